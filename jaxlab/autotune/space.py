"""Tuning tasks, their configuration spaces and the six KernelBand strategies as config edits.

A task is one (op, shape, dtype, device) call site; a candidate is a
`pallas_kernels.tuning.KernelConfig` for it. Each op tunes a subset of the
config fields (`TUNED_FIELDS`); the others stay at their pinned value, so a
row-wise op (rmsnorm, softmax) only tunes its row block, warps and stages.

Strategies (systems.md 3a/3d; each targets one resource, index into h)::

  tiling        -> 2 (on-chip capacity; the paper's L2): block_m or block_n x2 / /2
  vectorization -> 1 (DRAM): block_k x2 / /2
  fusion        -> 1 (DRAM): trade block_n against block_k (x2 one, /2 the other)
  pipeline      -> 0 (compute): num_stages +-1
  reordering    -> 0 (compute): flip grid_order or num_warps x2 / /2
  access_layout -> 1 (DRAM): trade block_m against block_n

jaxlab interpretation: the paper's strategies rewrite kernel source through an
LLM; here they are deterministic edits of a config (spec 3d).
"""

import dataclasses
import itertools

import numpy as np

from pallas_kernels.tuning import GRID_ORDERS, KernelConfig

STRATEGIES = ("tiling", "vectorization", "fusion", "pipeline", "reordering", "access_layout")
RESOURCES = ("compute", "dram", "capacity")
# Target resource of each strategy (index into RESOURCES), from the official code's mapping.
STRATEGY_TARGET = np.array([2, 1, 1, 0, 0, 1])

# op -> names of its shape dims.
OPS = {
    "matmul": ("m", "k", "n"),
    "gmm": ("m", "k", "n", "g"),
    "fp4_dequant_matmul": ("m", "k", "n"),
    "attention": ("bh", "s", "d"),
    "rmsnorm": ("m", "d"),
    "softmax": ("m", "d"),
}
_ALL = ("block_m", "block_n", "block_k", "grid_order", "num_warps", "num_stages")
TUNED_FIELDS = {
    "matmul": _ALL, "gmm": _ALL, "fp4_dequant_matmul": _ALL,
    "attention": ("block_m", "block_n", "num_warps", "num_stages"),
    "rmsnorm": ("block_m", "num_warps", "num_stages"),
    "softmax": ("block_m", "num_warps", "num_stages"),
}
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
WARPS = (1, 2, 4, 8, 16)
STAGES = (1, 2, 3, 4)


@dataclasses.dataclass(frozen=True)
class Task:
  """One kernel call site to tune.

  Attributes:
    op: a key of `OPS`.
    shape: the op's dims in `OPS[op]` order, e.g. (m, k, n) for matmul.
    dtype: operand dtype name ("bfloat16", "float16", "float32").
    device: a device spec name (`jaxlab.autotune.cost_model.DEVICES`) or "cpu".
  """
  op: str
  shape: tuple[int, ...]
  dtype: str = "bfloat16"
  device: str = "h100"

  def __post_init__(self):
    if self.op not in OPS:
      raise ValueError(f"Unknown op {self.op!r}; expected one of {sorted(OPS)}")
    if len(self.shape) != len(OPS[self.op]) or any(int(s) <= 0 for s in self.shape):
      raise ValueError(f"{self.op} needs a shape of positive {OPS[self.op]}, got {self.shape}")
    if self.dtype not in DTYPE_BYTES:
      raise ValueError(f"dtype must be one of {sorted(DTYPE_BYTES)}, got {self.dtype!r}")

  @property
  def dims(self) -> dict[str, int]:
    return dict(zip(OPS[self.op], (int(s) for s in self.shape), strict=True))

  @property
  def name(self) -> str:
    return f"{self.op}{'x'.join(map(str, self.shape))}/{self.dtype}/{self.device}"

  def pinned(self) -> dict:
    """Values of the fields this op does not tune (the full row / head dim)."""
    d = self.dims
    if self.op == "attention":
      return dict(block_k=d["d"], grid_order="mn")
    if self.op in ("rmsnorm", "softmax"):
      return dict(block_n=d["d"], block_k=d["d"], grid_order="mn")
    return {}


def default_config(task: Task, device_kind: str) -> KernelConfig:
  """The config an untuned kernel runs (jaxlab interpretation: our kernels' defaults on TPU,
  Triton-style 64 x 64 x 32 tiles on GPU; row ops 8 rows (TPU) or 16 rows (GPU)).

  Example:
    >>> default_config(Task("matmul", (1024, 1024, 1024), "bfloat16", "h100"), "h100")
    KernelConfig(block_m=64, block_n=64, block_k=32, grid_order='mn', num_warps=4, num_stages=2)
  """
  d = task.dims
  if task.op in ("rmsnorm", "softmax"):
    base = dict(block_m=8 if device_kind == "tpu" else 16)
  elif task.op == "attention":
    base = dict(block_m=128, block_n=128) if device_kind == "tpu" else dict(block_m=64,
                                                                             block_n=64)
  elif device_kind == "tpu":
    base = dict(block_m=16, block_n=128, block_k=512) if task.op != "gmm" else dict(
        block_m=128, block_n=128, block_k=128)
  else:
    base = dict(block_m=64, block_n=64, block_k=32)
  cfg = dict(KernelConfig().to_dict(), **base, **task.pinned())
  # Blocks clip to the dims, as the kernels do.
  for f, dim in (("block_m", "m"), ("block_n", "n"), ("block_k", "k")):
    if dim in d and f in base:
      cfg[f] = min(cfg[f], d[dim])
  if task.op == "attention":
    cfg.update(block_m=min(cfg["block_m"], d["s"]), block_n=min(cfg["block_n"], d["s"]))
  return KernelConfig(**cfg)


def _pow2_upto(lo: int, hi: int) -> list[int]:
  out, v = [], lo
  while v <= hi:
    out.append(v)
    v *= 2
  return out or [hi]


def config_grid(task: Task, device_kind: str) -> dict[str, np.ndarray]:
  """Every config of the task's search grid, as equal-length arrays per field (the oracle's
  space: powers of two up to each dim, both grid orders, `WARPS` x `STAGES`).

  Example:
    >>> grid = config_grid(Task("matmul", (1024, 1024, 1024), "bfloat16", "h100"), "h100")
    >>> sorted(grid), len(grid["block_m"])
    (['block_k', 'block_m', 'block_n', 'grid_order', 'num_stages', 'num_warps'], 3136)
  """
  d = task.dims
  rows = d.get("m", d.get("s"))
  cols = d.get("n", d.get("s", d.get("d")))
  choices = {
      "block_m": _pow2_upto(8, min(rows, 1024)),
      "block_n": _pow2_upto(16, min(cols, 1024)),
      "block_k": _pow2_upto(16, min(d.get("k", 16), 2048)),
      "grid_order": list(GRID_ORDERS),
      "num_warps": list(WARPS) if device_kind == "gpu" else [4],
      "num_stages": list(STAGES),
  }
  base = default_config(task, device_kind).to_dict()
  for f in _ALL:
    if f not in TUNED_FIELDS[task.op]:
      choices[f] = [base[f]]
  combos = list(itertools.product(*(choices[f] for f in _ALL)))
  return {f: np.array([c[i] for c in combos]) for i, f in enumerate(_ALL)}


def grid_config(grid: dict[str, np.ndarray], i: int) -> KernelConfig:
  """Row `i` of a config grid (field -> array of values) as a `KernelConfig`.

  Example:
    >>> grid = config_grid(Task("matmul", (1024, 1024, 1024), "bfloat16", "h100"), "h100")
    >>> grid_config(grid, 0)
    KernelConfig(block_m=8, block_n=16, block_k=16, grid_order='mn', num_warps=4, num_stages=1)
  """
  return KernelConfig(**{f: (str(v[i]) if f == "grid_order" else int(v[i]))
                         for f, v in grid.items()})


def apply_strategy(task: Task, config: KernelConfig, strategy: str,
                   rng: np.random.Generator) -> KernelConfig:
  """One edit of `config` by `strategy` (see the module docstring); may leave the valid space.

  The direction (x2 or /2, which field) is drawn from `rng`; if the edit would
  not change the config (a pinned field) the other direction is tried.

  Example:
    >>> task = Task("matmul", (1024, 1024, 1024), "bfloat16", "h100")
    >>> apply_strategy(task, default_config(task, "h100"), "pipeline", np.random.default_rng(0))
    KernelConfig(block_m=64, block_n=64, block_k=32, grid_order='mn', num_warps=4, num_stages=3)
  """
  if strategy not in STRATEGIES:
    raise ValueError(f"Unknown strategy {strategy!r}; expected one of {STRATEGIES}")
  c = config.to_dict()
  pinned = task.pinned()

  def edit(up: bool, which: int) -> dict:
    n = dict(c)
    f2 = 2 if up else 0.5
    if strategy == "tiling":
      f = ("block_m", "block_n")[which]
      n[f] = int(n[f] * f2)
    elif strategy == "vectorization":
      n["block_k"] = int(n["block_k"] * f2)
    elif strategy == "fusion":
      n["block_n"], n["block_k"] = int(n["block_n"] * f2), int(n["block_k"] / f2)
    elif strategy == "pipeline":
      n["num_stages"] += 1 if up else -1
    elif strategy == "reordering":
      if which == 0:
        n["grid_order"] = "nm" if n["grid_order"] == "mn" else "mn"
      else:
        n["num_warps"] = int(n["num_warps"] * f2)
    else:  # access_layout
      n["block_m"], n["block_n"] = int(n["block_m"] * f2), int(n["block_n"] / f2)
    n.update(pinned)
    return n

  up, which = bool(rng.integers(2)), int(rng.integers(2))
  for u, w in ((up, which), (not up, which), (up, 1 - which), (not up, 1 - which)):
    n = edit(u, w)
    if n != c:
      break
  # Zero or negative values are invalid for a KernelConfig itself: clamp to 1 so the candidate
  # exists and the evaluator (not the dataclass) reports it invalid.
  for f in ("block_m", "block_n", "block_k", "num_warps", "num_stages"):
    n[f] = max(1, int(n[f]))
  return KernelConfig(**n)
