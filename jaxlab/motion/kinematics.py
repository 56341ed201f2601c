"""Forward kinematics on a joint tree, in JAX, vectorised over joints.

Joints are indexed so that a parent precedes its children (`parents[j] < j`,
`-1` for the root, which is joint 0). FK composes rotations down the tree:
R_j = R_{p(j)} L_j and p_j = p_{p(j)} + R_{p(j)} o_j, with o_j the rest offset
of joint j from its parent. Instead of a Python loop over joints, every joint
is updated at once from its parent's current value, `num_levels` times (the
tree's depth suffices): after k rounds every joint of depth < k is exact.

Example:
  >>> import jax.numpy as jnp
  >>> parents = jnp.array([-1, 0, 1])
  >>> offsets = jnp.array([[0., 0, 0], [0, 1, 0], [0, 1, 0]])
  >>> rot = jnp.broadcast_to(jnp.eye(3), (3, 3, 3))
  >>> pos, _ = forward_kinematics(parents, offsets, rot, jnp.zeros(3))
  >>> pos[2].tolist()
  [0.0, 2.0, 0.0]
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array
from jaxtyping import Float, Int


def check_parents(parents: np.ndarray | list | tuple) -> np.ndarray:
  """Validates a parent array (root first, parents before children); returns it as int32.

  Example:
    >>> check_parents([-1, 0, 0, 2])
    array([-1,  0,  0,  2], dtype=int32)
    >>> check_parents([-1, 2, 0])
    Traceback (most recent call last):
    ...
    ValueError: parents[j] must lie in [0, j) for j >= 1 (parents before children); bad joints [1]
  """
  p = np.asarray(parents)
  if p.ndim != 1 or p.size == 0:
    raise ValueError(f"parents must be a non-empty 1-D array, got shape {p.shape}")
  if p[0] != -1:
    raise ValueError(f"parents[0] must be -1 (joint 0 is the root), got {p[0]}")
  bad = [j for j in range(1, p.size) if not 0 <= p[j] < j]
  if bad:
    raise ValueError(f"parents[j] must lie in [0, j) for j >= 1 (parents before children); "
                     f"bad joints {bad[:5]}")
  return p.astype(np.int32)


def joint_depths(parents: np.ndarray | list | tuple) -> np.ndarray:
  """Topological depth of every joint (root 0), from a validated parent array.

  Example:
    >>> joint_depths([-1, 0, 1, 0]).tolist()
    [0, 1, 2, 1]
  """
  p = check_parents(parents)
  depth = np.zeros(p.size, np.int32)
  for j in range(1, p.size):
    depth[j] = depth[p[j]] + 1
  return depth


def forward_kinematics(
    parents: Int[Array, "p"], offsets: Float[Array, "*ob j 3"],
    local_rot: Float[Array, "*rb j 3 3"], root_pos: Float[Array, "*pb 3"], *,
    num_levels: int | None = None,
) -> tuple[Float[Array, "*b j 3"], Float[Array, "*b j 3 3"]]:
  """Global joint positions and rotations from local rotations and rest offsets.

  Args:
    parents: [J] parent indices, -1 for the root (joint 0), `parents[j] < j`.
      Padding joints may point at any earlier joint; their outputs are unused.
    offsets: [..., J, 3] rest offsets from the parent (the root's is ignored:
      the root sits at `root_pos`).
    local_rot: [..., J, 3, 3] local rotation matrices.
    root_pos: [..., 3] root position. The batch dimensions of the three broadcast.
    num_levels: rounds of parent-to-child propagation; at least the tree depth
      + 1 gives the exact result (fewer leave the deepest joints unfinished; not
      checked here, where padding joints are not told apart: the
      `jaxlab.motion.training` entry points check it). None uses J (always enough).

  Returns:
    (positions [..., J, 3], global rotations [..., J, 3, 3]).

  Example:
    >>> from jaxlab.motion.rotations import axis_rotation
    >>> parents = jnp.array([-1, 0, 1])                    # a chain of two unit bones
    >>> offsets = jnp.array([[0.0, 0, 0], [0, 1, 0], [0, 1, 0]])
    >>> rot = jnp.stack([jnp.eye(3), axis_rotation(jnp.array(jnp.pi / 2), "Z"), jnp.eye(3)])
    >>> pos, glob = forward_kinematics(parents, offsets, rot, jnp.zeros(3))
    >>> pos.shape, glob.shape, pos[2].round(6).tolist()   # the elbow turns the tip to -x
    ((3, 3), (3, 3, 3), [-1.0, 1.0, 0.0])
  """
  num_joints = offsets.shape[-2]
  if parents.shape != (num_joints,):
    raise ValueError(f"parents must have shape ({num_joints},), got {parents.shape}")
  if local_rot.shape[-3:] != (num_joints, 3, 3):
    raise ValueError(f"local_rot must end in ({num_joints}, 3, 3), got {local_rot.shape}")
  levels = num_joints if num_levels is None else int(num_levels)
  if levels < 1:
    raise ValueError(f"num_levels must be >= 1, got {levels}")
  is_root = (parents < 0)
  par = jnp.where(is_root, 0, parents)
  batch = jnp.broadcast_shapes(offsets.shape[:-2], local_rot.shape[:-3], root_pos.shape[:-1])
  offsets = jnp.broadcast_to(offsets, (*batch, num_joints, 3))
  local_rot = jnp.broadcast_to(local_rot, (*batch, num_joints, 3, 3))
  root = jnp.broadcast_to(root_pos, (*batch, 3))[..., None, :]

  def step(_, carry):
    pos, rot = carry
    prot = jnp.take(rot, par, axis=-3)
    ppos = jnp.take(pos, par, axis=-2)
    new_rot = jnp.where(is_root[:, None, None], local_rot, prot @ local_rot)
    new_pos = jnp.where(is_root[:, None], root, ppos + jnp.einsum("...ij,...j->...i", prot, offsets))
    return new_pos, new_rot

  init = (jnp.broadcast_to(root, offsets.shape), local_rot)
  return jax.lax.fori_loop(0, levels, step, init)
