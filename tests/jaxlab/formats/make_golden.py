"""Writes golden/fp4_golden.npz: NVFP4, MXFP4 and MixFP4 bytes from plain NumPy.

An implementation of the recipes in the spec (quantization.md §0, §1) that is
independent of jaxlab: NumPy float32 arithmetic, ml_dtypes casts for the
round-half-to-even E4M3/E2M1 conversions, np.frexp for exponents, float64 for
the MixFP4 block errors. "amax / c" is evaluated as amax * fl32(1/c), the form
jaxlab defines (and XLA emits). Regenerate with

  .venv/bin/python tests/jaxlab/formats/make_golden.py
"""

import os

import ml_dtypes
import numpy as np

F32 = np.float32
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden", "fp4_golden.npz")


def inputs() -> np.ndarray:
  """[24, 64] float32: Gaussian/heavy-tailed rows, E2M1 ties, a zero block, tiny values."""
  rng = np.random.default_rng(1234)
  x = np.empty((24, 64), F32)
  x[:8] = rng.standard_normal((8, 64))
  x[8:12] = rng.standard_t(3, (4, 64))
  x[12:16] = rng.uniform(-1, 1, (4, 64)) * np.exp2(rng.integers(-8, 8, (4, 1)))
  x[16:20] = rng.laplace(size=(4, 64)) * 1e-3
  # Exact E2M1 midpoints (ties) at scale 1: the row's amax is 6, block amax 6.
  ties = np.array([.25, .75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0], F32)
  x[20] = np.tile(np.concatenate([ties, -ties]), 4)
  x[21] = np.tile(np.concatenate([ties * 2, -ties * 0.5]), 4)
  x[22] = rng.standard_normal(64)
  x[22, 16:32] = 0.0  # an all-zero block
  x[23] = rng.standard_normal(64) * 1e-6
  x[23, :16] = -0.0
  return x


def e4m3(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  b = np.clip(v, 0, 448).astype(F32).astype(ml_dtypes.float8_e4m3fn)
  return b.view(np.uint8), b.astype(F32)


def e2m1_codes(y: np.ndarray) -> np.ndarray:
  return np.clip(y, -6, 6).astype(F32).astype(ml_dtypes.float4_e2m1fn).view(np.uint8) & 0xF


def e2m1_values(codes: np.ndarray) -> np.ndarray:
  return codes.astype(np.uint8).view(ml_dtypes.float4_e2m1fn).astype(F32)


def pack(codes: np.ndarray) -> np.ndarray:
  c = codes.reshape(codes.shape[0], -1, 2).astype(np.uint8)
  return (c[..., 0] | (c[..., 1] << 4)).astype(np.uint8)


def tensor_scale(x: np.ndarray, qmax: float) -> F32:
  amax = F32(np.max(np.abs(x)))
  if amax == 0:
    return F32(1.0)
  return F32(min(F32(448.0 * qmax) / amax, np.finfo(F32).max))


def nvfp4(x: np.ndarray):
  r, k = x.shape
  s_enc = tensor_scale(x, 6.0)
  xb = x.reshape(r, k // 16, 16)
  amax_b = np.max(np.abs(xb), axis=-1)
  sb, sv = e4m3((amax_b * (F32(1) / F32(6))) * s_enc)
  with np.errstate(divide="ignore", invalid="ignore"):
    y = np.where(sv[..., None] > 0, (xb * s_enc) / sv[..., None], np.zeros_like(xb)).astype(F32)
  codes = e2m1_codes(y)
  return codes, sb, sv, s_enc


def mixfp4(x: np.ndarray):
  r, k = x.shape
  codes_f, sb_f, sv_f, s_enc = nvfp4(x)
  s_dec = F32(1.0) / s_enc
  xb = x.reshape(r, k // 16, 16)
  amax_b = np.max(np.abs(xb), axis=-1)
  sb_i, sv_i = e4m3((amax_b * (F32(1) / F32(7))) * s_enc)
  with np.errstate(divide="ignore", invalid="ignore"):
    y = np.where(sv_i[..., None] > 0, (xb * s_enc) / sv_i[..., None], np.zeros_like(xb)).astype(F32)
  kq = np.clip(np.rint(y), -7, 7)  # np.rint: round half to even
  codes_i = (np.signbit(y).astype(np.uint8) << 3) | np.abs(kq).astype(np.uint8)
  xh_f = ((e2m1_values(codes_f) * sv_f[..., None]) * s_dec).astype(F32)
  xh_i = ((np.abs(kq).astype(F32) * np.where(np.signbit(y), F32(-1), F32(1)) * sv_i[..., None])
          * s_dec).astype(F32)
  err_f = np.sum((xb.astype(np.float64) - xh_f) ** 2, axis=-1)
  err_i = np.sum((xb.astype(np.float64) - xh_i) ** 2, axis=-1)
  use_i = (err_i < err_f) & (sb_i > 0)
  decided = np.abs(err_i - err_f) > 1e-5 * np.maximum(err_f, 1e-30)
  decided |= (sb_i == 0) | (err_f == 0)
  codes = np.where(use_i[..., None], codes_i, codes_f)
  sb = np.where(use_i, sb_i | 0x80, sb_f).astype(np.uint8)
  return codes, sb, s_dec, decided


def mxfp4(x: np.ndarray, rule: str):
  r, k = x.shape
  xb = x.reshape(r, k // 32, 32)
  amax_b = np.max(np.abs(xb), axis=-1).astype(np.float64)
  _, ex = np.frexp(amax_b)  # amax = m * 2**ex, m in [0.5, 1)
  if rule == "floor":
    e = (ex - 1) - 2
  else:
    with np.errstate(divide="ignore"):
      e = np.ceil(np.log2(amax_b / 6.0))
  e = np.where(amax_b > 0, e, -127).clip(-127, 127).astype(np.int64)
  y = np.ldexp(xb.astype(np.float64), -e[..., None]).astype(F32)
  return e2m1_codes(y), (e + 127).astype(np.uint8)


def main():
  x = inputs()
  nv_codes, nv_sb, _, nv_enc = nvfp4(x)
  mix_codes, mix_sb, mix_dec, decided = mixfp4(x)
  mxf_codes, mxf_sb = mxfp4(x, "floor")
  mxr_codes, mxr_sb = mxfp4(x, "rceil")
  os.makedirs(os.path.dirname(OUT), exist_ok=True)
  np.savez_compressed(
      OUT, x=x,
      nvfp4_codes=pack(nv_codes.reshape(x.shape[0], -1)), nvfp4_scales=nv_sb,
      nvfp4_tensor_scale=np.float32(1.0) / nv_enc,
      mixfp4_codes=pack(mix_codes.reshape(x.shape[0], -1)), mixfp4_scales=mix_sb,
      mixfp4_tensor_scale=mix_dec, mixfp4_decided=decided,
      mxfp4_floor_codes=pack(mxf_codes.reshape(x.shape[0], -1)), mxfp4_floor_scales=mxf_sb,
      mxfp4_rceil_codes=pack(mxr_codes.reshape(x.shape[0], -1)), mxfp4_rceil_scales=mxr_sb)
  print(f"wrote {OUT}: E1M2 share {np.mean(mix_sb >> 7):.2f}, "
        f"undecided MixFP4 blocks {int(np.sum(~decided))}")


if __name__ == "__main__":
  main()
