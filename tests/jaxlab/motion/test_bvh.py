"""BVH parse / write: exact round trips, Euler conversion, errors that name the line."""

import os

import numpy as np
import pytest
from scipy.spatial import transform

from jaxlab.motion import bvh, generate, skeletons

HERE = os.path.dirname(os.path.abspath(__file__))
SMALL = os.path.join(HERE, "walk_small.bvh")


def test_hand_written_file_parses_as_written():
  b = bvh.read_bvh(SMALL)
  assert b.names == ("Hips", "Spine", "Head", "LeftUpLeg", "LeftLeg")
  assert b.parents == (-1, 0, 1, 0, 3)
  np.testing.assert_array_equal(b.offsets[1], [0.0, 10.5, -0.25])
  np.testing.assert_array_equal(b.offsets[4], [0.0, -40.25, 0.5])
  assert b.channels[3] == ("Xrotation", "Yrotation", "Zrotation")
  assert b.channels[4] == ("Yrotation", "Zrotation", "Xrotation")
  np.testing.assert_array_equal(b.end_sites[2], [0.0, 4.2, 0.0])
  assert b.end_sites[0] is None and b.end_sites[3] is None
  assert b.motion.shape == (3, 18) and b.frame_time == 0.0333333
  np.testing.assert_array_equal(b.motion[2, :3], [1.7, 90.2, -1.75])


def test_round_trip_of_hand_written_file(tmp_path):
  b = bvh.read_bvh(SMALL)
  path = tmp_path / "again.bvh"
  bvh.write_bvh(path, b)
  again = bvh.read_bvh(path)
  # Hierarchy, offsets and channels exactly; motion exactly too (shortest repr round-trips).
  assert again == b
  assert again.names == b.names and again.parents == b.parents and again.channels == b.channels
  np.testing.assert_array_equal(again.offsets, b.offsets)
  np.testing.assert_allclose(again.motion, b.motion, atol=1e-5, rtol=0)


def test_round_trip_of_generated_skeleton_and_motion(tmp_path):
  rng = np.random.default_rng(3)
  sk = skeletons.make_skeleton("quadruped", rng)
  clip = generate.generate_clip(sk, generate.sample_params(rng), num_frames=12, fps=30.0)
  b = bvh.from_motion(sk.names, sk.parents, sk.offsets, clip.local_rot, clip.root_pos,
                      frame_time=1 / 30.0)
  bvh.write_bvh(tmp_path / "q.bvh", b)
  again = bvh.read_bvh(tmp_path / "q.bvh")
  assert again == b
  # Back to rotations: the Euler angles written reproduce the generated rotations.
  rot, root = bvh.to_motion(again)
  np.testing.assert_allclose(np.asarray(rot), clip.local_rot, atol=1e-5)
  np.testing.assert_allclose(np.asarray(root), clip.root_pos, atol=1e-5)


def test_euler_channels_follow_scipy_intrinsic_convention():
  b = bvh.read_bvh(SMALL)
  rot, root = bvh.to_motion(b)
  np.testing.assert_allclose(np.asarray(root), b.motion[:, :3], atol=1e-5)
  expect = transform.Rotation.from_euler("YZX", b.motion[:, 15:18], degrees=True).as_matrix()
  np.testing.assert_allclose(np.asarray(rot[:, 4]), expect, atol=1e-5)


def _corrupt(tmp_path, old, new):
  with open(SMALL) as f:
    text = f.read()
  assert old in text
  return text.replace(old, new, 1)


@pytest.mark.parametrize("old,new,line,match", [
    ("OFFSET 0.00 10.50 -0.25", "OFFSET 0.00 ten -0.25", 8, "non-numeric"),
    ("OFFSET 0.00 10.50 -0.25", "OFFSET 0.00 10.50", 8, "needs 3 numbers"),
    ("CHANNELS 3 Zrotation Xrotation Yrotation\n\t\tJOINT Head",
     "CHANNELS 2 Zrotation Xrotation Yrotation\n\t\tJOINT Head", 9, "does not match"),
    ("CHANNELS 3 Xrotation Yrotation Zrotation", "CHANNELS 3 Xrotation Yrotation Wrotation",
     23, "unknown or repeated channel"),
    ("Frames: 3", "Frames: 4", 41, "unexpected end of file"),
    ("1.6 90.1 -2.00 3.0", "1.6 90.1 3.0", 39, "frame 2 needs 18 numbers"),
    ("\tJOINT LeftUpLeg", "\tJOIN LeftUpLeg", 20, "expected JOINT, End Site"),
])
def test_malformed_file_names_the_line(tmp_path, old, new, line, match):
  with pytest.raises(bvh.BvhError, match=match) as e:
    bvh.parse_bvh(_corrupt(tmp_path, old, new))
  assert e.value.line == line
  assert str(e.value).startswith(f"line {line}:")


def test_bad_bvh_values_are_rejected():
  b = bvh.read_bvh(SMALL)
  with pytest.raises(ValueError, match="motion must have shape"):
    bvh.Bvh(b.names, b.parents, b.offsets, b.channels, b.end_sites, b.frame_time, b.motion[:, 1:])
  with pytest.raises(ValueError, match="depth-first"):
    bvh.Bvh(b.names, (-1, 0, 0, 1, 3), b.offsets, b.channels, b.end_sites, b.frame_time,
            b.motion)
