"""The analytic tile-roofline cost model of KernelBand's JAX design (systems.md 3d).

`CostModelEvaluator` scores a `KernelConfig` for a `Task` on a `DeviceSpec`
without running it, so the >= 30-task x 5-seed benchmark and its exhaustive
oracle cost milliseconds. Per op (jaxlab interpretation of 3d's formulas):

* matmul-like (matmul, gmm, fp4_dequant_matmul): flops = 2MKN; bytes =
  s (M K ceil(N/tn) + K N ceil(M/tm) + M N), except that the operand kept by the
  grid order's inner loop is read once when tk = K (Pallas skips a DMA whose block
  index did not change); gmm pays one extra m-tile per group boundary; the FP4
  weight is 0.5 byte/element + scales and is dequantized once per m-tile.
* attention (flash): K and V are re-read once per q block.
* rmsnorm / softmax: one read and one write of the rows.
* footprint = num_stages (input tiles) s + 4 (f32 accumulator); above the
  device's on-chip capacity (VMEM / shared memory) the candidate is invalid.
* time = launch + steps t_step + body, body = max(C, M) + min(C, M) / num_stages
  (deeper pipelines overlap compute C with memory M), C = flops / (peak e_c),
  M = bytes / (BW e_m); e_c penalises tiles that are not multiples of the
  MXU / tensor-core shape, GPU warps far from the tile's need and register
  spills; e_c and e_m penalise grids with fewer programs than cores.
* measured time = time x exp(noise N(0, 1)), noise = 3 %: the bandit must cope.

h = [compute %, DRAM %, capacity %] of the device (the paper's NCU SM / DRAM / L2
throughput); phi = [log1p(ms), registers per thread (GPU) or accumulator KB (TPU),
footprint KB, log2 threads per program, occupancy %].
"""

import dataclasses

import numpy as np

from jaxlab.autotune import space
from pallas_kernels.tuning import KernelConfig


@dataclasses.dataclass(frozen=True)
class DeviceSpec:
  """What the cost model knows about a device (public datasheet numbers, dense bf16).

  Attributes:
    name: short name ("tpu_v5e", "h100", "h200").
    device_kind: its `jax.Device.device_kind`, the key of tuning tables.
    kind: "tpu" or "gpu".
    peak_flops: dense 16-bit FLOP/s.
    hbm_bandwidth: bytes/s.
    capacity: on-chip bytes a program's tiles may use (TPU scoped VMEM, GPU shared memory/SM).
    cores: programs that run concurrently (TensorCores, SMs).
    align: (m, n, k) tile multiples for full MXU / tensor-core efficiency.
    step_overhead: seconds per sequential grid step.
    launch: seconds per kernel launch.
  """
  name: str
  device_kind: str
  kind: str
  peak_flops: float
  hbm_bandwidth: float
  capacity: int
  cores: int
  align: tuple[int, int, int]
  step_overhead: float
  launch: float


DEVICES = {
    "tpu_v5e": DeviceSpec("tpu_v5e", "TPU v5 lite", "tpu", 197e12, 819e9, 16 * 2**20, 1,
                          (8, 128, 128), 0.35e-6, 2e-6),
    "h100": DeviceSpec("h100", "NVIDIA H100 80GB HBM3", "gpu", 989e12, 3.35e12, 227 * 2**10,
                       132, (64, 64, 32), 0.05e-6, 4e-6),
    "h200": DeviceSpec("h200", "NVIDIA H200", "gpu", 989e12, 4.8e12, 227 * 2**10, 132,
                       (64, 64, 32), 0.05e-6, 4e-6),
}
_REGS_PER_SM = 65536


def get_device(name: str) -> DeviceSpec:
  """The simulated device `name` (a key of `DEVICES`); ValueError for an unknown name.

  Example:
    >>> get_device("h100") is DEVICES["h100"]
    True
  """
  if name not in DEVICES:
    raise ValueError(f"Unknown device {name!r}; expected one of {sorted(DEVICES)}")
  return DEVICES[name]


def _cdiv(a, b):
  return -(-a // b)


def analyze(task: space.Task, dev: DeviceSpec, c: dict) -> dict[str, np.ndarray]:
  """Noise-free time, validity, h and phi of configs `c` (field -> scalar or array; vectorised).

  Returns:
    dict of arrays: time (s; inf where invalid), valid (bool), h [..., 3] (%), phi [..., 5].

  Example:
    >>> task = space.Task("matmul", (1024, 1024, 1024), "bfloat16", "h100")
    >>> config = space.default_config(task, "h100")
    >>> out = analyze(task, get_device("h100"), dataclasses.asdict(config))
    >>> bool(out["valid"]), out["h"].shape, out["phi"].shape  # h: SM / DRAM / L2 throughput %
    (True, (3,), (5,))
  """
  d = task.dims
  s = space.DTYPE_BYTES[task.dtype]
  tm, tn, tk = (np.asarray(c[f], np.int64) for f in ("block_m", "block_n", "block_k"))
  warps, stages = np.asarray(c["num_warps"], np.int64), np.asarray(c["num_stages"], np.int64)
  n_inner = np.asarray(c["grid_order"]) == "mn"  # n innermost: the m panel is kept
  gpu = dev.kind == "gpu"
  valid = (tm >= 1) & (tn >= 1) & (tk >= 1) & (stages >= 1) & (stages <= 4)
  if gpu:
    valid &= np.isin(warps, space.WARPS)
  op = task.op
  if op in ("matmul", "gmm", "fp4_dequant_matmul"):
    m, k, n = d["m"], d["k"], d["n"]
    valid &= (m % np.maximum(tm, 1) == 0) & (n % np.maximum(tn, 1) == 0) & (
        k % np.maximum(tk, 1) == 0) & (tm <= m) & (tn <= n) & (tk <= k)
    tm_, tn_, tk_ = np.maximum(tm, 1), np.maximum(tn, 1), np.maximum(tk, 1)
    if not gpu:  # Mosaic TPU: a tile's lane dim is a multiple of 128 or the full dim
      valid &= ((tn_ % 128 == 0) | (tn_ == n)) & ((tk_ % 128 == 0) | (tk_ == k))
    m_tiles = m // tm_ + (d["g"] - 1 if op == "gmm" else 0)  # boundary tiles of gmm
    n_tiles, k_tiles = n // tn_, k // tk_
    w_s = 0.5 + 1 / 16 if op == "fp4_dequant_matmul" else s  # packed FP4 + E4M3 scales
    lhs_reads = np.where(n_inner & (tk_ == k), 1, n_tiles)
    rhs_reads = np.where(~n_inner & (tk_ == k), 1, m_tiles)
    if op == "gmm":  # each m tile reads its group's weights; the kept panel is one group's
      rhs_bytes = w_s * k * n * np.where(~n_inner & (tk_ == k), d["g"], m_tiles)
    else:
      rhs_bytes = w_s * k * n * rhs_reads
    bytes_ = s * m_tiles * tm_ * k * lhs_reads + rhs_bytes + 4 * m * n
    flops = 2.0 * m_tiles * tm_ * k * n
    if op == "fp4_dequant_matmul":  # decode every weight once per m tile, ~8 VPU ops each
      flops = flops + 8.0 * k * n * m_tiles
    footprint = stages * (tm_ * tk_ * s + tk_ * tn_ * w_s) + 4 * tm_ * tn_
    programs, steps_per_prog = m_tiles * n_tiles, k_tiles
    acc = tm_ * tn_
    al = [(tm_, dev.align[0]), (tn_, dev.align[1]), (tk_, dev.align[2])]
  elif op == "attention":
    bh, sl, hd = d["bh"], d["s"], d["d"]
    valid &= (sl % np.maximum(tm, 1) == 0) & (sl % np.maximum(tn, 1) == 0) & (tm <= sl) & (
        tn <= sl)
    tm_, tn_ = np.maximum(tm, 1), np.maximum(tn, 1)
    if not gpu:
      valid &= (tn_ % 128 == 0) | (tn_ == sl)
    q_tiles, kv_tiles = sl // tm_, sl // tn_
    bytes_ = s * bh * sl * hd * (2 + 2 * q_tiles)
    flops = 4.0 * bh * sl * sl * hd + 8.0 * bh * sl * sl * (1 + dev.align[1] / tn_ / 8)
    footprint = stages * (tm_ + 2 * tn_) * hd * s + 4 * (tm_ * tn_ + tm_ * hd)
    programs, steps_per_prog = bh * q_tiles, kv_tiles
    acc = tm_ * (tn_ + hd)
    al = [(tm_, dev.align[0]), (tn_, dev.align[1])]
  else:  # rmsnorm, softmax
    m, hd = d["m"], d["d"]
    valid &= (m % np.maximum(tm, 1) == 0) & (tm <= m)
    tm_ = np.maximum(tm, 1)
    if not gpu:
      valid &= tm_ % 8 == 0
    bytes_ = s * 2.0 * m * hd + 4 * hd
    flops = (4.0 if op == "rmsnorm" else 6.0) * m * hd
    footprint = stages * 2 * tm_ * hd * s + 4 * tm_ * hd
    programs, steps_per_prog = m // tm_, 1
    acc = tm_ * hd
    al = [(tm_, 8)]
  valid &= footprint <= dev.capacity

  e_c = np.ones(np.broadcast(tm, tn, tk, warps, stages, n_inner).shape)
  for t, a in al:
    e_c = e_c * np.minimum(1.0, t / a)
  if op in ("rmsnorm", "softmax"):
    e_c = np.ones_like(e_c) * 0.25  # vector units, not the MXU: memory bound anyway
  e_m = np.ones_like(e_c)
  if gpu:
    # Threads a tile needs (jaxlab interpretation: 4 warps for a 64 x 64 accumulator).
    need = np.clip(4.0 * np.sqrt(acc / 4096.0), 1, 16)
    e_c = e_c * np.exp(-0.3 * np.abs(np.log2(warps / need)))
    regs = acc / (np.maximum(warps, 1) * 32) + 32
    spill = regs > 255
    e_c = np.where(spill, e_c * 0.4, e_c)
    per_sm = np.minimum(dev.capacity // np.maximum(footprint, 1),
                        _REGS_PER_SM // (np.minimum(regs, 255) * np.maximum(warps, 1) * 32))
    per_sm = np.clip(per_sm, 1, 32)
    occupancy = np.minimum(1.0, per_sm * warps / 64.0)
    e_m = e_m * (0.55 + 0.45 * occupancy)  # latency hiding needs warps in flight
    waves = _cdiv(programs, dev.cores * per_sm)
    short = np.minimum(1.0, programs / dev.cores)
    steps = waves * steps_per_prog
    phi_regs = regs
  else:
    occupancy = np.minimum(1.0, dev.capacity / np.maximum(footprint, 1) / 8.0)
    short = np.ones_like(e_c)
    steps = programs * steps_per_prog
    phi_regs = acc * 4 / 1024.0
  e_c, e_m = e_c * short, e_m * short
  with np.errstate(divide="ignore", invalid="ignore"):  # invalid configs: masked to inf below
    comp = flops / (dev.peak_flops * e_c)
    mem = bytes_ / (dev.hbm_bandwidth * e_m)
  body = np.maximum(comp, mem) + np.minimum(comp, mem) / np.maximum(stages, 1)
  time = dev.launch + steps * dev.step_overhead + body
  time = np.where(valid, time, np.inf)
  fin = np.where(valid, time, 1.0)
  h = np.stack(np.broadcast_arrays(
      100 * flops / (fin * dev.peak_flops), 100 * bytes_ / (fin * dev.hbm_bandwidth),
      100 * footprint / dev.capacity), -1)
  phi = np.stack(np.broadcast_arrays(
      np.log1p(fin * 1e3), phi_regs, footprint / 1024.0, np.log2(np.maximum(warps, 1) * 32.0),
      100 * occupancy), -1)
  return dict(time=time, valid=valid, h=np.minimum(h, 100.0), phi=phi)


@dataclasses.dataclass(frozen=True)
class Measurement:
  """What an evaluator says about one candidate.

  Attributes:
    ok: compiled / ran and matched the reference.
    time: measured seconds (inf when not ok).
    h: [3] resource utilisation % (compute, DRAM, capacity).
    phi: [5] clustering features.
    error: why it is not ok ("" when ok).
  """
  ok: bool
  time: float
  h: np.ndarray
  phi: np.ndarray
  error: str = ""


class CostModelEvaluator:
  """Scores candidates with `analyze`, times `exp(noise N(0,1))`.

  Example:
    >>> ev = CostModelEvaluator(noise=0.0)
    >>> task = space.Task("matmul", (512, 512, 512), "bfloat16", "h100")
    >>> ev.evaluate(task, KernelConfig(64, 64, 32), np.random.default_rng(0)).ok
    True
  """

  def __init__(self, noise: float = 0.03):
    if noise < 0:
      raise ValueError(f"noise must be >= 0, got {noise}")
    self.noise = float(noise)

  def device_kind(self, task: space.Task) -> str:
    return get_device(task.device).kind

  def evaluate(self, task: space.Task, config: KernelConfig,
               rng: np.random.Generator) -> Measurement:
    a = analyze(task, get_device(task.device), config.to_dict())
    if not bool(a["valid"]):
      return Measurement(False, float("inf"), np.zeros(3), np.zeros(5),
                         "invalid config (does not divide the shape, or overflows on-chip "
                         "memory, or an unsupported warp / stage count)")
    t = float(a["time"]) * float(np.exp(self.noise * rng.standard_normal()))
    return Measurement(True, t, np.asarray(a["h"], float), np.asarray(a["phi"], float))

  def true_time(self, task: space.Task, config: KernelConfig) -> float:
    """The noise-free time (inf if invalid): what metrics are computed on."""
    return float(analyze(task, get_device(task.device), config.to_dict())["time"])

  def oracle(self, task: space.Task) -> tuple[KernelConfig, float]:
    """The best config of the task's whole grid (`space.config_grid`) and its time."""
    dev = get_device(task.device)
    grid = space.config_grid(task, dev.kind)
    times = analyze(task, dev, grid)["time"]
    i = int(np.argmin(times))
    if not np.isfinite(times[i]):
      raise ValueError(f"{task.name}: the config space has no valid config")
    return space.grid_config(grid, i), float(times[i])
