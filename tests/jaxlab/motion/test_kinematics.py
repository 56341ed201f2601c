"""6-D rotations and forward kinematics against NumPy references."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.spatial import transform

from jaxlab.motion import kinematics, rotations, skeletons


def test_sixd_to_matrix_is_orthonormal_with_det_one():
  d6 = jax.random.normal(jax.random.key(0), (64, 6)) * 3.0
  r = np.asarray(rotations.sixd_to_matrix(d6))
  np.testing.assert_allclose(r @ np.swapaxes(r, -1, -2), np.broadcast_to(np.eye(3), r.shape),
                             atol=1e-5)
  np.testing.assert_allclose(np.linalg.det(r), 1.0, atol=1e-5)
  # The first column is the normalised first input column (Gram-Schmidt).
  a1 = np.asarray(d6[:, :3])
  np.testing.assert_allclose(r[:, :, 0], a1 / np.linalg.norm(a1, axis=-1, keepdims=True),
                             atol=1e-5)


def test_sixd_round_trip_and_zero_input_is_finite():
  r = transform.Rotation.random(16, random_state=0).as_matrix().astype(np.float32)
  back = rotations.sixd_to_matrix(rotations.matrix_to_sixd(jnp.asarray(r)))
  np.testing.assert_allclose(np.asarray(back), r, atol=1e-5)
  assert np.all(np.isfinite(np.asarray(rotations.sixd_to_matrix(jnp.zeros((2, 6))))))


def test_euler_and_geodesic_match_scipy():
  angles = np.random.default_rng(0).uniform(-180, 180, (20, 3)).astype(np.float32)
  for order in ("ZXY", "XYZ", "YZX"):
    ours = np.asarray(rotations.euler_to_matrix(jnp.asarray(angles), order))
    ref = transform.Rotation.from_euler(order, angles, degrees=True).as_matrix()
    np.testing.assert_allclose(ours, ref, atol=1e-5)
  r1, r2 = (transform.Rotation.random(20, random_state=s) for s in (1, 2))
  ref = (r1.inv() * r2).magnitude()
  ours = rotations.geodesic_angle(jnp.asarray(r1.as_matrix(), jnp.float32),
                                  jnp.asarray(r2.as_matrix(), jnp.float32))
  np.testing.assert_allclose(np.asarray(ours), ref, atol=1e-4)
  with pytest.raises(ValueError, match="permutation"):
    rotations.euler_to_matrix(jnp.zeros(3), "XXY")


def _fk_reference(parents, offsets, local_rot, root):
  pos = np.zeros((len(parents), 3))
  glob = np.zeros((len(parents), 3, 3))
  for j, p in enumerate(parents):
    if p < 0:
      pos[j], glob[j] = root, local_rot[j]
    else:
      glob[j] = glob[p] @ local_rot[j]
      pos[j] = pos[p] + glob[p] @ offsets[j]
  return pos, glob


def test_forward_kinematics_matches_numpy_reference():
  sk = skeletons.make_skeleton("biped", np.random.default_rng(0))
  j = sk.num_joints
  rot = transform.Rotation.random(3 * j, random_state=0).as_matrix().reshape(3, j, 3, 3)
  root = np.random.default_rng(1).normal(size=(3, 3))
  pos, glob = jax.jit(kinematics.forward_kinematics, static_argnames="num_levels")(
      jnp.asarray(sk.parents), jnp.asarray(sk.offsets), jnp.asarray(rot, jnp.float32),
      jnp.asarray(root, jnp.float32), num_levels=int(sk.depth.max()) + 1)
  for b in range(3):
    ref_pos, ref_rot = _fk_reference(sk.parents, sk.offsets, rot[b], root[b])
    np.testing.assert_allclose(np.asarray(pos[b]), ref_pos, atol=1e-5)
    np.testing.assert_allclose(np.asarray(glob[b]), ref_rot, atol=1e-5)
  # Too few levels leaves the deepest joints unfinished: the level count matters.
  short, _ = kinematics.forward_kinematics(jnp.asarray(sk.parents), jnp.asarray(sk.offsets),
                                           jnp.asarray(rot[0], jnp.float32),
                                           jnp.asarray(root[0], jnp.float32), num_levels=2)
  assert not np.allclose(np.asarray(short), _fk_reference(sk.parents, sk.offsets, rot[0],
                                                          root[0])[0], atol=1e-3)


def test_bad_parents_are_rejected():
  with pytest.raises(ValueError, match="parents"):
    kinematics.check_parents([-1, 2, 0])
  with pytest.raises(ValueError, match="parents"):
    kinematics.forward_kinematics(jnp.array([-1, 0]), jnp.zeros((3, 3)), jnp.zeros((3, 3, 3)),
                                  jnp.zeros(3))
