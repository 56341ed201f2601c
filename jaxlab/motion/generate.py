"""Procedural motion with hidden ground truth, and padded batches of clips for the model.

Shared *semantic* gait parameters (speed, turn rate, cadence, start phase,
bounce) drive species-specific controllers: every limb joint's local rotation
is a sinusoid of the gait phase shifted by its limb's offset (`skeletons.PHASES`:
biped legs alternate, quadrupeds trot, hexapods walk a tripod gait), the spine
sways, a tail wags, and the root follows the integrated (speed, turn rate)
path with a bounce. Foot contacts are read from forward kinematics (a foot is
in contact while it is within a quarter of its height range of its lowest
point). The same parameters on two species give a *paired* clip: used only to
score retargeting, never for training.

Example:
  >>> import numpy as np
  >>> from jaxlab.motion import skeletons
  >>> rng = np.random.default_rng(0)
  >>> sk = skeletons.make_skeleton("biped", rng)
  >>> clip = generate_clip(sk, sample_params(rng), num_frames=16, fps=20.0)
  >>> clip.local_rot.shape == (16, sk.num_joints, 3, 3), clip.features().shape[-1]
  (True, 17)
"""

import dataclasses
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from jaxlab.motion import skeletons

# Per-joint feature layout (F_m of the spec): 6-D local rotation, root-relative
# position, its velocity, contact, and the root's motion (on the root joint only).
ROT, POS, VEL, CONTACT, ROOT = slice(0, 6), slice(6, 9), slice(9, 12), 12, slice(13, 17)
NUM_FEATURES = 17
# The root's motion: forward and lateral speed in its heading frame (m/s),
# yaw rate (rad/s) and height (m).
NUM_ROOT = 4
# Static per-joint features: rest position relative to the root, offset from the parent.
NUM_STATIC = 6


@dataclasses.dataclass(frozen=True)
class GaitParams:
  """Species-neutral semantic parameters of one clip (the hidden ground truth)."""
  speed: float       # m/s along the heading
  turn_rate: float   # rad/s
  cadence: float     # gait cycles per second
  phase0: float      # start phase, fraction of a cycle
  bounce: float      # in [0, 1]: vertical bob and pitch
  heading0: float    # start heading, rad


SPEED_RANGE = (0.4, 1.6)  # m/s


def sample_params(rng: np.random.Generator,
                  speed_range: tuple[float, float] = SPEED_RANGE) -> GaitParams:
  """Draws gait parameters (jaxlab interpretation of the spec's ranges).

  Args:
    rng: numpy generator; the same number of draws whatever `speed_range`.
    speed_range: [low, high) of the uniform speed (m/s), inside `SPEED_RANGE`; cadence
      and swing amplitude follow the speed.

  Returns:
    The `GaitParams`.

  Example:
    >>> p = sample_params(np.random.default_rng(0), speed_range=(0.4, 0.8))
    >>> 0.4 <= p.speed < 0.8
    True
  """
  lo, hi = speed_range
  if not SPEED_RANGE[0] <= lo < hi <= SPEED_RANGE[1]:
    raise ValueError(f"speed_range must satisfy {SPEED_RANGE[0]} <= low < high <= "
                     f"{SPEED_RANGE[1]}, got {speed_range}")
  speed = float(rng.uniform(lo, hi))
  return GaitParams(speed=speed, turn_rate=float(rng.uniform(-0.6, 0.6)),
                    cadence=float(0.7 + 0.5 * speed + rng.uniform(-0.1, 0.1)),
                    phase0=float(rng.uniform()), bounce=float(rng.uniform()),
                    heading0=float(rng.uniform(-np.pi, np.pi)))


def _rot(axis: int, angle: np.ndarray) -> np.ndarray:
  c, s = np.cos(angle), np.sin(angle)
  r = np.zeros(angle.shape + (3, 3), np.float64)
  i, j = [(1, 2), (2, 0), (0, 1)][axis]
  r[..., axis, axis] = 1.0
  r[..., i, i], r[..., i, j], r[..., j, i], r[..., j, j] = c, -s, s, c
  return r


def numpy_fk(parents: np.ndarray, offsets: np.ndarray, local_rot: np.ndarray,
             root_pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """NumPy forward kinematics of one clip: (positions [T, J, 3], global rotations [T, J, 3, 3]).

  A loop over joints (data generation and scoring files, not a hot path); the same
  arithmetic as `kinematics.forward_kinematics`.

  Args:
    parents: [J] parent indices, parents before children, -1 for joint 0.
    offsets: [J, 3] rest offsets from the parent.
    local_rot: [T, J, 3, 3] local rotations.
    root_pos: [T, 3] root positions.

  Returns:
    (positions, global rotations), float64.

  Example:
    >>> parents = np.array([-1, 0, 1])                     # a chain of two unit bones
    >>> offsets = np.array([[0.0, 0, 0], [0, 1, 0], [0, 1, 0]])
    >>> rot = np.broadcast_to(np.eye(3), (2, 3, 3, 3))     # 2 frames at rest
    >>> pos, glob = numpy_fk(parents, offsets, rot, np.zeros((2, 3)))
    >>> pos.shape, glob.shape, pos[0, 2].tolist()
    ((2, 3, 3), (2, 3, 3, 3), [0.0, 2.0, 0.0])
  """
  t, j = local_rot.shape[:2]
  pos = np.zeros((t, j, 3))
  rot = np.zeros((t, j, 3, 3))
  pos[:, 0], rot[:, 0] = root_pos, local_rot[:, 0]
  for k in range(1, j):
    p = parents[k]
    rot[:, k] = rot[:, p] @ local_rot[:, k]
    pos[:, k] = pos[:, p] + rot[:, p] @ offsets[k]
  return pos, rot


# Swing amplitude (rad at speed 1 m/s) per (species, walks on the ground); jaxlab interpretation.
_AMPLITUDE = {("biped", True): 0.5, ("biped", False): 0.3, ("quadruped", True): 0.4,
              ("hexapod", True): 0.3}


@dataclasses.dataclass(frozen=True, eq=False)
class Clip:
  """One generated clip.

  Attributes:
    skeleton: its `Skeleton`.
    params: the `GaitParams` that made it.
    fps: frames per second.
    local_rot: [T, J, 3, 3] local rotations; the root's holds the heading yaw.
    root_pos: [T, 3] world root positions.
    heading: [T] heading (yaw about +y) in rad.
    contact: [T, J] bool foot contacts (False for non-contact joints).
  """
  skeleton: skeletons.Skeleton
  params: GaitParams
  fps: float
  local_rot: np.ndarray
  root_pos: np.ndarray
  heading: np.ndarray
  contact: np.ndarray

  def heading_free(self) -> tuple[np.ndarray, np.ndarray]:
    """(local rotations with the root's yaw removed [T, J, 3, 3], root-relative FK positions)."""
    rot = self.local_rot.copy()
    rot[:, 0] = _rot(1, -self.heading) @ rot[:, 0]
    pos, _ = numpy_fk(self.skeleton.parents, self.skeleton.offsets, rot, np.zeros((len(rot), 3)))
    return rot, pos

  def root_features(self) -> np.ndarray:
    """[T, 4]: forward and lateral speed in the heading frame, yaw rate, height."""
    vel = np.gradient(self.root_pos, axis=0) * self.fps
    c, s = np.cos(self.heading), np.sin(self.heading)
    forward = vel[:, 0] * s + vel[:, 2] * c
    lateral = vel[:, 0] * c - vel[:, 2] * s
    yaw_rate = np.gradient(np.unwrap(self.heading)) * self.fps
    return np.stack([forward, lateral, yaw_rate, self.root_pos[:, 1]], -1).astype(np.float32)

  def features(self) -> np.ndarray:
    """[T, J, 17] per-joint dynamic features (layout: `ROT`, `POS`, `VEL`, `CONTACT`, `ROOT`)."""
    rot, pos = self.heading_free()
    t, j = rot.shape[:2]
    out = np.zeros((t, j, NUM_FEATURES), np.float32)
    out[..., ROT] = np.concatenate([rot[..., :, 0], rot[..., :, 1]], -1)
    out[..., POS] = pos
    out[..., VEL] = np.gradient(pos, axis=0) * self.fps
    out[..., CONTACT] = self.contact
    out[:, 0, ROOT] = self.root_features()
    return out


def generate_clip(skeleton: skeletons.Skeleton, params: GaitParams, *, num_frames: int,
                  fps: float) -> Clip:
  """Runs the species controller of `skeleton` with `params` for `num_frames` frames.

  Example:
    >>> rng = np.random.default_rng(0)
    >>> sk = skeletons.make_skeleton("biped", rng)
    >>> clip = generate_clip(sk, sample_params(rng), num_frames=8, fps=20.0)
    >>> clip.local_rot.shape, clip.root_pos.shape, int(clip.contact.any(0).sum())  # 2 feet
    ((8, 20, 3, 3), (8, 3), 2)
  """
  if num_frames < 2:
    raise ValueError(f"num_frames must be >= 2, got {num_frames}")
  if not fps > 0:
    raise ValueError(f"fps must be > 0, got {fps}")
  sk, p = skeleton, params
  t = np.arange(num_frames) / fps
  theta = 2 * np.pi * (p.phase0 + p.cadence * t)                        # [T]
  j = sk.num_joints
  angle = np.zeros((num_frames, j, 3))                                   # per-axis angles
  limb = ~np.isnan(sk.limb_phase)
  psi = theta[:, None] + 2 * np.pi * np.nan_to_num(sk.limb_phase)[None]  # [T, J]
  amp = np.array([_AMPLITUDE.get((sk.species, bool(g)), 0.3) for g in sk.ground_limb])
  amp = amp * (0.5 + 0.5 * p.speed)
  flex = np.maximum(0.0, np.sin(psi + np.pi / 2))
  seg = sk.segment
  pitch = np.where(seg == 0, amp * np.sin(psi),
                   np.where(seg == 1, 1.6 * amp * flex,
                            np.where(seg == 2, -0.8 * amp * flex, 0.5 * amp * flex)))
  angle[..., 0] = np.where(limb[None], pitch, 0.0)
  roles = np.array(sk.roles)
  spine = np.char.startswith(roles, "spine")
  angle[..., 1] += np.where(spine[None], 0.06 * np.sin(theta)[:, None], 0.0)
  tail = roles == "tail"
  tail_index = np.cumsum(tail) * tail
  angle[..., 1] += np.where(tail[None], 0.35 * np.sin(theta[:, None] - 0.6 * tail_index[None]),
                            0.0)
  head = (roles == "neck") | (roles == "head")
  angle[..., 0] += np.where(head[None], -0.08 * p.bounce * np.sin(2 * theta)[:, None], 0.0)
  local = _rot(1, angle[..., 1]) @ _rot(0, angle[..., 0])
  heading = p.heading0 + p.turn_rate * t
  local[:, 0] = _rot(1, heading) @ _rot(0, 0.05 * p.bounce * np.sin(2 * theta))
  # Root path: the heading integrated at constant speed; height keeps the rest-pose
  # feet on the ground, minus a bounce at twice the gait frequency.
  rest = sk.rest_positions()
  leg = -rest[sk.contact, 1].min()
  height = leg - 0.04 * leg * p.bounce * (1 - np.cos(2 * theta)) / 2
  step = p.speed / fps
  x = np.concatenate([[0.0], np.cumsum(step * np.sin(heading[:-1]))])
  z = np.concatenate([[0.0], np.cumsum(step * np.cos(heading[:-1]))])
  root_pos = np.stack([x, height, z], -1)
  pos, _ = numpy_fk(sk.parents, sk.offsets, local, root_pos)
  foot = pos[..., 1]
  low, high = foot.min(0, keepdims=True), foot.max(0, keepdims=True)
  contact = (foot - low <= 0.25 * (high - low)) & sk.contact[None]
  return Clip(sk, p, float(fps), local.astype(np.float32), root_pos.astype(np.float32),
              heading.astype(np.float32), contact)


class MotionData(NamedTuple):
  """A padded batch of clips: J padded to `max_joints`, padding masked out.

  Attributes:
    features: [N, T, J, 17] dynamic features (`generate` layout).
    static: [N, J, 6] rest position (root-relative) and parent offset per joint.
    offsets: [N, J, 3] parent offsets (for forward kinematics).
    parents: [N, J] int32 parents (-1 root; padding joints point at the root).
    depth: [N, J] int32 topological depth.
    text_id: [N, J] int32 row of the joint's description in the text table.
    mask: [N, J] bool real joints.
    contact_joint: [N, J] bool foot joints.
    swing_joint: [N, J] bool upper segments of walking limbs (gait-phase metric).
  """
  features: np.ndarray
  static: np.ndarray
  offsets: np.ndarray
  parents: np.ndarray
  depth: np.ndarray
  text_id: np.ndarray
  mask: np.ndarray
  contact_joint: np.ndarray
  swing_joint: np.ndarray


def pack(clips: Sequence[Clip], text_index: dict[str, int], max_joints: int) -> MotionData:
  """Pads clips into a `MotionData`; `text_index` maps each description to its table row.

  Example:
    >>> rng = np.random.default_rng(0)
    >>> sk = skeletons.make_skeleton("biped", rng)
    >>> clip = generate_clip(sk, sample_params(rng), num_frames=8, fps=20.0)
    >>> index = {d: i for i, d in enumerate(sorted(set(sk.descriptions)))}
    >>> data = pack([clip, clip], index, max_joints=32)
    >>> data.features.shape, data.mask.sum(1).tolist()   # 20 real joints, 12 padding
    ((2, 8, 32, 17), [20, 20])
  """
  if not clips:
    raise ValueError("clips must be non-empty")
  n, t = len(clips), clips[0].local_rot.shape[0]
  out = MotionData(
      features=np.zeros((n, t, max_joints, NUM_FEATURES), np.float32),
      static=np.zeros((n, max_joints, NUM_STATIC), np.float32),
      offsets=np.zeros((n, max_joints, 3), np.float32),
      parents=np.zeros((n, max_joints), np.int32), depth=np.zeros((n, max_joints), np.int32),
      text_id=np.zeros((n, max_joints), np.int32), mask=np.zeros((n, max_joints), bool),
      contact_joint=np.zeros((n, max_joints), bool), swing_joint=np.zeros((n, max_joints), bool))
  for i, c in enumerate(clips):
    sk = c.skeleton
    j = sk.num_joints
    if j > max_joints:
      raise ValueError(f"a {sk.species} skeleton has {j} joints > max_joints={max_joints}")
    if c.local_rot.shape[0] != t:
      raise ValueError("every clip must have the same number of frames")
    out.features[i, :, :j] = c.features()
    out.static[i, :j] = np.concatenate([sk.rest_positions(), sk.offsets], -1)
    out.offsets[i, :j] = sk.offsets
    out.parents[i, :j] = sk.parents
    out.depth[i, :j] = sk.depth
    out.text_id[i, :j] = [text_index[d] for d in sk.descriptions]
    out.mask[i, :j] = True
    out.contact_joint[i, :j] = sk.contact
    out.swing_joint[i, :j] = (sk.segment == 0) & sk.ground_limb
  return out


def shuffle_text(data: MotionData, rng: np.random.Generator) -> MotionData:
  """Each clip's descriptions permuted among its own joints (the shuffled-text ablation).

  Example:
    >>> rng = np.random.default_rng(0)
    >>> sk = skeletons.make_skeleton("biped", rng)
    >>> clip = generate_clip(sk, sample_params(rng), num_frames=8, fps=20.0)
    >>> data = pack([clip], {d: i for i, d in enumerate(sk.descriptions)}, max_joints=24)
    >>> shuffled = shuffle_text(data, np.random.default_rng(1))
    >>> bool((shuffled.text_id != data.text_id).any())
    True
    >>> sorted(shuffled.text_id[0, :20].tolist()) == sorted(data.text_id[0, :20].tolist())
    True
  """
  text_id = data.text_id.copy()
  for i in range(len(text_id)):
    j = int(data.mask[i].sum())
    text_id[i, :j] = text_id[i, rng.permutation(j)]
  return data._replace(text_id=text_id)


def make_splits(seed: int, *, num_train: int, num_test: int, num_frames: int, fps: float,
                train_species: Sequence[str] = ("biped", "quadruped"),
                heldout_species: str = "hexapod", pair: tuple[str, str] = ("biped", "quadruped"),
                bone_jitter: float = 0.3, split_speed: float | None = None,
                heldout_morphology: bool = False) -> dict[str, list[Clip]]:
  """Clips of one seed: every clip on its own random skeleton.

  Retargeting is only a test of transfer when the target species cannot have learnt the
  hidden pairs' motion on its own skeletons. Two knobs hold parts of it out of training
  (jaxlab interpretation of the paper's zero-shot setting, where the target species' data
  is not trained on at all):

  * `split_speed`: the source species `pair[0]` trains on gait speeds below it, the target
    species `pair[1]` at or above it, and the hidden pairs move below it: the target species
    never moved at those speeds (cadence and swing amplitude follow the speed).
  * `heldout_morphology`: the target species trains on "common" skeletons (no limb tips,
    short tails; `skeletons.MORPHOLOGIES`) and the hidden pairs' targets are "rare" ones
    (tips on every limb, 3-4 tail segments), whose limb ends only the source species had.

  Args:
    seed: numpy seed of every draw.
    num_train: training clips per training species.
    num_test: clips per test split.
    num_frames, fps: clip length and rate.
    train_species: species trained on (unpaired clips).
    heldout_species: a species never trained on (reconstruction out of topology).
    pair: (source, target) species of the hidden pairs.
    bone_jitter: per-bone length jitter of every skeleton.
    split_speed: see above; None draws every speed from the full `SPEED_RANGE`.
    heldout_morphology: see above; False draws every skeleton from any morphology.

  Returns:
    A dict of clip lists:

    * "train": `num_train` clips per training species (unpaired, shuffled);
    * "test_seen": `num_test` fresh clips per training species, each as it was trained
      (reconstruction);
    * "test_heldout": `num_test` clips of `heldout_species` (out-of-topology reconstruction);
    * "pair_source" / "pair_target": `num_test` hidden pairs (same `GaitParams`, species
      `pair[0]` and `pair[1]`), used for scoring retargeting only;
    * "pair_target_common": the same pairs' targets on skeletons of the morphology the
      target species trained on (drawn after every other split).

  Example:
    >>> s = make_splits(0, num_train=2, num_test=2, num_frames=4, fps=10.0, split_speed=1.0,
    ...                 heldout_morphology=True)
    >>> all(c.params.speed < 1.0 for c in s["pair_target"]), len(s["pair_target_common"])
    (True, 2)
  """
  for s in (*train_species, heldout_species, *pair):
    if s not in skeletons.SPECIES:
      raise ValueError(f"unknown species {s!r}; expected one of {skeletons.SPECIES}")
  lo, hi = SPEED_RANGE
  if split_speed is not None and not lo < split_speed < hi:
    raise ValueError(f"split_speed must lie in ({lo}, {hi}), got {split_speed}")
  rng = np.random.default_rng(seed)
  full = SPEED_RANGE
  below = full if split_speed is None else (lo, split_speed)
  above = full if split_speed is None else (split_speed, hi)
  trained_speeds = {pair[0]: below, pair[1]: above}
  trained_morphology = {pair[1]: "common" if heldout_morphology else "any"}

  def clip(species, params=None, morphology=None):
    morphology = morphology or trained_morphology.get(species, "any")
    sk = skeletons.make_skeleton(species, rng, bone_jitter=bone_jitter, morphology=morphology)
    params = params or sample_params(rng, trained_speeds.get(species, full))
    return generate_clip(sk, params, num_frames=num_frames, fps=fps)

  train = [clip(s) for s in train_species for _ in range(num_train)]
  order = rng.permutation(len(train))
  splits = dict(train=[train[i] for i in order],
                test_seen=[clip(s) for s in train_species for _ in range(num_test)],
                test_heldout=[clip(heldout_species) for _ in range(num_test)])
  params = [sample_params(rng, below) for _ in range(num_test)]
  splits["pair_source"] = [clip(pair[0], p) for p in params]
  splits["pair_target"] = [clip(pair[1], p, "rare" if heldout_morphology else None)
                           for p in params]
  splits["pair_target_common"] = [clip(pair[1], p) for p in params]
  return splits
