"""Pallas kernel bodies for FP4 quantize and dequant-matmul (no jit, no pallas_call).

Bodies use generic `jnp`/`pl` ops only, so one body serves TPU (Mosaic), GPU
(Triton) and CPU interpret mode. Block math is shared with `jaxlab.formats`
(the reference), which is written in kernel-friendly arithmetic.
"""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from jaxlab import formats
from jaxlab.formats import _grids

BLOCK = 16  # NVFP4 / MixFP4 elements per scale


def quantize_kernel(x_ref, sc_ref, codes_ref, scales_ref, *, mix: bool, select_p: float):
  """One [rows, cols] tile -> packed codes [rows, cols/2] and scale bytes [rows, cols/16].

  sc_ref holds [[S_enc, S_dec]] (tensor scales computed outside: a global amax).
  """
  x = x_ref[...].astype(jnp.float32)
  rows, cols = x.shape
  s_enc = sc_ref[:, 0:1]
  s_dec = sc_ref[:, 1:2]
  xb = x.reshape(rows, cols // BLOCK, BLOCK)
  if mix:
    codes, sbytes, _ = formats.mixfp4_blocks(xb, s_enc, s_dec, None, select_p)
  else:
    codes, sbytes, _ = formats.nvfp4_blocks(xb, s_enc, s_dec, None)
  pairs = codes.astype(jnp.int32).reshape(rows, cols // 2, 2)
  shift = 4 * jax.lax.broadcasted_iota(jnp.int32, pairs.shape, 2)
  codes_ref[...] = jnp.sum(pairs << shift, axis=-1).astype(jnp.uint8)
  scales_ref[...] = sbytes.astype(jnp.uint8)


def _expand(v, bk16: int, bk2: int):
  """[r, bk16] -> [r, bk2]: each value repeated over its block's 8 packed columns.

  Done as a matmul with a 0/1 matrix (exact: one nonzero term per output, and
  the values are E4M3 magnitudes or flags) instead of a lane reshape.
  """
  blk = jax.lax.broadcasted_iota(jnp.int32, (bk16, bk2), 0)
  col = jax.lax.broadcasted_iota(jnp.int32, (bk16, bk2), 1)
  e = ((col >> 3) == blk).astype(jnp.float32)  # 8 packed bytes per block; shift, not //
  return jnp.dot(v, e, precision=jax.lax.Precision.HIGHEST, preferred_element_type=jnp.float32)


def dequant_matmul_kernel(xe_ref, xo_ref, codes_ref, scales_ref, sdec_ref, o_ref, *, bk: int):
  """out[bm, bn] = (x_even @ W_lo^T + x_odd @ W_hi^T) * S_dec, K looped in chunks of bk.

  The activations arrive split into even/odd K columns, matching the low/high
  nibbles of the packed weight bytes, so no in-kernel interleave is needed.
  """
  k2 = codes_ref.shape[1]
  bk2, bk16 = bk // 2, bk // BLOCK
  dims = (((1,), (1,)), ((), ()))

  def body(i, acc):
    c = codes_ref[:, pl.ds(i * bk2, bk2)].astype(jnp.int32)
    s = scales_ref[:, pl.ds(i * bk16, bk16)].astype(jnp.int32)
    smag = _grids._decode_float((s & 0x7F).astype(jnp.uint8), _grids.E4M3)
    s_exp = _expand(smag, bk16, bk2)
    f_exp = _expand((s >> 7).astype(jnp.float32), bk16, bk2)
    w_lo = _grids.decode_mix_e2m2(c & 0xF, f_exp) * s_exp
    w_hi = _grids.decode_mix_e2m2(c >> 4, f_exp) * s_exp
    xe = xe_ref[:, pl.ds(i * bk2, bk2)].astype(jnp.float32)
    xo = xo_ref[:, pl.ds(i * bk2, bk2)].astype(jnp.float32)
    hp = jax.lax.Precision.HIGHEST
    acc += jax.lax.dot_general(xe, w_lo, dims, precision=hp, preferred_element_type=jnp.float32)
    acc += jax.lax.dot_general(xo, w_hi, dims, precision=hp, preferred_element_type=jnp.float32)
    return acc

  acc = jax.lax.fori_loop(0, k2 // bk2, body, jnp.zeros(o_ref.shape, jnp.float32))
  o_ref[...] = (acc * sdec_ref[...]).astype(o_ref.dtype)
