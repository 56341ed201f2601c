"""FP8 E4M3 ("fn": max 448, no Inf) with a float32 scale amax/448.

Granularity "tensor" (one scale), "row" (one per slice along the blocked axis)
or "block" (one per `block_size` elements); scales are floored at 2**-126
(see `_scales`).
"""

import jax.numpy as jnp
from jax import Array

from jaxlab.formats import _grids
from jaxlab.formats._format import Format
from jaxlab.formats._grids import E4M3
from jaxlab.formats._scales import f32_scale, mul_inv, tensor_amax


def encode(xb: Array, amax_b: Array, fmt: Format, key: Array | None,
           all_finite: bool = False, amax_t: Array | None = None):
  """Blocks -> (E4M3 bytes [..., nb, bs], float32 scales ([..., nb] or ()), 1)."""
  del all_finite  # one path for every input
  if fmt.granularity == "tensor":
    s = f32_scale(tensor_amax(amax_b, amax_t), 448.0)
    y = mul_inv(xb, s)
  else:
    s = f32_scale(amax_b, 448.0)
    y = mul_inv(xb, s[..., None])
  codes, _ = _grids.round_float(y, E4M3, key=key)
  return codes, s, jnp.ones((), jnp.float32)


def decode(codes: Array, scales: Array, tensor_scale: Array, fmt: Format) -> Array:
  del tensor_scale
  vals = _grids.decode_float(codes, E4M3)
  return vals * (scales if fmt.granularity == "tensor" else scales[..., None])
