"""Training and evaluating one privacy-aware VAD arm: pure, jittable, vmappable over seeds.

An `Arm` holds traced scalars (the G-OPL rank, the OPL rank, λ_face), so a whole sweep
over k and λ_face runs through one compiled program: "none" is (0, 0, 0), OPL(k) is
(0, k, 0), G-OPL(k) + OPL(k) is (k, k, λ_face).

Loss (the paper's L_total, one orthogonality term per projection):
L = L_MIL + λ_face L_face + λ_orth (||Q_g^T Q_g - I||^2 + ||Q_o^T Q_o - I||^2), with L_MIL
the top-k MIL BCE (`jaxlab.privacy.mil.topk_mil_loss`) and L_face the G-OPL alignment
on frames with a face (`jaxlab.privacy.projection.face_alignment_loss`).

Example:
  >>> import jax, jax.numpy as jnp, optax
  >>> from jaxlab.privacy import training, world
  >>> w = world.make_world(world.WorldConfig(num_train=8, num_test=4), seed=0)
  >>> cfg = training.TrainConfig(num_steps=2, batch_size=4, max_rank=4, hidden=8)
  >>> params, curve = training.train(training.as_arrays(w.train), training.make_arm(4, 4, 1.0),
  ...                                jax.random.key(0), cfg, optax.adam(1e-3))
  >>> curve.shape
  (2, 4)
"""

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxlab.privacy import mil, projection
from jaxlab.privacy.world import VideoSet

# Columns of the loss curve returned by `train`.
LOSS_TERMS = ("total", "mil", "face", "orth")


@dataclasses.dataclass(frozen=True)
class TrainConfig:
  """Training of one arm (full-size defaults: the quick preset's).

  Attributes:
    num_steps: optimizer steps.
    batch_size: videos per step (each with all its snippets).
    top_k: snippets in the top-k MIL mean (RTFM's: 3).
    lam_orth: λ_orth (jaxlab interpretation: the paper's value was not found).
    hidden: the scorer's hidden width.
    max_rank: rows of each projection's W, >= the largest k of the sweep.
    mode: "qr" or "direct" projection (jaxlab interpretation, see `projection`).
    opl_placement: "input" or "hidden" (jaxlab interpretation, see `mil.PrivacyVAD`).
  """
  num_steps: int = 400
  batch_size: int = 32
  top_k: int = 3
  lam_orth: float = 1.0
  hidden: int = 32
  max_rank: int = 64
  mode: str = "qr"
  opl_placement: str = "input"


class Arm(NamedTuple):
  """One arm as traced scalars (vmappable, one compile for a sweep)."""
  gopl_rank: jax.Array   # int32 [], 0 = no G-OPL
  opl_rank: jax.Array    # int32 [], 0 = no OPL
  lam_face: jax.Array    # float32 [], λ_face


def make_arm(gopl_rank: int, opl_rank: int, lam_face: float) -> Arm:
  """An `Arm` from Python numbers, validated.

  Example:
    >>> arm = make_arm(4, 4, 0.5)    # G-OPL(4) + OPL(4), lambda_face 0.5
    >>> int(arm.gopl_rank), int(arm.opl_rank), float(arm.lam_face)
    (4, 4, 0.5)
  """
  if gopl_rank < 0 or opl_rank < 0 or lam_face < 0:
    raise ValueError(f"ranks and lam_face must be >= 0, got {gopl_rank}, {opl_rank}, {lam_face}")
  return Arm(jnp.asarray(gopl_rank, jnp.int32), jnp.asarray(opl_rank, jnp.int32),
             jnp.asarray(lam_face, jnp.float32))


class Batch(NamedTuple):
  """The arrays of a `VideoSet` that training reads (jnp; vmappable)."""
  features: jax.Array      # [n, t, d]
  face_crops: jax.Array    # [n, t, d]
  faces: jax.Array         # [n, t] bool
  video_labels: jax.Array  # [n] int32


def as_arrays(videos: VideoSet) -> Batch:
  """The training arrays of a split, as jnp.

  Example:
    >>> from jaxlab.privacy import world
    >>> w = world.make_world(world.WorldConfig(num_train=8, num_test=4), seed=0)
    >>> data = as_arrays(w.train)
    >>> data.features.shape, data.faces.dtype, data.video_labels.shape
    ((8, 32, 128), dtype('bool'), (8,))
  """
  return Batch(jnp.asarray(videos.features), jnp.asarray(videos.face_crops),
               jnp.asarray(videos.faces), jnp.asarray(videos.video_labels))


def stack(batches: list[Batch]) -> Batch:
  """Stacks per-seed splits along a new leading axis (for vmap over seeds).

  Example:
    >>> from jaxlab.privacy import world
    >>> cfg = world.WorldConfig(num_train=8, num_test=4)
    >>> seeds = [as_arrays(world.make_world(cfg, seed=s).train) for s in range(3)]
    >>> stack(seeds).features.shape
    (3, 8, 32, 128)
  """
  return Batch(*(jnp.stack(x) for x in zip(*batches, strict=True)))


def make_model(cfg: TrainConfig) -> mil.PrivacyVAD:
  """The `PrivacyVAD` of a training config.

  Example:
    >>> model = make_model(TrainConfig(hidden=8, max_rank=4))
    >>> model.hidden, model.max_rank, model.mode
    (8, 4, 'qr')
  """
  return mil.PrivacyVAD(hidden=cfg.hidden, max_rank=cfg.max_rank, mode=cfg.mode,
                        opl_placement=cfg.opl_placement)


def _check(data: Batch, arm: Arm, cfg: TrainConfig) -> None:
  n, t, d = data.features.shape
  if cfg.batch_size > n:
    raise ValueError(f"batch_size ({cfg.batch_size}) exceeds the {n} training videos")
  if not 1 <= cfg.top_k <= t:
    raise ValueError(f"top_k must lie in [1, {t}], got {cfg.top_k}")
  for name in ("gopl_rank", "opl_rank"):
    try:
      r = int(getattr(arm, name))
    except (jax.errors.ConcretizationTypeError, jax.errors.TracerIntegerConversionError):
      continue  # traced (a vmapped sweep): checked where the arm was made
    if not 0 <= r <= cfg.max_rank:
      raise ValueError(f"arm.{name} must lie in [0, max_rank={cfg.max_rank}], got {r}")


def loss_terms(params, batch: Batch, arm: Arm, model: mil.PrivacyVAD, cfg: TrainConfig
               ) -> jax.Array:
  """[total, mil, face, orth] of one batch (the total is what is minimised).

  Example:
    >>> from jaxlab.privacy import world
    >>> w = world.make_world(world.WorldConfig(num_train=8, num_test=4), seed=0)
    >>> cfg = TrainConfig(num_steps=2, batch_size=4, max_rank=4, hidden=8)
    >>> data, arm, model = as_arrays(w.train), make_arm(4, 4, 1.0), make_model(cfg)
    >>> params = model.init(jax.random.key(0), data.features[:1], arm.gopl_rank, arm.opl_rank)
    >>> terms = loss_terms(params, data, arm, model, cfg)
    >>> terms.shape, bool(jnp.isfinite(terms).all())
    ((4,), True)
  """
  out = model.apply(params, batch.features, arm.gopl_rank, arm.opl_rank)
  l_mil = jnp.mean(mil.topk_mil_loss(out.logits, batch.video_labels, k=cfg.top_k))
  l_face = projection.face_alignment_loss(batch.face_crops, batch.features, out.q_gopl,
                                          batch.faces)
  l_orth = (projection.orthogonality_penalty(out.q_gopl,
                                             projection.rank_mask(cfg.max_rank, arm.gopl_rank))
            + projection.orthogonality_penalty(out.q_opl,
                                               projection.rank_mask(cfg.max_rank, arm.opl_rank)))
  total = l_mil + arm.lam_face * l_face + cfg.lam_orth * l_orth
  return jnp.stack([total, l_mil, l_face, l_orth])


def train(data: Batch, arm: Arm, key: jax.Array, cfg: TrainConfig,
          tx: optax.GradientTransformation) -> tuple[dict, jax.Array]:
  """Trains one arm on one seed's training videos (a `lax.scan` of `tx` steps).

  Args:
    data: the training split (`as_arrays(world.train)`); vmap it with `key` over seeds.
    arm: the arm (traced scalars are fine).
    key: PRNG key: initialisation and minibatch order.
    cfg: training settings (static).
    tx: the optimizer (`jaxlab.train.optimizer`; RTFM trains its head with Adam).

  Returns:
    (params, loss curve [num_steps, len(LOSS_TERMS)]).

  Example (skipped: it compiles and runs Adam steps; the module example runs this call)::

    >>> from jaxlab.privacy import world
    >>> w = world.make_world(world.WorldConfig(num_train=8, num_test=4), seed=0)
    >>> cfg = TrainConfig(num_steps=2, batch_size=4, max_rank=4, hidden=8)
    >>> params, curve = train(as_arrays(w.train), make_arm(4, 4, 1.0),  # doctest: +SKIP
    ...                       jax.random.key(0), cfg)
    >>> curve.shape   # num_steps x (total, mil, face, orth)  # doctest: +SKIP
    (2, 4)
  """
  _check(data, arm, cfg)
  model = make_model(cfg)
  k_init, k_data = jax.random.split(key)
  params = model.init(k_init, data.features[:1], arm.gopl_rank, arm.opl_rank)
  n = data.features.shape[0]

  def step(carry, k):
    p, s = carry
    idx = jax.random.choice(k, n, (cfg.batch_size,), replace=False)
    batch = jax.tree.map(lambda x: x[idx], data)
    grads, terms = jax.grad(lambda q: (lambda v: (v[0], v))(
        loss_terms(q, batch, arm, model, cfg)), has_aux=True)(p)
    updates, s = tx.update(grads, s, p)
    return (optax.apply_updates(p, updates), s), terms

  (params, _), curve = jax.lax.scan(step, (params, tx.init(params)),
                                    jax.random.split(k_data, cfg.num_steps))
  return params, curve


def evaluate(params, features: jax.Array, arm: Arm, cfg: TrainConfig) -> dict[str, jax.Array]:
  """Test-time outputs of one trained arm.

  Args:
    params: from `train`.
    features: test features [n, t, d].
    arm: the arm it was trained as.
    cfg: its training config.

  Returns:
    dict: logits [n, t], raw_logits [n, t] (the same scorer with both projections
    switched off, for ARD), private [n, t, d] (features after the input-level
    projections, for the face probe), q_gopl and q_opl.

  Example:
    >>> from jaxlab.privacy import world
    >>> w = world.make_world(world.WorldConfig(num_train=8, num_test=4), seed=0)
    >>> cfg = TrainConfig(num_steps=2, batch_size=4, max_rank=4, hidden=8)
    >>> arm, model = make_arm(4, 4, 1.0), make_model(cfg)
    >>> x = jnp.asarray(w.test.features)
    >>> params = model.init(jax.random.key(0), x[:1], arm.gopl_rank, arm.opl_rank)
    >>> out = evaluate(params, x, arm, cfg)
    >>> out["logits"].shape, out["private"].shape, out["q_gopl"].shape
    ((4, 32), (4, 32, 128), (128, 4))
  """
  model = make_model(cfg)
  out = model.apply(params, features, arm.gopl_rank, arm.opl_rank)
  raw = model.apply(params, features, 0, 0)
  return dict(logits=out.logits, raw_logits=raw.logits, private=out.private,
              q_gopl=out.q_gopl, q_opl=out.q_opl)


def first_basis(outputs: dict[str, Any], arm: Arm, cfg: TrainConfig) -> np.ndarray | None:
  """The basis of the arm's first input-level privacy layer (G-OPL, else OPL), or None.

  Example:
    >>> cfg = TrainConfig(max_rank=4)
    >>> outputs = dict(q_gopl=jnp.eye(128, 4), q_opl=jnp.zeros((128, 4)))
    >>> first_basis(outputs, make_arm(4, 4, 1.0), cfg).shape
    (128, 4)
    >>> first_basis(outputs, make_arm(0, 0, 0.0), cfg) is None   # the "none" arm
    True
  """
  if int(arm.gopl_rank) > 0:
    return np.asarray(outputs["q_gopl"])
  if int(arm.opl_rank) > 0 and cfg.opl_placement == "input":
    return np.asarray(outputs["q_opl"])
  return None
