"""Retargeted clips as BVH: the round trip, the facing-frame score, and the mean-pose floor."""

import numpy as np
import pytest

from jaxlab.motion import bvh, generate, retarget, skeletons


def _clip(seed=0, species="quadruped", morphology="any", num_frames=12):
  rng = np.random.default_rng(seed)
  sk = skeletons.make_skeleton(species, rng, morphology=morphology)
  return generate.generate_clip(sk, generate.sample_params(rng), num_frames=num_frames, fps=10.0)


def test_a_clip_written_as_bvh_and_read_back_scores_zero_against_itself(tmp_path):
  clip = _clip(morphology="rare")
  rot, _ = clip.heading_free()
  path = tmp_path / "clip.bvh"
  bvh.write_bvh(path, retarget.to_bvh(clip.skeleton, rot, clip.root_features(), fps=clip.fps,
                                      heading0=float(clip.heading[0])))
  back = bvh.read_bvh(path)
  assert back.names == clip.skeleton.names and back.frame_time == pytest.approx(0.1)
  local, root = retarget.motion_arrays(back)
  # The NumPy reading is bvh.to_motion's.
  jnp_rot, jnp_root = bvh.to_motion(back)
  np.testing.assert_allclose(local, jnp_rot, atol=1e-5)
  np.testing.assert_allclose(root, jnp_root, atol=1e-5)
  s = retarget.score(local, root, clip, fps=clip.fps)
  assert s["jp_cm"] < 1e-3 and s["gait_corr"] > 0.999
  # The root path is integrated from the speeds: central differences of it are close to them.
  assert s["root_vel"] < 0.05
  # The file holds the heading, not the heading-free pose: the root faces along the path.
  yaw = np.arctan2(local[:, 0, 0, 2], local[:, 0, 2, 2])
  np.testing.assert_allclose(np.unwrap(yaw), clip.heading, atol=0.02)


def test_score_sees_a_wrong_pose_and_ignores_the_heading():
  clip = _clip(1)
  turned = clip.local_rot.copy()
  turned[:, 0] = retarget._yaw_matrix(np.full(len(turned), 1.3)) @ turned[:, 0]
  # Turning the whole clip changes no root-relative position in the facing frame.
  assert retarget.score(turned, clip.root_pos, clip, fps=clip.fps)["jp_cm"] < 1e-4
  frozen = np.repeat(clip.local_rot[:1], len(clip.local_rot), 0)
  s = retarget.score(frozen, clip.root_pos, clip, fps=clip.fps)
  assert s["jp_cm"] > 0.5 and s["gait_corr"] < 0.1
  with pytest.raises(ValueError, match="local_rot"):
    retarget.score(clip.local_rot[:, :-1], clip.root_pos, clip, fps=clip.fps)


def test_integrate_root_inverts_root_features():
  clip = _clip(2, num_frames=30)
  pos, heading = retarget.integrate_root(clip.root_features(), clip.fps,
                                         heading0=float(clip.heading[0]))
  np.testing.assert_allclose(heading, clip.heading, atol=1e-3)
  np.testing.assert_allclose(pos[:, 1], clip.root_pos[:, 1], atol=1e-6)
  path = pos[:, [0, 2]] - pos[0, [0, 2]]
  true = clip.root_pos[:, [0, 2]] - clip.root_pos[0, [0, 2]]
  assert np.abs(path - true).max() < 0.02 * np.abs(true).max()
  with pytest.raises(ValueError, match="fps"):
    retarget.integrate_root(np.zeros((5, 4)), 0.0)


def test_mean_pose_is_each_roles_mean_rotation_and_a_floor_above_zero():
  clips = [_clip(s, morphology="common") for s in range(6)]
  table = retarget.mean_pose(clips)
  for r in table.values():
    np.testing.assert_allclose(r @ r.T, np.eye(3), atol=1e-9)
    assert np.linalg.det(r) == pytest.approx(1.0)
  # The walking limbs' upper segments swing forward and back: their mean is near the rest pose
  # but not a frame of the clip.
  upper = table["hind_left/upper"]
  assert np.degrees(np.arccos((np.trace(upper) - 1) / 2)) < 15
  target = _clip(10, morphology="rare")
  rot, root = retarget.mean_pose_clip(table, target)
  assert rot.shape == target.local_rot.shape
  # Roles the training skeletons never had (limb tips) stay at the rest pose.
  tips = [j for j, role in enumerate(target.skeleton.roles) if role.endswith("/tip")]
  assert tips
  np.testing.assert_array_equal(rot[:, tips], np.broadcast_to(np.eye(3), rot[:, tips].shape))
  s = retarget.score(rot, root, target, fps=target.fps)
  assert s["jp_cm"] > 0.5 and abs(s["gait_corr"]) < 1e-6
