"""NVFP4: E2M1 elements, an E4M3 scale per 16 elements, an FP32 tensor scale.

The recipe of NVIDIA Transformer Engine / torchao: S_enc = 448*6/amax(T),
block scale byte = E4M3(amax_b/6 * S_enc), element = E2M1(x * S_enc / s_b),
value = element * s_b * S_dec with S_dec = 1/S_enc.
"""

import jax
import jax.numpy as jnp
from jax import Array

from jaxlab.formats import _grids
from jaxlab.formats._format import Format
from jaxlab.formats._grids import E2M1
from jaxlab.formats._packing import pack_nibbles, pack_pairs
from jaxlab.formats._scales import (
    block_amax,
    decode_e4m3_scales,
    e4m3_byte_inverse,
    e4m3_byte_value,
    e4m3_scale,
    e4m3_scale_finite,
    finite,
    recip,
    rne_input,
    safe_div,
    tensor_amax,
    tensor_encode_scale,
)


def nvfp4_blocks(xb: Array, s_enc: Array, s_dec: Array, key: Array | None = None, *,
                 amax_b: Array | None = None) -> tuple[Array, Array, Array]:
  """NVFP4 on blocked input [..., nb, bs]: (nibble codes, scale bytes, x_hat).

  `amax_b` (the blocks' finite amax) is recomputed when not given. A block holding
  a NaN or an Inf gets the E4M3 NaN scale byte 0x7F and NaN x_hat (`nan_blocks`).
  Plain jnp: the Pallas quantize kernel calls it on its tile.
  """
  if amax_b is None:
    amax_b = block_amax(xb)
  codes, sb, sv, vals = e2m1_candidate(xb * s_enc, amax_b, s_enc, key)
  return (codes, *nan_blocks(xb, sb, (vals * sv[..., None]) * s_dec))


def nan_blocks(xb: Array, sb: Array, xh: Array) -> tuple[Array, Array]:
  """OCP MX's rule for non-finite input on E4M3-scaled blocks [..., nb, bs]: a block
  holding a NaN or an Inf gets scale byte 0x7F (NaN; MixFP4's flag clear) and NaN
  x_hat. Returns (scale bytes, x_hat)."""
  # A max, not `jnp.any`: Pallas' Triton lowering has no reduce_or.
  bad = jnp.max(jnp.where(finite(xb), 0.0, 1.0), axis=-1) > 0
  return (jnp.where(bad, jnp.uint8(0x7F), sb),
          jnp.where(bad[..., None], jnp.nan, xh))


def e2m1_candidate(xs: Array, amax_b: Array, s_enc: Array, key: Array | None = None
                   ) -> tuple[Array, Array, Array, Array]:
  """NVFP4's blocks of xs = x * S_enc [..., nb, bs]: (codes, scale bytes, scale values s_b,
  element values). x_hat = (values * s_b) * S_dec; MixFP4 takes it as its E2M1 candidate."""
  sb, sv = e4m3_scale((amax_b * recip(6.0)) * s_enc)
  codes, vals = _grids.round_float(safe_div(xs, sv[..., None]), E2M1, key=key)
  return codes, sb, sv, vals


def tensor_scales(amax_b: Array, amax_t: Array | None = None) -> tuple[Array, Array]:
  """(S_enc, S_dec) from the block amaxes (NVFP4 and MixFP4 share them; `amax_t` as for
  `tensor_amax`)."""
  s_enc = tensor_encode_scale(tensor_amax(amax_b, amax_t), 6.0)
  return s_enc, 1.0 / s_enc


def scaled(x: Array, s_enc: Array, inv: Array) -> Array:
  """y = x * S_enc / s_b as `safe_div` computes it: XLA turns its division by the broadcast
  scale into a product with the reciprocal `inv` ([..., nb, 1], `e4m3_byte_inverse`: 0 for
  a zero scale, which gives +0)."""
  return jnp.where(inv > 0, (x * s_enc) * inv, 0.0)


def _rne_scales(amax_b: Array, amax_t: Array | None
                ) -> tuple[Array, Array, Array, Array]:
  """(S_enc, S_dec, scale bytes [..., nb], fl32(1 / s_b) [..., nb, 1]) for round-to-nearest."""
  s_enc, s_dec = tensor_scales(amax_b, amax_t)
  sb, _ = e4m3_scale_finite((amax_b * recip(6.0)) * s_enc)
  return s_enc, s_dec, sb, e4m3_byte_inverse(sb)[..., None]


def encode(xb: Array, amax_b: Array, fmt: Format, key: Array | None, all_finite: bool = False,
           amax_t: Array | None = None):
  """Blocks -> (packed element codes [..., nb, bs // 2] uint8, scale bytes [..., nb], S_dec).

  `all_finite=True` promises that every element of `xb` is finite (skips a mask);
  `amax_t` is max(amax_b) where the caller has it (`tensor_amax`). Round-to-nearest
  packs the codes straight from x (`pack_pairs`).
  """
  del fmt
  if key is None:
    s_enc, s_dec, sb, inv = _rne_scales(amax_b, amax_t)

    def code(v):
      return _grids.e2m1_or_int_codes(scaled(rne_input(v, all_finite), s_enc, inv), False)

    return pack_pairs(code, xb), sb, s_dec
  s_enc, s_dec = tensor_scales(amax_b, amax_t)
  codes, sb, _ = nvfp4_blocks(xb, s_enc, s_dec, key, amax_b=amax_b)
  return pack_nibbles(codes), sb, s_dec


def fake(xb: Array, amax_b: Array, fmt: Format, key: Array | None, all_finite: bool = False,
         amax_t: Array | None = None) -> Array:
  """x_hat in blocks: the same float32 products `decode` forms, without codes."""
  del fmt
  if key is None:
    s_enc, s_dec, sb, inv = _rne_scales(amax_b, amax_t)
    vals = _grids.round_e2m1_finite(scaled(rne_input(xb, all_finite), s_enc, inv))[1]
    return (vals * e4m3_byte_value(sb)[..., None]) * s_dec
  s_enc, s_dec = tensor_scales(amax_b, amax_t)
  return nvfp4_blocks(xb, s_enc, s_dec, key, amax_b=amax_b)[2]


def decode(codes: Array, scales: Array, tensor_scale: Array, fmt: Format) -> Array:
  """Element codes [..., nb, bs] and scale bytes -> float32 values [..., nb, bs].

  Bit 7 of a scale byte flags an E1M2 block (MixFP4; never set by NVFP4): the
  (flag, nibble) pair has the value `MIX_LUT[flag << 4 | nibble]`.
  """
  del fmt
  vals = element_values(codes, ((scales >> 7) == 1)[..., None])
  sv = decode_e4m3_scales(scales)
  return (vals * sv[..., None]) * tensor_scale


def element_values(codes: Array, e1m2: Array) -> Array:
  """`MIX_LUT[e1m2 << 4 | code]` for 4-bit codes, on the float32 bits (no table lookup).

  E2M1 magnitude code t = (e, m) >= 2 is 2**(e-1) * (1 + m/2), the float32 with
  exponent e + 126 and one mantissa bit m: bits (t + 252) << 22; t = 1 is 0.5
  (252 << 22) and t = 0 is 0. An E1M2 block's code holds the integer magnitude t. The
  sign bit goes to bit 31, so code 8 is -0 as in the table. Elementwise ops only, which
  XLA:CPU vectorises (a gather from the table stays scalar); the kernels' E2M2 datapath
  `decode_mix_e2m2` gives the same values with ~1.5x the dequantize time.
  """
  c = codes.astype(jnp.int32)
  t = c & 7
  e2m1 = jax.lax.bitcast_convert_type((t + jnp.where(t == 1, 251, 252)) << 22, jnp.float32)
  mag = jnp.where(e1m2, t.astype(jnp.float32), jnp.where(t == 0, 0.0, e2m1))
  return _grids._with_sign((c & 8) << 28, mag)
