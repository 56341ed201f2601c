"""Metrics to `workdir/metrics.jsonl` and a progress bar that is quiet off a TTY."""

import json
import math
import os
import sys
from collections.abc import Iterable, Mapping
from typing import Any

import jax
import numpy as np


def _to_float(x: Any) -> float | None:
  value = float(np.asarray(x))
  return value if math.isfinite(value) else None


class MetricWriter:
  """Appends one JSON object per call: `{"step": s, **metrics}`.

  On resume (`resume_step`), rows logged after that step by the interrupted
  run are dropped first, so the file reads as one uninterrupted run.
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
      with open(self.path, "w") as f:
        for row in rows:
          if row["step"] <= resume_step:
            f.write(json.dumps(row) + "\n")

  def write(self, step: int, metrics: Mapping[str, Any], *, prefix: str = "") -> dict:
    row = {"step": int(step), **{prefix + k: _to_float(v) for k, v in metrics.items()}}
    if self._enabled:
      with open(self.path, "a") as f:
        f.write(json.dumps(row) + "\n")
    return row


def read_metrics(path: str) -> list[dict]:
  with open(path) as f:
    return [json.loads(line) for line in f if line.strip()]


def progress(iterable: Iterable, *, total: int | None = None, desc: str = "", initial: int = 0):
  """A tqdm bar on stderr, disabled when stderr is not a terminal (CI, logs)."""
  from tqdm.auto import tqdm
  return tqdm(iterable, total=total, desc=desc, initial=initial, dynamic_ncols=True,
              disable=not sys.stderr.isatty(), leave=False)
