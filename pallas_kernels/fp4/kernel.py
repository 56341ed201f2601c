"""Pallas kernel bodies for FP4 quantize and dequant-matmul (no jit, no pallas_call).

Bodies use generic `jnp`/`pl` ops only. `quantize_kernel` serves every
backend; `dequant_matmul_kernel` (K grid axis, VMEM accumulator) serves Mosaic
TPU and CPU interpret mode, `dequant_matmul_gpu_kernel` Triton (the Mosaic GPU
variant is `mgpu.py`). Block math is shared with `jaxlab.formats`
(the reference), which is written in kernel-friendly arithmetic.
"""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from jaxlab import formats

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


def _chunk(xe, xo, c, s, bk: int):
  """Partial product of one K chunk: x_even @ W_lo^T + x_odd @ W_hi^T (float32).

  xe, xo: [bm, bk/2] activations; c: [bn, bk/2] packed codes (int32); s: [bn,
  bk/16] scale bytes (int32, MixFP4 flag in bit 7).
  """
  bk2, bk16 = bk // 2, bk // BLOCK
  smag = formats.decode_float((s & 0x7F).astype(jnp.uint8), formats.E4M3)
  s_exp = _expand(smag, bk16, bk2)
  f_exp = _expand((s >> 7).astype(jnp.float32), bk16, bk2)
  w_lo = formats.decode_mix_e2m2(c & 0xF, f_exp) * s_exp
  w_hi = formats.decode_mix_e2m2(c >> 4, f_exp) * s_exp
  dims = (((1,), (1,)), ((), ()))
  hp = jax.lax.Precision.HIGHEST
  acc = jax.lax.dot_general(xe.astype(jnp.float32), w_lo, dims, precision=hp,
                            preferred_element_type=jnp.float32)
  return acc + jax.lax.dot_general(xo.astype(jnp.float32), w_hi, dims, precision=hp,
                                   preferred_element_type=jnp.float32)


def dequant_matmul_kernel(xe_ref, xo_ref, codes_ref, scales_ref, sdec_ref, o_ref, acc_ref, *,
                          bk: int):
  """Grid (m tiles, n tiles, K chunks), K last and "arbitrary" (TPU layout, CPU interpret).

  The activations arrive split into even/odd K columns, matching the low/high
  nibbles of the packed weight bytes, so no in-kernel interleave is needed.
  xe/xo/codes are [bm|bn, bk/2] chunks of this K step; the scale bytes are
  the whole K of the n tile ([bn, K/16]: one fetch per output tile, and a
  K/16-wide block satisfies TPU's 128-lane rule for any K), sliced here.
  acc_ref is an f32 VMEM accumulator that lives across the K steps.
  """
  kk = pl.program_id(2)
  bk16 = bk // BLOCK

  @pl.when(kk == 0)
  def _zero():
    acc_ref[...] = jnp.zeros_like(acc_ref)

  s = scales_ref[:, pl.ds(kk * bk16, bk16)].astype(jnp.int32)
  acc_ref[...] += _chunk(xe_ref[...], xo_ref[...], codes_ref[...].astype(jnp.int32), s, bk)

  @pl.when(kk == pl.num_programs(2) - 1)
  def _store():
    o_ref[...] = (acc_ref[...] * sdec_ref[...]).astype(o_ref.dtype)


def dequant_matmul_gpu_kernel(xe_ref, xo_ref, codes_ref, scales_ref, sdec_ref, o_ref, *, bk: int):
  """Triton variant: grid (m tiles, n tiles); K looped in-kernel in chunks of bk.

  Triton programs cannot carry an accumulator across grid steps, so the K
  reduction is a loop over dynamic slices of full-K blocks, accumulated in
  registers (float32).
  """
  k2 = codes_ref.shape[1]
  bk2, bk16 = bk // 2, bk // BLOCK

  def body(i, acc):
    c = codes_ref[:, pl.ds(i * bk2, bk2)].astype(jnp.int32)
    s = scales_ref[:, pl.ds(i * bk16, bk16)].astype(jnp.int32)
    return acc + _chunk(xe_ref[:, pl.ds(i * bk2, bk2)], xo_ref[:, pl.ds(i * bk2, bk2)], c, s, bk)

  acc = jax.lax.fori_loop(0, k2 // bk2, body, jnp.zeros(o_ref.shape, jnp.float32))
  o_ref[...] = (acc * sdec_ref[...]).astype(o_ref.dtype)
