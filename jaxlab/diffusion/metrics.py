"""Pixel-space stand-ins for the Pose-ICL metrics: PSNR, pose error by render search, identity.

* PSNR against the ground-truth render (images in [0, 1]).
* Pose error: the pose of a generated view is estimated as the argmin, over a yaw x pitch
  grid, of the L2 distance to ground-truth renders of the same object; the error is the
  angle between the estimated and the requested viewing directions (degrees).
* Identity: total-variation distance between joint colour histograms of the foreground
  pixels of the output and of the reference views (a stand-in for DINO / CLIP-I, whose
  weights are not available offline).

Example:
  >>> import jax.numpy as jnp
  >>> float(psnr(jnp.zeros((2, 4, 4, 3)), jnp.zeros((2, 4, 4, 3)) + 0.1)[0])
  20.0
"""

import jax
import jax.numpy as jnp
from jax import Array
from jaxtyping import Float, Int

from jaxlab.diffusion import render

# The pose error of a guess unrelated to the requested pose, in degrees. A guess uniform over the
# search grid (`pose_grid`: yaws evenly round the circle, pitches symmetric about 0) is as likely
# as its antipode -v (the yaw 180 degrees away, the pitch negated, when the step divides 180),
# and the angles from any requested view to v and to -v sum to 180; so the expected error is 90,
# whatever the requested views' distribution (any split, any pitch range). The same holds for a
# fixed guess against requested yaws uniform round the circle.
CHANCE_POSE_ERROR = 90.0


def psnr(images: Float[Array, "b h w c"], targets: Float[Array, "b h w c"]
         ) -> Float[Array, "b"]:
  """Peak signal-to-noise ratio (dB) per image, peak 1 (outputs clipped to [0, 1]; MSE floored
  at 1e-10 so identical images give 100 dB, never inf).

  Example:
    >>> x = jnp.full((2, 4, 4, 3), 0.5)
    >>> psnr(x, jnp.stack([x[0], x[1] + 0.1])).round(2).tolist()
    [100.0, 20.0]
  """
  mse = jnp.mean(jnp.square(jnp.clip(images, 0, 1) - targets), axis=(1, 2, 3))
  return -10.0 * jnp.log10(jnp.maximum(mse, 1e-10))


def pose_grid(step_deg: float, pitch_max: float) -> tuple[Float[Array, "g"], Float[Array, "g"]]:
  """Flattened (yaw, pitch) grid: yaw in [0, 360) and pitch in [-pitch_max, pitch_max].

  Example:
    >>> y, p = pose_grid(90.0, 0.0)
    >>> y.tolist(), p.tolist()
    ([0.0, 90.0, 180.0, 270.0], [0.0, 0.0, 0.0, 0.0])
  """
  if step_deg <= 0 or pitch_max < 0:
    raise ValueError(f"step_deg must be > 0 and pitch_max >= 0, got {step_deg}, {pitch_max}")
  yaws = jnp.arange(0.0, 360.0 - 1e-6, step_deg)
  n_pitch = int(pitch_max // step_deg)
  pitches = jnp.arange(-n_pitch, n_pitch + 1, dtype=jnp.float32) * step_deg
  y, p = jnp.meshgrid(yaws, pitches, indexing="ij")
  return y.reshape(-1), p.reshape(-1)


def angular_error(yaw_a: Float[Array, "*b"], pitch_a: Float[Array, "*b"],
                  yaw_b: Float[Array, "*b"], pitch_b: Float[Array, "*b"]) -> Float[Array, "*b"]:
  """Angle in degrees between two viewing directions.

  Example:
    >>> round(float(angular_error(jnp.array(0.0), jnp.array(0.0), jnp.array(90.0),
    ...                           jnp.array(0.0))), 3)
    90.0
  """
  a, b = render.view_direction(yaw_a, pitch_a), render.view_direction(yaw_b, pitch_b)
  # atan2(|a x b|, a . b): accurate near 0 and 180 degrees, where float32 arccos is not.
  return jnp.rad2deg(jnp.arctan2(jnp.linalg.norm(jnp.cross(a, b), axis=-1), jnp.sum(a * b, -1)))


def estimate_pose(images: Float[Array, "b h w c"], grid_images: Float[Array, "b g h w c"],
                  grid_yaw: Float[Array, "g"], grid_pitch: Float[Array, "g"]
                  ) -> tuple[Float[Array, "b"], Float[Array, "b"], Int[Array, "b"]]:
  """(yaw, pitch, grid index) of the grid render nearest (L2) to each image.

  Example:
    >>> grid_yaw, grid_pitch = pose_grid(90.0, 0.0)                  # 4 yaws
    >>> grid_images = jnp.arange(4.0).reshape(1, 4, 1, 1, 1) * jnp.ones((1, 4, 2, 2, 3)) / 4
    >>> yaw, pitch, idx = estimate_pose(grid_images[:, 2], grid_images, grid_yaw, grid_pitch)
    >>> yaw.tolist(), pitch.tolist(), idx.tolist()
    ([180.0], [0.0], [2])
  """
  d = jnp.sum(jnp.square(jnp.clip(images, 0, 1)[:, None] - grid_images), axis=(2, 3, 4))
  idx = jnp.argmin(d, -1)
  return grid_yaw[idx], grid_pitch[idx], idx


def colour_histogram(images: Float[Array, "*b h w c"], bins: int = 4,
                     threshold: float = 0.05) -> Float[Array, "*b k"]:
  """Normalised joint colour histogram (bins^3 cells) of the pixels brighter than `threshold`
  (the background is black); an image without such pixels gets the all-zero histogram.

  Example:
    >>> image = jnp.zeros((4, 4, 3)).at[:2, :, 0].set(1.0)           # top half red
    >>> h = colour_histogram(image, bins=2)
    >>> h.shape, h.tolist()
    ((8,), [0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0])
  """
  x = jnp.clip(images, 0.0, 1.0)
  fg = (jnp.max(x, -1) > threshold).astype(jnp.float32)
  cell = jnp.minimum((x * bins).astype(jnp.int32), bins - 1)
  index = (cell[..., 0] * bins + cell[..., 1]) * bins + cell[..., 2]
  hist = jnp.sum(jax.nn.one_hot(index, bins ** 3) * fg[..., None], axis=(-3, -2))
  return hist / jnp.maximum(jnp.sum(hist, -1, keepdims=True), 1.0)


def histogram_distance(a: Float[Array, "*b k"], b: Float[Array, "*b k"]) -> Float[Array, "*b"]:
  """Total-variation distance ``0.5 * sum |a - b|`` (0 = same colours, 1 = disjoint).

  Example:
    >>> histogram_distance(jnp.array([[0.5, 0.5, 0.0], [1.0, 0.0, 0.0]]),
    ...                    jnp.array([[0.5, 0.0, 0.5], [1.0, 0.0, 0.0]])).tolist()
    [0.5, 0.0]
  """
  return 0.5 * jnp.sum(jnp.abs(a - b), -1)
