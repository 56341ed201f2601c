"""MXFP4 (OCP MX v1.0): E2M1 elements, a shared power-of-two E8M0 scale per 32.

X = 2**e with e = floor(log2 amax) - 2 ("floor", the spec; values above 6*X
clip) or the smallest e with amax <= 6 * 2**e ("rceil"; never clips). No
tensor scale: dividing by a power of two is exact.
"""

import jax.numpy as jnp
from jax import Array

from jaxlab.formats import _grids
from jaxlab.formats._format import Format
from jaxlab.formats._grids import E2M1
from jaxlab.formats._packing import pack_nibbles
from jaxlab.formats._scales import rne_input

# 6 * 2**125 is the largest block maximum whose decoded values stay finite in
# float32 (6 * 2**126 overflows), so exponents are capped there: "rceil" then
# clips blocks with amax > 1.5 * 2**126 as "floor" does (found by the property
# test: amax 3e38 used to decode to +Inf).
_E_MAX = 125


def mx_scale_exponent(amax_b: Array, rule: str) -> Array:
  """MXFP4 shared exponent (int32, clamped to [-127, 125]; 0 amax -> -127)."""
  f = _grids.floor_log2(amax_b)
  if rule == "floor":
    e = f - 2
  else:  # rceil: smallest e with amax <= 6 * 2**e, exact (amax in [2**f, 2**(f+1)))
    e = jnp.where(amax_b <= 1.5 * _grids.exp2i(f), f - 2, f - 1)
  e = jnp.where(amax_b > 0, e, -127)
  return jnp.clip(e, -127, _E_MAX)


def encode(xb: Array, amax_b: Array, fmt: Format, key: Array | None,
           all_finite: bool = False, amax_t: Array | None = None):
  """Blocks -> (packed E2M1 codes [..., nb, bs // 2] uint8, E8M0 bytes [..., nb], 1).

  `all_finite=True` promises that every element of `xb` is finite (a faster path).
  """
  del amax_t  # no tensor scale
  e = mx_scale_exponent(amax_b, fmt.scale_rule)
  y = xb * _grids.exp2i(-e)[..., None]  # exact: multiply by a power of two
  if key is None:  # the same bits as round_float's (NaN -> +0, ±Inf saturates)
    codes = _grids.e2m1_or_int_codes(rne_input(y, all_finite), False).astype(jnp.uint8)
  else:
    codes, _ = _grids.round_float(y, E2M1, key=key)
  return (pack_nibbles(codes), (e + _grids.E8M0_BIAS).astype(jnp.uint8),
          jnp.ones((), jnp.float32))


def decode(codes: Array, scales: Array, tensor_scale: Array, fmt: Format) -> Array:
  del tensor_scale, fmt
  vals = _grids.decode_float(codes, E2M1)
  return vals * _grids.decode_e8m0(scales)[..., None]
