"""Mosaic GPU (`plgpu`) variant of the FP4 dequant-matmul (Hopper wgmma), beside the Triton one.

Swap-AB: each block computes a transposed output tile, out^T[n, m] =
W^T[n, k] @ x^T[k, m], because the packed weights are stored n-major (codes
[n, k/2], scales [n, k/16]) and wgmma takes its A operand from registers: the
dequantized weight tile never goes through shared memory, and the token
dimension m is wgmma's N (a multiple of 8), so decode-sized batches waste no
MMA rows. One block per (n tile, m tile); K is pipelined through SMEM by TMA
(`plgpu.emit_pipeline`, two stages). Per K step of tk:

  * x arrives as `pair_major(x)` tiles [2, tk/32, tm, 16] (wgmma tiling, 32-byte
    swizzle): slab [h, p] holds the K columns that meet the low (h=0) or high
    (h=1) nibbles of packed columns 16p..16p+15, so no nibble interleave is
    needed in registers;
  * codes [tn, tk/2] and scale bytes [tn, tk/16] arrive untransformed;
  * the scale bytes are decoded once per step with `formats.decode_float`
    (E4M3); the MixFP4 flag (bit 7) rides in the sign of the decoded scale;
  * for each 16 packed columns (two 16-blocks, a `pl.loop`) the codes are
    loaded in the wgmma register layout, each row's two block scales picked by
    exact masked row sums, the nibbles decoded by `formats.decode_mix_e2m2`
    and scaled -- the numerics of `reference.py` -- and cast to the activation
    dtype, which is exact (an E2M2 value times an E4M3 scale has <= 7
    significant bits and stays in bf16/f16 range); two wgmmas (low, high
    nibbles) accumulate into an f32 wgmma accumulator.

The [tn, tm] f32 tile is stored through SMEM (TMA) into out^T; the caller
transposes and applies the tensor scale (as the other variants, whose
accumulator is scaled once at the end).

Interpret mode (`interpret=True`) runs the same kernel in JAX's GPU
interpreter (simulated SMEM, TMA copies, barriers, wgmma). Register layouts do
not exist there, and the interpreter takes wgmma operands from refs only, so
it reads refs plainly and stages each pair's A and B^T in SMEM; everything
else (pipeline, indexing, decode, accumulation) is the compiled path.

Constraints (`check_tiles`): activations bfloat16 or float16; tm (wgmma N) a
multiple of 8, <= 256; tn a multiple of 64 (wgmma M); tm * tn <= 16384 (the
accumulator's registers); tk a multiple of 256 (a K tile's scale-byte row is
>= 16 bytes, TMA's minimum box); the two pipeline stages within 227 KiB of SMEM.
"""

import inspect

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

from jaxlab import formats
from pallas_kernels import _common

DTYPES = (jnp.bfloat16, jnp.float16)
BLOCK = 16  # elements per scale
_PAIR = 2 * BLOCK  # K elements per wgmma step: two 16-blocks = 16 packed bytes
# The f32 accumulator holds tm * tn / 128 registers per thread: at most 128 (a 64 x 256 tile,
# the usual Hopper warpgroup tile), leaving room for the decoded operands.
_MAX_ACC = 128 * 128
# SMEM: Hopper's 227 KiB per block, less 2 KiB for the pipeline's barriers and spare.
_MAX_SMEM = 227 * 1024 - 2048
_STAGES = 2  # TMA pipeline depth (max_concurrent_steps)
_SWIZZLE = 32  # bytes: 16 columns of a 16-bit tile, so each pair's slice is whole tiles


def check_tiles(tm: int, tk: int, tn: int, dtype) -> None:
  """Raises ValueError unless (tm, tk, tn) and the activation dtype suit this kernel."""
  if jnp.dtype(dtype) not in [jnp.dtype(d) for d in DTYPES]:
    raise ValueError(f"dequant_matmul (mosaic_gpu): x must be bfloat16 or float16, got {dtype}")
  if tm % 8 or tm > 256 or tn % 64 or tk % 256 or tm * tn > _MAX_ACC:
    raise ValueError(f"dequant_matmul (mosaic_gpu): tiles need m % 8 == 0, m <= 256, "
                     f"n % 64 == 0, m * n <= {_MAX_ACC} and k % 256 == 0; got m={tm}, k={tk}, "
                     f"n={tn}")
  smem = _STAGES * (tk * tm * jnp.dtype(dtype).itemsize + tn * tk // 2 + tn * tk // BLOCK)
  if smem > _MAX_SMEM:
    raise ValueError(f"dequant_matmul (mosaic_gpu): tiles m={tm}, k={tk}, n={tn} need {smem} "
                     f"bytes of SMEM ({_STAGES} pipeline stages of the x, code and scale tiles) "
                     f"> {_MAX_SMEM}; use a smaller m or k")


# `plgpu.load` takes the index as a positional argument up to jax 0.11 and not after.
_LOAD_TAKES_IDX = "idx" in inspect.signature(plgpu.load).parameters


def _load(ref, layout, interpret):
  """ref[...] into registers with `layout`.

  Register layouts only matter to the compiler: the GPU interpreter keeps
  values in their logical layout, and jax 0.10's has no `load` or
  `layout_cast`, so interpret mode reads the ref plainly.
  """
  if interpret:
    return ref[...]
  if _LOAD_TAKES_IDX:
    return plgpu.load(ref, (), layout=layout, optimized=False)
  return plgpu.load(ref, layout=layout, optimized=False)


def _iota(shape, interpret):
  """Column index of a [rows, cols] array in the wgmma layout (see `_load` for interpret)."""
  if interpret:
    return jax.lax.broadcasted_iota(jnp.int32, shape, 1)
  return plgpu.broadcasted_iota(jnp.int32, shape, 1, layout=plgpu.Layout.WGMMA)


def _transposed(ref):
  # `plgpu.transpose_ref` is deprecated from jax 0.12 in favour of the ref method.
  return ref.transpose((1, 0))


def _decode_pair(codes, ss_lo, ss_hi, dtype, interpret):
  """Two 16-blocks of a weight tile, decoded: ([tn, 16] low nibbles, [tn, 16] high nibbles).

  codes: [tn, 16] uint8 (packed columns 0..7 in block `lo`, 8..15 in block
  `hi`); ss_lo/ss_hi: [tn] float32 signed block scales (sign = MixFP4 flag).
  """
  col = _iota(codes.shape, interpret)
  row = lambda v: jax.lax.broadcast_in_dim(v, codes.shape, (0,))  # noqa: E731
  ss = jnp.where(col < BLOCK // 2, row(ss_lo), row(ss_hi))
  flag = ss < 0.0
  mag = jnp.abs(ss)
  c = codes.astype(jnp.int32)
  w_lo = (formats.decode_mix_e2m2(c & 0xF, flag) * mag).astype(dtype)
  w_hi = (formats.decode_mix_e2m2(c >> 4, flag) * mag).astype(dtype)
  return w_lo, w_hi


def pair_major(x):
  """x [m, k] -> [2, k/32, m, 16]: [h, p, :, c] is column 32p + 2c + h of x.

  h = 0/1 picks the K columns of the low/high nibbles of packed byte 16p + c,
  so the B operand of every wgmma step (one nibble half of one 16-byte pair)
  is a contiguous [m, 16] slab.
  """
  m, k = x.shape
  return x.reshape(m, k // _PAIR, BLOCK, 2).transpose(3, 1, 0, 2)


def dequant_matmul_t(xs, codes, scales, *, tm: int, tk: int, tn: int, compiler_params,
                     interpret=False):
  """out^T [n, m] float32 = (x @ (W / S_dec))^T, without the tensor scale.

  xs: `pair_major(x)` of x [m, k] (m a multiple of tm); codes [n, k/2] uint8;
  scales [n, k/16] uint8 (E4M3 magnitude, MixFP4 flag in bit 7).
  """
  _, kp, m, _ = xs.shape
  n = codes.shape[0]
  dtype = xs.dtype
  tkp = tk // _PAIR
  tiles = (plgpu.TilingTransform((8, _SWIZZLE // jnp.dtype(dtype).itemsize)),
           plgpu.SwizzleTransform(_SWIZZLE))

  def mma(acc_ref, w, x_smem, staging):
    if interpret:
      # The interpreter takes wgmma operands from refs only, and jax 0.10's
      # cannot read through a transposed ref: stage both operands in SMEM.
      a_smem, b_smem = staging
      a_smem[...] = w
      b_smem[...] = x_smem[...].T
      plgpu.wgmma(acc_ref, a_smem, b_smem)
    else:
      plgpu.wgmma(acc_ref, w, _transposed(x_smem))

  def jaxlab_fp4_dequant_matmul_mgpu(xs_gmem, codes_gmem, scales_gmem, out_gmem):
    j, i = jax.lax.axis_index("n"), jax.lax.axis_index("m")

    def step(x_smem, c_smem, s_smem, acc_ref, staging):
      # Block scales of this K step, decoded once: [tn, tk/16] float32, sign = MixFP4 flag.
      sb = _load(s_smem, plgpu.Layout.WGMMA, interpret).astype(jnp.int32)
      smag = formats.decode_float((sb & 0x7F).astype(jnp.uint8), formats.E4M3)
      ss = jnp.where((sb >> 7) == 1, -smag, smag)
      blk = _iota(ss.shape, interpret)

      def column(b):  # [tn] scale of block b, one per row (a masked row sum: exact)
        return jnp.sum(jnp.where(blk == b, ss, 0.0), axis=1)

      @pl.loop(0, tkp)
      def _pair(p):  # 16 packed columns = two scale blocks per wgmma pair
        codes_p = _load(c_smem.at[:, pl.ds(p * BLOCK, BLOCK)], plgpu.Layout.WGMMA, interpret)
        w_lo, w_hi = _decode_pair(codes_p, column(2 * p), column(2 * p + 1), dtype, interpret)
        mma(acc_ref, w_lo, x_smem.at[0, p], staging)
        mma(acc_ref, w_hi, x_smem.at[1, p], staging)
        plgpu.wgmma_wait(0)  # this pair's A registers are dead after its two wgmmas

    def acc_scope(acc_ref):
      def pipeline(*staging):
        plgpu.emit_pipeline(
            lambda _, *refs: step(*refs, acc_ref, staging),
            grid=(kp // tkp,),
            in_specs=[plgpu.BlockSpec((2, tkp, tm, BLOCK), lambda kk: (0, kk, i, 0),
                                      transforms=tiles),
                      plgpu.BlockSpec((tn, tk // 2), lambda kk: (j, kk)),
                      plgpu.BlockSpec((tn, tk // BLOCK), lambda kk: (j, kk))],
            max_concurrent_steps=_STAGES)(xs_gmem, codes_gmem, scales_gmem)

      if interpret:
        pl.run_scoped(pipeline, plgpu.SMEM((tn, BLOCK), dtype), plgpu.SMEM((BLOCK, tm), dtype))
      else:
        pipeline()
      return acc_ref[...]

    acc = pl.run_scoped(acc_scope, plgpu.ACC((tn, tm), jnp.float32))

    def store(o_smem):
      o_smem[...] = acc
      plgpu.commit_smem()
      plgpu.copy_smem_to_gmem(o_smem, out_gmem.at[pl.ds(j * tn, tn), pl.ds(i * tm, tm)])
      plgpu.wait_smem_to_gmem(0)

    pl.run_scoped(store, plgpu.SMEM((tn, tm), jnp.float32))

  return plgpu.kernel(
      jaxlab_fp4_dequant_matmul_mgpu,
      out_type=jax.ShapeDtypeStruct((n, m), jnp.float32),
      grid=(n // tn, m // tm), grid_names=("n", "m"),
      compiler_params=compiler_params,
      interpret=_common.mosaic_gpu_interpret(interpret))(xs, codes, scales)
