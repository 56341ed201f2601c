"""Compares two results.json files recursively, apart from timings and workdir paths.

Porting a row onto `jaxlab.study` must not change what it measures: its smoke
`results.json` before and after the port must be equal apart from wall-clock
timings. Run both and compare:

  python tests/compare_results.py BEFORE/results.json AFTER/results.json

Prints one line per difference (`path: before != after`, `path: only in before`,
...) and exits 1 if there is any. Keys that hold timings (`TIMING_KEY`: wall_s,
seconds, ..._seconds, time, ...) are skipped on both sides, and each file's own
workdir prefix in strings is replaced by "<workdir>", so two workdirs compare
equal. `--ignore KEY` skips more keys (by name, at any depth); `--rtol` lets
floats differ by that relative amount (default 0: bit-equal).
"""

import argparse
import json
import math
import os
import re
import sys
from collections.abc import Iterator
from typing import Any

# Key names that hold wall-clock or CPU timings, skipped wherever they occur.
TIMING_KEY = re.compile(r"^(wall_s|wall|time|times|elapsed|laps?|seconds|.*_seconds|"
                        r"seconds_.*|.*_time_s|.*_s_per_.*)$")


def _normalise(x: Any, workdir: str) -> Any:
  if isinstance(x, str) and workdir:
    return x.replace(workdir, "<workdir>")
  return x


def differences(before: Any, after: Any, *, path: str = "", ignore: frozenset[str] = frozenset(),
                rtol: float = 0.0, workdirs: tuple[str, str] = ("", "")) -> Iterator[str]:
  """Yields one line per difference between two JSON trees (dicts, lists, scalars).

  Args:
    before, after: the two trees.
    path: where they sit (for the lines).
    ignore: more key names to skip (besides `TIMING_KEY`).
    rtol: relative tolerance for floats (0: equal; NaN / None equals itself).
    workdirs: the workdir of each side, replaced by "<workdir>" in strings.

  Example:
    >>> list(differences({"a": 1.0, "wall_s": 3}, {"a": 1.5, "wall_s": 9, "b": 2}))
    ['a: 1.0 != 1.5', 'b: only in after']
  """
  if isinstance(before, dict) and isinstance(after, dict):
    for key in sorted(set(before) | set(after), key=str):
      if TIMING_KEY.match(str(key)) or key in ignore:
        continue
      sub = f"{path}.{key}" if path else str(key)
      if key not in after:
        yield f"{sub}: only in before"
      elif key not in before:
        yield f"{sub}: only in after"
      else:
        yield from differences(before[key], after[key], path=sub, ignore=ignore, rtol=rtol,
                               workdirs=workdirs)
    return
  if isinstance(before, list) and isinstance(after, list):
    if len(before) != len(after):
      yield f"{path}: length {len(before)} != {len(after)}"
      return
    for i, (b, a) in enumerate(zip(before, after, strict=True)):
      yield from differences(b, a, path=f"{path}[{i}]", ignore=ignore, rtol=rtol,
                             workdirs=workdirs)
    return
  b, a = _normalise(before, workdirs[0]), _normalise(after, workdirs[1])
  if isinstance(b, float) and isinstance(a, float) and not isinstance(b, bool):
    if (math.isnan(b) and math.isnan(a)) or a == b or (rtol and math.isclose(a, b, rel_tol=rtol)):
      return
  elif type(a) is type(b) and a == b:
    return
  yield f"{path}: {b!r} != {a!r}"


def compare_files(before: str, after: str, *, ignore: frozenset[str] = frozenset(),
                  rtol: float = 0.0) -> list[str]:
  """The differences between two results.json files (see `differences`)."""
  trees = []
  for p in (before, after):
    with open(p) as f:
      trees.append(json.load(f))
  workdirs = tuple(os.path.dirname(os.path.abspath(p)) for p in (before, after))
  return list(differences(*trees, ignore=ignore, rtol=rtol, workdirs=workdirs))


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("before")
  parser.add_argument("after")
  parser.add_argument("--ignore", action="append", default=[], help="a key name to skip")
  parser.add_argument("--rtol", type=float, default=0.0)
  args = parser.parse_args(argv)
  diffs = compare_files(args.before, args.after, ignore=frozenset(args.ignore), rtol=args.rtol)
  for line in diffs:
    print(line)
  print(f"{len(diffs)} difference(s)" if diffs else "equal (apart from timings and paths)")
  return 1 if diffs else 0


if __name__ == "__main__":
  sys.exit(main())
