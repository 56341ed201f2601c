"""Side-by-side timing: candidates interleaved in one process, medians, ratios.

Every benchmark in `configs/bench_*.py` measures ours against a baseline
with `time_interleaved`, so both see the same machine state (caches,
thermal, other load), and reports ratios rather than absolute times.
`time_back_to_back` times the steady state of calling one candidate in a loop
(a training loop), in blocks that still alternate between candidates.
"""

import statistics
import time
from collections.abc import Callable, Mapping
from typing import Any

import jax


def time_interleaved(candidates: Mapping[str, Callable[[], Any]], *, repeats: int = 7,
                     warmup: int = 1) -> dict[str, dict[str, float]]:
  """Times each zero-argument callable `repeats` times, round-robin.

  Results are blocked on (`jax.block_until_ready`), so asynchronous dispatch
  is included. Returns `{name: {"median_s", "min_s", "max_s"}}`.

  Example:
    >>> t = time_interleaved({"a": lambda: 1, "b": lambda: 2}, repeats=3)
    >>> sorted(t), sorted(t["a"])
    (['a', 'b'], ['max_s', 'median_s', 'min_s'])
  """
  return _time_rounds(candidates, repeats=repeats, warmup=warmup, block=1, untimed=0)


def time_back_to_back(candidates: Mapping[str, Callable[[], Any]], *, repeats: int = 7,
                      warmup: int = 1, block: int = 4) -> dict[str, dict[str, float]]:
  """Times each callable in blocks of `block` consecutive calls, the candidates in turn.

  Every round runs each candidate `block` times in a row. The first call of a
  block is not timed: it absorbs the switch from the previous candidate (another
  library's worker threads still spinning or asleep, its data in the caches). The
  other `block - 1` are: the steady state of a loop that calls one candidate over
  and over, as a training loop does, where `time_interleaved` measures each call
  right after another candidate's. Medians over `repeats * (block - 1)` timed calls;
  the same return value as `time_interleaved`.

  Example:
    >>> t = time_back_to_back({"a": lambda: 1, "b": lambda: 2}, repeats=2, block=3)
    >>> sorted(t)
    ['a', 'b']
  """
  if block < 2:
    raise ValueError(f"block must be >= 2 (its first call is not timed), got {block}")
  return _time_rounds(candidates, repeats=repeats, warmup=warmup, block=block, untimed=1)


def _time_rounds(candidates: Mapping[str, Callable[[], Any]], *, repeats: int, warmup: int,
                 block: int, untimed: int) -> dict[str, dict[str, float]]:
  if repeats < 1 or warmup < 0:
    raise ValueError(f"repeats must be >= 1 and warmup >= 0, got {repeats}, {warmup}")
  for _ in range(warmup):
    for fn in candidates.values():
      jax.block_until_ready(fn())
  times: dict[str, list[float]] = {name: [] for name in candidates}
  for _ in range(repeats):
    for name, fn in candidates.items():
      for call in range(block):
        start = time.perf_counter()
        jax.block_until_ready(fn())
        if call >= untimed:
          times[name].append(time.perf_counter() - start)
  return {name: {"median_s": statistics.median(ts), "min_s": min(ts), "max_s": max(ts)}
          for name, ts in times.items()}


def ratio(timings: Mapping[str, Mapping[str, float]], numerator: str, denominator: str) -> float:
  """`median(numerator) / median(denominator)`, e.g. baseline / ours = speed-up.

  Example:
    >>> ratio({"xla": {"median_s": 3.0}, "pallas": {"median_s": 1.5}}, "xla", "pallas")
    2.0
  """
  return timings[numerator]["median_s"] / timings[denominator]["median_s"]
