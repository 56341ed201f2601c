"""One JSON result per finished arm of a sweep, so a killed sweep resumes where it stopped.

Sweeps (many cheap runs: the MoDEX cells, the QAT grid, ECO arms, AES tasks,
EB+ studies) resume at arm granularity: each finished arm's result is one
file `workdir/arms/<name>.<hash>.json`, written atomically (temp file +
`os.replace`), where `hash` fingerprints the part of the config that
determines that arm. A changed config therefore never reuses a stale result,
and a file is either absent or complete, whenever the process was killed. A
file damaged some other way (a full disk, an edit) is set aside as
`<file>.damaged` and its arm recomputed.

Every sweep shows its progress through its cache (`jaxlab.train.progress_display.Progress`):
arm i (of N when the sweep declares `total`), the last arm's name and time, elapsed
time and ETA; a bar on a terminal, a log line at most every 30 s elsewhere.
"""

import hashlib
import json
import os
import re
import time
import warnings
from collections.abc import Callable
from typing import Any

import ml_collections
import numpy as np

from jaxlab.train.progress_display import Progress


def _default(x: Any) -> Any:
  """JSON for numpy / jax scalars and arrays (results are often computed with them)."""
  if isinstance(x, np.generic) or getattr(x, "shape", None) == ():
    return np.asarray(x).item()
  if hasattr(x, "__array__"):
    return np.asarray(x).tolist()
  raise TypeError(f"ArmCache results must be JSON-serialisable, got {type(x).__name__}")


def config_hash(*parts: Any) -> str:
  """A short stable hash of config parts (ConfigDicts, dicts, tuples, scalars)."""
  def plain(x):
    return x.to_dict() if isinstance(x, ml_collections.ConfigDict) else x
  text = json.dumps([plain(p) for p in parts], sort_keys=True, default=str)
  return hashlib.sha1(text.encode()).hexdigest()[:12]


class ArmCache:
  """Per-arm result cache in `workdir/arms/`, which also shows the sweep's progress.

  Args:
    workdir: the run's directory; results go to `workdir/arms/`.
    total: arms of the whole sweep, when the experiment knows it (i/N and an ETA);
      None counts arms without a total. Settable later as `cache.total`.
    desc: the progress line's title.
    progress_mode: "bar", "log" or "off"; None picks one (`jaxlab.train.progress_display`).

  Example:
    >>> cache = ArmCache(workdir, total=12)                     # doctest: +SKIP
    >>> result = cache.get_or_run("standard/modex", config_hash(config.train),
    ...                           lambda: train_and_evaluate(...))  # doctest: +SKIP

  Attributes:
    computed: names of the arms this object ran (not loaded), in order.
  """

  def __init__(self, workdir: str, *, total: int | None = None, desc: str = "arms",
               progress_mode: str | None = None):
    self.directory = os.path.join(workdir, "arms")
    self.computed: list[str] = []
    self.total = total
    self._desc, self._progress_mode = desc, progress_mode
    self._progress: Progress | None = None  # opened at the first arm

  def _open(self) -> Progress:
    if self._progress is None:  # at the first arm: the sweep's clock starts here
      self._progress = Progress(self.total, desc=self._desc, unit="arm",
                                mode=self._progress_mode)
    if self._progress.total != self.total:
      self._progress.set_total(self.total)
    return self._progress

  def _count(self, name: str, seconds: float | None) -> None:
    """Counts one finished arm (`seconds` None: loaded from the cache) in the progress."""
    progress = self._open()
    if seconds is not None:
      progress.set_postfix(last=f"{name} ({seconds:.1f} s)")
    progress.update(timed=seconds is not None)
    if self.total is not None and progress.n >= self.total:
      self.close()

  def close(self) -> None:
    """Ends the progress display (a last log line, the bar's last frame); idempotent."""
    if self._progress is not None:
      self._progress.close()
      self._progress = None

  def path(self, name: str, key: str) -> str:
    if not name or not key:
      raise ValueError(f"arm name and key must be non-empty, got {name!r}, {key!r}")
    safe = re.sub(r"[^A-Za-z0-9_.=-]+", "_", name)
    return os.path.join(self.directory, f"{safe}.{key}.json")

  def load(self, name: str, key: str) -> Any | None:
    """The stored result of arm `name` under `key`, else None.

    A file that cannot be read back (truncated or edited by hand: not JSON, or
    no "result") is set aside as `<file>.damaged`, with a `RuntimeWarning` naming
    it, and the arm counts as not run: `get_or_run` recomputes it.
    """
    path = self.path(name, key)
    if not os.path.exists(path):
      return None
    try:
      with open(path) as f:
        return json.load(f)["result"]
    except (ValueError, KeyError, TypeError) as e:  # JSONDecodeError is a ValueError
      why = f"no {e} entry" if isinstance(e, KeyError) else str(e)
      try:
        os.replace(path, path + ".damaged")  # kept for inspection, never read again
      except FileNotFoundError:  # another process of the run moved it first
        pass
      warnings.warn(f"arm result {path} is damaged ({type(e).__name__}: {why}); moved to "
                    f"{path}.damaged, the arm {name!r} runs again", RuntimeWarning, stacklevel=2)
      return None

  def store(self, name: str, key: str, result: Any) -> None:
    """Writes the result atomically (a reader never sees a partial file)."""
    os.makedirs(self.directory, exist_ok=True)
    path = self.path(name, key)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
      json.dump({"arm": name, "key": key, "result": result}, f, default=_default)
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)

  def get_or_run(self, name: str, key: str, fn: Callable[[], Any]) -> Any:
    """The cached result of arm `name`, else `fn()` (JSON-serialisable), stored first.

    The returned value is always the JSON round trip, so a fresh and a
    resumed run hand identical objects to the caller.
    """
    cached = self.load(name, key)
    if cached is not None:
      self._count(name, None)
      return cached
    self._open()
    start = time.perf_counter()
    result = fn()
    self.store(name, key, result)
    self.computed.append(name)
    self._count(name, time.perf_counter() - start)
    return self.load(name, key)
