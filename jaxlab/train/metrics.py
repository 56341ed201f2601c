"""Metrics to `workdir/metrics.jsonl`, and `progress` over an iterable."""

import json
import math
import os
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

import jax
import numpy as np

from jaxlab.train.progress_display import Progress


def _to_float(x: Any) -> float | None:
  value = float(np.asarray(x))
  return value if math.isfinite(value) else None


class MetricWriter:
  """Appends one JSON object per call: `{"step": s, **metrics}`.

  On resume (`resume_step`), rows logged after that step by the interrupted
  run (and a torn last line) are dropped first, so the file reads as one
  uninterrupted run.
  Only process 0 writes (multi-host).
  """

  def __init__(self, workdir: str, *, resume_step: int = 0, filename: str = "metrics.jsonl"):
    self.path = os.path.join(workdir, filename)
    self._enabled = jax.process_index() == 0
    if not self._enabled:
      return
    os.makedirs(workdir, exist_ok=True)
    if os.path.exists(self.path):
      rows = read_metrics(self.path)
      tmp = self.path + ".tmp"  # replaced atomically: a kill here loses no kept row
      with open(tmp, "w") as f:
        for row in rows:
          if row["step"] <= resume_step:
            f.write(json.dumps(row) + "\n")
      os.replace(tmp, self.path)

  def write(self, step: int, metrics: Mapping[str, Any], *, prefix: str = "") -> dict:
    row = {"step": int(step), **{prefix + k: _to_float(v) for k, v in metrics.items()}}
    if self._enabled:
      with open(self.path, "a") as f:
        f.write(json.dumps(row) + "\n")
    return row


def read_metrics(path: str) -> list[dict]:
  """The rows of a metrics.jsonl file, in order.

  A run killed mid-write can leave its last line torn (no newline, cut JSON):
  that one line is dropped with a `RuntimeWarning`, since the resumed run
  writes it again. A bad line anywhere else is real corruption and raises.

  Raises:
    ValueError: a line other than the last is not a JSON object with a "step".
  """
  with open(path) as f:
    lines = f.read().split("\n")
  rows = []
  numbered = [(i, line) for i, line in enumerate(lines, 1) if line.strip()]
  for k, (lineno, line) in enumerate(numbered):
    try:
      row = json.loads(line)
      if not isinstance(row, dict) or "step" not in row:
        raise ValueError("not a JSON object with a 'step'")
    except ValueError as e:  # json.JSONDecodeError is a ValueError
      if k == len(numbered) - 1:
        warnings.warn(f"{path}:{lineno}: dropping a torn last line ({e}): {line[:80]!r}",
                      RuntimeWarning, stacklevel=2)
        break
      raise ValueError(f"{path}:{lineno} is corrupt ({e}): {line[:80]!r}") from e
    rows.append(row)
  return rows


def progress(iterable: Iterable, *, total: int | None = None, desc: str = "", initial: int = 0):
  """Yields `iterable`'s items while `jaxlab.train.progress_display.Progress` shows how far it got.

  A bar on a terminal or in a notebook, periodic log lines elsewhere, nothing on
  processes other than 0.

  Example:
    >>> [x for x in progress(range(3), total=3, desc="demo")]  # doctest: +SKIP
    [0, 1, 2]
  """
  with Progress(total, desc=desc, initial=initial) as p:
    for item in iterable:
      yield item
      p.update()
