"""Tuned kernel configurations: a JSON table (op, shape, dtype, device) -> `KernelConfig`.

tokamax style: an autotuner (e.g. `jaxlab.autotune`) writes a tuning table, and
a kernel called without an explicit `block=` looks its call up in the active
table and falls back to its own default when there is no entry. The active
table is, in order: the one installed by `use(table)` (a context manager), else
the JSON file named by the environment variable `JAXLAB_TUNING_FILE`, else none.
An explicit `block=` argument always wins.

File format (one JSON object)::

  {"version": 1, "entries": [
     {"op": "fp4_dequant_matmul", "shape": [256, 1024, 512], "dtype": "float32",
      "device": "NVIDIA H200", "config": {"block_m": 64, "block_n": 128, "block_k": 256,
                                          "grid_order": "mn", "num_warps": 4, "num_stages": 2}}]}

`device` is a `jax.Device.device_kind` (matched case- and punctuation-
insensitively, a table's "TPU v5 lite" matching the device "TPU v5 lite") or
"*" for every device; an exact device entry wins over "*".
"""

import contextlib
import contextvars
import dataclasses
import json
import os
import re
from collections.abc import Iterator, Sequence
from typing import Any

import jax
import numpy as np

ENV_VAR = "JAXLAB_TUNING_FILE"
GRID_ORDERS = ("mn", "nm")
_VERSION = 1


@dataclasses.dataclass(frozen=True)
class KernelConfig:
  """One tunable configuration of a tiled kernel.

  Attributes:
    block_m: rows of the output tile (the kernel clips it to the dimension).
    block_n: columns of the output tile.
    block_k: contraction chunk per grid step.
    grid_order: "mn" (n innermost) or "nm" (m innermost): which operand a core
      keeps while the other streams.
    num_warps: GPU warps per program (Triton / Mosaic GPU); ignored on TPU.
    num_stages: software-pipeline depth (buffers per input).
  """
  block_m: int = 16
  block_n: int = 128
  block_k: int = 512
  grid_order: str = "mn"
  num_warps: int = 4
  num_stages: int = 2

  def __post_init__(self):
    for f in ("block_m", "block_n", "block_k", "num_warps", "num_stages"):
      v = getattr(self, f)
      if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v <= 0:
        raise ValueError(f"KernelConfig.{f} must be a positive int, got {v!r}")
    if self.grid_order not in GRID_ORDERS:
      raise ValueError(f"KernelConfig.grid_order must be one of {GRID_ORDERS}, got "
                       f"{self.grid_order!r}")

  def to_dict(self) -> dict[str, Any]:
    return {k: (int(v) if isinstance(v, (int, np.integer)) else v)
            for k, v in dataclasses.asdict(self).items()}

  @classmethod
  def from_dict(cls, d: dict[str, Any]) -> "KernelConfig":
    unknown = set(d) - {f.name for f in dataclasses.fields(cls)}
    if unknown:
      raise ValueError(f"KernelConfig: unknown fields {sorted(unknown)}")
    return cls(**d)


def normalize_device(kind: str) -> str:
  """'NVIDIA H200' -> 'nvidia_h200' (case and punctuation do not matter in a table).

  Example:
    >>> normalize_device("NVIDIA H200"), normalize_device("TPU v5 lite")
    ('nvidia_h200', 'tpu_v5_lite')
  """
  return re.sub(r"[^a-z0-9]+", "_", str(kind).lower()).strip("_")


def _key(op: str, shape: Sequence[int], dtype: Any, device: str) -> tuple:
  return (str(op), tuple(int(s) for s in shape), np.dtype(dtype).name,
          "*" if device == "*" else normalize_device(device))


class TuningTable:
  """An in-memory tuning table; `save`/`load` give the JSON file of the module docstring.

  Example:
    >>> t = TuningTable()
    >>> t.add("fp4_dequant_matmul", (16, 64, 32), "float32", "cpu", KernelConfig(block_m=8))
    >>> t.lookup("fp4_dequant_matmul", (16, 64, 32), "float32", "cpu").block_m
    8
  """

  def __init__(self):
    self._entries: dict[tuple, KernelConfig] = {}

  def __len__(self) -> int:
    return len(self._entries)

  def add(self, op: str, shape: Sequence[int], dtype: Any, device: str,
          config: KernelConfig) -> None:
    if not isinstance(config, KernelConfig):
      raise ValueError(f"config must be a KernelConfig, got {type(config).__name__}")
    self._entries[_key(op, shape, dtype, device)] = config

  def lookup(self, op: str, shape: Sequence[int], dtype: Any,
             device: str) -> KernelConfig | None:
    """The config for this call on `device`, else the "*" entry, else None."""
    exact = self._entries.get(_key(op, shape, dtype, device))
    return exact if exact is not None else self._entries.get(_key(op, shape, dtype, "*"))

  def to_json(self) -> dict[str, Any]:
    return {"version": _VERSION, "entries": [
        {"op": op, "shape": list(shape), "dtype": dtype, "device": device,
         "config": cfg.to_dict()} for (op, shape, dtype, device), cfg in self._entries.items()]}

  @classmethod
  def from_json(cls, obj: Any) -> "TuningTable":
    if not isinstance(obj, dict) or obj.get("version") != _VERSION or not isinstance(
        obj.get("entries"), list):
      raise ValueError(f"a tuning table must be {{'version': {_VERSION}, 'entries': [...]}}")
    table = cls()
    for i, e in enumerate(obj["entries"]):
      try:
        table.add(e["op"], e["shape"], e["dtype"], e["device"],
                  KernelConfig.from_dict(e["config"]))
      except (KeyError, TypeError) as err:
        raise ValueError(f"tuning table entry {i} is malformed: {err!r}") from err
    return table

  def save(self, path: str) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
      json.dump(self.to_json(), f, indent=1)
    os.replace(tmp, path)  # atomic: a kernel never reads half a file

  @classmethod
  def load(cls, path: str) -> "TuningTable":
    with open(path) as f:
      return cls.from_json(json.load(f))


_ACTIVE: contextvars.ContextVar[TuningTable | None] = contextvars.ContextVar(
    "jaxlab_tuning_table", default=None)
_FILE_CACHE: dict[str, tuple[float, TuningTable]] = {}


@contextlib.contextmanager
def use(table: TuningTable | str) -> Iterator[TuningTable]:
  """Makes `table` (or the JSON file at that path) the active table inside the block.

  Example:
    >>> table = TuningTable()
    >>> table.add("fp4_dequant_matmul", (16, 64, 32), "float32", "cpu", KernelConfig(block_m=8))
    >>> with use(table):
    ...   lookup("fp4_dequant_matmul", (16, 64, 32), "float32", platform="cpu").block_m
    8
  """
  if isinstance(table, str):
    table = TuningTable.load(table)
  token = _ACTIVE.set(table)
  try:
    yield table
  finally:
    _ACTIVE.reset(token)


def active_table() -> TuningTable | None:
  """The table of `use`, else the file named by $JAXLAB_TUNING_FILE (re-read when it changes).

  Example:
    >>> table = TuningTable()
    >>> with use(table):
    ...   active_table() is table
    True
  """
  table = _ACTIVE.get()
  if table is not None:
    return table
  path = os.environ.get(ENV_VAR)
  if not path:
    return None
  if not os.path.exists(path):
    raise ValueError(f"${ENV_VAR} names {path!r}, which does not exist")
  mtime = os.path.getmtime(path)
  cached = _FILE_CACHE.get(path)
  if cached is None or cached[0] != mtime:
    cached = (mtime, TuningTable.load(path))
    _FILE_CACHE[path] = cached
  return cached[1]


def current_device_kind(platform: str | None = None) -> str:
  """The device kind a kernel is tuned for: the first device of `platform` (None = default).

  Example:
    >>> current_device_kind("cpu")
    'cpu'
  """
  try:
    return jax.devices(platform)[0].device_kind
  except RuntimeError:  # lowering for a platform this machine does not have
    return str(platform)


def lookup(op: str, shape: Sequence[int], dtype: Any,
           platform: str | None = None) -> KernelConfig | None:
  """The active table's config for this call on this machine's device, else None.

  Example:
    >>> table = TuningTable()
    >>> table.add("fp4_dequant_matmul", (16, 64, 32), "float32", "*", KernelConfig(block_n=64))
    >>> with use(table):  # "*" matches any device
    ...   lookup("fp4_dequant_matmul", (16, 64, 32), "float32").block_n, lookup("other", (1,), "float32")
    (64, None)
  """
  table = active_table()
  if table is None:
    return None
  return table.lookup(op, shape, dtype, current_device_kind(platform))
