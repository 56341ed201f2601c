"""NVFP4: E2M1 elements, an E4M3 scale per 16 elements, an FP32 tensor scale.

The recipe of NVIDIA Transformer Engine / torchao: S_enc = 448*6/amax(T),
block scale byte = E4M3(amax_b/6 * S_enc), element = E2M1(x * S_enc / s_b),
value = element * s_b * S_dec with S_dec = 1/S_enc.
"""

import jax.numpy as jnp
from jax import Array

from jaxlab.formats import _grids
from jaxlab.formats._format import Format
from jaxlab.formats._grids import E2M1, E4M3
from jaxlab.formats._scales import (
    block_amax,
    e4m3_scale,
    recip,
    safe_div,
    tensor_amax,
    tensor_encode_scale,
)


def nvfp4_blocks(xb: Array, s_enc: Array, s_dec: Array, key: Array | None = None, *,
                 amax_b: Array | None = None) -> tuple[Array, Array, Array]:
  """NVFP4 on blocked input [..., nb, bs]: (nibble codes, scale bytes, x_hat).

  `amax_b` (the blocks' finite amax) is recomputed when not given. Plain jnp:
  the Pallas quantize kernel calls it on its tile.
  """
  if amax_b is None:
    amax_b = block_amax(xb)
  sb, sv = e4m3_scale((amax_b * recip(6.0)) * s_enc)
  y = safe_div(xb * s_enc, sv[..., None])
  codes, vals = _grids.round_float(y, E2M1, key=key)
  return codes, sb, (vals * sv[..., None]) * s_dec


def tensor_scales(amax_b: Array) -> tuple[Array, Array]:
  """(S_enc, S_dec) from the block amaxes (NVFP4 and MixFP4 share them)."""
  s_enc = tensor_encode_scale(tensor_amax(amax_b), 6.0)
  return s_enc, 1.0 / s_enc


def _finite_blocks(xb: Array, amax_b: Array, s_enc: Array, s_dec: Array
                   ) -> tuple[Array, Array, Array]:
  """`nvfp4_blocks` for finite blocks and round-to-nearest: the same bits, fewer operations.

  The XLA quantize path takes it when every element is finite (`_api._by_blocks`
  checks); the elements round with `round_e2m1_finite` instead of the kernel-friendly
  midpoint compares.
  """
  sb, sv = e4m3_scale((amax_b * recip(6.0)) * s_enc)
  y = safe_div(xb * s_enc, sv[..., None])
  codes, vals = _grids.round_e2m1_finite(y)
  return codes, sb, (vals * sv[..., None]) * s_dec


def _blocks(xb: Array, amax_b: Array, key: Array | None, all_finite: bool):
  s_enc, s_dec = tensor_scales(amax_b)
  if all_finite and key is None:
    return (*_finite_blocks(xb, amax_b, s_enc, s_dec), s_dec)
  return (*nvfp4_blocks(xb, s_enc, s_dec, key, amax_b=amax_b), s_dec)


def encode(xb: Array, amax_b: Array, fmt: Format, key: Array | None, all_finite: bool = False):
  """Blocks -> (element codes [..., nb, bs] uint8, scale bytes [..., nb], S_dec).

  `all_finite=True` promises that every element of `xb` is finite (a faster path).
  """
  del fmt
  codes, sb, _, s_dec = _blocks(xb, amax_b, key, all_finite)
  return codes, sb, s_dec


def fake(xb: Array, amax_b: Array, fmt: Format, key: Array | None, all_finite: bool = False
         ) -> Array:
  """x_hat in blocks: the same float32 products `decode` forms, without codes."""
  del fmt
  return _blocks(xb, amax_b, key, all_finite)[2]


def decode(codes: Array, scales: Array, tensor_scale: Array, fmt: Format) -> Array:
  """Element codes [..., nb, bs] and scale bytes -> float32 values [..., nb, bs].

  Bit 7 of a scale byte flags an E1M2 block (MixFP4; never set by NVFP4): the
  (flag, nibble) pair decodes through the 32-entry E2M2 table `MIX_LUT`.
  """
  del fmt
  flag = (scales >> 7).astype(jnp.int32)[..., None]
  vals = jnp.take(jnp.asarray(_grids.MIX_LUT), (flag << 4) | codes.astype(jnp.int32),
                  mode="clip")
  sv = _grids.decode_float(scales & jnp.uint8(0x7F), E4M3)
  return (vals * sv[..., None]) * tensor_scale
