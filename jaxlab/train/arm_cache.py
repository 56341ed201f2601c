"""One JSON result per finished arm of a sweep, so a killed sweep resumes where it stopped.

Sweeps (many cheap runs: the MoDEX cells, the QAT grid, ECO arms, AES tasks,
EB+ studies) resume at arm granularity: each finished arm's result is one
file `workdir/arms/<name>.<hash>.json`, written atomically (temp file +
`os.replace`), where `hash` fingerprints the part of the config that
determines that arm. A changed config therefore never reuses a stale result,
and a file is either absent or complete, whenever the process was killed.
"""

import hashlib
import json
import os
import re
from collections.abc import Callable
from typing import Any

import ml_collections
import numpy as np


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
  """Per-arm result cache in `workdir/arms/`.

  Example:
    >>> cache = ArmCache(workdir)                               # doctest: +SKIP
    >>> result = cache.get_or_run("standard/modex", config_hash(config.train),
    ...                           lambda: train_and_evaluate(...))  # doctest: +SKIP

  Attributes:
    computed: names of the arms this object ran (not loaded), in order.
  """

  def __init__(self, workdir: str):
    self.directory = os.path.join(workdir, "arms")
    self.computed: list[str] = []

  def path(self, name: str, key: str) -> str:
    if not name or not key:
      raise ValueError(f"arm name and key must be non-empty, got {name!r}, {key!r}")
    safe = re.sub(r"[^A-Za-z0-9_.=-]+", "_", name)
    return os.path.join(self.directory, f"{safe}.{key}.json")

  def load(self, name: str, key: str) -> Any | None:
    """The stored result of arm `name` under `key`, else None."""
    path = self.path(name, key)
    if not os.path.exists(path):
      return None
    with open(path) as f:
      return json.load(f)["result"]

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
      return cached
    result = fn()
    self.store(name, key, result)
    self.computed.append(name)
    return self.load(name, key)
