"""Mosaic GPU (`plgpu`) variant of the grouped matmul (Hopper wgmma), beside the Triton one.

A `plgpu.kernel` with one block per (work item, n tile), as the Triton
variant: a work item is a (group, m tile) pair of `ops.make_group_metadata`,
read as scalars from GMEM. The block
pipelines K through shared memory (`plgpu.emit_pipeline`, TMA copies with the
wgmma tiling/swizzle) and accumulates `lhs_tile @ rhs[group]_tile` in a wgmma
f32 register accumulator, then stores the whole [tm, tn] tile through SMEM
(TMA); the caller
keeps the rows of the item's group (rows of other groups are masked in XLA,
as are padding items past `num_work`). Weights of groups with no rows are
never read.

Constraints (Hopper wgmma): lhs and rhs bfloat16 or float16 (a float32 B
operand must be K-major, which [g, k, n] weights are not); tm a multiple of
64; tn a multiple of 8 and <= 256; tk a multiple of 128 bytes of elements.
"""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

from pallas_kernels import _common

DTYPES = (jnp.bfloat16, jnp.float16)


def _transforms(cols: int, dtype) -> tuple:
  """wgmma operand layout: (8, swizzle) tiles with the widest swizzle that fits `cols`."""
  itemsize = jnp.dtype(dtype).itemsize
  swizzle = plgpu.find_swizzle(cols * itemsize * 8)
  return plgpu.TilingTransform((8, swizzle // itemsize)), plgpu.SwizzleTransform(swizzle)


def check_tiles(tm: int, tk: int, tn: int, dtype) -> None:
  """Raises ValueError unless (tm, tk, tn) and dtype suit Hopper wgmma."""
  if jnp.dtype(dtype) not in [jnp.dtype(d) for d in DTYPES]:
    raise ValueError(f"gmm (mosaic_gpu): lhs and rhs must be bfloat16 or float16, got {dtype}")
  elems = 128 // jnp.dtype(dtype).itemsize
  if tm % 64 or tn % 8 or tn > 256 or tk % elems:
    raise ValueError(f"gmm (mosaic_gpu): tiles need m % 64 == 0, n % 8 == 0, n <= 256 and "
                     f"k % {elems} == 0; got m={tm}, k={tk}, n={tn}")


def gmm_tiles(meta, lhs, rhs, *, tm: int, tk: int, tn: int, num_items: int, compiler_params,
              interpret: bool = False):
  """Per-item output tiles [num_items, tm, n] float32 (unmasked).

  meta: int32 [>= 2 * num_items] = group_ids then m_tile_ids of the work
  items (read as scalars from GMEM).
  """
  k = lhs.shape[1]
  n = rhs.shape[2]
  dtype = lhs.dtype

  def body(meta_gmem, lhs_gmem, rhs_gmem, out_gmem):
    w, j = jax.lax.axis_index("item"), jax.lax.axis_index("n")
    group, tile = meta_gmem[w], meta_gmem[num_items + w]

    def acc_scope(acc_ref):
      plgpu.emit_pipeline(
          lambda _, a_smem, b_smem: plgpu.wgmma(acc_ref, a_smem, b_smem),
          grid=(k // tk,),
          in_specs=[plgpu.BlockSpec((tm, tk), lambda kk: (tile, kk),
                                    transforms=_transforms(tk, dtype)),
                    plgpu.BlockSpec((tk, tn), lambda kk: (kk, j),
                                    transforms=_transforms(tn, dtype))],
          max_concurrent_steps=2)(lhs_gmem, rhs_gmem.at[group])
      return acc_ref[...]

    acc = pl.run_scoped(acc_scope, plgpu.ACC((tm, tn), jnp.float32))

    def store(o_smem):
      o_smem[...] = acc
      plgpu.commit_smem()
      plgpu.copy_smem_to_gmem(o_smem, out_gmem.at[w, :, pl.ds(j * tn, tn)])
      plgpu.wait_smem_to_gmem(0)

    pl.run_scoped(store, plgpu.SMEM((tm, tn), jnp.float32))

  return plgpu.kernel(
      body,
      out_type=jax.ShapeDtypeStruct((num_items, tm, n), jnp.float32),
      grid=(num_items, n // tn), grid_names=("item", "n"),
      compiler_params=compiler_params, interpret=_common.mosaic_gpu_interpret(interpret))(meta, lhs, rhs)
