"""The blocked layout: the one place that moves the blocked axis last, pads and splits it.

Every codec works on `[..., num_blocks, block]` float32 blocks and returns
codes in `[..., K_pad]` order; `to_blocks` / `from_blocks` are the only
conversions between that and the user's array (quantize, dequantize,
fake_quant, block_view and the kernels' references all use them).
"""

from typing import NamedTuple

import jax.numpy as jnp
from jax import Array

from jaxlab.formats._format import Format


class Layout(NamedTuple):
  """Static geometry of one blocked axis."""
  axis: int          # the blocked axis of the original array, non-negative
  block: int         # elements per block
  length: int        # the axis' length K
  padded: int        # K_pad, a multiple of `block`


def layout(shape: tuple[int, ...], axis: int, fmt: Format) -> Layout:
  """Validates the blocked axis of an array of `shape` for `fmt`.

  Raises:
    ValueError: axis out of range, an empty blocked axis, an odd block for a
      4-bit format, or a length that is not a multiple of the block without
      `fmt.pad`.
  """
  ndim = len(shape)
  if isinstance(axis, bool) or not isinstance(axis, int) or not -ndim <= axis < ndim:
    raise ValueError(f"axis {axis!r} out of range for an array of shape {shape}")
  axis %= ndim
  k = shape[axis]
  if k == 0:
    raise ValueError(f"the blocked axis {axis} of shape {shape} is empty (K = 0); other axes "
                     "may be empty, the blocked one may not")
  if fmt.name == "fp8_e4m3" and fmt.granularity in ("tensor", "row"):
    bs = k
  else:
    bs = fmt.block_size if fmt.block_size is not None else k
  if fmt.element_bits == 4 and bs % 2:
    raise ValueError(f"4-bit format {fmt.name!r} needs an even block; axis {axis} of shape "
                     f"{shape} has length {k}")
  k_pad = -(-k // bs) * bs
  if k_pad != k and not fmt.pad:
    raise ValueError(
        f"{fmt.name}: axis {axis} of shape {shape} has length {k}, not a multiple of the "
        f"block size {bs}; pass pad=True to zero-pad it (cropped on dequantize)")
  return Layout(axis, bs, k, k_pad)


def to_blocks(x: Array, lay: Layout, dtype=jnp.float32) -> Array:
  """x -> [..., K_pad // block, block] in `dtype` (axis moved last, zero-padded)."""
  xm = jnp.moveaxis(x.astype(dtype), lay.axis, -1)
  if lay.padded != lay.length:
    xm = jnp.pad(xm, [(0, 0)] * (xm.ndim - 1) + [(0, lay.padded - lay.length)])
  return xm.reshape(*xm.shape[:-1], lay.padded // lay.block, lay.block)


def from_blocks(vb: Array, lay: Layout) -> Array:
  """Inverse of `to_blocks`: [..., nb, bs] values -> the original layout (cropped)."""
  v = vb.reshape(*vb.shape[:-2], lay.padded)
  return jnp.moveaxis(v[..., :lay.length], -1, lay.axis)
