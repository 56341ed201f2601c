"""Retargeted clips as BVH files, scored on what is read back, and the mean-pose floor.

The autoencoder outputs heading-free local rotations and the root's motion
(forward and lateral speed in its heading frame, yaw rate, height). `to_bvh`
turns one decoded clip into a BVH clip of its target skeleton: the heading is
integrated from the yaw rate and put back on the root's rotation, the root
path from the speeds. `score` takes a clip read back (`motion_arrays`) and compares
it with the hidden pair in the *facing frame*: the root's yaw (the heading of
its forward axis, atan2(R[0, 2], R[2, 2])) is taken off before forward
kinematics, so positions are root-relative and facing +z, as the training
features are. For a generated clip the facing yaw is exactly its heading.

Floor: `mean_pose` holds every joint of a target skeleton at its role's mean
rotation over the training clips of its species (identity for a role they never
had), for every frame: what a predictor that ignores the source clip scores.

Example:
  >>> import numpy as np
  >>> from jaxlab.motion import generate, skeletons
  >>> rng = np.random.default_rng(0)
  >>> clip = generate.generate_clip(skeletons.make_skeleton("quadruped", rng),
  ...                               generate.sample_params(rng), num_frames=8, fps=10.0)
  >>> rot, _ = clip.heading_free()
  >>> b = to_bvh(clip.skeleton, rot, clip.root_features(), fps=clip.fps)
  >>> s = score(*motion_arrays(b), clip, fps=clip.fps)
  >>> bool(s["jp_cm"] < 1e-3), bool(s["gait_corr"] > 0.999)
  (True, True)
"""

import numpy as np
from jaxtyping import Float
from scipy.spatial import transform

from jaxlab.motion import bvh, generate, skeletons

METRICS = ("jp_cm", "root_vel", "gait_corr")


def _yaw_matrix(angle: np.ndarray) -> np.ndarray:
  c, s = np.cos(angle), np.sin(angle)
  r = np.zeros(np.shape(angle) + (3, 3))
  r[..., 0, 0], r[..., 0, 2], r[..., 1, 1], r[..., 2, 0], r[..., 2, 2] = c, s, 1.0, -s, c
  return r


def integrate_root(root: Float[np.ndarray, "t 4"], fps: float, heading0: float = 0.0
                   ) -> tuple[Float[np.ndarray, "t 3"], Float[np.ndarray, "t"]]:
  """World root path and heading from per-frame root motion (`Clip.root_features` layout).

  Args:
    root: [T, 4] forward and lateral speed in the heading frame (m/s), yaw rate (rad/s),
      height (m).
    fps: frames per second.
    heading0: heading at frame 0 (rad).

  Returns:
    (root positions [T, 3] starting above the origin, heading [T]).

  Example:
    >>> pos, h = integrate_root(np.tile([1.0, 0.0, 0.0, 0.5], (3, 1)), fps=10.0)
    >>> pos[:, 2].round(2).tolist(), h.tolist()
    ([0.0, 0.1, 0.2], [0.0, 0.0, 0.0])
  """
  root = np.asarray(root, np.float64)
  if root.ndim != 2 or root.shape[1] != generate.NUM_ROOT:
    raise ValueError(f"root must have shape [T, {generate.NUM_ROOT}], got {root.shape}")
  if not fps > 0:
    raise ValueError(f"fps must be > 0, got {fps}")
  heading = heading0 + np.concatenate([[0.0], np.cumsum(root[:-1, 2]) / fps])
  s, c = np.sin(heading), np.cos(heading)
  vx = root[:, 0] * s + root[:, 1] * c  # inverse of the heading-frame projection
  vz = root[:, 0] * c - root[:, 1] * s
  x = np.concatenate([[0.0], np.cumsum(vx[:-1]) / fps])
  z = np.concatenate([[0.0], np.cumsum(vz[:-1]) / fps])
  return np.stack([x, root[:, 3], z], -1), heading


def to_bvh(skeleton: skeletons.Skeleton, local_rot: Float[np.ndarray, "t j 3 3"],
           root: Float[np.ndarray, "t 4"], *, fps: float, heading0: float = 0.0) -> bvh.Bvh:
  """A decoded clip on `skeleton` as a BVH clip (the joints' names, offsets, ZXY Euler).

  Args:
    skeleton: the target skeleton (its first `num_joints` rows of the padded outputs).
    local_rot: [T, J, 3, 3] heading-free local rotations, J >= `skeleton.num_joints`
      (padding joints are dropped).
    root: [T, 4] root motion (`integrate_root`).
    fps: frames per second.
    heading0: the heading the clip starts with (rad).

  Returns:
    The `bvh.Bvh` (write it with `bvh.write_bvh`).

  Example:
    >>> rng = np.random.default_rng(0)
    >>> clip = generate.generate_clip(skeletons.make_skeleton("quadruped", rng),
    ...                               generate.sample_params(rng), num_frames=8, fps=10.0)
    >>> rot, _ = clip.heading_free()
    >>> b = to_bvh(clip.skeleton, rot, clip.root_features(), fps=clip.fps)
    >>> len(b.names), b.motion.shape   # 23 joints: root 6 channels, the others 3
    (23, (8, 72))
  """
  j = skeleton.num_joints
  local_rot = np.asarray(local_rot, np.float64)
  if local_rot.ndim != 4 or local_rot.shape[1] < j or local_rot.shape[2:] != (3, 3):
    raise ValueError(f"local_rot must have shape [T, >= {j}, 3, 3], got {local_rot.shape}")
  # A rotation must be orthonormal for its Euler angles to mean anything: the network's
  # 6-D outputs are orthonormalised already, this only removes float32 rounding.
  u, _, vt = np.linalg.svd(local_rot[:, :j])
  rot = u @ vt
  pos, heading = integrate_root(root, fps, heading0)
  rot[:, 0] = _yaw_matrix(heading) @ rot[:, 0]
  return bvh.from_motion(skeleton.names, skeleton.parents, skeleton.offsets, rot, pos,
                         frame_time=1.0 / fps)


def motion_arrays(clip: bvh.Bvh) -> tuple[Float[np.ndarray, "t j 3 3"], Float[np.ndarray, "t 3"]]:
  """(local rotations [T, J, 3, 3], root positions [T, 3]) of a BVH clip, in NumPy.

  The same reading as `bvh.to_motion` (Euler channels intrinsic in file order, position
  channels on the root only, identity for a joint without rotation channels), one vectorised
  scipy call per joint instead of JAX's per-operation dispatch: scoring reads hundreds of
  files.

  Args:
    clip: a parsed BVH clip (`bvh.read_bvh`).

  Returns:
    (local rotations, root positions), float64.

  Example:
    >>> b = bvh.from_motion(["Hips"], [-1], np.zeros((1, 3)), np.eye(3)[None, None],
    ...                     np.ones((1, 3)), frame_time=0.1)
    >>> rot, root = motion_arrays(b)
    >>> rot.shape, root.tolist()
    ((1, 1, 3, 3), [[1.0, 1.0, 1.0]])
  """
  frames = clip.motion.shape[0]
  cols = np.cumsum([0] + [len(c) for c in clip.channels])
  rot = np.broadcast_to(np.eye(3), (frames, len(clip.names), 3, 3)).copy()
  root = np.zeros((frames, 3))
  for j, chans in enumerate(clip.channels):
    pos = [c for c in chans if c in bvh.POSITION_CHANNELS]
    angles = [c for c in chans if c in bvh.ROTATION_CHANNELS]
    if pos and (j != 0 or len(pos) != 3):
      raise ValueError(f"joint {clip.names[j]!r}: only the root may have position channels, "
                       f"all three; got {pos}")
    for axis, c in enumerate(bvh.POSITION_CHANNELS):
      if c in chans:
        root[:, axis] = clip.motion[:, cols[j] + chans.index(c)]
    if not angles:
      continue
    if len(angles) != 3:
      raise ValueError(f"joint {clip.names[j]!r}: expected 0 or 3 rotation channels, "
                       f"got {angles}")
    values = clip.motion[:, [cols[j] + chans.index(c) for c in angles]]
    order = "".join(c[0] for c in angles).upper()  # upper case: intrinsic, as in a BVH file
    rot[:, j] = transform.Rotation.from_euler(order, values, degrees=True).as_matrix()
  return rot, root


def facing_frame(local_rot: Float[np.ndarray, "t j 3 3"], root_pos: Float[np.ndarray, "t 3"],
                 fps: float) -> tuple[np.ndarray, np.ndarray]:
  """(local rotations with the root's yaw taken off, [T, 2] forward and lateral speed).

  The yaw is that of the root's forward (+z) axis; the speeds are the root path's
  velocity (central differences) in that frame, as `Clip.root_features` computes them.

  Example:
    >>> rng = np.random.default_rng(0)
    >>> clip = generate.generate_clip(skeletons.make_skeleton("quadruped", rng),
    ...                               generate.sample_params(rng), num_frames=8, fps=10.0)
    >>> rot, speeds = facing_frame(clip.local_rot, clip.root_pos, clip.fps)
    >>> np.allclose(rot, clip.heading_free()[0], atol=1e-5)   # the yaw is the heading
    True
    >>> speeds.shape, round(float(speeds[0, 0]), 3), round(clip.params.speed, 3)
    ((8, 2), 1.436, 1.436)
  """
  rot = np.array(local_rot, np.float64)
  yaw = np.arctan2(rot[:, 0, 0, 2], rot[:, 0, 2, 2])
  rot[:, 0] = _yaw_matrix(-yaw) @ rot[:, 0]
  vel = np.gradient(np.asarray(root_pos, np.float64), axis=0) * fps
  s, c = np.sin(yaw), np.cos(yaw)
  speeds = np.stack([vel[:, 0] * s + vel[:, 2] * c, vel[:, 0] * c - vel[:, 2] * s], -1)
  return rot, speeds


def _pearson_over_time(a: np.ndarray, b: np.ndarray, eps: float = 1e-6) -> np.ndarray:
  a = a - a.mean(0)
  b = b - b.mean(0)
  return (a * b).sum(0) / np.sqrt(np.maximum((a * a).sum(0) * (b * b).sum(0), eps))


def _swing_angle(rot: np.ndarray) -> np.ndarray:
  return np.arctan2(rot[..., 2, 1], rot[..., 1, 1])


def score(local_rot: Float[np.ndarray, "t j 3 3"], root_pos: Float[np.ndarray, "t 3"],
          target: generate.Clip, *, fps: float) -> dict[str, float]:
  """A clip on `target`'s skeleton (e.g. `motion_arrays` of a file) against the hidden pair.

  Args:
    local_rot: [T, J, 3, 3] local rotations, the root's including its heading.
    root_pos: [T, 3] world root positions.
    target: the hidden pair (the same skeleton, joint for joint).
    fps: frames per second of both.

  Returns:
    A dict of three floats:

    * jp_cm: mean joint-position error (cm) of root-relative positions in the facing frame;
    * root_vel: mean absolute error of the root's forward and lateral speed (m/s);
    * gait_corr: Pearson correlation over time of the walking limbs' swing angles
      (upper segments), averaged over those joints.

  Example:
    >>> rng = np.random.default_rng(0)
    >>> clip = generate.generate_clip(skeletons.make_skeleton("quadruped", rng),
    ...                               generate.sample_params(rng), num_frames=8, fps=10.0)
    >>> {k: round(v, 2) for k, v in score(clip.local_rot, clip.root_pos, clip,
    ...                                   fps=clip.fps).items()}   # the pair itself
    {'jp_cm': 0.0, 'root_vel': 0.0, 'gait_corr': 1.0}
    >>> rot, root = mean_pose_clip(mean_pose([clip]), clip)     # standing still
    >>> {k: round(v, 2) for k, v in score(rot, root, clip, fps=clip.fps).items()}
    {'jp_cm': 6.54, 'root_vel': 0.72, 'gait_corr': 0.0}
  """
  sk = target.skeleton
  local_rot = np.asarray(local_rot, np.float64)
  if local_rot.shape != target.local_rot.shape:
    raise ValueError(f"local_rot must have the target's shape {target.local_rot.shape}, got "
                     f"{local_rot.shape}")
  pred_rot, pred_speed = facing_frame(local_rot, root_pos, fps)
  true_rot, true_speed = facing_frame(target.local_rot, target.root_pos, fps)
  zero = np.zeros((len(pred_rot), 3))
  pred_pos, _ = generate.numpy_fk(sk.parents, sk.offsets, pred_rot, zero)
  true_pos, _ = generate.numpy_fk(sk.parents, sk.offsets, true_rot, zero)
  swing = (sk.segment == 0) & sk.ground_limb
  corr = _pearson_over_time(_swing_angle(pred_rot[:, swing]), _swing_angle(true_rot[:, swing]))
  return dict(jp_cm=float(100 * np.linalg.norm(pred_pos - true_pos, axis=-1).mean()),
              root_vel=float(np.abs(pred_speed - true_speed).mean()),
              gait_corr=float(corr.mean()))


def mean_pose(clips: list[generate.Clip]) -> dict[str, np.ndarray]:
  """Each role's mean heading-free local rotation over `clips` (projected onto SO(3)).

  Args:
    clips: training clips (of the target species).

  Returns:
    role -> [3, 3] rotation.

  Example:
    >>> rng = np.random.default_rng(0)
    >>> clip = generate.generate_clip(skeletons.make_skeleton("biped", rng),
    ...                               generate.sample_params(rng), num_frames=8, fps=10.0)
    >>> table = mean_pose([clip])
    >>> np.allclose(table["head"], np.eye(3), atol=0.1)
    True
  """
  sums: dict[str, np.ndarray] = {}
  for c in clips:
    rot, _ = c.heading_free()
    for role, r in zip(c.skeleton.roles, np.moveaxis(rot.astype(np.float64), 1, 0),
                       strict=True):
      sums[role] = sums.get(role, 0.0) + r.sum(0)
  out = {}
  for role, m in sums.items():
    u, _, vt = np.linalg.svd(m)
    r = u @ vt
    if np.linalg.det(r) < 0:  # the nearest rotation, not a reflection
      r = u @ np.diag([1.0, 1.0, -1.0]) @ vt
    out[role] = r
  return out


def mean_pose_clip(table: dict[str, np.ndarray], target: generate.Clip
                   ) -> tuple[np.ndarray, np.ndarray]:
  """(local rotations [T, J, 3, 3], root positions [T, 3]): `target`'s skeleton held at
  `table`'s mean pose (identity for roles absent from it), the root at rest.

  Example:
    >>> rng = np.random.default_rng(0)
    >>> clip = generate.generate_clip(skeletons.make_skeleton("quadruped", rng),
    ...                               generate.sample_params(rng), num_frames=8, fps=10.0)
    >>> rot, root = mean_pose_clip(mean_pose([clip]), clip)
    >>> rot.shape, root.shape, bool((rot == rot[0]).all())   # one pose, every frame
    ((8, 23, 3, 3), (8, 3), True)
  """
  sk = target.skeleton
  pose = np.stack([table.get(role, np.eye(3)) for role in sk.roles])
  t = target.local_rot.shape[0]
  return np.broadcast_to(pose, (t, *pose.shape)).copy(), np.zeros((t, 3))
