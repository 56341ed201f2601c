"""SATA losses, metrics and the jitted train / evaluate programs (pure functions).

Loss (spec: L = L_rec + lambda L_reg, SAME-style reconstruction): MSE of the
decoded rotation matrices, of root-relative FK positions and of their frame
differences (velocity), BCE of foot contacts, MSE of the root motion, plus a
KL term. The encoder reads its input features standardised per channel with
the training set's statistics (`feature_stats`; targets stay in physical
units): without it the gait signal (a few hundredths of a 6-D rotation
component) is dwarfed by the per-joint offsets and the model sits for hundreds
of steps on the mean pose. Training is one `lax.scan` over steps drawing
random minibatches from device arrays, so a whole run (and `jax.vmap` over
seeds) is one program; ablations are `model.Switches` (traced), so every arm
reuses it.

Metrics: JR = mean geodesic angle of local rotations (degrees); JP = MPJPE of
root-relative FK positions (cm). Retargeting (source clip decoded on the
hidden pair's target skeleton) adds root-velocity error (m/s), gait-phase
correlation (Pearson, over time, of each walking limb's swing angle) and
foot-contact F1.

Example:
  >>> import jax, optax, numpy as np
  >>> from jaxlab.motion import generate, model as sata, skeletons
  >>> rng = np.random.default_rng(0)
  >>> clips = [generate.generate_clip(skeletons.make_skeleton("biped", rng),
  ...          generate.sample_params(rng), num_frames=8, fps=20.0) for _ in range(4)]
  >>> descs = sorted({d for c in clips for d in c.skeleton.descriptions})
  >>> data = generate.pack(clips, {d: i for i, d in enumerate(descs)}, max_joints=24)
  >>> table = np.zeros((len(descs), 4), np.float32)
  >>> net = sata.SataAutoencoder(sata.SataConfig(width=16, num_blocks=1, num_heads=2,
  ...                                            latent_dim=4))
  >>> arrays = as_arrays(data)
  >>> params, losses = train(net, optax.adam(1e-3), arrays, table, jax.random.key(0),
  ...                        num_steps=3, batch_size=2, num_levels=12,
  ...                        stats=feature_stats(arrays))
  >>> losses["loss"].shape
  (3,)
"""

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import Array
from jax.flatten_util import ravel_pytree
from jaxtyping import Float

from jaxlab import validation
from jaxlab.motion import generate, kinematics, rotations
from jaxlab.motion import model as sata

ROOT_OUT, CONTACT_OUT = slice(6, 10), 10
IDENTITY_6D = jnp.array([1.0, 0.0, 0.0, 0.0, 1.0, 0.0])


@dataclasses.dataclass(frozen=True)
class LossWeights:
  """Per-term weights (the paper does not report them: jaxlab interpretation)."""
  rotation: float = 1.0
  position: float = 1.0
  velocity: float = 0.05
  contact: float = 0.2
  root: float = 0.5
  kl: float = 1e-3


def as_arrays(data: generate.MotionData) -> dict[str, Array]:
  """`MotionData` as a dict of device arrays (the pytree the programs take)."""
  return {k: jnp.asarray(v) for k, v in data._asdict().items()}


class FeatureStats(NamedTuple):
  """Per-channel mean and standard deviation of the dynamic features (over real joints)."""
  mean: Float[Array, "f"]
  std: Float[Array, "f"]


def feature_stats(data: dict[str, Array], min_std: float = 1e-2) -> FeatureStats:
  """Statistics of `data["features"]` over clips, frames and real (unmasked) joints.

  Args:
    data: a `MotionData` dict (the training set).
    min_std: floor on the standard deviation, so a near-constant channel (e.g. a
      rotation component no controller moves) is not blown up (jaxlab interpretation).

  Returns:
    `FeatureStats` of shape [F] each.
  """
  f = data["features"]
  w = jnp.broadcast_to(data["mask"][:, None, :, None], f.shape).astype(f.dtype)
  count = jnp.maximum(jnp.sum(w, (0, 1, 2)), 1.0)
  mean = jnp.sum(f * w, (0, 1, 2)) / count
  var = jnp.sum(((f - mean) ** 2) * w, (0, 1, 2)) / count
  return FeatureStats(mean, jnp.maximum(jnp.sqrt(var), min_std))


def model_input(features: Float[Array, "*b f"], stats: FeatureStats | None) -> Float[Array, "*b f"]:
  """The encoder's input: `features` standardised by `stats` (unchanged when None)."""
  return features if stats is None else (features - stats.mean) / stats.std


def skeleton_inputs(data: dict[str, Array], text_table: Float[Array | np.ndarray, "k e"]
                    ) -> sata.SkeletonInputs:
  """The model's static inputs; text rows gathered from the description table."""
  parents = jnp.where(jnp.arange(data["parents"].shape[-1]) == 0, -1, data["parents"])
  return sata.SkeletonInputs(static=data["static"], text=jnp.asarray(text_table)[data["text_id"]],
                             parents=parents, depth=data["depth"], mask=data["mask"])


def check_num_levels(num_levels: int, data: dict[str, Array]) -> None:
  """Raises ValueError when `num_levels` < deepest real joint of `data` + 1.

  Fewer FK rounds silently leave the deepest joints at wrong positions. The
  check needs concrete depths: it runs on eager calls and is skipped when
  `data` is traced (inside `jit` / `vmap`), where the caller must pass enough.
  """
  depth = validation.concrete(data["depth"])
  if depth is None or depth.size == 0:
    return
  mask = validation.concrete(data["mask"]) if "mask" in data else None
  if mask is not None:
    depth = np.where(np.broadcast_to(mask, depth.shape), depth, 0)
  needed = int(depth.max()) + 1
  if num_levels < needed:
    raise ValueError(f"num_levels must be >= {needed} (deepest skeleton depth "
                     f"{needed - 1} + 1), got {num_levels}")


def decode_outputs(out: Float[Array, "b t j 11"], data: dict[str, Array], num_levels: int
                   ) -> dict[str, Array]:
  """Rotations [B, T, J, 3, 3], root-relative FK positions, root motion and contact logits.

  Raises ValueError when `num_levels` < deepest skeleton depth + 1 and `data` is
  concrete (`check_num_levels`).
  """
  check_num_levels(num_levels, data)
  # The network predicts the 6-D offset from the identity (the rest pose), so an
  # untrained decoder starts at the rest pose instead of a random rotation.
  rot = rotations.sixd_to_matrix(out[..., :6] + IDENTITY_6D)
  parents = jnp.where(jnp.arange(data["parents"].shape[-1]) == 0, -1, data["parents"])

  def fk(par, off, r):  # one clip: [T, J, 3, 3]
    pos, _ = kinematics.forward_kinematics(par, off, r, jnp.zeros(3), num_levels=num_levels)
    return pos

  pos = jax.vmap(fk)(parents, data["offsets"], rot)
  return dict(rot=rot, pos=pos, root=out[:, :, 0, ROOT_OUT], contact_logit=out[..., CONTACT_OUT])


def targets(data: dict[str, Array]) -> dict[str, Array]:
  """Ground truth in the layout of `decode_outputs`."""
  f = data["features"]
  return dict(rot=rotations.sixd_to_matrix(f[..., generate.ROT]), pos=f[..., generate.POS],
              root=f[:, :, 0, generate.ROOT], contact=f[..., generate.CONTACT])


def _masked_mean(x, mask):
  mask = jnp.broadcast_to(mask, x.shape).astype(x.dtype)
  return jnp.sum(x * mask) / jnp.maximum(jnp.sum(mask), 1.0)


def loss_fn(params: Any, net: sata.SataAutoencoder, batch: dict[str, Array],
            text_table: Array, rng: Array | None, weights: LossWeights, num_levels: int,
            stats: FeatureStats | None = None, switches: sata.Switches | None = None):
  """Reconstruction + KL loss of one batch; returns (loss, per-term dict)."""
  skel = skeleton_inputs(batch, text_table)
  out, mu, logvar = net.apply(params, model_input(batch["features"], stats), skel, skel, rng,
                              switches)
  pred, true = decode_outputs(out, batch, num_levels), targets(batch)
  jm = batch["mask"][:, None, :]                                       # [B, 1, J]
  terms = dict(
      rotation=_masked_mean(jnp.sum((pred["rot"] - true["rot"]) ** 2, (-1, -2)), jm),
      position=_masked_mean(jnp.sum((pred["pos"] - true["pos"]) ** 2, -1), jm),
      velocity=_masked_mean(jnp.sum((jnp.diff(pred["pos"], axis=1)
                                     - jnp.diff(true["pos"], axis=1)) ** 2, -1), jm) * 100.0,
      contact=_masked_mean(optax.sigmoid_binary_cross_entropy(pred["contact_logit"],
                                                              true["contact"]), jm),
      root=jnp.mean((pred["root"] - true["root"]) ** 2),
      kl=jnp.mean(jnp.sum(0.5 * (jnp.exp(logvar) + mu ** 2 - 1.0 - logvar), -1)))
  loss = sum(getattr(weights, k) * v for k, v in terms.items())
  return loss, terms


def train(net: sata.SataAutoencoder, tx: optax.GradientTransformation, data: dict[str, Array],
          text_table: Float[Array | np.ndarray, "k e"], key: Array, *, num_steps: int,
          batch_size: int, num_levels: int, weights: LossWeights = LossWeights(),
          stats: FeatureStats | None = None, switches: sata.Switches | None = None):
  """Trains from a fresh init on random minibatches of `data` for `num_steps` (one scan).

  Args:
    net: the autoencoder.
    tx: optimizer.
    data: the training `MotionData` dict.
    text_table: [K, E] description embeddings (rows indexed by `data["text_id"]`).
    key: init + minibatch + latent-sample key.
    num_steps: optimizer steps.
    batch_size: clips per step.
    num_levels: FK propagation rounds, at least the deepest skeleton depth + 1
      (checked when `data` is concrete: ValueError otherwise).
    weights: loss weights.
    stats: input standardisation (`feature_stats` of `data`); None feeds raw features.
    switches: run-time ablation switches of `net` (traced: every arm shares the program).

  Returns:
    (params, per-step losses dict: "loss" and each term, each [num_steps]).
  """
  if num_steps < 1 or batch_size < 1:
    raise ValueError(f"num_steps and batch_size must be >= 1, got {num_steps}, {batch_size}")
  check_num_levels(num_levels, data)
  n = data["features"].shape[0]
  text_table = jnp.asarray(text_table)
  init_key, key = jax.random.split(key)
  first = jax.tree.map(lambda x: x[:1], data)
  skel = skeleton_inputs(first, text_table)
  # The optimizer updates one flat vector: the same arithmetic for elementwise and
  # global-norm transforms (Adam, clipping), but one fused update instead of one per
  # parameter leaf, which makes the program several times cheaper to compile.
  flat, unravel = ravel_pytree(net.init(init_key, first["features"], skel, skel, None, switches))
  opt_state = tx.init(flat)

  def flat_loss(flat, batch, rng):
    return loss_fn(unravel(flat), net, batch, text_table, rng, weights, num_levels, stats,
                   switches)

  grad_fn = jax.value_and_grad(flat_loss, has_aux=True)

  def step(carry, k):
    flat, opt_state = carry
    k_idx, k_z = jax.random.split(k)
    idx = jax.random.randint(k_idx, (batch_size,), 0, n)
    batch = jax.tree.map(lambda x: x[idx], data)
    (loss, terms), grads = grad_fn(flat, batch, k_z)
    updates, opt_state = tx.update(grads, opt_state, flat)
    return (optax.apply_updates(flat, updates), opt_state), dict(loss=loss, **terms)

  (flat, _), losses = jax.lax.scan(step, (flat, opt_state), jax.random.split(key, num_steps))
  return unravel(flat), losses


def swing_angle(rot: Float[Array, "*b 3 3"]) -> Float[Array, "*b"]:
  """Angle of a local rotation about the x (lateral) axis: the limb's fore-aft swing."""
  return jnp.arctan2(rot[..., 2, 1], rot[..., 1, 1])


def _pearson_over_time(a, b, eps=1e-6):
  a = a - a.mean(1, keepdims=True)
  b = b - b.mean(1, keepdims=True)
  return jnp.sum(a * b, 1) / jnp.sqrt(jnp.maximum(jnp.sum(a * a, 1) * jnp.sum(b * b, 1), eps))


def metrics(pred: dict[str, Array], true: dict[str, Array], data: dict[str, Array]
            ) -> dict[str, Array]:
  """JR (deg), JP (cm), root-velocity error (m/s), gait-phase correlation and contact F1."""
  jm = data["mask"][:, None, :]
  jr = _masked_mean(jnp.rad2deg(rotations.geodesic_angle(pred["rot"], true["rot"])), jm)
  jp = _masked_mean(100.0 * jnp.linalg.norm(pred["pos"] - true["pos"], axis=-1), jm)
  root_vel = jnp.mean(jnp.abs(pred["root"][..., :2] - true["root"][..., :2]))
  corr = _pearson_over_time(swing_angle(pred["rot"]), swing_angle(true["rot"]))  # [B, J]
  gait = _masked_mean(corr, data["swing_joint"])
  cm = data["contact_joint"][:, None, :]
  p, t = (pred["contact_logit"] > 0) & cm, (true["contact"] > 0.5) & cm
  tp = jnp.sum(p & t)
  f1 = 2 * tp / jnp.maximum(jnp.sum(p) + jnp.sum(t), 1)
  return dict(jr_deg=jr, jp_cm=jp, root_vel=root_vel, gait_corr=gait, contact_f1=f1)


def predict(net: sata.SataAutoencoder, params: Any, source: dict[str, Array],
            target: dict[str, Array], text_table: Float[Array | np.ndarray, "k e"], *,
            num_levels: int, stats: FeatureStats | None = None,
            switches: sata.Switches | None = None) -> dict[str, Array]:
  """`source` clips encoded (latent mean) and decoded on `target`'s skeletons (`decode_outputs`).

  `stats` and `switches` must be those of training. Raises ValueError when
  `num_levels` is too small for `target`'s skeletons (`check_num_levels`).
  """
  check_num_levels(num_levels, target)  # before the network runs
  out, _, _ = net.apply(params, model_input(source["features"], stats),
                        skeleton_inputs(source, text_table), skeleton_inputs(target, text_table),
                        None, switches)
  return decode_outputs(out, target, num_levels)


def evaluate(net: sata.SataAutoencoder, params: Any, source: dict[str, Array],
             target: dict[str, Array], text_table: Float[Array | np.ndarray, "k e"], *,
             num_levels: int, stats: FeatureStats | None = None,
             switches: sata.Switches | None = None) -> dict[str, Array]:
  """Encodes `source` clips, decodes them on `target`'s skeletons, scores against `target`.

  With `target = source` this is reconstruction; with the hidden pairs of another
  species it is zero-shot retargeting (the latent mean is used, no sampling).
  `stats` and `switches` must be those of training.
  """
  pred = predict(net, params, source, target, text_table, num_levels=num_levels, stats=stats,
                 switches=switches)
  return metrics(pred, targets(target), target)
