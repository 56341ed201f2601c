"""Drift metrics on a learning curve: degradation, recovery time, nAUC.

All functions take one run's evaluation curve (returns at evaluation steps)
and the drift level per environment step, and work in numpy (they run once,
after training). Definitions (the paper's metric names; the exact formulas are
a jaxlab interpretation, following the jaxlab plan):

  * normalised return `n = (R - low) / (high - low)` with per-task bounds
    (`low` ~ a random policy, `high` ~ a solved policy), so returns are
    positive and comparable across tasks.
  * for each abrupt change point c: `n_pre` = mean of n over evaluations in
    `[c - pre_window * T, c)`; the post-change curve is smoothed by a trailing
    moving average of `smooth` evaluations that starts at c;
    degradation = `max(0, (n_pre - min_post) / |n_pre|)` (NaN when
    `n_pre == 0`, where no relative loss is defined);
    recovery time = (first smoothed evaluation >= `n_pre - (1 - threshold) *
    |n_pre|`) - c, in % of training steps T, i.e. the first time the remaining
    relative loss `(n_pre - n) / |n_pre|` is at most `1 - threshold` (the same
    as `n >= threshold * n_pre` when `n_pre > 0`; for `n_pre < 0`, where
    `threshold * n_pre` would lie above `n_pre`, the target stays below it, and
    for `n_pre == 0` it is 0); if that never happens before the next change
    point (or the end), the recovery is censored at the segment length.
    Normalised returns are meant to be positive, but a negative `n_pre` (a run
    below the `low` bound) is handled as above.
  * nAUC(steady) = mean n over evaluations whose drift level did not change
    during the preceding `settle * T` steps; nAUC(drift) = mean n over
    evaluations whose level changed during the preceding `drift_window * T`
    steps.

NaN rule: a NaN (or +-inf) evaluation in `curve` leaves no metric of the run
defined, so every number `drift_metrics` returns is then NaN (and no event
counts as recovered); a comparison such as `sm >= target` must not skip it and
report a finite recovery time. Drift levels and the window knobs are inputs,
not measurements: non-finite ones raise ValueError.
"""

import math

import numpy as np


def normalize(returns, low: float | int, high: float | int) -> np.ndarray:
  """`(returns - low) / (high - low)`; raises if `high <= low`."""
  if not high > low:
    raise ValueError(f"need high > low, got low={low!r}, high={high!r}")
  return (np.asarray(returns, np.float64) - low) / (high - low)


def _levels(levels) -> np.ndarray:
  z = np.asarray(levels, np.float64)
  if z.ndim != 1 or not np.all(np.isfinite(z)):
    raise ValueError(f"levels must be a finite 1-D array, got shape {z.shape} with "
                     f"{int(np.sum(~np.isfinite(z)))} non-finite values")
  return z


def change_points(levels, min_jump: float = 0.5) -> list[int]:
  """Steps t where abs(level[t] - level[t-1]) > min_jump (abrupt changes).

  Raises ValueError for non-finite `levels` (a NaN jump would never count) or a
  `min_jump` that is not a finite number >= 0.

  Example:
    >>> change_points([0.0, 0.0, 1.0, 1.0, 0.0])
    [2, 4]
  """
  if not (math.isfinite(min_jump) and min_jump >= 0):
    raise ValueError(f"min_jump must be a finite number >= 0, got {min_jump!r}")
  z = _levels(levels)
  return [int(i) for i in np.nonzero(np.abs(np.diff(z)) > min_jump)[0] + 1]


def _recent_change(levels, step, window) -> bool:
  step, window = int(step), int(window)
  lo = max(0, step - window)
  seg = levels[lo:step + 1]
  return bool(seg.max() - seg.min() > 1e-6)


def drift_metrics(steps, curve, levels, *, pre_window: float = 0.05,
                  smooth: int = 3, threshold: float = 0.9,
                  settle: float = 1 / 6, drift_window: float = 0.1) -> dict:
  """Metrics of one normalised curve.

  Args:
    steps: [E] environment step (exclusive end) of each evaluation.
    curve: [E] normalised return at each evaluation.
    levels: [T] drift level per environment step.
    pre_window, smooth, threshold, settle, drift_window: see module doc.

  Returns:
    dict with "events" (one dict per change point: step, n_pre, degradation,
    recovery_pct, recovered), "degradation" and "recovery_pct" (means over
    events, NaN without events; "degradation" is also NaN when an event has
    `n_pre == 0`), "nauc_steady", "nauc_drift". Every number is NaN (and no
    event recovered) when `curve` holds a non-finite value (module docstring).

  Raises:
    ValueError: on mismatched shapes, non-finite `levels`, or a window knob
      that is not finite and in range (`pre_window`, `settle`, `drift_window`
      >= 0, `threshold` in [0, 1], `smooth` >= 1).
  """
  for name, v in (("pre_window", pre_window), ("settle", settle), ("drift_window", drift_window),
                  ("threshold", threshold)):
    if not (math.isfinite(v) and v >= 0):
      raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
  if threshold > 1:
    raise ValueError(f"threshold must be in [0, 1], got {threshold!r}")
  if int(smooth) != smooth or smooth < 1:
    raise ValueError(f"smooth must be an integer >= 1, got {smooth!r}")
  steps = np.asarray(steps, np.int64)
  curve = np.asarray(curve, np.float64)
  levels = _levels(levels)
  if steps.shape != curve.shape or steps.ndim != 1:
    raise ValueError(f"steps and curve must be 1-D of equal length, got "
                     f"{steps.shape} and {curve.shape}")
  total = levels.shape[0]
  cps = change_points(levels)
  bounds = cps + [total]
  events = []
  for i, c in enumerate(cps):
    pre = (steps > c - pre_window * total) & (steps <= c)
    post_idx = np.nonzero((steps > c) & (steps <= bounds[i + 1]))[0]
    if not pre.any() or post_idx.size == 0:
      continue
    n_pre = float(curve[pre].mean())
    post = curve[post_idx]
    sm = np.array([post[max(0, j - smooth + 1):j + 1].mean()
                   for j in range(post.size)])
    scale = abs(n_pre)
    degradation = (max(0.0, (n_pre - float(sm.min())) / scale) if scale > 0
                   else float("nan"))
    ok = np.nonzero(sm >= n_pre - (1.0 - threshold) * scale)[0]
    recovered = ok.size > 0
    end = steps[post_idx[ok[0]]] if recovered else bounds[i + 1]
    events.append(dict(step=c, n_pre=n_pre, degradation=degradation,
                       recovery_pct=100.0 * (end - c) / total,
                       recovered=bool(recovered)))
  settle_n, drift_n = int(settle * total), int(drift_window * total)
  steady = np.array([s >= settle_n and not _recent_change(levels, s - 1,
                                                          settle_n)
                     for s in steps])
  drifting = np.array([_recent_change(levels, s - 1, drift_n) for s in steps])

  def mean(x):
    return float(x.mean()) if x.size else float("nan")

  if not np.all(np.isfinite(curve)):
    nan = float("nan")
    events = [dict(e, n_pre=nan, degradation=nan, recovery_pct=nan, recovered=False)
              for e in events]
    return dict(events=events, degradation=nan, recovery_pct=nan, nauc_steady=nan,
                nauc_drift=nan)
  return dict(
      events=events,
      degradation=mean(np.array([e["degradation"] for e in events])),
      recovery_pct=mean(np.array([e["recovery_pct"] for e in events])),
      nauc_steady=mean(curve[steady]), nauc_drift=mean(curve[drifting]))
