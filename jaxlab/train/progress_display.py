"""Progress of long loops (training steps, sweep arms): a bar where someone watches, log lines elsewhere.

`Progress` picks one of three modes (`progress_mode`):

  * "bar": a tqdm bar on stderr when it is a terminal, or in a notebook kernel (tqdm's
    widget where ipywidgets is installed). It shows i/N, the rate, elapsed time and
    ETA, plus what the loop reports (the training loss); a top-level bar stays on
    screen when done, a bar opened inside another one (a sweep arm's training) goes.
  * "log": one line on the `jaxlab.progress` logger (INFO, absl's format under an absl
    app, which shows it whatever absl's verbosity) when the loop starts, at most every
    `log_every_s` seconds while it runs, and when it ends. Without any logging
    handler (a plain script) the lines go to stderr. Off a terminal: CI, log files,
    `launch.reproduce` piped to a file.
  * "off": nothing, on JAX processes other than 0.

`JAXLAB_PROGRESS=bar|log|off` overrides the choice; `TQDM_DISABLE=1` hides bars.
"""

import logging
import math
import os
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

import jax
from tqdm.auto import tqdm

MODES = ("bar", "log", "off")
LOGGER = logging.getLogger("jaxlab.progress")
# Progress lines are INFO: set here so that absl's WARNING default (launch.main silences
# orbax's per-save INFO lines) does not hide them; `LOGGER.setLevel` turns them off.
LOGGER.setLevel(logging.INFO)


def progress_mode() -> str:
  """"bar", "log" or "off" for this process (see the module docstring).

  Raises:
    ValueError: JAXLAB_PROGRESS is set to something else.
  """
  forced = os.environ.get("JAXLAB_PROGRESS", "").strip().lower()
  if forced:
    if forced not in MODES:
      raise ValueError(f"JAXLAB_PROGRESS must be one of {MODES}, got {forced!r}")
    return forced
  # Asked only of a multi-process run: jax.process_index() would start JAX's backends.
  if jax.distributed.is_initialized() and jax.process_index() != 0:
    return "off"
  # A kernel's stderr is no terminal, yet someone watches the cell's output.
  if "ipykernel" in sys.modules or sys.stderr.isatty():
    return "bar"
  return "log"


def format_duration(seconds: float) -> str:
  """'42 s', '3 min 05 s', '2 h 07 min'.

  >>> format_duration(185.2)
  '3 min 05 s'
  """
  s = int(round(seconds))
  if s < 60:
    return f"{s} s"
  if s < 3600:
    return f"{s // 60} min {s % 60:02d} s"
  return f"{s // 3600} h {s % 3600 // 60:02d} min"


def _format_value(value: Any) -> str:
  if value is None:  # MetricWriter's non-finite value
    return "nan"
  if isinstance(value, float):
    return "nan" if not math.isfinite(value) else f"{value:.4g}"
  return str(value)


class Progress:
  """Progress of a loop of `total` units (None: unknown), shown as the mode says.

  Args:
    total: units of the whole loop (steps, arms); None when unknown (no ETA).
    desc: what the loop does ("train", "arms"), first on each line.
    initial: units already done before this call (a resumed run).
    unit: the unit's name.
    mode: "bar", "log" or "off"; None picks one (`progress_mode`).
    log_every_s: least seconds between two log lines ("log" mode).
    clock: seconds, monotonic (default `time.monotonic`; tests pass a fake one).

  Example:
    >>> with Progress(3, desc="demo", mode="off") as p:
    ...   for loss in (2.0, 1.5, 1.2):
    ...     p.set_postfix(loss=loss)
    ...     p.update()
    >>> p.line()
    'demo: 3/3 steps (100%), loss 1.2, 0 s elapsed'
  """

  def __init__(self, total: int | None = None, *, desc: str = "", initial: int = 0,
               unit: str = "step", mode: str | None = None, log_every_s: float = 30.0,
               clock: Callable[[], float] | None = None):
    if total is not None and total < 0:
      raise ValueError(f"total must be >= 0 or None, got {total}")
    self.mode = progress_mode() if mode is None else mode
    if self.mode not in MODES:
      raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
    self.total, self.desc, self.unit, self.n = total, desc, unit, initial
    self._clock, self._log_every_s = clock or time.monotonic, log_every_s
    self._start = self._clock()
    self._timed = 0  # units done by this object and timed (not loaded from a cache)
    self._postfix: dict[str, Any] = {}
    self._logged_at: float | None = None
    self._logged_n: int | None = None
    self._bar = None
    if self.mode == "bar":
      # leave=None: a top-level bar stays when done, a nested one (position > 0) goes.
      with warnings.catch_warnings():  # a kernel without ipywidgets: tqdm.auto falls back to text
        warnings.filterwarnings("ignore", message="IProgress not found")
        self._bar = tqdm(total=total, desc=desc, initial=initial, unit=f" {unit}",
                         dynamic_ncols=True, leave=None)
    elif self.mode == "log":
      self._log()

  def __enter__(self) -> "Progress":
    return self

  def __exit__(self, *exc) -> None:
    self.close()

  def update(self, n: int = 1, *, timed: bool = True) -> None:
    """Counts `n` more units done; `timed=False` for units that took no time (cached)."""
    self.n += n
    self._timed += n if timed else 0
    if self._bar is not None:
      self._bar.update(n)
    elif self.mode == "log" and (self.total is not None and self.n >= self.total
                                 or self._clock() - self._logged_at >= self._log_every_s):
      self._log()

  def set_total(self, total: int | None) -> None:
    """Changes the loop's total (a sweep that learns its size as it goes)."""
    self.total = total
    if self._bar is not None:
      self._bar.total = total
      self._bar.refresh()

  def set_postfix(self, **values: Any) -> None:
    """Values shown after the count (e.g. `loss=2.31`) until they are set again."""
    self._postfix.update(values)
    if self._bar is not None:
      self._bar.set_postfix({k: _format_value(v) for k, v in self._postfix.items()},
                            refresh=False)

  def eta_s(self) -> float | None:
    """Seconds left at the rate of the timed units so far; None when unknown."""
    if self.total is None or self._timed == 0:
      return None
    return (self._clock() - self._start) / self._timed * max(self.total - self.n, 0)

  def line(self) -> str:
    """The log line: 'train: 1200/3000 steps (40%), loss 2.31, 1 min 12 s elapsed, ETA 1 min 48 s'."""
    count = f"{self.n}/{self.total}" if self.total is not None else f"{self.n}"
    parts = [f"{self.desc}: {count} {self.unit}s"
             + (f" ({100 * self.n / self.total:.0f}%)" if self.total else "")]
    parts += [f"{k} {_format_value(v)}" for k, v in self._postfix.items()]
    parts.append(f"{format_duration(self._clock() - self._start)} elapsed")
    eta = self.eta_s()
    if eta is not None and self.n < self.total:
      parts.append(f"ETA {format_duration(eta)}")
    return ", ".join(parts)

  def _log(self) -> None:
    self._logged_at, self._logged_n = self._clock(), self.n
    if LOGGER.hasHandlers():
      LOGGER.info(self.line())
    else:  # a plain script configured no logging: Python would drop INFO lines
      print(f"[jaxlab] {self.line()}", file=sys.stderr, flush=True)

  def close(self) -> None:
    """Ends the display: the bar's last frame, or a last log line if the count moved."""
    if self._bar is not None:
      self._bar.close()
      self._bar = None
    elif self.mode == "log" and self._logged_n != self.n:
      self._log()
