"""A pure-JAX ray caster for procedural objects: unions of boxes, ellipsoids and cylinders.

An object lives in its canonical frame inside the unit box B = [-1, 1]^3 and is a union of
up to P axis-aligned parts, each a box, an ellipsoid or a y-axis cylinder with its own
colour (its identity). A view is an orthographic camera on the sphere around the object
at a known (yaw, pitch), looking at the origin. Every pixel's ray is intersected
analytically with every part at once (vectorised over pixels and parts, no marching);
the first hit gives the pixel's colour (Lambert shading with a light fixed in the object
frame, so the shading itself changes with the pose), its 3-D surface point and its part.

Example:
  >>> import jax
  >>> objs = sample_objects(jax.random.key(0), 2)
  >>> img = render(jax.tree.map(lambda x: x[0], objs), 30.0, 10.0, size=16)
  >>> img.image.shape, img.points.shape
  ((16, 16, 3), (16, 16, 3))
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import Array
from jaxtyping import Float, Int

BOX, ELLIPSOID, CYLINDER = 0, 1, 2
KINDS = ("box", "ellipsoid", "cylinder")
# Orthographic image plane half-width in object units: the unit box's silhouette fits at any pose
# up to its corners (sqrt(3) ~ 1.73 only at diagonal views; parts stay inside |x| <= 0.95).
DEFAULT_EXTENT = 1.25
CAMERA_DISTANCE = 3.0   # > sqrt(3): every ray starts outside the unit box
LIGHT = (0.45, 0.8, 0.4)  # light direction in the object frame (normalised below)
AMBIENT = 0.35
_EPS = 1e-9
_INF = jnp.inf


class Objects(NamedTuple):
  """A (batch of) procedural object(s); leading axes are batch axes.

  kind: int32 [..., P] part type (BOX, ELLIPSOID, CYLINDER); center, half: float [..., P, 3]
  the part's centre and half-extents (axis-aligned, object frame); color: float [..., P, 3] in
  [0, 1]; active: bool [..., P] (inactive parts are never hit).
  """
  kind: Array
  center: Array
  half: Array
  color: Array
  active: Array


class Render(NamedTuple):
  """One view: image [H, W, 3] in [0, 1], hit mask [H, W], first-hit points [H, W, 3]
  (object frame; 0 where missed), hit part index [H, W] (-1 where missed), ray depth [H, W]
  (inf where missed)."""
  image: Array
  hit: Array
  points: Array
  part: Array
  depth: Array


def sample_objects(key: Array, num: int, *, max_parts: int = 3, min_parts: int = 2,
                   center_range: float = 0.4, half_range: tuple[float, float] = (0.2, 0.55)
                   ) -> Objects:
  """Draws `num` random objects (their identities: part kinds, placements, sizes, colours).

  Parts are placed off-centre so that most objects have no rotational symmetry (the pose is
  recoverable from a view); every part lies inside B = [-1, 1]^3.

  Args:
    key: PRNG key.
    num: number of objects (>= 1).
    max_parts: parts per object P (the array width).
    min_parts: fewest active parts, in [1, max_parts].
    center_range: part centres are uniform in [-center_range, center_range]^3.
    half_range: part half-extents are uniform in this interval (per axis).

  Returns:
    `Objects` with leading axis `num`.

  Example:
    >>> objs = sample_objects(jax.random.key(0), 4, max_parts=3)
    >>> objs.center.shape
    (4, 3, 3)
  """
  if num < 1:
    raise ValueError(f"num must be >= 1, got {num}")
  if not 1 <= min_parts <= max_parts:
    raise ValueError(f"need 1 <= min_parts <= max_parts, got {min_parts}, {max_parts}")
  lo, hi = half_range
  if not 0 < lo <= hi or center_range < 0 or center_range + hi > 1:
    raise ValueError(f"parts must fit the unit box: center_range + half_range[1] <= 1 and "
                     f"0 < half_range[0] <= half_range[1], got {center_range}, {half_range}")
  k = jax.random.split(key, 5)
  shape = (num, max_parts)
  kind = jax.random.randint(k[0], shape, 0, len(KINDS))
  center = jax.random.uniform(k[1], (*shape, 3), minval=-center_range, maxval=center_range)
  half = jax.random.uniform(k[2], (*shape, 3), minval=lo, maxval=hi)
  color = jax.random.uniform(k[3], (*shape, 3), minval=0.15, maxval=1.0)
  count = jax.random.randint(k[4], (num, 1), min_parts, max_parts + 1)
  active = jnp.arange(max_parts)[None, :] < count
  return Objects(kind.astype(jnp.int32), center, half, color, active)


def view_direction(yaw_deg: Float[Array, "*b"] | float,
                   pitch_deg: Float[Array, "*b"] | float) -> Float[Array, "*b 3"]:
  """Unit vector from the object's centre towards the camera (y is up, yaw about y).

  Example:
    >>> view_direction(0.0, 0.0).tolist()
    [0.0, 0.0, 1.0]
  """
  yaw, pitch = jnp.deg2rad(jnp.asarray(yaw_deg, jnp.float32)), jnp.deg2rad(
      jnp.asarray(pitch_deg, jnp.float32))
  return jnp.stack([jnp.cos(pitch) * jnp.sin(yaw), jnp.sin(pitch),
                    jnp.cos(pitch) * jnp.cos(yaw)], axis=-1)


def camera_frame(yaw_deg: Float[Array, ""] | float, pitch_deg: Float[Array, ""] | float
                 ) -> tuple[Float[Array, "3"], Float[Array, "3"], Float[Array, "3"]]:
  """(w, right, up): the camera's backward axis (towards the camera) and image axes.

  Example:
    >>> w, right, up = camera_frame(90.0, 0.0)
    >>> [[round(float(x), 3) + 0.0 for x in v] for v in (w, right, up)]
    [[1.0, 0.0, 0.0], [0.0, 0.0, -1.0], [0.0, 1.0, 0.0]]
  """
  w = view_direction(yaw_deg, pitch_deg)
  yaw = jnp.deg2rad(jnp.asarray(yaw_deg, jnp.float32))
  right = jnp.stack([jnp.cos(yaw), jnp.zeros_like(yaw), -jnp.sin(yaw)])
  up = jnp.cross(w, right)
  return w, right, up


def pixel_rays(yaw_deg: Float[Array, ""] | float, pitch_deg: Float[Array, ""] | float,
               height: int, width: int | None = None, *, extent: float = DEFAULT_EXTENT,
               stride: int = 1) -> tuple[Float[Array, "h w 3"], Float[Array, "h w 3"]]:
  """Orthographic rays (origins, unit directions) of the pixel centres, object frame.

  Args:
    yaw_deg, pitch_deg: the camera's pose in degrees.
    height, width: the image size (width defaults to height).
    extent: half-width of the image plane in object units.
    stride: > 1 returns only the rays through the centres of `stride x stride` patches
      (shape [height // stride, width // stride, 3]), e.g. one ray per DiT token.

  Returns:
    origins and directions, each [h, w, 3].

  Example:
    >>> o, d = pixel_rays(0.0, 0.0, 16, stride=4)
    >>> o.shape, [abs(float(x)) for x in d[0, 0]]
    ((4, 4, 3), [0.0, 0.0, 1.0])
  """
  width = height if width is None else width
  if height < 1 or width < 1 or stride < 1 or height % stride or width % stride:
    raise ValueError(f"height, width, stride must be >= 1 with stride dividing both, got "
                     f"{height}, {width}, {stride}")
  w, right, up = camera_frame(yaw_deg, pitch_deg)
  # Centres of stride x stride cells, in [-extent, extent]; row 0 is the top of the image.
  cols = (jnp.arange(width // stride) + 0.5) * stride / width * 2 - 1
  rows = (jnp.arange(height // stride) + 0.5) * stride / height * 2 - 1
  u = extent * cols[None, :, None]
  v = -extent * rows[:, None, None]
  origins = CAMERA_DISTANCE * w + u * right + v * up
  dirs = jnp.broadcast_to(-w, origins.shape)
  return origins, dirs


def _safe_inv(x):
  return 1.0 / jnp.where(jnp.abs(x) < _EPS, jnp.where(x < 0, -_EPS, _EPS), x)


def box_slab(origins: Float[Array, "*r 3"], dirs: Float[Array, "*r 3"]
             ) -> tuple[Float[Array, "*r"], Float[Array, "*r"], Int[Array, "*r"]]:
  """Slab test of rays against the unit box [-1, 1]^3.

  Returns (t_near, t_far, axis of t_near); the ray hits iff t_near <= t_far and t_far > 0.

  Example:
    >>> origins = jnp.array([[0.0, 0.0, 3.0], [0.0, 2.0, 3.0]])
    >>> t_near, t_far, axis = box_slab(origins, jnp.array([[0.0, 0.0, -1.0]] * 2))
    >>> t_near.tolist(), axis.tolist(), (t_near <= t_far).tolist()   # the second ray misses
    ([2.0, 2.0], [2, 2], [True, False])
  """
  inv = _safe_inv(dirs)
  t1, t2 = (-1.0 - origins) * inv, (1.0 - origins) * inv
  lo, hi = jnp.minimum(t1, t2), jnp.maximum(t1, t2)
  return jnp.max(lo, -1), jnp.min(hi, -1), jnp.argmax(lo, -1)


def _ellipsoid(o, d):
  a = jnp.sum(d * d, -1)
  b = jnp.sum(o * d, -1)
  # disc = b^2 - a (|o|^2 - 1) = a (1 - |o_perp|^2), o_perp = o - (b / a) d: the second form
  # avoids float32 cancellation when the camera is far (b^2 ~ a |o|^2).
  o_perp = o - (b / a)[..., None] * d
  disc = a * (1.0 - jnp.sum(o_perp * o_perp, -1))
  t = (-b - jnp.sqrt(jnp.maximum(disc, 0.0))) / a
  return jnp.where((disc >= 0) & (t > 0), t, _INF)


def _cylinder(o, d):
  # Side: x^2 + z^2 = 1 with |y| <= 1; caps: y = +-1 with x^2 + z^2 <= 1 (the entering cap).
  a = d[..., 0] ** 2 + d[..., 2] ** 2
  b = o[..., 0] * d[..., 0] + o[..., 2] * d[..., 2]
  ratio = b / jnp.maximum(a, _EPS)
  px, pz = o[..., 0] - ratio * d[..., 0], o[..., 2] - ratio * d[..., 2]
  disc = a * (1.0 - px * px - pz * pz)   # = b^2 - a c, without cancellation (see _ellipsoid)
  t_side = (-b - jnp.sqrt(jnp.maximum(disc, 0.0))) / jnp.maximum(a, _EPS)
  y_side = o[..., 1] + t_side * d[..., 1]
  side_ok = (disc >= 0) & (a > _EPS) & (t_side > 0) & (jnp.abs(y_side) <= 1.0)
  cap_y = -jnp.sign(d[..., 1])
  t_cap = (cap_y - o[..., 1]) * _safe_inv(d[..., 1])
  px, pz = o[..., 0] + t_cap * d[..., 0], o[..., 2] + t_cap * d[..., 2]
  cap_ok = (jnp.abs(d[..., 1]) > _EPS) & (t_cap > 0) & (px * px + pz * pz <= 1.0)
  return jnp.minimum(jnp.where(side_ok, t_side, _INF), jnp.where(cap_ok, t_cap, _INF))


def _box(o, d):
  t_near, t_far, _ = box_slab(o, d)
  return jnp.where((t_near <= t_far) & (t_near > 0), t_near, _INF)


def part_gauge(points: Float[Array, "*p 3"], kind: Int[Array, "*k"], center: Float[Array, "*c 3"],
               half: Float[Array, "*c 3"]) -> Float[Array, "..."]:
  """The part's gauge function: < 1 inside, = 1 on the surface, > 1 outside.

  The arguments broadcast against each other (e.g. points [..., 1, 3] against P parts).

  Box: ``max |q|``; ellipsoid: ``|q|``; cylinder: ``max(sqrt(q_x^2 + q_z^2), |q_y|)``,
  ``q = (p - c) / h``.

  Example:
    >>> float(part_gauge(jnp.array([0.5, 0.0, 0.0]), jnp.array(ELLIPSOID), jnp.zeros(3),
    ...                  jnp.full(3, 0.5)))
    1.0
  """
  q = (points - center) / half
  box = jnp.max(jnp.abs(q), -1)
  ell = jnp.sqrt(jnp.sum(q * q, -1))
  cyl = jnp.maximum(jnp.sqrt(q[..., 0] ** 2 + q[..., 2] ** 2), jnp.abs(q[..., 1]))
  return jnp.where(kind == BOX, box, jnp.where(kind == ELLIPSOID, ell, cyl))


def _normals(points, kind, center, half):
  """Outward unit normals of the parts at their surface points (gradient of the gauge)."""
  q = (points - center) / half
  axis = jnp.argmax(jnp.abs(q), -1)
  box = jax.nn.one_hot(axis, 3) * jnp.sign(jnp.take_along_axis(q, axis[..., None], -1))
  ell = q / half
  on_cap = jnp.abs(q[..., 1]) >= jnp.sqrt(q[..., 0] ** 2 + q[..., 2] ** 2)
  cyl = jnp.where(on_cap[..., None], jnp.stack(
      [jnp.zeros_like(q[..., 1]), jnp.sign(q[..., 1]), jnp.zeros_like(q[..., 1])], -1),
      q * jnp.array([1.0, 0.0, 1.0]) / half)
  n = jnp.where((kind == BOX)[..., None], box, jnp.where((kind == ELLIPSOID)[..., None], ell, cyl))
  return n / jnp.maximum(jnp.linalg.norm(n, axis=-1, keepdims=True), _EPS)


def ray_cast(objects: Objects, origins: Float[Array, "*r 3"], dirs: Float[Array, "*r 3"]
             ) -> tuple[Float[Array, "*r"], Int[Array, "*r"]]:
  """First hit of each ray with one object's parts: (depth t, part index).

  Every ray is tested against every part in closed form; missed rays get t = inf, part -1.

  Args:
    objects: one object (no batch axes: kind [P], center [P, 3], ...).
    origins, dirs: the rays, any leading shape (dirs need not be unit; t is in their units).

  Returns:
    depth ``[*r]`` and part index ``[*r]``.

  Example:
    >>> ball = Objects(kind=jnp.array([ELLIPSOID]), center=jnp.zeros((1, 3)),
    ...                half=jnp.full((1, 3), 0.5), color=jnp.ones((1, 3)),
    ...                active=jnp.array([True]))
    >>> origins = jnp.array([[0.0, 0.0, 3.0], [0.0, 1.0, 3.0]])
    >>> depth, part = ray_cast(ball, origins, jnp.array([[0.0, 0.0, -1.0]] * 2))
    >>> depth.tolist(), part.tolist()
    ([2.5, inf], [0, -1])
  """
  if objects.kind.ndim != 1:
    raise ValueError(f"ray_cast takes one object (kind [P]); got kind {objects.kind.shape}: "
                     "vmap over a batch of objects")
  o = (origins[..., None, :] - objects.center) / objects.half      # [*r, P, 3]
  d = dirs[..., None, :] / objects.half
  kind = objects.kind
  t = jnp.where(kind == BOX, _box(o, d), jnp.where(kind == ELLIPSOID, _ellipsoid(o, d),
                                                   _cylinder(o, d)))
  t = jnp.where(objects.active, t, _INF)
  part = jnp.argmin(t, -1)
  depth = jnp.min(t, -1)
  return depth, jnp.where(jnp.isfinite(depth), part, -1).astype(jnp.int32)


def render(objects: Objects, yaw_deg: Float[Array, ""] | float,
           pitch_deg: Float[Array, ""] | float, *, size: int = 16,
           extent: float = DEFAULT_EXTENT, background: float = 0.0) -> Render:
  """Renders one object at (yaw, pitch): colour, hit mask, surface points, part, depth.

  Args:
    objects: one object (kind [P], ...); vmap for batches of objects or poses.
    yaw_deg, pitch_deg: the camera pose in degrees.
    size: image height = width in pixels.
    extent: half-width of the orthographic image plane.
    background: grey level of pixels that miss the object.

  Returns:
    A `Render`.

  Example:
    >>> objs = sample_objects(jax.random.key(1), 1)
    >>> view = render(jax.tree.map(lambda x: x[0], objs), 0.0, 0.0, size=8)
    >>> bool(view.hit.any()), float(view.image.max()) <= 1.0
    (True, True)
  """
  origins, dirs = pixel_rays(yaw_deg, pitch_deg, size, extent=extent)
  depth, part = ray_cast(objects, origins, dirs)
  hit = part >= 0
  safe = jnp.maximum(part, 0)
  points = jnp.where(hit[..., None], origins + jnp.where(hit, depth, 0.0)[..., None] * dirs, 0.0)
  kind, center, half = objects.kind[safe], objects.center[safe], objects.half[safe]
  normal = _normals(points, kind, center, half)
  light = jnp.asarray(LIGHT) / jnp.linalg.norm(jnp.asarray(LIGHT))
  shade = AMBIENT + (1 - AMBIENT) * jnp.maximum(jnp.sum(normal * light, -1), 0.0)
  image = jnp.where(hit[..., None], objects.color[safe] * shade[..., None], background)
  return Render(image, hit, points, part, depth)


def render_views(objects: Objects, yaw_deg: Float[Array, "*b"], pitch_deg: Float[Array, "*b"],
                 *, size: int = 16, extent: float = DEFAULT_EXTENT) -> Float[Array, "*b h w 3"]:
  """Images of a batch of views: objects and poses share their leading axes ``[*b]``.

  Example:
    >>> objs = sample_objects(jax.random.key(0), 3)
    >>> render_views(objs, jnp.zeros(3), jnp.zeros(3), size=8).shape
    (3, 8, 8, 3)
  """
  if objects.kind.shape[:-1] != jnp.shape(yaw_deg) or jnp.shape(yaw_deg) != jnp.shape(pitch_deg):
    raise ValueError(f"objects {objects.kind.shape[:-1]}, yaw {jnp.shape(yaw_deg)} and pitch "
                     f"{jnp.shape(pitch_deg)} must share their batch shape")
  fn = lambda o, y, p: render(o, y, p, size=size, extent=extent).image
  for _ in range(len(jnp.shape(yaw_deg))):
    fn = jax.vmap(fn)
  return fn(objects, yaw_deg, pitch_deg)


__all__ = ["BOX", "CYLINDER", "ELLIPSOID", "KINDS", "Objects", "Render", "box_slab",
           "camera_frame", "part_gauge", "pixel_rays", "ray_cast", "render", "render_views",
           "sample_objects", "view_direction"]
