"""A byte-level text corpus made of the running interpreter's stdlib sources.

The files are found through `sysconfig` (never a hard-coded path), read in
sorted order, and split into train/val *by file* with a hash of the file's
relative path, so the split does not depend on the order of discovery and a
file never straddles the two splits. Batches are a pure function of
`(seed, step)`, which makes the iterator seekable: a resumed run asks for
step `n` and gets exactly the batch an uninterrupted run saw at step `n`.
"""

import dataclasses
import hashlib
import os
import sysconfig
from collections.abc import Iterator

import numpy as np

_SKIP_DIRS = frozenset({"site-packages", "dist-packages", "__pycache__", "test", "tests",
                        "idlelib", "lib2to3", "turtledemo", "ensurepip"})


def stdlib_py_files() -> list[str]:
  """Sorted relative paths of the standard library's `.py` files.

  Third-party packages (site-packages) and the big test suites are left out.

  Example:
    >>> files = stdlib_py_files()
    >>> "os.py" in files, files == sorted(files)
    (True, True)
  """
  root = sysconfig.get_paths()["stdlib"]
  found = []
  for dirpath, dirnames, filenames in os.walk(root):
    dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
    for name in filenames:
      if name.endswith(".py"):
        found.append(os.path.relpath(os.path.join(dirpath, name), root))
  return sorted(found)


def _is_val(relpath: str, val_fraction: float) -> bool:
  digest = hashlib.sha256(relpath.encode()).digest()
  return int.from_bytes(digest[:8], "little") / 2.0**64 < val_fraction


@dataclasses.dataclass(frozen=True)
class Corpus:
  """Train and val byte streams (uint8) and the files behind each."""
  train: np.ndarray
  val: np.ndarray
  train_files: tuple[str, ...]
  val_files: tuple[str, ...]

  vocab_size: int = 256


def load_corpus(*, max_bytes: int | None = 4_000_000, val_fraction: float = 0.1) -> Corpus:
  """Loads the stdlib byte corpus, split by file.

  Args:
    max_bytes: cap on train+val bytes (files are taken in sorted order until
      the cap); None reads everything.
    val_fraction: share of files (by path hash) that go to val, in (0, 1).

  Returns:
    A `Corpus` whose `train`/`val` are 1-D uint8 arrays; files are joined with
    a blank line so windows can cross file boundaries like running text.

  Example:
    >>> corpus = load_corpus(max_bytes=100_000)
    >>> corpus.train.dtype, corpus.vocab_size
    (dtype('uint8'), 256)
    >>> set(corpus.train_files).isdisjoint(corpus.val_files)  # split by file
    True
  """
  if not 0.0 < val_fraction < 1.0:
    raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
  if max_bytes is not None and max_bytes < 1024:
    raise ValueError(f"max_bytes must be >= 1024 or None, got {max_bytes}")
  root = sysconfig.get_paths()["stdlib"]
  parts: dict[bool, list[bytes]] = {False: [], True: []}
  names: dict[bool, list[str]] = {False: [], True: []}
  total = 0
  for rel in stdlib_py_files():
    with open(os.path.join(root, rel), "rb") as f:
      data = f.read() + b"\n\n"
    is_val = _is_val(rel, val_fraction)
    parts[is_val].append(data)
    names[is_val].append(rel)
    total += len(data)
    if max_bytes is not None and total >= max_bytes:
      break
  if not parts[True] or not parts[False]:
    raise ValueError("The stdlib corpus is too small for a train/val split; raise max_bytes.")
  as_array = lambda chunks: np.frombuffer(b"".join(chunks), dtype=np.uint8).copy()
  return Corpus(train=as_array(parts[False]), val=as_array(parts[True]),
                train_files=tuple(names[False]), val_files=tuple(names[True]))


def lm_batch(tokens: np.ndarray, step: int, *, batch_size: int, seq_len: int,
             seed: int) -> np.ndarray:
  """The batch for `step`: `[batch_size, seq_len + 1]` int32 windows.

  Window offsets are drawn from a generator seeded by `(seed, step)`, so any
  step can be produced directly (seekable) and reproducibly. They are uniform
  over [0, len(tokens) - seq_len - 2]: the stream's last token is never in a
  window (one token of the stream; widening the range would redraw every
  seeded batch and so change every recorded LM result).

  Example:
    >>> tokens = np.arange(100, dtype=np.uint8)
    >>> batch = lm_batch(tokens, 3, batch_size=2, seq_len=8, seed=0)
    >>> batch.shape, batch.dtype  # inputs batch[:, :-1], targets batch[:, 1:]
    ((2, 9), dtype('int32'))
    >>> bool((lm_batch(tokens, 3, batch_size=2, seq_len=8, seed=0) == batch).all())
    True
  """
  if tokens.ndim != 1:
    raise ValueError(f"tokens must be 1-D, got shape {tokens.shape}")
  if batch_size < 1 or seq_len < 1:
    raise ValueError(f"batch_size and seq_len must be >= 1, got {batch_size}, {seq_len}")
  if len(tokens) <= seq_len + 1:
    raise ValueError(f"stream of {len(tokens)} tokens is too short for seq_len={seq_len}")
  rng = np.random.default_rng([seed, step])
  starts = rng.integers(0, len(tokens) - seq_len - 1, size=batch_size)
  idx = starts[:, None] + np.arange(seq_len + 1)[None, :]
  return tokens[idx].astype(np.int32)


def lm_batches(tokens: np.ndarray, *, batch_size: int, seq_len: int, seed: int,
               start_step: int = 0) -> Iterator[np.ndarray]:
  """Infinite iterator of `lm_batch(...)` from `start_step` on (resumable).

  Example:
    >>> tokens = np.arange(100, dtype=np.uint8)
    >>> batches = lm_batches(tokens, batch_size=2, seq_len=8, seed=0, start_step=3)
    >>> bool((next(batches) == lm_batch(tokens, 3, batch_size=2, seq_len=8, seed=0)).all())
    True
  """
  step = start_step
  while True:
    yield lm_batch(tokens, step, batch_size=batch_size, seq_len=seq_len, seed=seed)
    step += 1


def unigram_bits_per_byte(train: np.ndarray, val: np.ndarray) -> float:
  """Cross-entropy (bits/byte) of val under train's add-one byte unigram.

  Example:
    >>> zeros = np.zeros(1000, np.uint8)  # p(0) = 1001 / (1001 + 255)
    >>> round(unigram_bits_per_byte(zeros, zeros[:10]), 3)
    0.327
  """
  counts = np.bincount(train, minlength=256).astype(np.float64) + 1.0
  logp = np.log2(counts / counts.sum())
  return float(-logp[val].mean())
