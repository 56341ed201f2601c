"""Side-by-side timing: candidates interleaved in one process, medians, ratios.

Every benchmark in `configs/bench_*.py` measures ours against a baseline
with `time_interleaved`, so both see the same machine state (caches,
thermal, other load), and reports ratios rather than absolute times.
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
  """
  if repeats < 1 or warmup < 0:
    raise ValueError(f"repeats must be >= 1 and warmup >= 0, got {repeats}, {warmup}")
  for _ in range(warmup):
    for fn in candidates.values():
      jax.block_until_ready(fn())
  times: dict[str, list[float]] = {name: [] for name in candidates}
  for _ in range(repeats):
    for name, fn in candidates.items():
      start = time.perf_counter()
      jax.block_until_ready(fn())
      times[name].append(time.perf_counter() - start)
  return {name: {"median_s": statistics.median(ts), "min_s": min(ts), "max_s": max(ts)}
          for name, ts in times.items()}


def ratio(timings: Mapping[str, Mapping[str, float]], numerator: str, denominator: str) -> float:
  """`median(numerator) / median(denominator)`, e.g. baseline / ours = speed-up."""
  return timings[numerator]["median_s"] / timings[denominator]["median_s"]
