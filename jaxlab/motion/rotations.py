"""Rotation representations: the continuous 6-D form, Euler angles (BVH), geodesic angles.

The 6-D representation (Zhou et al. 2019) is the first two columns of a rotation
matrix; `sixd_to_matrix` maps any 6 numbers with independent columns back to
SO(3) by Gram-Schmidt, so a network can predict it without constraints.

Example:
  >>> import jax.numpy as jnp
  >>> r = euler_to_matrix(jnp.array([90.0, 0.0, 0.0]), "ZXY")   # 90 deg about Z
  >>> bool(jnp.allclose(sixd_to_matrix(matrix_to_sixd(r)), r, atol=1e-6))
  True
"""

import jax.numpy as jnp
from jax import Array
from jaxtyping import Float

AXES = "XYZ"


def sixd_to_matrix(d6: Float[Array, "*b 6"], eps: float = 1e-8) -> Float[Array, "*b 3 3"]:
  """Rotation matrices from 6-D vectors (two columns) by Gram-Schmidt.

  Args:
    d6: [..., 6]: the first column (a1) then the second (a2) of an unnormalised frame.
    eps: floor on norms, so a zero input gives a finite (if arbitrary) frame, never NaN.

  Returns:
    [..., 3, 3] orthonormal matrices with determinant +1 whose columns are
    ``b1 = a1/|a1|``, ``b2 = (a2 - (b1.a2) b1)/|.|``, ``b3 = b1 x b2``.

  Example:
    >>> r = sixd_to_matrix(jnp.array([2.0, 0.0, 0.0, 1.0, 3.0, 0.0]))  # unnormalised
    >>> r.tolist()
    [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
  """
  if d6.shape[-1] != 6:
    raise ValueError(f"d6 must end in 6, got shape {d6.shape}")
  a1, a2 = d6[..., :3], d6[..., 3:]
  b1 = a1 / jnp.maximum(jnp.linalg.norm(a1, axis=-1, keepdims=True), eps)
  a2 = a2 - jnp.sum(b1 * a2, axis=-1, keepdims=True) * b1
  b2 = a2 / jnp.maximum(jnp.linalg.norm(a2, axis=-1, keepdims=True), eps)
  b3 = jnp.cross(b1, b2)
  return jnp.stack([b1, b2, b3], axis=-1)


def matrix_to_sixd(r: Float[Array, "*b 3 3"]) -> Float[Array, "*b 6"]:
  """The 6-D vector of rotation matrices: their first two columns, concatenated.

  Example:
    >>> matrix_to_sixd(jnp.eye(3)).tolist()
    [1.0, 0.0, 0.0, 0.0, 1.0, 0.0]
  """
  return jnp.concatenate([r[..., :, 0], r[..., :, 1]], axis=-1)


def axis_rotation(angle: Float[Array, "*b"], axis: str) -> Float[Array, "*b 3 3"]:
  """Right-handed rotation by `angle` radians about the X, Y or Z axis.

  Example:
    >>> r = axis_rotation(jnp.array([jnp.pi / 2]), "Z")
    >>> r.shape, ((r[0] @ jnp.array([1.0, 0.0, 0.0])).round(6) + 0.0).tolist()   # x -> y
    ((1, 3, 3), [0.0, 1.0, 0.0])
  """
  if axis not in AXES:
    raise ValueError(f"axis must be one of X, Y, Z, got {axis!r}")
  c, s = jnp.cos(angle), jnp.sin(angle)
  o, z = jnp.ones_like(angle), jnp.zeros_like(angle)
  rows = {"X": ((o, z, z), (z, c, -s), (z, s, c)),
          "Y": ((c, z, s), (z, o, z), (-s, z, c)),
          "Z": ((c, -s, z), (s, c, z), (z, z, o))}[axis]
  return jnp.stack([jnp.stack(r, axis=-1) for r in rows], axis=-2)


def euler_to_matrix(degrees: Float[Array, "*b 3"], order: str) -> Float[Array, "*b 3 3"]:
  """BVH Euler angles (degrees, intrinsic, applied in channel order) to matrices.

  A BVH joint with channels "Zrotation Xrotation Yrotation" and values (a, b, c)
  has local rotation Rz(a) @ Rx(b) @ Ry(c).

  Args:
    degrees: [..., 3] angles in degrees, in the order of `order`.
    order: three distinct axis letters, e.g. "ZXY".

  Returns:
    [..., 3, 3] rotation matrices.

  Example:
    >>> r = euler_to_matrix(jnp.array([[0.0, 90.0, 0.0], [0.0, 0.0, 0.0]]), "ZXY")
    >>> r.shape, ((r[0] @ jnp.array([0.0, 1.0, 0.0])).round(6) + 0.0).tolist()  # about X
    ((2, 3, 3), [0.0, 0.0, 1.0])
  """
  if len(order) != 3 or set(order) != set(AXES):
    raise ValueError(f"order must be a permutation of 'XYZ', got {order!r}")
  if degrees.shape[-1] != 3:
    raise ValueError(f"degrees must end in 3, got shape {degrees.shape}")
  rad = jnp.deg2rad(degrees)
  r = axis_rotation(rad[..., 0], order[0])
  r = r @ axis_rotation(rad[..., 1], order[1])
  return r @ axis_rotation(rad[..., 2], order[2])


def geodesic_angle(r1: Float[Array, "*b 3 3"], r2: Float[Array, "*b 3 3"]) -> Float[Array, "*b"]:
  """Angle in radians of the relative rotation r1^T r2 (in [0, pi]).

  Computed as ``atan2(|skew part|, trace part)``: accurate near 0 and pi, where
  arccos((trace - 1) / 2) loses precision, and with a finite gradient at 0 for
  non-equal inputs.

  Example:
    >>> r = euler_to_matrix(jnp.array([30.0, 0.0, 0.0]), "ZXY")
    >>> round(float(jnp.rad2deg(geodesic_angle(jnp.eye(3), r))), 3)
    30.0
  """
  rel = jnp.swapaxes(r1, -1, -2) @ r2
  cos = (rel[..., 0, 0] + rel[..., 1, 1] + rel[..., 2, 2] - 1.0) / 2.0
  skew = jnp.stack([rel[..., 2, 1] - rel[..., 1, 2], rel[..., 0, 2] - rel[..., 2, 0],
                    rel[..., 1, 0] - rel[..., 0, 1]], axis=-1) / 2.0
  return jnp.arctan2(jnp.linalg.norm(skew, axis=-1), cos)
