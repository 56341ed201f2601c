"""INT4 / INT8: symmetric integers in [-qmax, qmax] (qmax 7 / 127), one scale per block.

scale_dtype "f32": scale = amax_b * fl32(1/qmax) in float32 (floored at
2**-126, see `_scales`); "e4m3": the NVFP4 two-level scheme with qmax in place
of 6 (a jaxlab interpretation for INT). Codes are two's complement: int4 as
nibbles (two per byte), int8 as bytes.
"""

import jax
import jax.numpy as jnp
from jax import Array

from jaxlab.formats import _grids
from jaxlab.formats._format import Format
from jaxlab.formats._grids import E4M3
from jaxlab.formats._packing import pack_nibbles
from jaxlab.formats._scales import (
    e4m3_scale,
    f32_scale,
    mul_inv,
    recip,
    safe_div,
    tensor_amax,
    tensor_encode_scale,
)


def encode(xb: Array, amax_b: Array, fmt: Format, key: Array | None,
           all_finite: bool = False, amax_t: Array | None = None):
  """Blocks -> (codes uint8, scales [..., nb], tensor scale).

  Codes: int8 bytes [..., nb, bs]; int4 nibbles packed two per byte [..., nb, bs // 2].

  `all_finite=True` promises that every element of `xb` is finite (a faster path).
  """
  qmax = fmt.qmax
  if fmt.scale_dtype == "e4m3":
    s_enc = tensor_encode_scale(tensor_amax(amax_b, amax_t), qmax)
    scales, sv = e4m3_scale((amax_b * recip(qmax)) * s_enc)
    y = safe_div(xb * s_enc, sv[..., None])
    tensor_scale = 1.0 / s_enc
  else:
    scales = f32_scale(amax_b, qmax)
    y = mul_inv(xb, scales[..., None])
    tensor_scale = jnp.ones((), jnp.float32)
  if all_finite and key is None:
    q = _grids.round_int_finite(y, int(qmax)).astype(jnp.int32)
  else:
    q = _grids.round_int(y, int(qmax), key=key).astype(jnp.int32)
  if fmt.name == "int4":
    codes = pack_nibbles((q & 0xF).astype(jnp.uint8))
  else:
    codes = jax.lax.bitcast_convert_type(q.astype(jnp.int8), jnp.uint8)
  return codes, scales, jnp.asarray(tensor_scale, jnp.float32)


def decode(codes: Array, scales: Array, tensor_scale: Array, fmt: Format) -> Array:
  if fmt.name == "int4":
    c = codes.astype(jnp.int32)
    vals = jnp.where(c >= 8, c - 16, c).astype(jnp.float32)
  else:
    vals = jax.lax.bitcast_convert_type(codes, jnp.int8).astype(jnp.float32)
  if fmt.scale_dtype == "e4m3":
    sv = _grids.decode_float(scales, E4M3)
    return (vals * sv[..., None]) * tensor_scale
  return (vals * scales[..., None]) * tensor_scale
