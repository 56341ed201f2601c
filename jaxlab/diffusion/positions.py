"""Token positions of one view: SAPE surface anchors, the 2-D grid, and Plücker rays.

SAPE (surface-anchored position embedding; jaxlab interpretation of Pose-ICL, whose
equations are not public): every token's ray -- the ray through its patch centre, in the
object frame -- is intersected with the subject's bounding box B = [-1, 1]^3 (slab test),
and the first hit p on the box's surface becomes the token's 3-D position
`kappa * (p + 1) / 2 * G` (G = tokens per image side), fed to a 3-axis RoPE
(`jaxlab.diffusion.rope`). Two tokens of two views that see the same box point get the same
phase, whatever the poses: pose enters through the positions alone, with no parameters.
Tokens whose ray misses B keep 2-D grid coordinates (`miss="grid"`) or one reserved far
coordinate (`miss="far"`).

Example:
  >>> pos = sape_positions(30.0, 10.0, image_size=16, patch=4)
  >>> pos.shape
  (4, 4, 3)
"""

import jax.numpy as jnp
from jax import Array
from jaxtyping import Float

from jaxlab.diffusion import render

MISS_MODES = ("grid", "far")


def box_anchors(origins: Float[Array, "*r 3"], dirs: Float[Array, "*r 3"]
                ) -> tuple[Float[Array, "*r 3"], Array]:
  """First surface points of rays on the bounding box B = [-1, 1]^3, and the hit mask.

  Slab test: t1 = (-1 - o) / d, t2 = (1 - o) / d per axis; t_near = max_axis min(t1, t2),
  t_far = min_axis max(t1, t2); hit iff t_near <= t_far and t_far > 0; p = o + t_near d
  (0 where missed).

  Example:
    >>> p, hit = box_anchors(jnp.array([0.0, 0.0, 3.0]), jnp.array([0.0, 0.0, -1.0]))
    >>> p.tolist(), bool(hit)
    ([0.0, 0.0, 1.0], True)
  """
  t_near, t_far, _ = render.box_slab(origins, dirs)
  hit = (t_near <= t_far) & (t_far > 0)
  t = jnp.where(hit, jnp.maximum(t_near, 0.0), 0.0)
  points = jnp.where(hit[..., None], origins + t[..., None] * dirs, 0.0)
  return points, hit


def grid_positions(grid: int, index: Float[Array, ""] | float = 0.0) -> Float[Array, "g g 3"]:
  """The 2-D grid RoPE's positions of one image: (image index, row, column).

  Example:
    >>> grid_positions(2, 1.0)[1, 0].tolist()
    [1.0, 1.0, 0.0]
  """
  if grid < 1:
    raise ValueError(f"grid must be >= 1, got {grid}")
  r, c = jnp.meshgrid(jnp.arange(grid, dtype=jnp.float32), jnp.arange(grid, dtype=jnp.float32),
                      indexing="ij")
  return jnp.stack([jnp.full_like(r, index), r, c], -1)


def sape_positions(yaw_deg: Float[Array, ""] | float, pitch_deg: Float[Array, ""] | float, *,
                   image_size: int, patch: int, kappa: float = 1.0, miss: str = "grid",
                   extent: float = render.DEFAULT_EXTENT) -> Float[Array, "g g 3"]:
  """SAPE positions of the tokens of one view (jaxlab interpretation, see the module doc).

  Args:
    yaw_deg, pitch_deg: the view's pose.
    image_size: pixels per side; patch: pixels per token side (G = image_size // patch).
    kappa: scale of the anchor into RoPE units, pos = kappa (p + 1) / 2 G (spec: ~1).
    miss: tokens whose ray misses the box: "grid" keeps (row, col) on the first two axes and
      -1 on the third (outside the box's range [0, kappa G]); "far" puts them all at -G.
    extent: the camera's image-plane half-width (as in `render.render`).

  Returns:
    [G, G, 3] float positions.

  Example:
    >>> pos = sape_positions(0.0, 0.0, image_size=16, patch=4)
    >>> pos.shape, pos[0, 0].tolist()   # on the box's front face z = 1, i.e. kappa G = 4
    ((4, 4, 3), [0.125, 3.875, 4.0])
  """
  if miss not in MISS_MODES:
    raise ValueError(f"miss must be one of {MISS_MODES}, got {miss!r}")
  if kappa <= 0:
    raise ValueError(f"kappa must be > 0, got {kappa}")
  # pixel_rays checks image_size and patch (>= 1, patch dividing image_size) first.
  origins, dirs = render.pixel_rays(yaw_deg, pitch_deg, image_size, extent=extent, stride=patch)
  grid = image_size // patch
  points, hit = box_anchors(origins, dirs)
  pos = kappa * (points + 1.0) / 2.0 * grid
  if miss == "grid":
    g = grid_positions(grid)
    fallback = jnp.stack([g[..., 1], g[..., 2], jnp.full_like(g[..., 0], -1.0)], -1)
  else:
    fallback = jnp.full(pos.shape, -float(grid))
  return jnp.where(hit[..., None], pos, fallback)


def plucker_rays(yaw_deg: Float[Array, ""] | float, pitch_deg: Float[Array, ""] | float, *,
                 image_size: int, patch: int, extent: float = render.DEFAULT_EXTENT
                 ) -> Float[Array, "g g 6"]:
  """Plücker coordinates (d, o x d) of each token's ray, object frame (a per-token feature).

  Example:
    >>> plucker_rays(0.0, 0.0, image_size=8, patch=4).shape
    (2, 2, 6)
  """
  origins, dirs = render.pixel_rays(yaw_deg, pitch_deg, image_size, extent=extent, stride=patch)
  return jnp.concatenate([dirs, jnp.cross(origins, dirs)], -1)


def pose_features(yaw_deg: Float[Array, "*b"] | float, pitch_deg: Float[Array, "*b"] | float
                  ) -> Float[Array, "*b 4"]:
  """(sin yaw, cos yaw, sin pitch, cos pitch): the pose code of adaLN / per-image embeddings.

  Example:
    >>> [round(x, 3) for x in pose_features(90.0, 0.0).tolist()]
    [1.0, -0.0, 0.0, 1.0]
  """
  yaw = jnp.deg2rad(jnp.asarray(yaw_deg, jnp.float32))
  pitch = jnp.deg2rad(jnp.asarray(pitch_deg, jnp.float32))
  return jnp.stack([jnp.sin(yaw), jnp.cos(yaw), jnp.sin(pitch), jnp.cos(pitch)], -1)
