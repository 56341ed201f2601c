"""Step-time models for LLM serving: the linear model, its fit, a roofline backend.

A serving step is one forward pass over a batch. Two interchangeable backends
price it (seconds):

  * `LinearStepModel` (the paper's Sec. 3): prefill `alpha_p + beta_p L`,
    decode `alpha_d + beta_d k`, and a mixed-batching (MB) step
    `alpha_MB + beta_MB^e(r) (#tokens)` with `beta_MB^e(r) = a + b r + c r^2`,
    r the decode-token share. `fit_linear_model` fits it from timed steps.
  * `RooflineModel`: `T = overhead + sum_ops max(FLOPs / peak, bytes / BW)` from
    hardware numbers and model shapes, with a mixed-batch attention
    interference term `kappa min(T_dec_attn, T_pre_attn)` (jaxlab
    interpretation of the spec's physics backend; kappa is fitted per GPU).

Shipped calibrations (Qwen3-8B, the authors' code JSON) are module constants:
`H200_QWEN3_8B_SHIPPED`, `RTX_PRO_6000_QWEN3_8B_SHIPPED`, and the variants whose
interference coefficient b is refitted so the crossover share is the paper's
(0.8 on H200, 0.2 on RTX PRO 6000): `H200_QWEN3_8B`, `RTX_PRO_6000_QWEN3_8B`.

Example:
  >>> from jaxlab.serving import cost
  >>> round(cost.crossover_share(cost.RTX_PRO_6000_QWEN3_8B_SHIPPED), 3)
  0.206
  >>> round(cost.crossover_share(cost.H200_QWEN3_8B), 3)
  0.8
"""

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

MS = 1e-3
US = 1e-6


@dataclasses.dataclass(frozen=True)
class LinearStepModel:
  """The linear step-time model (all times in seconds).

  Attributes:
    alpha_p, beta_p: prefill step `alpha_p + beta_p * prompt_tokens`.
    alpha_d, beta_d: decode step `alpha_d + beta_d * decoding_requests`.
    mb_a, mb_b, mb_c: MB effective marginal cost `a + b r + c r^2` (s/token).
    alpha_mb: MB step intercept; None means `alpha_p` (the paper's default).
    name: a label.
  """
  alpha_p: float
  beta_p: float
  alpha_d: float
  beta_d: float
  mb_a: float
  mb_b: float
  mb_c: float
  alpha_mb_override: float | int | None = None
  name: str = ""

  def __post_init__(self):
    for f in ("alpha_p", "beta_p", "alpha_d", "beta_d"):
      v = getattr(self, f)
      if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
        raise ValueError(f"LinearStepModel.{f} must be a finite number > 0, got {v!r}")
    for f in ("mb_a", "mb_b", "mb_c"):
      v = getattr(self, f)
      if not (isinstance(v, (int, float)) and math.isfinite(v)):
        raise ValueError(f"LinearStepModel.{f} must be finite, got {v!r}")

  @property
  def alpha_mb(self) -> float:
    return self.alpha_p if self.alpha_mb_override is None else self.alpha_mb_override

  def beta_mb(self, r: float | int) -> float:
    """MB effective marginal cost per token at decode share r in [0, 1]."""
    return self.mb_a + self.mb_b * r + self.mb_c * r * r

  def prefill_time(self, tokens: float | int) -> float:
    return self.alpha_p + self.beta_p * tokens

  def decode_time(self, k: float | int) -> float:
    return self.alpha_d + self.beta_d * k

  def mixed_time(self, decode_tokens: float | int, prefill_tokens: float | int, share: float | int | None = None) -> float:
    """An MB step; `share` defaults to this step's own decode share."""
    tot = decode_tokens + prefill_tokens
    if tot <= 0:
      return 0.0
    r = decode_tokens / tot if share is None else share
    return self.alpha_mb + self.beta_mb(r) * tot

  def replace(self, **kw) -> "LinearStepModel":
    return dataclasses.replace(self, **kw)


def _ms_us(name, alpha_p_ms, beta_p_us, alpha_d_ms, beta_d_us, a_us, b_us, c_us):
  return LinearStepModel(alpha_p_ms * MS, beta_p_us * US, alpha_d_ms * MS, beta_d_us * US,
                         a_us * US, b_us * US, c_us * US, name=name)


#: The authors' shipped Qwen3-8B calibrations (code JSON), unchanged.
H200_QWEN3_8B_SHIPPED = _ms_us("H200/Qwen3-8B (shipped)", 1.279, 24.85, 8.921, 45.86, 24.94, 51.93, 14.78)
RTX_PRO_6000_QWEN3_8B_SHIPPED = _ms_us("RTX PRO 6000/Qwen3-8B (shipped)", 4.691, 50.08, 10.376, 103.88,
                                       62.93, 196.89, 9.90)


def crossover_share(model: LinearStepModel) -> float:
  """r-dagger: the decode share where `beta_MB^e(r) = beta_d` (root in [0, 1]).

  MB's marginal token cost exceeds pure decode's only for r > r-dagger.
  Without a sign change on [0, 1] it returns 0.0 when MB's marginal cost is
  above beta_d everywhere and 1.0 when it is below everywhere.

  Example:
    >>> round(crossover_share(RTX_PRO_6000_QWEN3_8B_SHIPPED), 3)  # the paper: about 0.2
    0.206
  """
  a, b, c = model.mb_a - model.beta_d, model.mb_b, model.mb_c
  f = lambda r: a + b * r + c * r * r
  if f(0.0) > 0 and f(1.0) > 0:
    return 0.0
  if f(0.0) < 0 and f(1.0) < 0:
    return 1.0
  lo, hi = 0.0, 1.0
  rising = f(1.0) > f(0.0)
  for _ in range(200):
    mid = 0.5 * (lo + hi)
    if (f(mid) < 0) == rising:
      lo = mid
    else:
      hi = mid
  return 0.5 * (lo + hi)


def refit_interference(model: LinearStepModel, target_share: float | int) -> LinearStepModel:
  """Returns `model` with b re-solved (a, c kept) so that `crossover_share == target_share`.

  This is the spec's suggested refit: the shipped H200 coefficients give
  r-dagger = 0.365 while the paper states 0.8.

  Example:
    >>> round(crossover_share(H200_QWEN3_8B_SHIPPED), 3)
    0.365
    >>> round(crossover_share(refit_interference(H200_QWEN3_8B_SHIPPED, 0.8)), 3)
    0.8
  """
  if not 0.0 < target_share <= 1.0:
    raise ValueError(f"target_share must lie in (0, 1], got {target_share!r}")
  b = (model.beta_d - model.mb_a - model.mb_c * target_share ** 2) / target_share
  name = f"{model.name.replace(' (shipped)', '')} (r*={target_share:g})"
  return model.replace(mb_b=b, name=name)


#: Shipped calibrations with b refitted so r-dagger = 0.8 (H200) and 0.2 (RTX PRO 6000).
H200_QWEN3_8B = refit_interference(H200_QWEN3_8B_SHIPPED, 0.8)
RTX_PRO_6000_QWEN3_8B = refit_interference(RTX_PRO_6000_QWEN3_8B_SHIPPED, 0.2)


@dataclasses.dataclass(frozen=True)
class StepSample:
  """One timed step for calibration: `prefill_tokens` and `decode_tokens` in it, `seconds`."""
  prefill_tokens: int
  decode_tokens: int
  seconds: float


def _lstsq_line(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
  a = np.stack([np.ones_like(x), x], 1)
  (c0, c1), *_ = np.linalg.lstsq(a, y, rcond=None)
  ss = float(((y - y.mean()) ** 2).sum())
  r2 = 1.0 - float(((y - a @ np.array([c0, c1])) ** 2).sum()) / ss if ss > 0 else 1.0
  return float(c0), float(c1), r2


def fit_linear_model(samples: Sequence[StepSample], *, name: str = "fitted",
                     alpha_mb: float | int | None = None) -> tuple[LinearStepModel, dict[str, float]]:
  """Fits `LinearStepModel` from timed steps (the paper's calibration sweep).

  Pure-prefill samples (decode_tokens == 0) fit (alpha_p, beta_p); pure-decode
  samples fit (alpha_d, beta_d); mixed samples fit `beta_MB^e(r) = a + b r + c r^2`
  by least squares on `(T - alpha_MB) / tokens` against each sample's share r,
  with `alpha_MB = alpha_p` unless given.

  Args:
    samples: at least 2 distinct pure-prefill, 2 pure-decode and 3 mixed samples.
    name: label of the fitted model.
    alpha_mb: MB intercept (seconds); None uses the fitted alpha_p.

  Returns:
    (model, {"r2_prefill", "r2_decode", "r2_mixed"}).

  Example:
    >>> model, r2 = fit_linear_model(calibration_samples(RooflineModel(RTX_PRO_6000_SPEC)))
    >>> sorted(r2), r2["r2_prefill"] > 0.99
    (['r2_decode', 'r2_mixed', 'r2_prefill'], True)
  """
  pre = [(s.prefill_tokens, s.seconds) for s in samples if s.decode_tokens == 0 and s.prefill_tokens > 0]
  dec = [(s.decode_tokens, s.seconds) for s in samples if s.prefill_tokens == 0 and s.decode_tokens > 0]
  mix = [s for s in samples if s.prefill_tokens > 0 and s.decode_tokens > 0]
  if len({p for p, _ in pre}) < 2 or len({d for d, _ in dec}) < 2 or len(mix) < 3:
    raise ValueError("samples must hold >= 2 distinct pure-prefill sizes, >= 2 distinct decode "
                     f"counts and >= 3 mixed steps; got {len(pre)}, {len(dec)}, {len(mix)}")
  ap, bp, r2p = _lstsq_line(*map(np.asarray, zip(*pre, strict=True)))
  ad, bd, r2d = _lstsq_line(*map(np.asarray, zip(*dec, strict=True)))
  # Intercepts can come out slightly negative on noisy data; keep them positive.
  ap, ad = max(ap, 1e-9), max(ad, 1e-9)
  amb = ap if alpha_mb is None else alpha_mb
  tot = np.array([s.prefill_tokens + s.decode_tokens for s in mix], np.float64)
  r = np.array([s.decode_tokens for s in mix], np.float64) / tot
  t = np.array([s.seconds for s in mix], np.float64)
  y = (t - amb) / tot
  a = np.stack([np.ones_like(r), r, r * r], 1)
  coef, *_ = np.linalg.lstsq(a, y, rcond=None)
  pred = amb + (a @ coef) * tot
  ss = float(((t - t.mean()) ** 2).sum())
  r2m = 1.0 - float(((t - pred) ** 2).sum()) / ss if ss > 0 else 1.0
  model = LinearStepModel(ap, max(bp, 1e-12), ad, max(bd, 1e-12), float(coef[0]), float(coef[1]),
                          float(coef[2]), alpha_mb_override=alpha_mb, name=name)
  return model, {"r2_prefill": r2p, "r2_decode": r2d, "r2_mixed": r2m}


# ----------------------------------------------------------------------------
# Roofline backend
# ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ModelShape:
  """A dense decoder's shapes for the roofline (bf16 weights and KV by default)."""
  num_layers: int = 36
  d_model: int = 4096
  num_heads: int = 32
  num_kv_heads: int = 8
  head_dim: int = 128
  d_ff: int = 12288
  vocab_size: int = 151_936
  bytes_per_param: int = 2
  bytes_per_kv: int = 2

  @property
  def params(self) -> float:
    attn = self.d_model * self.head_dim * (2 * self.num_heads + 2 * self.num_kv_heads)
    mlp = 3 * self.d_model * self.d_ff
    return float(self.num_layers * (attn + mlp) + 2 * self.vocab_size * self.d_model)

  @property
  def matmul_params(self) -> float:
    """Parameters touched per token by matmuls (embedding lookup excluded)."""
    return self.params - self.vocab_size * self.d_model

  @property
  def kv_bytes_per_token(self) -> float:
    return float(2 * self.num_layers * self.num_kv_heads * self.head_dim * self.bytes_per_kv)


QWEN3_8B_SHAPE = ModelShape()


@dataclasses.dataclass(frozen=True)
class HardwareSpec:
  """Accelerator numbers for the roofline.

  Attributes:
    name: label.
    bandwidth: HBM bandwidth, bytes/s.
    flops: dense bf16 peak, FLOP/s.
    memory: device memory, bytes.
    bw_eff, flops_eff: achievable fractions of the peaks (jaxlab interpretation).
    step_overhead: fixed per-step time (launch, sampling, scheduling), seconds
      (jaxlab interpretation).
  """
  name: str
  bandwidth: float
  flops: float
  memory: float
  bw_eff: float | int = 0.8
  flops_eff: float | int = 0.6
  step_overhead: float | int = 1.0e-3


H200_SPEC = HardwareSpec("H200", bandwidth=4.8e12, flops=989e12, memory=141e9)
#: ~500 TFLOPS dense bf16 is the spec's inference from NVIDIA's FP4 sparse figure.
RTX_PRO_6000_SPEC = HardwareSpec("RTX PRO 6000", bandwidth=1.792e12, flops=500e12, memory=96e9)


def kv_capacity_tokens(hw: HardwareSpec, shape: ModelShape = QWEN3_8B_SHAPE, *,
                       memory_utilization: float | int = 0.9, reserve_bytes: float | int = 0.0) -> int:
  """KV-cache capacity in tokens: `(util * memory - weights - reserve) / kv_bytes_per_token`.

  jaxlab interpretation of how vLLM sizes its cache (gpu_memory_utilization=0.9).

  Example:
    >>> kv_capacity_tokens(RTX_PRO_6000_SPEC)  # Qwen3-8B in bf16 at 90% of 96 GB
    474847
  """
  free = memory_utilization * hw.memory - shape.params * shape.bytes_per_param - reserve_bytes
  if free <= 0:
    raise ValueError(f"the weights do not fit on {hw.name}: no KV capacity left")
  return int(free // shape.kv_bytes_per_token)


@dataclasses.dataclass(frozen=True)
class RooflineModel:
  """Physics step-time backend: `overhead + sum_ops max(FLOPs/peak, bytes/BW)`.

  Ops per step: the weight matmuls (all weights read once per step, 2 FLOPs per
  parameter per token), prefill attention (causal, FLOPs grow with L^2, KV
  prefix read), decode attention (reads each decoding request's KV). In a mixed
  step the two attention parts cost `T_dec + T_pre + kappa min(T_dec, T_pre)`
  (the spec's interference term; jaxlab interpretation).

  Attributes:
    hw: the accelerator.
    shape: the model.
    kappa: interference coefficient >= 0.
  """
  hw: HardwareSpec
  shape: ModelShape = QWEN3_8B_SHAPE
  kappa: float | int = 0.0

  def _t(self, flops: float | int, nbytes: float | int) -> float:
    return max(flops / (self.hw.flops * self.hw.flops_eff), nbytes / (self.hw.bandwidth * self.hw.bw_eff))

  def step_time(self, prefill_lens: Sequence[float | int] | np.ndarray,
                prefill_ctx: Sequence[float | int] | np.ndarray,
                decode_ctx: Sequence[float | int] | np.ndarray) -> float:
    """Seconds for a step with prefill chunks (lengths, prior context) and decodes (contexts)."""
    s = self.shape
    pl_ = np.asarray(prefill_lens, np.float64)
    pc = np.asarray(prefill_ctx, np.float64)
    dc = np.asarray(decode_ctx, np.float64)
    tokens = float(pl_.sum() + dc.size)
    if tokens == 0:
      return 0.0
    w_bytes = s.params * s.bytes_per_param
    t_lin = self._t(2.0 * s.matmul_params * tokens, w_bytes + tokens * s.d_model * 4 * s.num_layers)
    qk = 4.0 * s.num_layers * s.num_heads * s.head_dim  # QK^T and PV FLOPs per (query, key) pair
    t_pre = 0.0
    if pl_.size:
      pairs = float((pl_ * (pc + 0.5 * (pl_ + 1))).sum())
      t_pre = self._t(qk * pairs, s.kv_bytes_per_token * float((pc + pl_).sum()))
    t_dec = 0.0
    if dc.size:
      t_dec = self._t(qk * float(dc.sum()), s.kv_bytes_per_token * float(dc.sum()))
    return self.hw.step_overhead + t_lin + t_pre + t_dec + self.kappa * min(t_pre, t_dec)


def calibration_samples(backend: RooflineModel, *, context: float | int = 512.0,
                        prefill_sizes: Sequence[int] = (256, 512, 1024, 2048, 4096),
                        decode_counts: Sequence[int] = (16, 32, 64, 128, 256, 512, 1024),
                        mixed_shares: Sequence[float] = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95),
                        mixed_decodes: Sequence[int] = (64, 128, 256, 512)) -> list[StepSample]:
  """The paper's calibration sweep run against a roofline backend.

  Prefill steps are single prompts of each size; decode steps hold k requests
  at `context` tokens each; mixed steps hold k decodes plus one prefill chunk
  sized so the decode share is r.

  Example:
    >>> samples = calibration_samples(RooflineModel(H200_SPEC))
    >>> len(samples), samples[0].prefill_tokens, samples[0].decode_tokens
    (56, 256, 0)
  """
  out = []
  for n in prefill_sizes:
    out.append(StepSample(int(n), 0, backend.step_time([n], [0.0], [])))
  for k in decode_counts:
    out.append(StepSample(0, int(k), backend.step_time([], [], np.full(k, context))))
  for r in mixed_shares:
    for k in mixed_decodes:
      n = max(1, int(round(k * (1.0 - r) / r)))
      out.append(StepSample(n, int(k), backend.step_time([n], [0.0], np.full(k, context))))
  return out


def calibrate_roofline(backend: RooflineModel, *, context: float | int = 512.0,
                       name: str | None = None) -> LinearStepModel:
  """Fits the linear model to a roofline backend's calibration sweep.

  Example:
    >>> model = calibrate_roofline(RooflineModel(RTX_PRO_6000_SPEC))
    >>> model.name, round(crossover_share(model), 3)
    ('RTX PRO 6000 roofline (kappa=0)', 0.531)
  """
  model, _ = fit_linear_model(calibration_samples(backend, context=context),
                              name=name or f"{backend.hw.name} roofline (kappa={backend.kappa:.3g})")
  return model


def fit_kappa(backend: RooflineModel, target_share: float | int, *, context: float | int = 512.0,
              kappa_min: float | int = -1.0, kappa_max: float | int = 64.0,
              tol: float | int = 0.01) -> float:
  """Bisects kappa so the calibrated model's crossover share equals `target_share`.

  More interference raises beta_MB^e(r) and lowers the crossover share. A
  negative kappa (down to -1, where mixed attention costs max(T_dec, T_pre))
  models overlap: mixing then helps.

  Raises:
    ValueError: if no kappa in [kappa_min, kappa_max] reaches the target.

  Example:
    >>> kappa = fit_kappa(RooflineModel(H200_SPEC), 0.524)
    >>> round(kappa, 1), round(crossover_share(calibrate_roofline(RooflineModel(H200_SPEC, kappa=kappa))), 3)
    (5.3, 0.524)
  """
  if not 0.0 < target_share < 1.0:
    raise ValueError(f"target_share must lie in (0, 1), got {target_share!r}")

  def share(k):
    return crossover_share(calibrate_roofline(dataclasses.replace(backend, kappa=k), context=context))

  if not -1.0 <= kappa_min < kappa_max:
    raise ValueError(f"need -1 <= kappa_min < kappa_max, got {kappa_min}, {kappa_max}")
  lo, hi = kappa_min, kappa_max
  s_lo, s_hi = share(lo), share(hi)
  if not (s_hi <= target_share <= s_lo):
    raise ValueError(f"crossover share {target_share} is outside the reachable range "
                     f"[{s_hi:.3f}, {s_lo:.3f}] for kappa in [{kappa_min}, {kappa_max}] on {backend.hw.name}")
  for _ in range(60):
    mid = 0.5 * (lo + hi)
    if share(mid) > target_share:
      lo = mid
    else:
      hi = mid
  kappa = 0.5 * (lo + hi)
  got = share(kappa)
  if abs(got - target_share) > tol:
    # The share can jump (the crossing disappears) instead of moving through the target.
    raise ValueError(f"crossover share {target_share} is not reachable on {backend.hw.name}: the share "
                     f"jumps from {share(lo):.3f} to {share(hi):.3f} at kappa={kappa:.4g}")
  return kappa
