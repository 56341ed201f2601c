"""The toy Pose-ICL task: novel views of unseen objects from K posed references, per arm.

Data (all rendered on the fly inside the jitted step by `jaxlab.diffusion.render`): a pool
of training identities and a disjoint pool of test identities (new objects at test time =
in-context learning). Poses: yaw in [0, 360), pitch in [-30, 30]. Training and reference
yaws come from [0, train_yaw_max) minus interleaved held-out bands; test targets come from
those bands ("interp") or from the unseen sector [train_yaw_max, 360) ("extrap").

Arms (how pose reaches the model; `ARMS`):
  sape        SAPE 3-axis RoPE for every image (refs from their own pose); nothing else.
  rope2d      2-D grid RoPE (image index, row, col); every image's pose code added to its
              tokens and the target pose through adaLN (jaxlab interpretation: the spec names
              only the adaLN target pose; without the references' poses the baseline could
              not relate them to the target).
  plucker     rope2d + each token's Plücker ray (d, o x d) as a token feature.
  sape_noref  SAPE with every reference masked out (the shape prior alone).

Training samples the number of references K uniformly in [1, max_refs] per example (one
model serves every K at test time; jaxlab interpretation); the loss is rectified flow on
the target's tokens only.

Example:
  >>> import jax
  >>> cfg = TaskConfig(image_size=8, patch=4, num_train_objects=8, num_test_objects=2)
  >>> pool = sample_identities(jax.random.key(1), cfg)[0]
  >>> batch, _ = sample_batch(jax.random.key(0), pool, 3, cfg)
  >>> batch.images.shape
  (3, 4, 8, 8, 3)
"""

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax import Array

from jaxlab.diffusion import flow, positions, render
from jaxlab.diffusion import metrics as M
from jaxlab.diffusion.dit import DiT, DiTConfig

SPLITS = ("interp", "extrap")


@dataclasses.dataclass(frozen=True)
class ArmSpec:
  """How the pose reaches the model (see the module doc)."""
  sape: bool              # SAPE positions (else the 2-D grid with the image index)
  pose_tokens: bool       # each image's pose code added to its tokens
  plucker: bool           # Plücker ray per token
  pose_adaln: bool        # the target's pose code in the adaLN condition
  use_refs: bool          # references visible at all

  def flags(self) -> Array:
    """The arm as a float vector [5]: every arm runs the same compiled program (the inputs an
    arm does not use are zeros, which only leaves a constant bias), so arms can be vmapped."""
    return jnp.array([self.sape, self.pose_tokens, self.plucker, self.pose_adaln,
                      self.use_refs], jnp.float32)


ARMS = {
    "sape": ArmSpec(True, False, False, False, True),
    "rope2d": ArmSpec(False, True, False, True, True),
    "plucker": ArmSpec(False, True, True, True, True),
    "sape_noref": ArmSpec(True, False, False, False, False),
}
NUM_FEATURES = 10  # per-token features: pose code (4) + Plücker ray (6)


def get_arm(name: str) -> ArmSpec:
  """The `ArmSpec` of an arm name, with a clear error for an unknown one."""
  if name not in ARMS:
    raise ValueError(f"Unknown arm {name!r}; expected one of {', '.join(ARMS)}")
  return ARMS[name]


@dataclasses.dataclass(frozen=True)
class TaskConfig:
  """The task and its splits (every field a jaxlab interpretation of the spec's toy setting).

  Attributes:
    image_size, patch: pixels per side and per token side (G = image_size // patch).
    max_refs: the largest K (training draws K in [1, max_refs]).
    num_train_objects, num_test_objects: sizes of the disjoint identity pools.
    max_parts, min_parts: parts per object.
    pitch_max: pitch range [-pitch_max, pitch_max] (degrees).
    train_yaw_max: yaws >= this are never seen in training (the extrapolation sector).
    band_period, band_width: inside [0, train_yaw_max), the yaws [k P + (P - w) / 2,
      k P + (P + w) / 2) are held out for the interpolation split.
    kappa, sape_miss: SAPE's scale and its rule for tokens that miss the box.
  """
  image_size: int = 16
  patch: int = 4
  max_refs: int = 3
  num_train_objects: int = 256
  num_test_objects: int = 32
  max_parts: int = 3
  min_parts: int = 2
  pitch_max: float = 30.0
  train_yaw_max: float = 270.0
  band_period: float = 30.0
  band_width: float = 10.0
  kappa: float = 1.0
  sape_miss: str = "grid"

  def __post_init__(self):
    if self.patch < 1 or self.image_size % self.patch:
      raise ValueError(f"patch {self.patch} must divide image_size {self.image_size}")
    if self.max_refs < 1:
      raise ValueError(f"max_refs must be >= 1, got {self.max_refs}")
    if self.num_train_objects < 1 or self.num_test_objects < 1:
      raise ValueError("num_train_objects and num_test_objects must be >= 1")
    if not 0 < self.train_yaw_max < 360:
      raise ValueError(f"train_yaw_max must lie in (0, 360), got {self.train_yaw_max}")
    periods = self.train_yaw_max / self.band_period
    if abs(periods - round(periods)) > 1e-6 or not 0 < self.band_width < self.band_period:
      raise ValueError("band_period must divide train_yaw_max and 0 < band_width < band_period")
    if self.sape_miss not in positions.MISS_MODES:
      raise ValueError(f"sape_miss must be one of {positions.MISS_MODES}")

  @property
  def grid(self) -> int:
    return self.image_size // self.patch

  @property
  def patch_dim(self) -> int:
    return self.patch * self.patch * 3


class Batch(NamedTuple):
  """Rendered views in [0, 1]: images [b, M, H, W, 3] (refs, then the target), poses
  yaw / pitch [b, M] (degrees), image_mask [b, M] (present refs; the target is True)."""
  images: Array
  yaw: Array
  pitch: Array
  image_mask: Array


def sample_identities(key: Array, cfg: TaskConfig) -> tuple[render.Objects, render.Objects]:
  """(training pool, test pool): disjoint identities drawn from independent keys."""
  k_train, k_test = jax.random.split(key)
  kw = dict(max_parts=cfg.max_parts, min_parts=cfg.min_parts)
  return (render.sample_objects(k_train, cfg.num_train_objects, **kw),
          render.sample_objects(k_test, cfg.num_test_objects, **kw))


def sample_yaw(key: Array, shape: tuple[int, ...], split: str, cfg: TaskConfig) -> Array:
  """Yaws (degrees) of a split: "train" (also the references), "interp" or "extrap"."""
  p, w = cfg.band_period, cfg.band_width
  n_periods = int(round(cfg.train_yaw_max / p))
  k1, k2 = jax.random.split(key)
  if split == "extrap":
    return jax.random.uniform(k1, shape, minval=cfg.train_yaw_max, maxval=360.0)
  period = jax.random.randint(k1, shape, 0, n_periods).astype(jnp.float32) * p
  lo = (p - w) / 2
  if split == "interp":
    return period + lo + jax.random.uniform(k2, shape) * w
  if split == "train":
    r = jax.random.uniform(k2, shape) * (p - w)          # position in the period's train part
    return period + jnp.where(r < lo, r, r + w)
  raise ValueError(f"split must be 'train', 'interp' or 'extrap', got {split!r}")


def _render_batch(objects: render.Objects, yaw: Array, pitch: Array, cfg: TaskConfig) -> Array:
  m = yaw.shape[1]
  tiled = jax.tree.map(lambda x: jnp.repeat(x[:, None], m, axis=1), objects)
  return render.render_views(tiled, yaw, pitch, size=cfg.image_size)


def sample_batch(key: Array, pool: render.Objects, batch_size: int, cfg: TaskConfig,
                 split: str = "train", num_refs: int | None = None
                 ) -> tuple[Batch, render.Objects]:
  """A batch of (refs, target) views of random identities from `pool`.

  Args:
    key: PRNG key.
    pool: the identity pool to draw from (with replacement when `split == "train"`, else the
      first `batch_size` objects in order).
    batch_size: examples.
    cfg: the task.
    split: the target's yaw split; references always come from the training yaws.
    num_refs: refs shown (None: uniform in [1, max_refs] per example).

  Returns:
    (a `Batch` with M = max_refs + 1 images per example, the drawn objects).
  """
  ks = jax.random.split(key, 6)
  n_pool = pool.kind.shape[0]
  if split == "train":
    ids = jax.random.randint(ks[0], (batch_size,), 0, n_pool)
  else:
    if batch_size > n_pool:
      raise ValueError(f"batch_size {batch_size} exceeds the pool's {n_pool} objects")
    ids = jnp.arange(batch_size)
  objects = jax.tree.map(lambda x: x[ids], pool)
  k = cfg.max_refs
  ref_yaw = sample_yaw(ks[1], (batch_size, k), "train", cfg)
  tgt_yaw = sample_yaw(ks[2], (batch_size, 1), split, cfg)
  pitch = jax.random.uniform(ks[3], (batch_size, k + 1), minval=-cfg.pitch_max,
                             maxval=cfg.pitch_max)
  yaw = jnp.concatenate([ref_yaw, tgt_yaw], 1)
  if num_refs is None:
    count = jax.random.randint(ks[4], (batch_size, 1), 1, k + 1)
  else:
    count = jnp.full((batch_size, 1), num_refs)
  mask = jnp.concatenate([jnp.arange(k)[None] < count, jnp.ones((batch_size, 1), bool)], 1)
  return Batch(_render_batch(objects, yaw, pitch, cfg), yaw, pitch, mask), objects


def arm_inputs(flags: Array, yaw: Array, pitch: Array, image_mask: Array, cfg: TaskConfig
               ) -> dict[str, Array]:
  """The DiT's conditioning inputs of an arm (`ArmSpec.flags()`) for views at (yaw, pitch) [b, M].

  Returns positions [b, M, N, 3], image_mask [b, M], cond [b, 4] (the target's pose code or
  zeros) and token_features [b, M, N, 10] (pose codes and Plücker rays, or zeros).
  """
  if flags.shape != (5,):
    raise ValueError(f"flags must be ArmSpec.flags() [5], got {flags.shape}")
  b, m = yaw.shape
  n = cfg.grid * cfg.grid
  fn = lambda y, p: positions.sape_positions(y, p, image_size=cfg.image_size, patch=cfg.patch,
                                             kappa=cfg.kappa, miss=cfg.sape_miss)
  sape = jax.vmap(jax.vmap(fn))(yaw, pitch).reshape(b, m, n, 3)
  # 2-D grid: image index on axis 0 (the target 0, reference j at j + 1), then (row, col).
  index = jnp.concatenate([jnp.arange(1, m), jnp.zeros(1)]).astype(jnp.float32)
  grid = jax.vmap(lambda i: positions.grid_positions(cfg.grid, i))(index).reshape(m, n, 3)
  pos = jnp.where(flags[0] > 0, sape, grid[None])
  code = positions.pose_features(yaw, pitch)                                 # [b, m, 4]
  fn = lambda y, p: positions.plucker_rays(y, p, image_size=cfg.image_size, patch=cfg.patch)
  plucker = jax.vmap(jax.vmap(fn))(yaw, pitch).reshape(b, m, n, 6)
  feats = jnp.concatenate([flags[1] * jnp.broadcast_to(code[:, :, None], (b, m, n, 4)),
                           flags[2] * plucker], -1)
  cond = flags[3] * code[:, -1]
  mask = jnp.where(flags[4] > 0, image_mask, image_mask & (jnp.arange(m) == m - 1))
  return dict(positions=pos, image_mask=mask, cond=cond, token_features=feats)


@dataclasses.dataclass(frozen=True)
class TrainConfig:
  """Training: steps, batch, AdamW, and the sampler's Euler steps at evaluation."""
  num_steps: int = 300
  batch_size: int = 16
  learning_rate: Any = 1e-3   # a float or an optax schedule
  weight_decay: float = 0.0
  grad_clip: float = 1.0
  sample_steps: int = 10


def make_model(cfg: TaskConfig, model_kwargs: dict[str, Any]) -> DiT:
  """The task's DiT: patches of `cfg.patch_dim`, 3 RoPE axes, the rest from `model_kwargs`."""
  return DiT(DiTConfig(patch_dim=cfg.patch_dim, num_axes=3, **model_kwargs))


def _model_inputs(batch: Batch, flags: Array, cfg: TaskConfig):
  x = flow.patchify(batch.images * 2 - 1, cfg.patch)          # [b, M, N, p] in [-1, 1]
  return x, arm_inputs(flags, batch.yaw, batch.pitch, batch.image_mask, cfg)


def velocity_fn(model: DiT, params, refs: Array, inputs: dict[str, Any]):
  """v(x_t, t) of the target given clean reference tokens `refs` [b, K, N, p]."""
  def v(x_t, t):
    patches = jnp.concatenate([refs, x_t[:, None]], 1)
    return model.apply({"params": params}, patches, inputs["positions"], inputs["image_mask"], t,
                       inputs["cond"], inputs["token_features"])
  return v


def train(key: Array, flags: Array, pool: render.Objects, cfg: TaskConfig, train_cfg: TrainConfig,
          model: DiT) -> tuple[Any, Array]:
  """Trains one model per arm with rectified flow; returns (params, losses [A, steps]).

  The arms (`flags` [A, 5], rows of `ArmSpec.flags()`) share the init key and every batch,
  noise and time draw (paired arms); the rendering runs once per step for all of them.
  jit/vmap-able (vmap over `key` for seeds).
  """
  if flags.ndim != 2 or flags.shape[1] != 5:
    raise ValueError(f"flags must be [arms, 5] (ArmSpec.flags() rows), got {flags.shape}")
  k_init, k_data = jax.random.split(key)
  tx = optax.chain(optax.clip_by_global_norm(train_cfg.grad_clip),
                   optax.adamw(train_cfg.learning_rate, weight_decay=train_cfg.weight_decay))

  def draw(k):
    kb, kt, kn = jax.random.split(k, 3)
    batch, _ = sample_batch(kb, pool, train_cfg.batch_size, cfg)
    x = flow.patchify(batch.images * 2 - 1, cfg.patch)
    inputs = jax.vmap(lambda f: arm_inputs(f, batch.yaw, batch.pitch, batch.image_mask, cfg))(
        flags)
    t = jax.random.uniform(kt, (x.shape[0],))
    return x, inputs, t, jax.random.normal(kn, x[:, -1].shape)

  x, inputs, t, _ = draw(k_data)
  init = lambda inp: model.init(k_init, x, inp["positions"], inp["image_mask"], t, inp["cond"],
                                inp["token_features"])["params"]
  params = jax.vmap(init)(inputs)
  opt_state = jax.vmap(tx.init)(params)

  def loss_fn(p, inp, x, t, noise):
    return flow.rectified_flow_loss(velocity_fn(model, p, x[:, :-1], inp), x[:, -1], noise, t)

  def arm_step(p, s, inp, x, t, noise):
    loss, grads = jax.value_and_grad(loss_fn)(p, inp, x, t, noise)
    updates, s = tx.update(grads, s, p)
    return optax.apply_updates(p, updates), s, loss

  def step(carry, k):
    p, s = carry
    x, inputs, t, noise = draw(k)
    p, s, loss = jax.vmap(arm_step, in_axes=(0, 0, 0, None, None, None))(p, s, inputs, x, t,
                                                                         noise)
    return (p, s), loss

  (params, _), losses = jax.lax.scan(step, (params, opt_state),
                                     jax.random.split(k_data, train_cfg.num_steps))
  return params, losses.T


class EvalSet(NamedTuple):
  """The fixed evaluation views of one seed: `batch` and `noise` with a leading split axis
  (`SPLITS`; all max_refs references rendered), and the pose-grid renders of each test
  object [n, G, H, W, 3] (shared by the splits)."""
  batch: Batch
  noise: Array
  grid_images: Array


def make_eval_set(key: Array, pool: render.Objects, cfg: TaskConfig, grid_step: float
                  ) -> EvalSet:
  """Fixed views of every test object for every split (shared by every arm of a seed)."""
  n = pool.kind.shape[0]
  batches = [sample_batch(jax.random.fold_in(key, i), pool, n, cfg, split=split,
                          num_refs=cfg.max_refs)[0] for i, split in enumerate(SPLITS)]
  batch = jax.tree.map(lambda *xs: jnp.stack(xs), *batches)
  noise = jax.random.normal(jax.random.fold_in(key, len(SPLITS)),
                            (len(SPLITS), n, cfg.grid * cfg.grid, cfg.patch_dim))
  gy, gp = M.pose_grid(grid_step, cfg.pitch_max)
  g = gy.shape[0]
  tiled = jax.tree.map(lambda x: jnp.repeat(x[:, None], g, axis=1), pool)
  grid_images = render.render_views(tiled, jnp.broadcast_to(gy, (n, g)),
                                    jnp.broadcast_to(gp, (n, g)), size=cfg.image_size)
  return EvalSet(batch, noise, grid_images)


EVAL_METRICS = ("psnr", "pose_error", "pose_within_15", "identity_distance")


def evaluate(params, flags: Array, eval_set: EvalSet, num_refs: Array | int, cfg: TaskConfig,
             model: DiT, sample_steps: int, grid_step: float) -> tuple[Array, Array]:
  """Generates one split's target views with `num_refs` references: (metrics [4], images).

  `eval_set` holds one split here (index a `make_eval_set` result's batch and noise, or vmap
  over their split axis with the grid renders shared). Metrics (means over the test
  objects): PSNR (dB), pose error (degrees), fraction with pose error <= 15 degrees,
  colour-histogram distance to the `num_refs` references shown (`image_metrics`).
  """
  batch = eval_set.batch
  k = cfg.max_refs
  mask = batch.image_mask.at[:, :k].set(jnp.arange(k)[None] < num_refs)
  batch = batch._replace(image_mask=mask)
  x, inputs = _model_inputs(batch, flags, cfg)
  sample = flow.euler_sample(velocity_fn(model, params, x[:, :-1], inputs), eval_set.noise,
                             sample_steps)
  images = jnp.clip((flow.unpatchify(sample, cfg.patch) + 1) / 2, 0, 1)
  return image_metrics(images, eval_set, num_refs, cfg, grid_step), images


def image_metrics(images: Array, eval_set: EvalSet, num_refs: Array | int, cfg: TaskConfig,
                  grid_step: float) -> Array:
  """The four `EVAL_METRICS` of target images [n, H, W, 3] (means over the n objects).

  The identity distance compares the images with the first `num_refs` references only (the
  ones the model was shown; 1 <= num_refs <= max_refs): a reference the model never saw says
  nothing about the identity it carried over.
  """
  batch = eval_set.batch
  target = batch.images[:, -1]
  gy, gp = M.pose_grid(grid_step, cfg.pitch_max)
  yaw_hat, pitch_hat, _ = M.estimate_pose(images, eval_set.grid_images, gy, gp)
  err = M.angular_error(yaw_hat, pitch_hat, batch.yaw[:, -1], batch.pitch[:, -1])
  ref_hist = M.colour_histogram(batch.images[:, :-1])                 # [n, max_refs, bins^3]
  shown = (jnp.arange(cfg.max_refs) < num_refs).astype(jnp.float32)
  ref_hist = jnp.einsum("nkc,k->nc", ref_hist, shown) / jnp.maximum(shown.sum(), 1.0)
  ident = M.histogram_distance(M.colour_histogram(images), ref_hist)
  return jnp.stack([jnp.mean(M.psnr(images, target)), jnp.mean(err),
                    jnp.mean((err <= 15.0).astype(jnp.float32)), jnp.mean(ident)])
