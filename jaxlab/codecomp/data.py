"""Line-completion examples from the stdlib byte corpus, split by file.

An example is a cut inside a line: the prompt is the `prefix_len` bytes before
the cut (running text: it may reach into earlier lines and files), the target
the rest of the line without its newline. The cut is uniform over the line's
positions after its indentation that leave 1..`max_target_len` target bytes.
Evaluation examples come from `Corpus.val` (files never seen in training, the
split of `jaxlab.data.load_corpus`), training examples from `Corpus.train`.

Example:
  >>> stream = np.frombuffer(b"def f(x):\\n    return x + 1\\n" * 20, np.uint8)
  >>> ex = line_completions(stream, 4, prefix_len=16, max_target_len=12, seed=0)
  >>> ex.prompts.shape, ex.targets.shape
  ((4, 16), (4, 12))
"""

from typing import NamedTuple

import numpy as np

NEWLINE = ord("\n")


class Completions(NamedTuple):
  """A batch of line-completion examples (numpy).

  prompts: int32 [n, prefix_len]; targets: int32 [n, max_target_len], zero-padded
  after `target_lens`; target_lens: int32 [n], in [1, max_target_len]; starts:
  int64 [n], the stream offset of each cut.
  """
  prompts: np.ndarray
  targets: np.ndarray
  target_lens: np.ndarray
  starts: np.ndarray


def line_completions(stream: np.ndarray, num: int, *, prefix_len: int, max_target_len: int,
                     seed: int, min_line_len: int = 4) -> Completions:
  """`num` seeded line-completion examples from a 1-D uint8 byte stream.

  Args:
    stream: bytes (e.g. `Corpus.val`).
    num: number of examples.
    prefix_len: prompt length in bytes.
    max_target_len: longest target (rest of line) kept.
    seed: the examples are a pure function of (stream, seed).
    min_line_len: lines with fewer non-space bytes are never cut.

  Returns:
    `Completions`.
  """
  stream = np.asarray(stream)
  if stream.ndim != 1:
    raise ValueError(f"stream must be 1-D bytes, got shape {stream.shape}")
  if num < 1 or prefix_len < 1 or max_target_len < 1:
    raise ValueError(f"num, prefix_len and max_target_len must be >= 1, got {num}, "
                     f"{prefix_len}, {max_target_len}")
  nl = np.flatnonzero(stream == NEWLINE)
  starts, ends = nl[:-1] + 1, nl[1:]  # line = stream[start:end], newline at end
  keep = []
  for s, e in zip(starts, ends, strict=True):
    if s < prefix_len + 1:
      continue
    line = stream[s:e]
    content = np.flatnonzero(line != ord(" "))
    if len(content) < min_line_len:
      continue
    first = s + content[0] + 1  # cut after at least one non-space byte
    lo = max(first, e - max_target_len)
    if lo < e:
      keep.append((lo, e))
  if not keep:
    raise ValueError("no line of the stream qualifies; lower min_line_len or raise max_target_len")
  rng = np.random.default_rng(seed)
  lines = np.asarray(keep)[rng.integers(0, len(keep), size=num)]
  cuts = rng.integers(lines[:, 0], lines[:, 1])
  prompts = stream[cuts[:, None] + np.arange(-prefix_len, 0)[None, :]].astype(np.int32)
  lens = (lines[:, 1] - cuts).astype(np.int32)
  idx = np.minimum(cuts[:, None] + np.arange(max_target_len)[None, :], len(stream) - 1)
  targets = np.where(np.arange(max_target_len)[None, :] < lens[:, None], stream[idx], 0)
  return Completions(prompts, targets.astype(np.int32), lens, cuts)
