"""BVH files: parse, write, and convert to / from local rotations for forward kinematics.

The format: a HIERARCHY section (ROOT / JOINT blocks with OFFSET, CHANNELS and
optional "End Site" blocks, nested by braces) and a MOTION section ("Frames:",
"Frame Time:", then one line of channel values per frame, joints in file order).
Rotation channels are Euler angles in degrees, applied in the listed order
(intrinsic): "Zrotation Xrotation Yrotation" means Rz Rx Ry.

`parse_bvh(format_bvh(b))` gives back `b` exactly: numbers are written with
Python's shortest round-tripping repr. A malformed file raises `BvhError`
naming the line (and, from `read_bvh`, the file).

Variants seen in public files are read as well: a UTF-8 byte-order mark,
Latin-1 bytes (`read_bvh` decodes UTF-8 and falls back to Latin-1), a named
`End Site <name>` (the name is not kept), and channel names in any
capitalisation (`ZPosition`, `xrotation`; stored in the canonical spelling).
Hierarchies of any depth are parsed and written without recursion, and the
frame count is checked against the lines that follow before anything is
allocated.

Example:
  >>> text = '''HIERARCHY
  ... ROOT Hips
  ... {
  ...   OFFSET 0 0 0
  ...   CHANNELS 6 Xposition Yposition Zposition Zrotation Xrotation Yrotation
  ...   End Site
  ...   {
  ...     OFFSET 0 1 0
  ...   }
  ... }
  ... MOTION
  ... Frames: 1
  ... Frame Time: 0.0333333
  ... 0 1 0 0 0 90
  ... '''
  >>> b = parse_bvh(text)
  >>> b.names, b.channels[0][3:], b.motion.shape
  (('Hips',), ('Zrotation', 'Xrotation', 'Yrotation'), (1, 6))
  >>> parse_bvh(format_bvh(b)) == b
  True
"""

import dataclasses
import math
import os

import jax.numpy as jnp
import numpy as np
from jax import Array
from jaxtyping import Float
from scipy.spatial import transform

from jaxlab.motion import kinematics, rotations

POSITION_CHANNELS = ("Xposition", "Yposition", "Zposition")
ROTATION_CHANNELS = ("Xrotation", "Yrotation", "Zrotation")
CHANNELS = POSITION_CHANNELS + ROTATION_CHANNELS


class BvhError(ValueError):
  """A malformed BVH file; the message is "line N: ..." ("PATH: line N: ..." when read
  from a file by `read_bvh`)."""

  def __init__(self, line: int, message: str, path: str | None = None):
    super().__init__(f"{path}: line {line}: {message}" if path else f"line {line}: {message}")
    self.line = line
    self.path = path
    self.detail = message


# Channel names as files spell them, in any capitalisation -> the canonical names.
_CANONICAL = {c.lower(): c for c in CHANNELS}


@dataclasses.dataclass(frozen=True, eq=False)
class Bvh:
  """The content of a BVH file.

  Attributes:
    names: joint names in file order (depth-first, parents before children).
    parents: parent index per joint, -1 for the root (joint 0).
    offsets: [J, 3] float64 rest offsets from the parent.
    channels: per joint, its channel names in file order.
    end_sites: per joint, the [3] offset of its "End Site" block, or None.
    frame_time: seconds per frame.
    motion: [T, C] float64 channel values, C = total number of channels.
  """
  names: tuple[str, ...]
  parents: tuple[int, ...]
  offsets: np.ndarray
  channels: tuple[tuple[str, ...], ...]
  end_sites: tuple[np.ndarray | None, ...]
  frame_time: float
  motion: np.ndarray

  def __post_init__(self):
    j = len(self.names)
    kinematics.check_parents(self.parents)
    object.__setattr__(self, "offsets", np.asarray(self.offsets, np.float64))
    object.__setattr__(self, "motion", np.asarray(self.motion, np.float64))
    if self.offsets.shape != (j, 3):
      raise ValueError(f"offsets must have shape ({j}, 3), got {self.offsets.shape}")
    if len(self.parents) != j or len(self.channels) != j or len(self.end_sites) != j:
      raise ValueError("names, parents, channels and end_sites must have one entry per joint")
    for name, chans in zip(self.names, self.channels, strict=True):
      if not name or any(c.isspace() for c in name):
        raise ValueError(f"joint names must be non-empty without whitespace, got {name!r}")
      if any(c not in CHANNELS for c in chans) or len(set(chans)) != len(chans):
        raise ValueError(f"joint {name!r}: channels must be distinct names of {CHANNELS}, "
                         f"got {chans}")
    # Children must follow their parent directly in depth-first order, as in a file.
    if self._preorder() != list(range(j)):
      raise ValueError("joints must be in depth-first (file) order")
    if self.motion.ndim != 2 or self.motion.shape[1] != self.num_channels:
      raise ValueError(f"motion must have shape [frames, {self.num_channels}], "
                       f"got {self.motion.shape}")
    if not (math.isfinite(self.frame_time) and self.frame_time > 0):
      raise ValueError(f"frame_time must be finite and > 0, got {self.frame_time}")

  def _preorder(self) -> list[int]:
    children = [[] for _ in self.names]
    for k, p in enumerate(self.parents[1:], start=1):
      children[p].append(k)
    order, stack = [], [0]
    while stack:
      k = stack.pop()
      order.append(k)
      stack.extend(reversed(children[k]))
    return order

  @property
  def num_channels(self) -> int:
    return sum(len(c) for c in self.channels)

  def __eq__(self, other) -> bool:
    if not isinstance(other, Bvh):
      return NotImplemented
    ends = all((a is None and b is None) or (a is not None and b is not None
                                              and np.array_equal(a, b))
               for a, b in zip(self.end_sites, other.end_sites, strict=False))
    return (self.names == other.names and self.parents == other.parents
            and self.channels == other.channels and ends
            and len(self.end_sites) == len(other.end_sites)
            and np.array_equal(self.offsets, other.offsets)
            and self.frame_time == other.frame_time
            and self.motion.shape == other.motion.shape
            and np.array_equal(self.motion, other.motion))


def _floats(tokens: list[str], n: int, line: int, what: str) -> list[float]:
  if len(tokens) != n:
    raise BvhError(line, f"{what} needs {n} numbers, got {len(tokens)}")
  try:
    values = [float(t) for t in tokens]
  except ValueError:
    raise BvhError(line, f"{what} has a non-numeric value in {tokens}") from None
  if not all(math.isfinite(v) for v in values):
    raise BvhError(line, f"{what} has a non-finite value in {tokens}")
  return values


def parse_bvh(text: str) -> Bvh:
  """Parses the text of a BVH file.

  Args:
    text: the whole file.

  Returns:
    A `Bvh`.

  Raises:
    BvhError: (a ValueError) on malformed input, naming the line.
  """
  if text.startswith("\ufeff"):  # a UTF-8 byte-order mark decoded as text
    text = text[1:]
  lines = [(i + 1, ln.split()) for i, ln in enumerate(text.splitlines())]
  lines = [(i, t) for i, t in lines if t]
  pos = 0

  def next_line(expect: str):
    nonlocal pos
    if pos >= len(lines):
      last = lines[-1][0] if lines else 0
      raise BvhError(last + 1, f"unexpected end of file, expected {expect}")
    pos += 1
    return lines[pos - 1]

  line, tokens = next_line("HIERARCHY")
  if tokens != ["HIERARCHY"]:
    raise BvhError(line, f"expected HIERARCHY, got {' '.join(tokens)!r}")
  names, parents, offsets, channels, end_sites = [], [], [], [], []
  open_joints = []  # the joints whose '}' is still to come, innermost last

  def open_joint(parent: int, line: int, tokens: list[str]) -> None:
    if len(tokens) != 2:
      raise BvhError(line, f"{tokens[0]} needs exactly one name")
    if tokens[1] in names:
      raise BvhError(line, f"duplicate joint name {tokens[1]!r}")
    open_joints.append(len(names))
    names.append(tokens[1])
    parents.append(parent)
    end_sites.append(None)
    ln, t = next_line("{")
    if t != ["{"]:
      raise BvhError(ln, f"expected '{{' after {tokens[0]} {tokens[1]}")
    ln, t = next_line("OFFSET")
    if t[0] != "OFFSET":
      raise BvhError(ln, f"expected OFFSET, got {t[0]!r}")
    offsets.append(_floats(t[1:], 3, ln, "OFFSET"))
    ln, t = next_line("CHANNELS")
    if t[0] != "CHANNELS":
      raise BvhError(ln, f"expected CHANNELS, got {t[0]!r}")
    try:
      count = int(t[1]) if len(t) > 1 else -1
    except ValueError:
      raise BvhError(ln, f"CHANNELS count must be an integer, got {t[1]!r}") from None
    if count < 0 or count != len(t) - 2:
      raise BvhError(ln, f"CHANNELS count {t[1] if len(t) > 1 else ''!r} does not match the "
                         f"{len(t) - 2} channel names")
    chans = tuple(_CANONICAL.get(c.lower(), c) for c in t[2:])
    if any(c not in CHANNELS for c in chans) or len(set(chans)) != len(chans):
      raise BvhError(ln, f"unknown or repeated channel in {t[2:]}; expected names of {CHANNELS}")
    channels.append(chans)

  def end_site(index: int, ln: int) -> None:
    if end_sites[index] is not None:
      raise BvhError(ln, f"joint {names[index]!r} has a second End Site")
    ln2, t2 = next_line("{")
    if t2 != ["{"]:
      raise BvhError(ln2, "expected '{' after End Site")
    ln2, t2 = next_line("OFFSET")
    if t2[0] != "OFFSET":
      raise BvhError(ln2, f"expected OFFSET in End Site, got {t2[0]!r}")
    end_sites[index] = np.array(_floats(t2[1:], 3, ln2, "OFFSET"), np.float64)
    ln2, t2 = next_line("}")
    if t2 != ["}"]:
      raise BvhError(ln2, "expected '}' closing End Site")

  line, tokens = next_line("ROOT")
  if tokens[0] != "ROOT":
    raise BvhError(line, f"expected ROOT, got {tokens[0]!r}")
  open_joint(-1, line, tokens)
  while open_joints:  # a loop, not recursion: hierarchies may be thousands deep
    ln, t = next_line("JOINT, End Site or }")
    if t == ["}"]:
      open_joints.pop()
    elif t[0] == "JOINT":
      open_joint(open_joints[-1], ln, t)
    elif t[:2] == ["End", "Site"]:  # some exporters name it: "End Site LeftToe_End"
      end_site(open_joints[-1], ln)
    else:
      raise BvhError(ln, f"expected JOINT, End Site or '}}', got {' '.join(t)!r}")
  line, tokens = next_line("MOTION")
  if tokens != ["MOTION"]:
    raise BvhError(line, f"expected MOTION (one ROOT per file), got {' '.join(tokens)!r}")
  line, tokens = next_line("Frames:")
  if len(tokens) != 2 or tokens[0] != "Frames:" or not tokens[1].isdigit():
    raise BvhError(line, f"expected 'Frames: <count>', got {' '.join(tokens)!r}")
  num_frames, frames_line = int(tokens[1]), line
  line, tokens = next_line("Frame Time:")
  if tokens[:2] != ["Frame", "Time:"]:
    raise BvhError(line, f"expected 'Frame Time: <seconds>', got {' '.join(tokens)!r}")
  frame_time = _floats(tokens[2:], 1, line, "Frame Time")[0]
  if frame_time <= 0:
    raise BvhError(line, f"Frame Time must be > 0, got {frame_time}")
  # Checked before allocating: a damaged count (Frames: 10**12) must not allocate first.
  if num_frames > len(lines) - pos:
    raise BvhError(lines[-1][0] + 1, f"unexpected end of file: 'Frames: {num_frames}' (line "
                   f"{frames_line}) but {len(lines) - pos} frame lines follow")
  num_channels = sum(len(c) for c in channels)
  motion = np.zeros((num_frames, num_channels), np.float64)
  for f in range(num_frames):
    line, tokens = next_line(f"frame {f + 1} of {num_frames}")
    motion[f] = _floats(tokens, num_channels, line, f"frame {f + 1}")
  if pos < len(lines):
    raise BvhError(lines[pos][0], f"more frame lines than 'Frames: {num_frames}'")
  return Bvh(tuple(names), tuple(parents), np.array(offsets, np.float64), tuple(channels),
             tuple(end_sites), frame_time, motion)


def read_bvh(path: str | os.PathLike) -> Bvh:
  """Reads and parses a BVH file.

  The bytes are decoded as UTF-8 (a byte-order mark is dropped), else as Latin-1,
  which some exporters write joint names in.

  Raises:
    BvhError: a malformed file; the message names the file and the line.
  """
  with open(path, "rb") as f:
    raw = f.read()
  try:
    text = raw.decode("utf-8-sig")
  except UnicodeDecodeError:
    text = raw.decode("latin-1")
  try:
    return parse_bvh(text)
  except BvhError as e:
    raise BvhError(e.line, e.detail, path=os.fspath(path)) from None


def _num(x: float) -> str:
  return repr(float(x))


def format_bvh(bvh: Bvh) -> str:
  """The text of a BVH file; `parse_bvh` of it gives back `bvh` exactly."""
  children = [[] for _ in bvh.names]
  for k, p in enumerate(bvh.parents[1:], start=1):
    children[p].append(k)
  out = ["HIERARCHY"]
  stack = [(True, 0, "")]  # (opening?, joint, indent): a loop, so any depth is written
  while stack:
    opening, j, indent = stack.pop()
    inner = indent + "\t"
    if opening:
      out.append(f"{indent}{'ROOT' if j == 0 else 'JOINT'} {bvh.names[j]}")
      out.append(f"{indent}{{")
      out.append(f"{inner}OFFSET " + " ".join(_num(v) for v in bvh.offsets[j]))
      out.append(f"{inner}CHANNELS {len(bvh.channels[j])}"
                 + "".join(f" {c}" for c in bvh.channels[j]))
      stack.append((False, j, indent))
      stack.extend((True, k, inner) for k in reversed(children[j]))
      continue
    if bvh.end_sites[j] is not None:
      out.extend([f"{inner}End Site", f"{inner}{{",
                  f"{inner}\tOFFSET " + " ".join(_num(v) for v in bvh.end_sites[j]),
                  f"{inner}}}"])
    out.append(f"{indent}}}")
  out.extend(["MOTION", f"Frames: {bvh.motion.shape[0]}", f"Frame Time: {_num(bvh.frame_time)}"])
  out.extend(" ".join(_num(v) for v in row) for row in bvh.motion)
  return "\n".join(out) + "\n"


def write_bvh(path: str | os.PathLike, bvh: Bvh) -> None:
  """Writes `bvh` to `path` (see `format_bvh`)."""
  with open(path, "w") as f:
    f.write(format_bvh(bvh))


def to_motion(bvh: Bvh) -> tuple[Float[Array, "t j 3 3"], Float[Array, "t 3"]]:
  """Local rotation matrices [T, J, 3, 3] and root positions [T, 3] of a BVH clip.

  jaxlab interpretation: position channels are supported on the root only (the
  common case); the root's position is its channel values (its OFFSET is not
  added). A joint without rotation channels has the identity rotation.

  Raises:
    ValueError: a non-root joint has position channels, or a joint has one or two
      rotation channels (ambiguous Euler order).
  """
  cols = np.cumsum([0] + [len(c) for c in bvh.channels])
  motion = jnp.asarray(bvh.motion, jnp.float32)
  frames = motion.shape[0]
  root = jnp.zeros((frames, 3), jnp.float32)
  rots = []
  for j, chans in enumerate(bvh.channels):
    pos = [c for c in chans if c in POSITION_CHANNELS]
    rot = [c for c in chans if c in ROTATION_CHANNELS]
    if pos and j != 0:
      raise ValueError(f"joint {bvh.names[j]!r} has position channels; only the root may")
    if len(pos) not in (0, 3):
      raise ValueError(f"joint {bvh.names[j]!r}: expected 0 or 3 position channels, got {pos}")
    for axis, c in enumerate(POSITION_CHANNELS):
      if c in chans:
        root = root.at[:, axis].set(motion[:, cols[j] + chans.index(c)])
    if not rot:
      rots.append(jnp.broadcast_to(jnp.eye(3), (frames, 3, 3)))
      continue
    if len(rot) != 3:
      raise ValueError(f"joint {bvh.names[j]!r}: expected 0 or 3 rotation channels, got {rot}")
    angles = jnp.stack([motion[:, cols[j] + chans.index(c)] for c in rot], axis=-1)
    rots.append(rotations.euler_to_matrix(angles, "".join(c[0] for c in rot)))
  return jnp.stack(rots, axis=1), root


def from_motion(names: tuple[str, ...] | list[str], parents: np.ndarray | list | tuple,
                offsets: np.ndarray, local_rot: np.ndarray, root_pos: np.ndarray, *,
                frame_time: float, order: str = "ZXY",
                end_sites: tuple | None = None) -> Bvh:
  """A `Bvh` from local rotations [T, J, 3, 3] and root positions [T, 3].

  Every joint gets rotation channels in `order`; the root also gets
  X/Y/Z position channels. Euler angles come from scipy (intrinsic, degrees).
  """
  local_rot = np.asarray(local_rot, np.float64)
  root_pos = np.asarray(root_pos, np.float64)
  t, j = local_rot.shape[:2]
  if local_rot.shape != (t, j, 3, 3) or root_pos.shape != (t, 3):
    raise ValueError(f"local_rot must be [T, J, 3, 3] and root_pos [T, 3], got "
                     f"{local_rot.shape} and {root_pos.shape}")
  if len(order) != 3 or set(order) != set("XYZ"):
    raise ValueError(f"order must be a permutation of 'XYZ', got {order!r}")
  euler = transform.Rotation.from_matrix(local_rot.reshape(-1, 3, 3)).as_euler(
      order.upper(), degrees=True).reshape(t, j, 3)
  rot_channels = tuple(f"{a}rotation" for a in order)
  channels = (POSITION_CHANNELS + rot_channels,) + (rot_channels,) * (j - 1)
  motion = np.concatenate([root_pos, euler.reshape(t, -1)], axis=1)
  ends = end_sites if end_sites is not None else (None,) * j
  return Bvh(tuple(names), tuple(int(p) for p in parents), np.asarray(offsets, np.float64),
             channels, tuple(ends), float(frame_time), motion)
