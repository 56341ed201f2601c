"""One NaN rule for every metric and reduction of jaxlab, as a property over a declared table.

The rule: a NaN anywhere in a metric's float inputs gives NaN (or a documented ValueError),
never a finite number; under `jit` (no exception possible) it gives NaN. Per-example
functions ("per_row") answer NaN for the example that holds the NaN (their other
examples may stay finite); every other function answers NaN in every float it returns.
Constant scores give the tie-pessimistic value: a tie never earns credit (a rank metric
ranks the true item below everything it ties with; an accuracy counts a tied top-1 as
wrong; a confidence score reads maximal uncertainty). AUROC / AUPR keep the usual
half-credit for tied pairs, so constant scores give exactly chance, never more.

Each row of `CASES` declares the function, how to build valid inputs from a numpy
Generator, which arguments are float scores (where NaN is injected), whether it can be
jitted, and optionally the inputs with constant scores and the value they must give.
Hypothesis picks the inputs' seed, the float argument and the NaN's position.
"""

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxlab import codecomp, uq
from jaxlab.codecomp import cost
from jaxlab.distill import losses as dlosses
from jaxlab.distill.sinkhorn import sinkhorn
from jaxlab.pc import voronoi
from jaxlab.privacy import metrics as pmetrics
from jaxlab.recsys import metrics as recmetrics
from jaxlab.retrieval import losses as rlosses
from jaxlab.retrieval import metrics as rmetrics
from jaxlab.retrieval import nig
from jaxlab.rl import metrics as rl_metrics
from jaxlab.zeroshot import metrics as zmetrics
from jaxlab.zeroshot import routing


@dataclasses.dataclass(frozen=True)
class Case:
  """One metric: `fn(**make(rng), **static)`.

  Attributes:
    name: test id.
    fn: the metric.
    make: valid inputs (whose checked outputs are all finite) from a numpy Generator.
    floats: the arguments holding float scores, where a NaN is injected.
    static: keyword arguments that are not data (held fixed, closed over under jit).
    jit: whether the function runs under `jax.jit` with every array argument traced.
    per_row: the output's leading axis is the float arguments' leading axis (one example
      per row); the NaN must reach the row it was put in.
    constant: inputs with constant scores and the outputs they must give ({key: value},
      key None for a plain value), from a numpy Generator.
    affects: for a float argument that only some outputs read, the keys of those outputs
      (the others need not turn NaN); every output by default.
  """
  name: str
  fn: Callable[..., Any]
  make: Callable[[np.random.Generator], dict[str, Any]]
  floats: tuple[str, ...]
  static: dict[str, Any] = dataclasses.field(default_factory=dict)
  jit: bool = False
  per_row: bool = False
  constant: Callable[[np.random.Generator], tuple[dict[str, Any], dict[Any, Any]]] | None = None
  affects: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)


def _simplex(rng, *shape):
  return rng.dirichlet(np.ones(shape[-1]), size=shape[:-1]).astype(np.float32)


def _labels_both(rng, n):
  y = rng.integers(0, 2, n).astype(bool)
  y[:2] = [True, False]
  return y


def _normal(rng, *shape):
  return rng.standard_normal(shape).astype(np.float32)


def _j(**kw):
  """numpy arrays as jax arrays (the jax-only signatures)."""
  return {k: jnp.asarray(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()}


# --------------------------------------------------------------------------------- retrieval

_N = 6


def _similarities(rng):
  return dict(similarities=_normal(rng, _N, _N) + 3 * np.eye(_N, dtype=np.float32))


RETRIEVAL = [
    Case("retrieval.ranks", rmetrics.ranks, _similarities, ("similarities",),
         constant=lambda rng: (dict(similarities=np.zeros((_N, _N))), {None: np.full(_N, _N - 1)})),
    Case("retrieval.recall_at_k", rmetrics.recall_at_k, _similarities, ("similarities",),
         static=dict(ks=(1, 3), one_percent=True),
         constant=lambda rng: (dict(similarities=np.zeros((_N, _N))),
                               {"R@1": 0.0, "R@3": 0.0, "R@1%": 0.0})),
    Case("retrieval.spearman", rmetrics.spearman,
         lambda rng: dict(a=_normal(rng, 8), b=_normal(rng, 8)), ("a", "b"),
         constant=lambda rng: (dict(a=np.ones(8), b=_normal(rng, 8)), {None: 0.0})),
    Case("retrieval.soft_infonce", rlosses.soft_infonce,
         lambda rng: _j(logits=_normal(rng, 4, 4), targets=_simplex(rng, 4, 4)),
         ("logits", "targets"), jit=True, per_row=True),
    Case("retrieval.infonce", rlosses.infonce, lambda rng: _j(logits=_normal(rng, 4, 4)),
         ("logits",), jit=True, per_row=True),
    Case("retrieval.squash_uncertainty", rlosses.squash_uncertainty,
         lambda rng: _j(u=rng.uniform(0.1, 2.0, 6).astype(np.float32)), ("u",), jit=True),
    Case("retrieval.attention_statistics", nig.attention_statistics,
         lambda rng: _j(attention=_simplex(rng, 3, 5)), ("attention",), jit=True, per_row=True),
    Case("retrieval.der_nll", nig.der_nll,
         lambda rng: _j(y=_normal(rng, 4), gamma=_normal(rng, 4),
                        nu=rng.uniform(0.5, 2, 4).astype(np.float32),
                        alpha=rng.uniform(1.5, 3, 4).astype(np.float32),
                        beta=rng.uniform(0.5, 2, 4).astype(np.float32)),
         ("y", "gamma", "nu", "alpha", "beta"), jit=True, per_row=True),
    Case("retrieval.nig_uncertainty",
         lambda gamma, nu, alpha, beta: nig.nig_uncertainty(nig.NIGParams(gamma, nu, alpha, beta)),
         lambda rng: _j(gamma=_normal(rng, 4), nu=rng.uniform(0.5, 2, 4).astype(np.float32),
                        alpha=rng.uniform(1.5, 3, 4).astype(np.float32),
                        beta=rng.uniform(0.5, 2, 4).astype(np.float32)),
         ("nu", "alpha", "beta"), jit=True, per_row=True,
         affects=dict(nu=("epistemic", "total"))),
]

# --------------------------------------------------------------------------------------- uq


def _binary(rng):
  return dict(labels=_labels_both(rng, 8), scores=_normal(rng, 8))


def _confidence(rng):
  return dict(confidence=_normal(rng, 8), correct=_labels_both(rng, 8))


def _ood(rng):
  return dict(id_confidence=_normal(rng, 5), ood_confidence=_normal(rng, 4))


def _probs(rng):
  return dict(probs=_simplex(rng, 6, 3), labels=rng.integers(0, 3, 6))


def _uniform(rng):
  return dict(probs=np.full((6, 3), 1 / 3), labels=rng.integers(0, 3, 6))


def _modex(rng):
  return _j(alpha=np.exp(_normal(rng, 4, 3)), tau=rng.uniform(0, 3, (4, 3)).astype(np.float32),
            omega=_simplex(rng, 4, 3))


_TIED_BINARY = np.array([True, False, True, True, False, False, True, False])

UQ = [
    Case("uq.auroc", uq.auroc, _binary, ("scores",),
         constant=lambda rng: (dict(labels=_TIED_BINARY, scores=np.zeros(8)), {None: 0.5})),
    Case("uq.aupr", uq.aupr, _binary, ("scores",),
         constant=lambda rng: (dict(labels=_TIED_BINARY, scores=np.zeros(8)), {None: 0.5})),
    Case("uq.ood_auroc", uq.ood_auroc, _ood, ("id_confidence", "ood_confidence"),
         constant=lambda rng: (dict(id_confidence=np.ones(5), ood_confidence=np.ones(4)),
                               {None: 0.5})),
    Case("uq.ood_aupr", uq.ood_aupr, _ood, ("id_confidence", "ood_confidence"),
         constant=lambda rng: (dict(id_confidence=np.ones(5), ood_confidence=np.ones(4)),
                               {None: 5 / 9})),
    Case("uq.misclassification_auroc", uq.misclassification_auroc, _confidence, ("confidence",),
         constant=lambda rng: (dict(confidence=np.ones(8), correct=_TIED_BINARY), {None: 0.5})),
    Case("uq.misclassification_aupr", uq.misclassification_aupr, _confidence, ("confidence",),
         constant=lambda rng: (dict(confidence=np.ones(8), correct=_TIED_BINARY), {None: 0.5})),
    Case("uq.accuracy", uq.accuracy, _probs, ("probs",),
         constant=lambda rng: (_uniform(rng), {None: 0.0})),
    Case("uq.top1_correct", uq.top1_correct, _probs, ("probs",),
         constant=lambda rng: (_uniform(rng), {None: np.zeros(6, bool)})),
    Case("uq.expected_calibration_error", uq.expected_calibration_error, _probs, ("probs",),
         constant=lambda rng: (_uniform(rng), {None: 1 / 3})),
    Case("uq.brier_score.labels", lambda probs, labels: uq.brier_score(probs, labels), _probs,
         ("probs",)),
    Case("uq.brier_score.soft", uq.brier_score,
         lambda rng: dict(probs=_simplex(rng, 6, 3), targets=_simplex(rng, 6, 3)),
         ("probs", "targets")),
    Case("uq.softmax_uncertainty", uq.softmax_uncertainty,
         lambda rng: _j(logits=_normal(rng, 4, 3)), ("logits",), jit=True, per_row=True,
         constant=lambda rng: (_j(logits=np.zeros((4, 3), np.float32)),
                               {"max_prob": np.full(4, 1 / 3), "entropy": np.full(4, math.log(3))})),
    Case("uq.dirichlet_uncertainty", uq.dirichlet_uncertainty,
         lambda rng: _j(alpha=np.exp(_normal(rng, 4, 3))), ("alpha",), jit=True, per_row=True),
    Case("uq.modex_uncertainty", uq.modex_uncertainty, _modex, ("alpha", "tau", "omega"),
         jit=True, per_row=True),
    Case("uq.modex_moments", uq.modex_moments, _modex, ("alpha", "tau", "omega"), jit=True,
         per_row=True),
    Case("uq.modex_log_mean", uq.modex_log_mean, _modex, ("alpha", "tau", "omega"), jit=True,
         per_row=True),
    Case("uq.fedl_moments", uq.fedl_moments,
         lambda rng: _j(alpha=np.exp(_normal(rng, 4, 3)), tau=rng.uniform(0, 3, 4).astype(np.float32),
                        p=_simplex(rng, 4, 3)), ("alpha", "tau", "p"), jit=True, per_row=True),
]

# --------------------------------------------------------------------------------- zeroshot

# 4 classes in 2 groups of 2 (no singleton group: a lone class wins its group by default).
_GROUPS = np.array([0, 0, 1, 1])
_SEEN = np.array([True, False, True, False])
_LABELS = np.repeat(np.arange(4), 3)


def _zs_logits(rng):
  return _normal(rng, _LABELS.shape[0], 4)


ZEROSHOT = [
    Case("zeroshot.harmonic_mean", zmetrics.harmonic_mean,
         lambda rng: _j(s=np.asarray(rng.uniform(0.1, 1), np.float32),
                        u=np.asarray(rng.uniform(0.1, 1), np.float32)),
         ("s", "u"), jit=True),
    Case("zeroshot.gzsl_accuracies", zmetrics.gzsl_accuracies,
         lambda rng: _j(logits=_zs_logits(rng), labels=_LABELS, seen=_SEEN), ("logits",), jit=True,
         constant=lambda rng: (_j(logits=np.zeros((12, 4), np.float32), labels=_LABELS, seen=_SEEN),
                               {"s": 0.0, "u": 0.0, "H": 0.0, "T": 0.0})),
    Case("zeroshot.group_accuracies", zmetrics.group_accuracies,
         lambda rng: _j(logits=_zs_logits(rng), labels=_LABELS, groups=_GROUPS,
                        class_mask=~_SEEN), ("logits",), jit=True,
         constant=lambda rng: (_j(logits=np.zeros((12, 4), np.float32), labels=_LABELS,
                                  groups=_GROUPS, class_mask=~_SEEN),
                               {"within": 0.0, "between": 0.0})),
    Case("zeroshot.template_spread", zmetrics.template_spread,
         lambda rng: _j(weights=_normal(rng, 2, 3, 4)), ("weights",), jit=True),
    Case("zeroshot.silhouette", functools.partial(routing.silhouette, num_clusters=2),
         lambda rng: _j(x=_normal(rng, 8, 3), assign=np.arange(8) % 2), ("x",), jit=True),
    Case("zeroshot.laplacian_spectrum", routing.laplacian_spectrum,
         lambda rng: _j(x=_normal(rng, 8, 3)), ("x",), jit=True),
    Case("zeroshot.kmeans", functools.partial(routing.kmeans, num_clusters=2),
         lambda rng: dict(x=jnp.asarray(_normal(rng, 8, 3)),
                          key=jax.random.key(int(rng.integers(1 << 16)))), ("x",), jit=True),
]

# --------------------------------------------------------------------------------- codecomp

CODECOMP = [
    Case("codecomp.entropy", codecomp.entropy, lambda rng: _j(logits=_normal(rng, 3, 5)),
         ("logits",), jit=True, per_row=True,
         constant=lambda rng: (_j(logits=np.zeros((3, 5), np.float32)),
                               {None: np.full(3, math.log(5))})),
    Case("codecomp.binary_entropy", cost.binary_entropy,
         lambda rng: dict(p=float(rng.uniform(0.05, 0.95))), ("p",)),
    Case("codecomp.critical_entropy", cost.critical_entropy,
         lambda rng: dict(rho=float(rng.uniform(0.1, 0.9))), ("rho",), static=dict(vocab_size=256)),
    Case("codecomp.cost_reward", cost.cost_reward,
         lambda rng: _j(cost=rng.uniform(0, 20, 4).astype(np.float32),
                        target_len=rng.integers(1, 10, 4)), ("cost",), jit=True, per_row=True),
]

# --------------------------------------------------------------------------------------- rl


def _drift(rng):
  levels = np.r_[np.zeros(500), np.ones(500)]
  return dict(steps=np.arange(50, 1001, 50), curve=rng.uniform(0.5, 1.0, 20), levels=levels)


RL = [
    Case("rl.normalize", rl_metrics.normalize,
         lambda rng: dict(returns=rng.uniform(-1500, -200, 5), low=-1600.0, high=-100.0),
         ("returns", "low", "high"), per_row=True),
    Case("rl.drift_metrics", rl_metrics.drift_metrics, _drift, ("curve", "levels"),
         static=dict(smooth=1)),
    Case("rl.change_points", rl_metrics.change_points,
         lambda rng: dict(levels=np.r_[np.zeros(50), np.ones(50)] + rng.uniform(0, 0.1, 100)),
         ("levels",)),
]

# ----------------------------------------------------------------------------------- recsys

_ITEMS = 9  # ids 1..8 are real items, 0 is padding


def _item_scores(rng):
  return _j(scores=_normal(rng, 4, _ITEMS), targets=np.array([1, 3, 5, 8]))


def _ranked(ranks_fn):
  """Ranks -> the HR/NDCG/MRR a study reports (the ranks alone are ints)."""
  return lambda **kw: recmetrics.ranking_metrics(ranks_fn(**kw), k=3)


RECSYS = [
    Case("recsys.full_ranks", _ranked(recmetrics.full_ranks), _item_scores, ("scores",),
         jit=True, per_row=True,
         constant=lambda rng: (_j(scores=np.zeros((4, _ITEMS), np.float32),
                                  targets=np.array([1, 3, 5, 8])),
                               {"hr": np.zeros(4), "ndcg": np.zeros(4), "mrr": np.zeros(4)})),
    Case("recsys.sampled_ranks", _ranked(recmetrics.sampled_ranks),
         lambda rng: dict(**_item_scores(rng),
                          negatives=jnp.array([[2, 4, 6], [1, 2, 4], [1, 2, 3], [2, 3, 4]])),
         ("scores",), jit=True, per_row=True),
    Case("recsys.top_k_genre_share", recmetrics.top_k_genre_share,
         lambda rng: _j(scores=_normal(rng, 3, _ITEMS),
                        item_genres=np.r_[np.zeros((1, 2)), np.eye(2)[rng.integers(0, 2, 8)]]
                        .astype(np.float32), genre=np.array([0, 1, 0])),
         ("scores",), static=dict(k=3), jit=True, per_row=True),
]

# ---------------------------------------------------------------------------------- distill


def _renyi(alpha):
  return Case(f"distill.renyi_entropy.{alpha}", dlosses.renyi_entropy,
              lambda rng: _j(p=_simplex(rng, 3, 5)), ("p",), static=dict(alpha=alpha), jit=True,
              per_row=True)


def _token_pair(rng):
  n, m, r = 3, 4, 3
  return _j(topk_teacher=-np.sort(-_simplex(rng, n, r)), mapped_ids=rng.integers(0, 6, (n, r)),
            logp_student=np.log(_simplex(rng, m, 6)), teacher_index=np.array([0, 1, 1, 2]),
            valid=np.ones(m, np.float32))


DISTILL = [_renyi(a) for a in (0.5, 1.0, 2.0, math.inf)] + [
    Case("distill.kl_divergence", dlosses.kl_divergence,
         lambda rng: _j(p=_simplex(rng, 3, 5), q=_simplex(rng, 3, 5)), ("p", "q"), jit=True,
         per_row=True),
    Case("distill.uld_distance", dlosses.uld_distance,
         lambda rng: _j(p=_simplex(rng, 3, 5), q=_simplex(rng, 3, 4)), ("p", "q"), jit=True,
         per_row=True),
    Case("distill.mined_loss", dlosses.mined_loss, _token_pair, ("topk_teacher", "logp_student"),
         jit=True),
    Case("distill.dense_ot_loss", dlosses.dense_ot_loss,
         lambda rng: _j(char_teacher=_simplex(rng, 3, 4), char_student=_simplex(rng, 5, 4)),
         ("char_teacher", "char_student"), static=dict(num_iters=5), jit=True),
    Case("distill.sinkhorn", sinkhorn,
         lambda rng: _j(cost=rng.uniform(0, 1, (3, 4)).astype(np.float32), a=np.full(3, 1 / 3),
                        b=np.full(4, 0.25)), ("cost", "a", "b"), static=dict(num_iters=5),
         jit=True),
]

# ---------------------------------------------------------------------------------- privacy


def _faces(rng):
  y = rng.random(40) < 0.5
  y[:10], y[10:20] = True, False  # >= 5 of each class for the 5 folds
  return dict(features=_normal(rng, 40, 3) + y[:, None], faces=y)


PRIVACY = [
    Case("privacy.snippet_auc", pmetrics.snippet_auc,
         lambda rng: dict(scores=_normal(rng, 8), labels=_labels_both(rng, 8)), ("scores",)),
    Case("privacy.face_probe_accuracy", pmetrics.face_probe_accuracy, _faces, ("features",)),
    Case("privacy.score_kl", pmetrics.score_kl,
         lambda rng: dict(raw=_normal(rng, 20), projected=_normal(rng, 20)), ("raw", "projected"),
         static=dict(grid_size=64)),
]

# --------------------------------------------------------------------------------------- pc


def _points(rng):
  return _j(x=_normal(rng, 6, 2), centroids=_normal(rng, 3, 2))


PC = [
    Case("pc.kmeans", functools.partial(voronoi.kmeans, num_clusters=2, num_iters=3),
         lambda rng: dict(x=jnp.asarray(_normal(rng, 8, 2)),
                          key=jax.random.key(int(rng.integers(1 << 16)))), ("x",), jit=True),
    Case("pc.squared_distances", voronoi.squared_distances, _points, ("x",), jit=True,
         per_row=True),
    Case("pc.hard_log_gates",  # -inf (outside the cell) read as -1, so valid gates are finite
         lambda x, centroids: jnp.maximum(voronoi.hard_log_gates(x, centroids), -1.0), _points,
         ("x", "centroids"), jit=True, per_row=True),
    Case("pc.soft_log_gates", voronoi.soft_log_gates, _points, ("x",), static=dict(alpha=2.0),
         jit=True, per_row=True),
    Case("pc.gate_gap", voronoi.gate_gap, _points, ("x",), static=dict(alpha=2.0), jit=True,
         per_row=True),
    Case("pc.vt_log_density", voronoi.vt_log_density,
         lambda rng: _j(channel_log_p=_normal(rng, 4, 3), log_pi=np.log(_simplex(rng, 3)),
                        log_gates=np.log(_simplex(rng, 4, 3))), ("channel_log_p", "log_gates"),
         jit=True, per_row=True),
]

CASES = RETRIEVAL + UQ + ZEROSHOT + CODECOMP + RL + RECSYS + DISTILL + PRIVACY + PC


# ---------------------------------------------------------------------------------- checks


def _leaves(out) -> list[tuple[Any, np.ndarray]]:
  """(path, value) of every float in `out` (dicts, lists, NamedTuples, arrays, scalars)."""
  flat = jax.tree_util.tree_flatten_with_path(out)[0]
  res = []
  for path, leaf in flat:
    a = np.asarray(leaf)
    if a.dtype.kind == "f":
      res.append((jax.tree_util.keystr(path), a.astype(np.float64)))
  return res


def _inject(value, pos: int):
  """`value` with a NaN at flat position `pos % size`; returns (new value, leading index)."""
  if isinstance(value, float):
    return math.nan, None
  a = np.array(value, dtype=np.asarray(value).dtype, copy=True)
  flat = a.reshape(-1)
  i = pos % flat.size
  flat[i] = np.nan
  lead = np.unravel_index(i, a.shape)[0] if a.ndim else None
  return (jnp.asarray(a) if isinstance(value, jax.Array) else a), lead


_JITTED: dict[str, Callable[..., Any]] = {}


def _jitted(case: Case):
  """One compiled function per case (the inputs' shapes are fixed per case)."""
  if case.name not in _JITTED:
    _JITTED[case.name] = jax.jit(lambda kw: case.fn(**kw, **case.static))
  return _JITTED[case.name]


def _assert_nan(case: Case, out, lead, mode: str, arg: str):
  leaves = _leaves(out)
  assert leaves, f"{case.name}: no float output"
  if arg in case.affects:
    leaves = [(p, a) for p, a in leaves if any(f"'{k}'" in p for k in case.affects[arg])]
  for path, a in leaves:
    part = a[lead] if case.per_row and lead is not None and a.ndim else a
    assert np.all(np.isnan(part)), (
        f"{case.name} ({mode}): NaN in, but {path} = {part} holds a number")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
@settings(max_examples=4, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**16), which=st.integers(0, 7), pos=st.integers(0, 2**20))
def test_nan_in_gives_nan_or_value_error(case, seed, which, pos):
  kw = case.make(np.random.default_rng(seed))
  # The valid inputs give finite outputs: a NaN below comes from the injected one (compiled
  # where possible: eager jax dispatches op by op).
  valid = _jitted(case)(kw) if case.jit else case.fn(**kw, **case.static)
  for path, a in _leaves(valid):
    assert np.all(np.isfinite(a)), f"{case.name}: valid inputs give {path} = {a}"
  name = case.floats[which % len(case.floats)]
  kw[name], lead = _inject(kw[name], pos)
  try:
    out = case.fn(**kw, **case.static)
  except ValueError:
    pass  # the documented eager raise
  else:
    _assert_nan(case, out, lead, "eager", name)
  if case.jit:  # traced: no exception possible, the answer must be NaN
    _assert_nan(case, _jitted(case)(kw), lead, "jit", name)


@pytest.mark.parametrize("case", [c for c in CASES if c.constant], ids=lambda c: c.name)
def test_constant_scores_give_the_tie_pessimistic_value(case):
  kw, want = case.constant(np.random.default_rng(0))
  out = case.fn(**kw, **case.static)
  for key, value in want.items():
    got = out if key is None else (out[key] if isinstance(out, dict) else getattr(out, key))
    np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(value, np.float64),
                               rtol=1e-6, atol=1e-7, err_msg=f"{case.name}[{key}]")
