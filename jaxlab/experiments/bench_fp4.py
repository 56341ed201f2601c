"""Benchmark `fp4`: XLA quantize/dequantize throughput vs a vectorized NumPy version.

For every format, in one process with interleaved repeats (medians):
  * quantize: `jaxlab.formats.quantize` (jitted XLA) vs `numpy_quantize` (the
    same recipe in vectorized NumPy + ml_dtypes casts; its bytes are checked
    equal to the XLA bytes), as input GB/s = float32 input bytes / time;
  * dequantize: `jaxlab.formats.dequantize` vs `numpy_dequantize`, as GB/s of
    the float32 output;
  * copy: an XLA elementwise pass over a same-size float32 array (read + write,
    `x + 1`), the bandwidth reference. `*_frac_of_copy` = copy time / op time in
    the rounds with the NumPy baselines; `*_frac_of_copy_xla_only` the same in
    rounds of copy, quantize and dequantize alone (no NumPy memory churn in
    between: the copy, all output, gains the most there): the median over
    `xla_batches` batches of `xla_repeats` rounds, each batch's fraction listed in
    `*_frac_of_copy_xla_only_batches` (the copy's time drifts with the machine's
    memory traffic, so single batches of the same code spread by +-10%).
  * quantize of the same tensor with one element set to +Inf (the general path:
    finite block maxima, non-finite elements saturated or zeroed), as
    `quantize_nonfinite_over_finite` = its time / the finite tensor's time.
Ratios: `xla_over_numpy` = NumPy time / XLA time (a speed-up).
"""

import functools
import statistics
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import ml_dtypes
import numpy as np

from jaxlab import formats
from jaxlab.benchmarking import time_interleaved

F32 = np.float32
# Format names are `jaxlab.formats` presets; `numpy_quantize` knows these.
NUMPY_FORMATS = ("fp8_e4m3", "int4_g16", "mxfp4_floor", "mxfp4_rceil", "nvfp4", "mixfp4")
_S_ENC_MAX = F32(2.0 ** 126)  # `formats.tensor_encode_scale`'s cap


# ----------------------------------------------------------------------------- NumPy baseline


def _e4m3(v):
  b = np.clip(v, 0, 448).astype(F32).astype(ml_dtypes.float8_e4m3fn)
  return b.view(np.uint8), b.astype(F32)


def _e2m1(y):
  return np.clip(y, -6, 6).astype(F32).astype(ml_dtypes.float4_e2m1fn).view(np.uint8) & 0xF


def _pack(c):
  c = c.reshape(c.shape[0], -1, 2)
  return (c[..., 0] | (c[..., 1] << 4)).astype(np.uint8)


def _unpack(p):
  return np.stack([p & 0xF, p >> 4], axis=-1).reshape(p.shape[0], -1)


def _div0(a, b):
  with np.errstate(divide="ignore", invalid="ignore"):
    return np.where(b > 0, a / np.where(b > 0, b, F32(1)), F32(0)).astype(F32)


def _mul_inv(a, b):
  with np.errstate(divide="ignore"):
    inv = np.where(b > 0, F32(1) / np.where(b > 0, b, F32(1)), F32(0)).astype(F32)
  return (a * inv).astype(F32)


def numpy_quantize(x: np.ndarray, name: str) -> dict[str, np.ndarray]:
  """Preset `name` (one of `NUMPY_FORMATS`) on a finite [rows, cols] float32 array, in NumPy."""
  r, k = x.shape
  if name in ("nvfp4", "mixfp4"):
    xb = x.reshape(r, k // 16, 16)
    amax = np.max(np.abs(x))
    s_enc = F32(1) if amax == 0 else F32(min(F32(2688.0) / amax, _S_ENC_MAX))
    s_dec = F32(1) / s_enc
    amax_b = np.max(np.abs(xb), axis=-1)
    sb, sv = _e4m3((amax_b * (F32(1) / F32(6))) * s_enc)
    xs = xb * s_enc
    codes = _e2m1(_div0(xs, sv[..., None]))
    if name == "mixfp4":
      sbi, svi = _e4m3((amax_b * (F32(1) / F32(7))) * s_enc)
      y = _div0(xs, svi[..., None])
      k_int = np.clip(np.rint(y), -7, 7)
      ci = (np.signbit(y).astype(np.uint8) << 3) | np.abs(k_int).astype(np.uint8)
      xf = ((codes.view(ml_dtypes.float4_e2m1fn).astype(F32) * sv[..., None]) * s_dec)
      xi = (np.copysign(np.abs(k_int), y).astype(F32) * svi[..., None]) * s_dec
      use_i = (np.sum((xb - xi) ** 2, -1) < np.sum((xb - xf) ** 2, -1)) & (sbi > 0)
      codes = np.where(use_i[..., None], ci, codes)
      sb = np.where(use_i, sbi | 0x80, sb).astype(np.uint8)
    return {"codes": _pack(codes.reshape(r, k)), "scales": sb, "tensor_scale": s_dec}
  if name.startswith("mxfp4"):
    xb = x.reshape(r, k // 32, 32)
    amax_b = np.max(np.abs(xb), axis=-1)
    _, ex = np.frexp(amax_b)
    f = ex - 1
    if name == "mxfp4_floor":
      e = f - 2
    else:
      e = np.where(amax_b <= F32(1.5) * np.ldexp(F32(1), f), f - 2, f - 1)
    e = np.where(amax_b > 0, e, -127).clip(-127, 127)
    codes = _e2m1(np.ldexp(xb, -e[..., None]).astype(F32))
    return {"codes": _pack(codes.reshape(r, k)), "scales": (e + 127).astype(np.uint8)}
  if name == "int4_g16":  # E4M3 block scales under an FP32 tensor scale (NVFP4-style)
    xb = x.reshape(r, k // 16, 16)
    amax = np.max(np.abs(x))
    s_enc = F32(1) if amax == 0 else F32(min(F32(448.0 * 7.0) / amax, _S_ENC_MAX))
    sb, sv = _e4m3((np.max(np.abs(xb), axis=-1) * (F32(1) / F32(7))) * s_enc)
    q = np.clip(np.rint(_div0(xb * s_enc, sv[..., None])), -7, 7).astype(np.int8)
    return {"codes": _pack((q.reshape(r, k) & 0xF).astype(np.uint8)), "scales": sb,
            "tensor_scale": F32(1) / s_enc}
  if name == "fp8_e4m3":
    s = F32(np.max(np.abs(x)) * (F32(1) / F32(448)))
    b = np.clip(_mul_inv(x, np.asarray(s)), -448, 448).astype(ml_dtypes.float8_e4m3fn)
    return {"codes": b.view(np.uint8), "scales": s}
  raise ValueError(f"Unknown format {name!r}")


_MIX_LUT = formats.MIX_LUT


def numpy_dequantize(q: dict[str, np.ndarray], name: str, shape: tuple[int, int]) -> np.ndarray:
  """`numpy_quantize`'s output back to float32 [rows, cols], in NumPy."""
  r, k = shape
  if name in ("nvfp4", "mixfp4"):
    nib = _unpack(q["codes"]).astype(np.int32)
    flag = np.repeat(q["scales"] >> 7, 16, axis=-1).astype(np.int32)
    vals = _MIX_LUT[(flag << 4) | nib].reshape(r, k // 16, 16)
    sv = (q["scales"] & 0x7F).view(ml_dtypes.float8_e4m3fn).astype(F32)
    return ((vals * sv[..., None]) * q["tensor_scale"]).reshape(r, k)
  if name.startswith("mxfp4"):
    vals = _MIX_LUT[_unpack(q["codes"]).astype(np.int32)].reshape(r, k // 32, 32)
    sv = np.ldexp(F32(1), q["scales"].astype(np.int32) - 127).astype(F32)
    return (vals * sv[..., None]).reshape(r, k)
  if name == "int4_g16":
    nib = _unpack(q["codes"]).astype(np.int8)
    vals = np.where(nib >= 8, nib - 16, nib).astype(F32).reshape(r, k // 16, 16)
    sv = q["scales"].view(ml_dtypes.float8_e4m3fn).astype(F32)
    return ((vals * sv[..., None]) * q["tensor_scale"]).reshape(r, k)
  return q["codes"].view(ml_dtypes.float8_e4m3fn).astype(F32) * q["scales"]


# ----------------------------------------------------------------------------- benchmark


def run_benchmark(config: ml_collections.ConfigDict) -> dict:
  """The timings and ratios of this benchmark (see the module docstring), as a dict."""
  rows, cols = config.rows, config.cols
  x = jax.random.normal(jax.random.key(config.seed), (rows, cols), jnp.float32)
  xn = np.asarray(x)
  x_inf = x.at[0, 0].set(jnp.inf)
  nbytes = xn.nbytes
  copy = jax.jit(lambda v: v + 1.0)
  out: dict[str, Any] = {"shape": [rows, cols], "bytes": nbytes, "formats": {}, "ratios": {}}
  for name in config.formats:
    if name not in NUMPY_FORMATS:
      raise ValueError(f"config.formats: {name!r} has no NumPy baseline; choose from "
                       f"{NUMPY_FORMATS}")
    qfn = jax.jit(functools.partial(formats.quantize, fmt=name))
    q = qfn(x)
    dfn = jax.jit(formats.dequantize)
    qn = numpy_quantize(xn, name)
    same = (np.array_equal(np.asarray(q.codes), qn["codes"])
            and np.array_equal(np.asarray(q.scales), qn["scales"]))
    # MixFP4 can pick the other candidate on a block whose two errors tie to within
    # float32 rounding: jaxlab sums them on x * S_enc (NumPy here on x), and XLA:CPU
    # contracts the subtractions and the sums of squares into FMAs.
    scale_bytes_differing = int(np.sum(np.asarray(q.scales) != qn["scales"]))
    deq_same = np.array_equal(np.asarray(dfn(q)), numpy_dequantize(qn, name, (rows, cols)))
    xla = {"copy": lambda: copy(x), "xla_quantize": lambda qfn=qfn: qfn(x),
           "xla_dequantize": lambda dfn=dfn, q=q: dfn(q)}
    t = time_interleaved({
        **xla,
        "xla_quantize_nonfinite": lambda qfn=qfn: qfn(x_inf),
        "numpy_quantize": lambda name=name: numpy_quantize(xn, name),
        "numpy_dequantize": lambda qn=qn, name=name: numpy_dequantize(qn, name, (rows, cols)),
    }, repeats=config.repeats)
    # The same XLA ops in rounds of their own: between the NumPy calls (which allocate
    # and free hundreds of MB) the copy, all output, slows down the most (with glibc's
    # default malloc and with `jaxlab.train.reuse_freed_memory` alike); without them it
    # runs at full speed.
    t_xla = [time_interleaved(xla, repeats=config.xla_repeats) for _ in range(config.xla_batches)]
    med = {k: v["median_s"] for k, v in t.items()}
    frac_x = {op: [tb["copy"]["median_s"] / tb[f"xla_{op}"]["median_s"] for tb in t_xla]
              for op in ("quantize", "dequantize")}
    r = {
        "timings": t, "xla_only_timings": t_xla, "same_bytes_as_numpy": bool(same),
        "scale_bytes_differing_from_numpy": scale_bytes_differing,
        "same_dequant_as_numpy": bool(deq_same),
        "quantize_gbps_xla": nbytes / med["xla_quantize"] / 1e9,
        "quantize_gbps_numpy": nbytes / med["numpy_quantize"] / 1e9,
        "dequantize_gbps_xla": nbytes / med["xla_dequantize"] / 1e9,
        "dequantize_gbps_numpy": nbytes / med["numpy_dequantize"] / 1e9,
        "copy_gbps": nbytes / med["copy"] / 1e9,
        "copy_gbps_xla_only": nbytes / statistics.median(tb["copy"]["median_s"] for tb in t_xla)
                              / 1e9,
        "quantize_xla_over_numpy": med["numpy_quantize"] / med["xla_quantize"],
        "quantize_nonfinite_over_finite": med["xla_quantize_nonfinite"] / med["xla_quantize"],
        "dequantize_xla_over_numpy": med["numpy_dequantize"] / med["xla_dequantize"],
        "quantize_frac_of_copy": med["copy"] / med["xla_quantize"],
        "dequantize_frac_of_copy": med["copy"] / med["xla_dequantize"],
        "quantize_frac_of_copy_xla_only": statistics.median(frac_x["quantize"]),
        "dequantize_frac_of_copy_xla_only": statistics.median(frac_x["dequantize"]),
        "quantize_frac_of_copy_xla_only_batches": frac_x["quantize"],
        "dequantize_frac_of_copy_xla_only_batches": frac_x["dequantize"],
    }
    out["formats"][name] = r
    for key in ("quantize_xla_over_numpy", "dequantize_xla_over_numpy",
                "quantize_nonfinite_over_finite", "quantize_frac_of_copy",
                "dequantize_frac_of_copy", "quantize_frac_of_copy_xla_only",
                "dequantize_frac_of_copy_xla_only"):
      out["ratios"][f"{name}_{key}"] = r[key]
  if "nvfp4" in out["formats"]:
    nv = out["formats"]["nvfp4"]
    out["targets"] = {"nvfp4_quantize_xla_over_numpy_ge_3": nv["quantize_xla_over_numpy"] >= 3}
  # Issue 18's goals: quantize >= 40% and dequantize >= 70% of copy bandwidth, judged
  # in both kinds of rounds.
  for name in ("nvfp4", "mixfp4"):
    if name in out["formats"]:
      r = out["formats"][name]
      for suffix in ("", "_xla_only"):
        out.setdefault("targets", {}).update({
            f"{name}_quantize_frac_of_copy{suffix}_ge_0.4":
                r[f"quantize_frac_of_copy{suffix}"] >= 0.4,
            f"{name}_dequantize_frac_of_copy{suffix}_ge_0.7":
                r[f"dequantize_frac_of_copy{suffix}"] >= 0.7})
  return out
