"""MLP classifiers with a softmax, EDL, F-EDL or MoDEX head, trained vectorised over seeds.

All four share the MLP backbone and the optimizer (`jaxlab.train.optimizer` of
`config.optimizer`); `train` trains one model per seed at once
(`jax.vmap` over seeds of one jitted step) and `predict` returns host-side
probabilities and uncertainty scores (`Prediction`).
"""

import dataclasses
import functools
from collections.abc import Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from jax.typing import DTypeLike

from jaxlab.train.optimizers import optimizer
from jaxlab.uq._baselines import EDLHead, dirichlet_uncertainty, softmax_uncertainty
from jaxlab.uq._losses import edl_kl_weight, edl_loss, modex_brier_loss, modex_nll_loss
from jaxlab.uq._modex import MoDEXHead, modex_moments, modex_uncertainty

MODELS = ("softmax", "edl", "fedl", "modex")
DIRICHLET_MODELS = ("edl", "fedl", "modex")


class Classifier(nn.Module):
  """Shared MLP backbone + one of the four heads.

  Outputs: softmax -> logits [b, K]; edl -> alpha [b, K];
  fedl / modex -> `jaxlab.uq.ModexParams`. `dtype` (computation) and
  `param_dtype` (weights, float32 by default) apply to every layer, as in
  `flax.linen.Dense`; the outputs stay at least float32 (softmax logits are
  upcast here, the Dirichlet heads do it themselves).
  """
  kind: str
  num_classes: int
  hidden: tuple[int, ...] = (128, 128)
  head_hidden: int = 64
  head_layers: int = 2
  log_alpha_clip: float = 10.0
  tau_max: float = 1e4
  edl_evidence: str = "softplus"
  dtype: DTypeLike | None = None
  param_dtype: DTypeLike = jnp.float32

  @nn.compact
  def __call__(self, x):
    kw = dict(dtype=self.dtype, param_dtype=self.param_dtype)
    h = x
    for i, width in enumerate(self.hidden):
      h = nn.relu(nn.Dense(width, name=f"backbone_{i}", **kw)(h))
    if self.kind == "softmax":
      logits = nn.Dense(self.num_classes, name="head", **kw)(h)
      return logits.astype(jnp.promote_types(logits.dtype, jnp.float32))
    if self.kind == "edl":
      return EDLHead(self.num_classes, evidence=self.edl_evidence,
                        log_clip=self.log_alpha_clip, name="head", **kw)(h)
    if self.kind in ("fedl", "modex"):
      return MoDEXHead(self.num_classes, hidden_dim=self.head_hidden,
                          num_layers=self.head_layers, shared_advocacy=self.kind == "fedl",
                          log_alpha_clip=self.log_alpha_clip, tau_max=self.tau_max,
                          name="head", **kw)(h)
    raise ValueError(f"Unknown model kind {self.kind!r}; expected one of {MODELS}")


def make_model(kind: str, config: ml_collections.ConfigDict, num_classes: int) -> Classifier:
  """The classifier `kind` (one of `MODELS`) with the backbone of `config.model`."""
  if kind not in MODELS:
    raise ValueError(f"Unknown model kind {kind!r}; expected one of {MODELS}")
  m = config.model
  return Classifier(kind=kind, num_classes=num_classes, hidden=tuple(m.hidden),
                    head_hidden=m.head_hidden, head_layers=m.head_layers,
                    log_alpha_clip=m.log_alpha_clip, tau_max=m.tau_max,
                    edl_evidence=m.edl_evidence)


def make_loss(kind: str, config: ml_collections.ConfigDict, model: Classifier):
  """`loss(params, x, y, epoch)` -> mean per-example loss of `kind`."""
  t = config.train
  if kind in ("fedl", "modex") and t.modex_loss not in ("brier", "nll"):
    raise ValueError(f"train.modex_loss must be 'brier' or 'nll', got {t.modex_loss!r}")

  def loss_fn(params, x, y, epoch):
    out = model.apply({"params": params}, x)
    if kind == "softmax":
      per = optax.softmax_cross_entropy(out, y)
    elif kind == "edl":
      w = edl_kl_weight(epoch, anneal_epochs=t.edl_anneal_epochs)
      per = edl_loss(alpha=out, targets=y, kl_weight=w)
    elif t.modex_loss == "brier":
      per = modex_brier_loss(alpha=out.alpha, tau=out.tau, omega=out.omega, targets=y,
                                omega_weight=float(t.omega_weight))
    else:
      per = modex_nll_loss(alpha=out.alpha, tau=out.tau, omega=out.omega, targets=y)
    return jnp.mean(per)
  return loss_fn


def init_params(model: Classifier, input_dim: int, seeds: Sequence[int]) -> Any:
  """Parameters for each seed, stacked on a leading axis, drawn with numpy.

  Same distributions as flax's defaults (Dense kernels lecun-normal
  truncated at 2 std, biases 0, LayerNorm scale 1 / bias 0). Drawing them on
  the host avoids compiling a PRNG-heavy `init` program, which costs more CPU
  time than the whole training run at this size.
  """
  shapes = jax.eval_shape(model.init, jax.random.key(0), jnp.zeros((1, input_dim)))["params"]

  def draw(rng, path, leaf):
    name = jax.tree_util.keystr(path[-1:])
    if "kernel" in name:
      std = np.sqrt(1.0 / leaf.shape[0]) / 0.87962566103423978
      z = rng.standard_normal(leaf.shape)
      while np.any(bad := np.abs(z) > 2.0):
        z[bad] = rng.standard_normal(int(bad.sum()))
      return (std * z).astype(np.float32)
    if "scale" in name:
      return np.ones(leaf.shape, np.float32)
    return np.zeros(leaf.shape, np.float32)

  per_seed = []
  for seed in seeds:
    rng = np.random.default_rng(seed)
    per_seed.append(jax.tree_util.tree_map_with_path(lambda p, leaf, rng=rng: draw(rng, p, leaf), shapes))
  return jax.tree.map(lambda *xs: jnp.asarray(np.stack(xs)), *per_seed)


@functools.lru_cache(maxsize=None)
def _train_step(kind: str, model: Classifier, train_cfg: tuple[tuple[str, Any], ...],
                opt_cfg: tuple[tuple[str, Any], ...]):
  """Jitted step vmapped over seeds; cached so that variants share one compile."""
  config = ml_collections.ConfigDict({"train": dict(train_cfg), "optimizer": dict(opt_cfg)})
  loss_fn = make_loss(kind, config, model)
  tx = optimizer(config.optimizer, config.train.num_steps)

  def step(params, opt_state, xb, yb, epoch):
    loss, grads = jax.value_and_grad(loss_fn)(params, xb, yb, epoch)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss

  return tx, jax.jit(jax.vmap(step))


def train(kind: str, config: ml_collections.ConfigDict, x: np.ndarray, y: np.ndarray,
          n_valid: np.ndarray, seeds: Sequence[int]):
  """Trains one model per seed, vectorised over seeds.

  Minibatches are drawn with replacement on the host (numpy, seeded) and the
  jitted step is vmapped over seeds; a Python loop drives it (a `lax.scan`
  compiles several times slower on CPU, which dominates at this size).

  Args:
    kind: one of `MODELS`.
    config: the experiment config (`model`, `train`, `optimizer`).
    x: [S, N, d] inputs, padded; rows >= n_valid[s] are ignored.
    y: [S, N, K] targets (one-hot or soft).
    n_valid: [S] number of real rows per seed.
    seeds: S integer seeds (initialisation and minibatch order).

  Returns:
    (model, params with a leading seed axis, losses [S, num_steps]).
  """
  t = config.train
  x, y = np.asarray(x, np.float32), np.asarray(y, np.float32)
  n_valid = np.asarray(n_valid)
  if x.ndim != 3 or y.ndim != 3 or x.shape[:2] != y.shape[:2] or len(seeds) != x.shape[0]:
    raise ValueError(f"x must be [S, N, d] and y [S, N, K] with S = len(seeds); got {x.shape}, "
                     f"{y.shape}, {len(seeds)} seeds")
  model = make_model(kind, config, y.shape[-1])
  tx, step = _train_step(kind, model, tuple(sorted(t.to_dict().items())),
                          tuple(sorted(config.optimizer.to_dict().items())))
  params = init_params(model, x.shape[-1], [1000 * s + MODELS.index(kind) for s in seeds])
  opt_state = jax.vmap(tx.init)(params)
  rng = np.random.default_rng([int(s) for s in seeds])
  rows = np.arange(len(seeds))[:, None]
  losses = []
  for i in range(t.num_steps):
    idx = (rng.random((len(seeds), t.batch_size)) * n_valid[:, None]).astype(np.int64)
    epoch = (i * t.batch_size / n_valid).astype(np.float32)
    params, opt_state, loss = step(params, opt_state, x[rows, idx], y[rows, idx], epoch)
    losses.append(loss)
  return model, params, np.asarray(jnp.stack(losses, axis=1))


@dataclasses.dataclass(frozen=True)
class Prediction:
  """Host-side predictions of one model on one input set (numpy)."""
  probs: np.ndarray              # [..., n, K]
  scores: dict[str, np.ndarray]  # uncertainty measures, each [..., n]

  def take(self, index) -> "Prediction":
    """Indexes the leading axes of every array, e.g. `pred.take((seed, slice(a, b)))`."""
    return Prediction(self.probs[index], {k: v[index] for k, v in self.scores.items()})


@functools.partial(jax.jit, static_argnums=(0, 3))
def _apply(model: Classifier, params: Any, x: jax.Array, batched: bool):
  fn = lambda p, v: model.apply({"params": p}, v)
  return jax.vmap(fn)(params, x) if batched else fn(params, x)


def predict(kind: str, model: Classifier, params: Any, x: np.ndarray, *,
            batched: bool = False) -> Prediction:
  """Probabilities and uncertainty scores of a trained model.

  Args:
    kind: one of `MODELS`.
    model: the `Classifier` returned by `train`.
    params: its parameters; with `batched=True` they carry a leading seed
      axis and `x` is [S, n, d].
    x: inputs [n, d] (or [S, n, d]).

  Returns:
    `Prediction` with probs [..., n, K] and, per measure, scores [..., n]:
    softmax -> max_prob, entropy; Dirichlet models -> the fields of
    `jaxlab.uq.ModexUncertainty`.
  """
  out = _apply(model, params, jnp.asarray(x), batched)
  if kind == "softmax":
    su = softmax_uncertainty(out)
    probs = jax.nn.softmax(out, axis=-1)
    scores = {"max_prob": su.max_prob, "entropy": su.entropy}
  else:
    if kind == "edl":
      u = dirichlet_uncertainty(out)
      probs = out / jnp.sum(out, -1, keepdims=True)
    else:
      u = modex_uncertainty(*out)
      probs = modex_moments(*out).mean
    scores = u._asdict()
  return Prediction(np.asarray(probs, np.float64),
                    {k: np.asarray(v, np.float64) for k, v in scores.items()})
