"""The VT-PC reproduction's pipeline: every model trained and scored on one data set over seeds.

Three models share one circuit shape (`jaxlab.pc.circuit`, K root channels)::

  base  EinsumNet: Gaussian leaves, mixture root (exact likelihood);
  hfv   HFV-PC: 1-D Voronoi-gated leaves, mixture root (exact likelihood);
  vt    VT-PC: VT root over the K channels, trained with annealed soft gates, tested with
        hard gates; its likelihood is bracketed by the anytime box bounds
        (`jaxlab.pc.bounds`): log f - log Z+ <= log p <= log f - log Z-.

`run_dataset` trains each model on every seed at once (seeds vmapped: same split, same
initialisation key across models, so seeds are paired) and returns JSON-ready per-seed
results; `summary_table` and the `draw_*` functions turn those into the report's table and
plots.
"""

import functools
import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from jaxlab.pc import bounds, datasets, training, voronoi
from jaxlab.pc.circuit import CircuitConfig
from jaxlab.pc.models import PCModel, init_params
from jaxlab.presets import config_seeds, split_names
from jaxlab.report import seed_summary
from jaxlab.train import optimizer

MODELS = ("base", "hfv", "vt")


def depth_for(num_vars: int, max_depth: int) -> int:
  """Product levels for D variables: floor(log2 D), at most `max_depth`, at least 1.

  Example:
    >>> depth_for(2, 2), depth_for(13, 2), depth_for(13, 5)
    (1, 2, 3)
  """
  return max(1, min(max_depth, int(math.floor(math.log2(num_vars)))))


def make_model(kind: str, num_vars: int, config: ml_collections.ConfigDict) -> PCModel:
  """The `PCModel` of a model name ("base", "hfv", "vt") for D = num_vars.

  Args:
    kind: one of `MODELS`.
    num_vars: D, the data's dimension.
    config: the experiment config (`circuit`, `base.leaf_components`,
      `hfv.leaf_components`).

  Returns:
    The model (a mixture root for base and HFV, a VT root for vt).

  Example:
    >>> from launch.configs import load_config
    >>> make_model("vt", 2, load_config("pc", "smoke")).root
    'vt'
  """
  if kind not in MODELS:
    raise ValueError(f"Unknown model {kind!r}; expected one of {MODELS}")
  c = config.circuit
  hfv = kind == "hfv"
  circuit = CircuitConfig(
      num_vars=num_vars, depth=depth_for(num_vars, c.max_depth), num_replicas=c.num_replicas,
      leaf_units=c.leaf_units, sum_units=c.sum_units, num_channels=c.num_channels,
      leaf_components=config.hfv.leaf_components if hfv else config.base.leaf_components,
      leaf_gate="voronoi" if hfv else "none", min_scale=c.min_scale,
      structure_seed=c.structure_seed)
  return PCModel(circuit, root="vt" if kind == "vt" else "mixture")


@functools.lru_cache(maxsize=64)
def _programs(model: PCModel, num_steps: int, batch_size: int, alpha: tuple[float, float],
              frozen: tuple[str, ...],
              bound_cfg: tuple[float, int, tuple[int, ...], float, int],
              alphas: tuple[float, ...], kmeans_iters: int, grid: int,
              opt_fields: tuple[tuple[str, Any], ...]):
  """Jitted, seed-vmapped train / evaluate programs of one model (cached across data sets)."""
  def train(x_train, key):
    k_init, k_fit = jax.random.split(key)
    params = init_params(model, k_init, x_train, kmeans_iters=kmeans_iters)
    tx = training.with_frozen(optimizer(dict(opt_fields), num_steps), params, frozen=frozen)
    return training.fit(model, params, x_train, k_fit, tx=tx, num_steps=num_steps,
                        batch_size=batch_size, alpha_start=alpha[0], alpha_end=alpha[1])

  def evaluate(params, x_test):
    log_f = model.apply(params, x_test)
    out = dict(mean_log_f=jnp.mean(log_f))
    if model.root == "vt":
      h, steps, caps, quad_h, quad_strips = bound_cfg
      log_pi = model.apply(params, method="log_pi")
      c = model.apply(params, method="cell_centroids")
      mass = lambda lo, hi: model.apply(params, lo, hi, method="box_mass")
      lz = [bounds.anytime_log_z_bounds(mass, log_pi, c, domain_halfwidth=h, num_steps=steps,
                                        capacity=cap) for cap in caps]
      out.update(log_z_lo=lz[0][0], log_z_hi=lz[0][1])
      # The final bracket's width at the last capacity, `vt.capacity_high_dim` (the budget
      # the D > low_dim_max sets get), so that bound gaps compare across dimensions.
      out["log_z_gap_at_capacity_high_dim"] = lz[-1][1][-1] - lz[-1][0][-1]
      if model.circuit.num_vars == 2:  # an independent check of the certified bracket
        out["log_z_quad"], out["log_z_tail"] = bounds.strip_log_z_2d(
            mass, log_pi, c, halfwidth=quad_h, num_strips=quad_strips)
      gaps = [voronoi.gate_gap(x_test, c, a) for a in alphas]
      out["gate_gap"] = jnp.stack([jnp.mean(g) for g, _ in gaps])
      out["gate_bound"] = jnp.stack([jnp.mean(b) for _, b in gaps])
      out["gate_bound_holds"] = jnp.stack([jnp.mean(g <= b * (1 + 1e-5) + 1e-7) for g, b in gaps])
      soft = [jnp.mean(log_f - model.apply(params, x_test, alpha=a)) for a in alphas]
      out["soft_hard_ll_gap"] = jnp.stack(soft)
    if grid and model.circuit.num_vars == 2:
      g = jnp.linspace(-3.0, 3.0, grid)
      pts = jnp.stack(jnp.meshgrid(g, g, indexing="xy"), -1).reshape(-1, 2)
      out["density_grid"] = model.apply(params, pts).reshape(grid, grid)
    return out

  return jax.jit(jax.vmap(train)), jax.jit(jax.vmap(evaluate))


def run_dataset(name: str, config: ml_collections.ConfigDict) -> dict[str, Any]:
  """Trains and evaluates every model of `config.models` on one data set over the seeds.

  Args:
    name: a data set of `jaxlab.pc.datasets.DATASETS`.
    config: the experiment config (`seeds`, `data`, `circuit`, `base`, `hfv`, `vt`,
      `train`, `optimizer`, `plot_grid`).

  Returns:
    {"num_vars", "num_train", "num_test", "gaussian_ll": per seed, "models": model ->
    per-seed results (test LL; for vt the bracket, its anytime curves, log Z bounds,
    the quadrature log Z in 2-D, gate gaps; a density grid of the first seed in 2-D)}.

  Raises:
    FloatingPointError: a non-finite training loss or test value (data set, model and
      seeds named), never a silent NaN.

  Example:
    >>> from launch.configs import load_config                    # doctest: +SKIP
    >>> out = run_dataset("moons", load_config("pc", "smoke"))    # doctest: +SKIP
    >>> out["models"]["vt"]["ll_lower"]                           # doctest: +SKIP
  """
  seeds = config_seeds(config)
  splits = [datasets.load(name, config.data.num_points, s) for s in seeds]
  x_train = jnp.asarray(np.stack([s.train for s in splits]))
  x_test = jnp.asarray(np.stack([s.test for s in splits]))
  num_vars = int(x_train.shape[-1])
  keys = jax.vmap(jax.random.key)(np.asarray(seeds))
  t, v = config.train, config.vt
  frozen = () if config.hfv.train_centroids else training.FROZEN_BY_DEFAULT
  big = num_vars > v.low_dim_max
  # Low-dimensional sets get their bounds at `capacity` and also at `capacity_high_dim`: the
  # gap across dimensions (bound_gap_widens_with_dim) is compared at one box budget.
  caps = (int(v.capacity_high_dim),) if big else tuple(dict.fromkeys(
      (int(v.capacity), int(v.capacity_high_dim))))
  bound_cfg = (float(v.domain_halfwidth), int(v.bisection_steps), caps,
               float(v.quad_halfwidth), int(v.quad_strips))
  out = dict(num_vars=num_vars, num_train=int(x_train.shape[1]), num_test=int(x_test.shape[1]),
             gaussian_ll=[datasets.gaussian_fit_ll(s.train, s.test) for s in splits], models={})
  for kind in split_names(config.models):
    train, evaluate = _programs(
        make_model(kind, num_vars, config), int(t.num_steps), int(t.batch_size),
        (float(v.alpha_start), float(v.alpha_end)), frozen, bound_cfg,
        tuple(float(a) for a in v.gap_alphas), int(v.kmeans_iters), int(config.plot_grid),
        tuple(sorted(config.optimizer.to_dict().items())))
    params, losses, skipped = train(x_train, keys)
    res = jax.device_get(evaluate(params, x_test))
    # Never a silent NaN: a non-finite training loss or test value stops the run here,
    # naming the data set, model and seeds (steps skipped by apply_if_finite are reported).
    bad = ~np.all(np.isfinite(np.asarray(losses)), axis=1) | ~np.isfinite(
        np.asarray(res["mean_log_f"]))
    if np.any(bad):
      raise FloatingPointError(
          f"pc: {kind} on {name} gave a non-finite training loss or test log f for seeds "
          f"{[s for s, b in zip(seeds, bad, strict=True) if b]} (skipped steps per seed: "
          f"{np.asarray(skipped).tolist()})")
    out["models"][kind] = _entry(kind, losses, skipped, res)
  return out


def _entry(kind: str, losses, skipped, res: dict) -> dict[str, Any]:
  """One model's JSON-ready per-seed results from its training and evaluation outputs."""
  lists = lambda **kw: {k: np.asarray(a).tolist() for k, a in kw.items()}
  entry = lists(final_loss=losses[:, -1], skipped_steps=skipped, mean_log_f=res["mean_log_f"])
  if kind == "vt":
    mlf = np.asarray(res["mean_log_f"])[:, None]
    ll_lo = mlf - np.asarray(res["log_z_hi"])  # [seeds, steps + 1]
    ll_hi = mlf - np.asarray(res["log_z_lo"])
    entry.update(lists(
        ll_lower=ll_lo[:, -1], ll_upper=ll_hi[:, -1], ll_lower_curve=ll_lo,
        ll_upper_curve=ll_hi, log_z_lo=res["log_z_lo"], log_z_hi=res["log_z_hi"],
        gap_at_capacity_high_dim=res["log_z_gap_at_capacity_high_dim"],
        gate_gap=res["gate_gap"], gate_bound=res["gate_bound"],
        gate_bound_holds=res["gate_bound_holds"], soft_hard_ll_gap=res["soft_hard_ll_gap"]))
    if "log_z_quad" in res:
      entry.update(lists(log_z_quad=res["log_z_quad"], log_z_tail=res["log_z_tail"]))
  else:
    entry["ll"] = entry["mean_log_f"]  # exact: the mixture root is normalised
  if "density_grid" in res:
    entry["density_grid"] = np.asarray(res["density_grid"][0]).tolist()  # first seed
  return entry


def bracket_violation(vt: dict[str, Any]) -> np.ndarray:
  """Per seed, how far (nats, <= 0) the quadrature log Z falls outside the anytime bracket.

  The true Z lies in [Z_strips, Z_strips + tail] (`bounds.strip_log_z_2d`); a step's bracket
  fails when log Z+ < log Z_strips or log Z- > log(Z_strips + tail). The worst step counts.

  Args:
    vt: a VT model's results (`run_dataset`): "log_z_lo", "log_z_hi" [seeds, steps + 1],
      "log_z_quad", "log_z_tail" [seeds].

  Returns:
    [seeds] violations, 0 where the bracket holds at every step.

  Example:
    >>> vt = dict(log_z_lo=[[-1.0, -0.5]], log_z_hi=[[0.0, -0.2]], log_z_quad=[-0.1],
    ...           log_z_tail=[-40.0])
    >>> [round(float(v), 6) for v in bracket_violation(vt)]
    [-0.1]
  """
  lz_lo, lz_hi = np.asarray(vt["log_z_lo"]), np.asarray(vt["log_z_hi"])  # [seeds, steps + 1]
  quad = np.asarray(vt["log_z_quad"])[:, None]
  quad_hi = np.logaddexp(quad, np.asarray(vt["log_z_tail"])[:, None])
  worst = np.minimum(lz_hi - quad, quad_hi - lz_lo).min(axis=1)
  return np.minimum(worst, 0.0)


def summary_table(per_ds: dict[str, dict[str, Any]]) -> dict[str, dict[str, dict]]:
  """Data set -> column -> `seed_summary` of the test LL of each model and of the floor.

  Columns: "base" / "hfv" (exact LL), "vt_lower" / "vt_upper" (the certified bracket),
  "vt_log_f" (the unnormalised hard-gated log f), "vt_quad" (2-D: log f normalised by the
  strip quadrature) and "gaussian" (the Gaussian fit, the floor).

  Args:
    per_ds: data set -> `run_dataset` result.

  Returns:
    The table.

  Example:
    >>> per_ds = {"moons": dict(gaussian_ll=[-2.0, -2.2],
    ...                         models=dict(base=dict(ll=[-1.0, -1.2])))}
    >>> sorted(summary_table(per_ds)["moons"])
    ['base', 'gaussian']
  """
  table = {}
  for d, r in per_ds.items():
    row = {}
    for k, m in r["models"].items():
      if k == "vt":
        row["vt_lower"] = seed_summary(m["ll_lower"])
        row["vt_upper"] = seed_summary(m["ll_upper"])
        row["vt_log_f"] = seed_summary(m["mean_log_f"])
        if "log_z_quad" in m:  # 2-D: normalised by the strip quadrature
          row["vt_quad"] = seed_summary(
              (np.asarray(m["mean_log_f"]) - np.asarray(m["log_z_quad"])).tolist())
      else:
        row[k] = seed_summary(m["ll"])
    if "gaussian_ll" in r:
      row["gaussian"] = seed_summary(r["gaussian_ll"])
    table[d] = row
  return table


def draw_densities(ax: Any, per_ds: dict[str, dict[str, Any]], kinds: Sequence[str]) -> None:
  """Replaces `ax` by a grid of the 2-D sets' density images (a row per model in `kinds`).

  Args:
    ax: a matplotlib axes (its figure is reused).
    per_ds: data set -> `run_dataset` result with "density_grid"s (`config.plot_grid` > 0).
    kinds: the models to show.

  Example:
    >>> import matplotlib.pyplot as plt
    >>> per_ds = {"moons": dict(num_vars=2, models=dict(base=dict(density_grid=[[0.0]])))}
    >>> fig, ax = plt.subplots()
    >>> draw_densities(ax, per_ds, ["base"]); plt.close(fig)
  """
  two_d = [d for d in per_ds if per_ds[d]["num_vars"] == 2]
  fig = ax.figure
  ax.remove()
  axes = fig.subplots(len(kinds), len(two_d), squeeze=False)
  fig.set_size_inches(2.2 * len(two_d), 2.2 * len(kinds))
  for j, d in enumerate(two_d):
    for i, k in enumerate(kinds):
      a = axes[i, j]
      a.imshow(np.exp(np.asarray(per_ds[d]["models"][k]["density_grid"])), origin="lower",
               extent=(-3, 3, -3, 3), cmap="viridis")
      a.set_xticks([])
      a.set_yticks([])
      if i == 0:
        a.set_title(d, fontsize=8)
      if j == 0:
        a.set_ylabel(k + (" (hard, unnorm.)" if k == "vt" else ""), fontsize=8)


def draw_anytime(ax: Any, per_ds: dict[str, dict[str, Any]]) -> None:
  """The VT bound gap log Z+ - log Z- over bisection steps, one line per data set.

  Example:
    >>> import matplotlib.pyplot as plt
    >>> vt = dict(ll_upper_curve=[[1.0, 0.5]], ll_lower_curve=[[0.0, 0.2]])
    >>> fig, ax = plt.subplots()
    >>> draw_anytime(ax, {"moons": dict(num_vars=2, models=dict(vt=vt))}); plt.close(fig)
  """
  for d in [d for d in per_ds if "vt" in per_ds[d]["models"]]:
    m = per_ds[d]["models"]["vt"]
    gap = np.mean(np.asarray(m["ll_upper_curve"]) - np.asarray(m["ll_lower_curve"]), 0)
    ax.plot(np.arange(gap.shape[0]), gap, label=f"{d} ({per_ds[d]['num_vars']}D)")
  ax.set_yscale("log")
  ax.set_xlabel("bisection steps")
  ax.set_ylabel("bound gap log Z+ - log Z- (nats)")
  ax.set_title("Anytime VT bounds (mean over seeds)")
  ax.legend(fontsize=6)


def draw_gate_gap(ax: Any, per_ds: dict[str, dict[str, Any]], alphas: Sequence[float]) -> None:
  """The soft -> hard gate gap vs alpha (solid) against its bound (K-1) exp(-alpha gamma).

  Example:
    >>> import matplotlib.pyplot as plt
    >>> vt = dict(gate_gap=[[0.1, 0.01]], gate_bound=[[0.2, 0.02]])
    >>> fig, ax = plt.subplots()
    >>> draw_gate_gap(ax, {"moons": dict(models=dict(vt=vt))}, [1.0, 50.0]); plt.close(fig)
  """
  alphas = list(alphas)
  for d in [d for d in per_ds if "vt" in per_ds[d]["models"]]:
    m = per_ds[d]["models"]["vt"]
    line = ax.plot(alphas, np.mean(m["gate_gap"], 0), label=f"{d}: 1 - w_nearest")
    ax.plot(alphas, np.mean(m["gate_bound"], 0), "--", color=line[0].get_color())
  ax.set_xscale("log")
  ax.set_yscale("log")
  ax.set_xlabel("alpha")
  ax.set_ylabel("mean over test points")
  ax.set_title("Soft -> hard gate gap (solid) vs (K-1) exp(-alpha gamma) (dashed)")
  ax.legend(fontsize=5)
