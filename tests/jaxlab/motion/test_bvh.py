"""BVH parse / write: exact round trips, Euler conversion, errors that name the line,
damaged counts, deep hierarchies and the variants of public files."""

import os
import re
import tracemalloc

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


def _text():
  with open(SMALL) as f:
    return f.read()


@pytest.mark.parametrize("frames", [10 ** 8, 10 ** 12])
def test_frame_count_is_checked_before_allocating(frames):
  # Before: np.zeros((frames, channels)) came first: MemoryError for 10**12 and 14 GB
  # of float64 for 10**8, in a file with 3 frame lines.
  text = _text().replace("Frames: 3", f"Frames: {frames}")
  tracemalloc.start()
  try:
    with pytest.raises(bvh.BvhError, match=rf"'Frames: {frames}' \(line 36\) but 3 frame") as e:
      bvh.parse_bvh(text)
    peak = tracemalloc.get_traced_memory()[1]
  finally:
    tracemalloc.stop()
  assert e.value.line == 41 and peak < 1e7


def _chain(depth: int) -> bvh.Bvh:
  rng = np.random.default_rng(0)
  channels = ((*bvh.POSITION_CHANNELS, "Zrotation", "Xrotation", "Yrotation"),) + (
      ("Zrotation", "Xrotation", "Yrotation"),) * (depth - 1)
  return bvh.Bvh(tuple(f"j{i}" for i in range(depth)), tuple(range(-1, depth - 1)),
                 rng.normal(size=(depth, 3)), channels,
                 (None,) * (depth - 1) + (np.array([0.0, 1.0, 0.0]),), 0.04,
                 rng.normal(size=(2, 3 * depth + 3)))


def test_deep_hierarchy_round_trips_without_recursion():
  # Before: a 3000-deep hierarchy raised RecursionError (in both format and parse).
  b = _chain(3000)
  text = bvh.format_bvh(b)
  again = bvh.parse_bvh(text)
  assert again == b and again.parents[-1] == 2998


def test_latin1_file_is_read_and_errors_name_the_file(tmp_path):
  # Before: UnicodeDecodeError, without the file's name.
  path = tmp_path / "hüfte.bvh"
  path.write_bytes(_text().replace("ROOT Hips", "ROOT Hüfte").encode("latin-1"))
  assert bvh.read_bvh(path).names[0] == "Hüfte"
  bad = tmp_path / "bad.bvh"
  bad.write_bytes(_corrupt(tmp_path, "OFFSET 0.00 10.50 -0.25", "OFFSET 0.00 ten -0.25")
                  .encode("latin-1"))
  with pytest.raises(bvh.BvhError, match=rf"^{re.escape(str(bad))}: line 8: OFFSET") as e:
    bvh.read_bvh(bad)
  assert e.value.line == 8 and e.value.path == str(bad)


def test_public_file_variants_are_read(tmp_path):
  # Seen in public files (Mixamo and other exporters): a UTF-8 byte-order mark, a named
  # End Site, channel names in other capitalisation. Before: each was refused.
  ref = bvh.read_bvh(SMALL)
  text = (_text().replace("\t\t\tEnd Site", "\t\t\tEnd Site HeadTop_End")
          .replace("CHANNELS 6 Xposition Yposition Zposition",
                   "CHANNELS 6 XPosition YPOSITION zposition")
          .replace("CHANNELS 3 Yrotation Zrotation Xrotation",
                   "CHANNELS 3 YRotation zrotation XROTATION"))
  path = tmp_path / "variants.bvh"
  path.write_bytes(b"\xef\xbb\xbf" + text.encode())
  for b in (bvh.read_bvh(path), bvh.parse_bvh("\ufeff" + text)):
    assert b == ref and b.channels == ref.channels
  assert "End Site HeadTop_End" in text
