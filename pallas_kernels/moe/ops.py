"""Public MoE kernel API: megablox-style grouped matmul and the routing kernel.

Dispatch is `pallas_kernels._common.resolve` (tokamax style):
`implementation=None` runs Mosaic TPU on TPU, the Mosaic GPU kernel on GPU
where there is one for the input (else the XLA reference) and the XLA
reference on CPU; "pallas" (or a variant by name) runs the kernel, interpreted
on CPU; "xla" the reference. `interpret=True` asks for the kernel in interpret
mode. `platform` picks the variant and compiler params when lowering for
another platform than the default backend ("tpu": the scalar-prefetch kernel;
"cuda"/"rocm"/"gpu": the GPU variant; None: the default backend, and the CPU
interpreter runs the TPU variant); it never turns interpret mode on.

Variants: gmm has Mosaic TPU, Mosaic GPU (`mgpu.py`, the GPU default for
bfloat16/float16 operands whose tiles it takes; Hopper wgmma) and Triton;
route has Mosaic TPU and Triton. Triton is deprecated by JAX and runs only when
named, so on GPU float32 gmm and route default to the XLA reference
(`jax.lax.ragged_dot`, and the jnp router).
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax import Array
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jaxtyping import Bool, Float, Int

from pallas_kernels import _common, tuning
from pallas_kernels.moe import kernel, mgpu, reference

# The op name of gmm in tuning tables; its shape key is (m, k, n, g).
TUNING_OP = "gmm"
GMM_VARIANTS = (_common.MOSAIC_TPU, _common.MOSAIC_GPU, _common.TRITON)
# Mosaic GPU's wgmma takes 16-bit operands (one dtype) here; others use XLA on GPU.
GMM_VARIANTS_F32 = (_common.MOSAIC_TPU, _common.TRITON)
ROUTE_VARIANTS = (_common.MOSAIC_TPU, _common.TRITON)


@dataclasses.dataclass(frozen=True)
class GmmBlockSizes:
  """Tiles of the grouped matmul: m rows, k contraction, n output columns.

  Each is clipped to its dimension, and the operands are zero-padded to multiples
  of the tiles (exact: padded rows and columns add zeros and are sliced off). On TPU, tiles should be multiples of (8, 128) or the full dims; on
  GPU (Triton), powers of two >= 16.
  """
  m: int = 128
  k: int = 128
  n: int = 128


def make_group_metadata(group_sizes: Int[Array, "g"], m: int, tm: int):
  """Megablox-style CSR metadata of the (group, m-tile) work items.

  Only non-empty groups get work items; there are at most
  `ceil(m / tm) + g - 1` of them (static bound) when `sum(group_sizes) <= m`.

  Returns:
    (offsets int32 [g + 1], group_ids int32 [W], m_tile_ids int32 [W],
    num_work int32 [1]); items past num_work repeat the last valid one.
  """
  g = group_sizes.shape[0]
  tiles_m = -(-m // tm)
  num_items = tiles_m + g - 1
  gs = group_sizes.astype(jnp.int32)
  ends = jnp.cumsum(gs)
  starts = ends - gs
  first = starts // tm
  ntiles = jnp.where(gs > 0, (ends - 1) // tm - first + 1, 0)
  cum = jnp.cumsum(ntiles)
  num_work = cum[-1]
  w = jnp.minimum(jnp.arange(num_items, dtype=jnp.int32), jnp.maximum(num_work - 1, 0))
  group_ids = jnp.minimum((cum[None, :] <= w[:, None]).sum(-1), g - 1).astype(jnp.int32)
  m_tile_ids = (first[group_ids] + w - (cum - ntiles)[group_ids]).astype(jnp.int32)
  offsets = jnp.concatenate([jnp.zeros((1,), jnp.int32), ends])
  return offsets, group_ids, jnp.minimum(m_tile_ids, tiles_m - 1), num_work.reshape(1)


def _tiles(lhs, rhs, block: GmmBlockSizes):
  if not all(isinstance(b, int) and b > 0 for b in (block.m, block.k, block.n)):
    raise ValueError(f"gmm: block sizes must be positive ints, got {block}")
  m, k = lhs.shape
  n = rhs.shape[2]
  return min(block.m, max(m, 1)), min(block.k, k), min(block.n, n)


@functools.partial(jax.jit, static_argnames=("block", "backend"))
def _gmm_pallas(lhs, rhs, group_sizes, *, block, backend):
  m, n_out = lhs.shape[0], rhs.shape[2]
  tm, tk, tn = _tiles(lhs, rhs, block)
  # Zero rows of lhs (past every group), zero K columns (add 0 to every dot) and zero N
  # columns (sliced off) make each dimension a multiple of its tile.
  mp = -(-m // tm) * tm
  lhs_p = jnp.pad(lhs, ((0, mp - m), (0, -lhs.shape[1] % tk)))
  rhs = jnp.pad(rhs, ((0, 0), (0, -rhs.shape[1] % tk), (0, -n_out % tn)))
  k = lhs_p.shape[1]
  g, _, n = rhs.shape
  offsets, group_ids, m_tile_ids, num_work = make_group_metadata(group_sizes, mp, tm)
  num_items = group_ids.shape[0]
  out_dtype = jnp.float32
  if backend.kind == _common.MOSAIC_GPU:
    mgpu.check_tiles(tm, tk, tn, lhs.dtype)
    tiles = mgpu.gmm_tiles(jnp.concatenate([group_ids, m_tile_ids]), lhs_p, rhs, tm=tm, tk=tk,
                           tn=tn, num_items=num_items,
                           compiler_params=_common.compiler_params(backend),
                           interpret=backend.interpret)
    # Keep each item's own group rows (and nothing of the padding items).
    rows = m_tile_ids[:, None] * tm + jnp.arange(tm)[None, :]  # [W, tm]
    mine = ((rows >= offsets[group_ids][:, None]) & (rows < offsets[group_ids + 1][:, None])
            & (jnp.arange(num_items) < num_work[0])[:, None])
    tiles = jnp.where(mine[:, :, None], tiles, 0.0)
    out = jnp.zeros((mp // tm, tm, n), out_dtype).at[m_tile_ids].add(tiles).reshape(mp, n)
  elif backend.kind == _common.TRITON:
    meta = jnp.concatenate([offsets, group_ids, m_tile_ids, num_work])
    tiles = pl.pallas_call(
        functools.partial(kernel.gmm_gpu_kernel, tm=tm, tk=tk, tn=tn, num_k=k // tk,
                          num_groups=g),
        out_shape=jax.ShapeDtypeStruct((num_items, tm, n), out_dtype),
        grid=(num_items, n // tn),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)] * 3,
        out_specs=pl.BlockSpec((None, tm, tn), lambda w, j: (w, 0, j)),
        compiler_params=_common.compiler_params(backend),
        interpret=backend.interpret, name="jaxlab_moe_gmm_gpu")(meta, lhs_p, rhs)
    out = jnp.zeros((mp // tm, tm, n), out_dtype).at[m_tile_ids].add(tiles).reshape(mp, n)
  else:
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=4,
        grid=(n // tn, num_items, k // tk),
        in_specs=[
            pl.BlockSpec((tm, tk), lambda j, w, kk, off, gid, mt, nw: (mt[w], kk)),
            pl.BlockSpec((None, tk, tn), lambda j, w, kk, off, gid, mt, nw: (gid[w], kk, j)),
        ],
        out_specs=pl.BlockSpec((tm, tn), lambda j, w, kk, off, gid, mt, nw: (mt[w], j)),
        scratch_shapes=[pltpu.VMEM((tm, tn), jnp.float32)])
    out = pl.pallas_call(
        functools.partial(kernel.gmm_kernel, tm=tm, num_k=k // tk),
        out_shape=jax.ShapeDtypeStruct((mp, n), out_dtype),
        grid_spec=grid_spec,
        compiler_params=_common.compiler_params(backend, ("parallel", "arbitrary", "arbitrary")),
        interpret=backend.interpret, name="jaxlab_moe_gmm")(
            offsets, group_ids, m_tile_ids, num_work, lhs_p, rhs)
  # Rows past sum(group_sizes) belong to no group (zeros, as in ragged_dot);
  # tiles no work item visits are never written by the kernel.
  rows = jnp.arange(mp)[:, None]
  return jnp.where(rows < offsets[-1], out, 0.0)[:m, :n_out]


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4))
def _gmm(lhs, rhs, group_sizes, block, backend):
  return _gmm_pallas(lhs, rhs, group_sizes, block=block, backend=backend)


def _gmm_fwd(lhs, rhs, group_sizes, block, backend):
  return _gmm(lhs, rhs, group_sizes, block, backend), (lhs, rhs, group_sizes)


def _gmm_bwd(block, backend, res, g):
  del block, backend
  lhs, rhs, group_sizes = res
  _, vjp = jax.vjp(lambda a, b: reference.gmm_reference(a, b, group_sizes), lhs, rhs)
  d_lhs, d_rhs = vjp(g)
  return d_lhs.astype(lhs.dtype), d_rhs.astype(rhs.dtype), None


_gmm.defvjp(_gmm_fwd, _gmm_bwd)


def gmm(lhs: Float[Array, "m k"], rhs: Float[Array, "g k n"], group_sizes: Int[Array, "g"], *,
        block: GmmBlockSizes | None = None, implementation: str | None = None,
        interpret: bool | None = None, platform: str | None = None) -> Float[Array, "m n"]:
  """Grouped (ragged) matmul, equal to `jax.lax.ragged_dot(lhs, rhs, group_sizes)`.

  Rows of `lhs` are sorted by group: rows `[s_g, s_g + group_sizes[g])` are
  multiplied by `rhs[g]`; rows past `sum(group_sizes)` give zeros. Experts with
  no rows are never visited, so their weights are never loaded.

  Args:
    lhs: [m, k] rows sorted by group.
    rhs: [g, k, n] one matrix per group.
    group_sizes: int32 [g], sum <= m.
    block: tiles (`GmmBlockSizes`). None: the active tuning table's entry for
      ("gmm", (m, k, n, g), lhs.dtype, device) (`pallas_kernels.tuning`), else
      `GmmBlockSizes()`.
    implementation: None (best backend: Mosaic TPU on TPU; on GPU Mosaic GPU
      for 16-bit operands whose tiles it takes, else XLA; XLA on CPU),
      "pallas", "mosaic_tpu", "mosaic_gpu", "triton" (deprecated; by name
      only) or "xla" (the reference).
    interpret: True runs the kernel in interpret mode; None = only when it
      runs on this host's CPU.
    platform: kernel variant / compiler params (see module docstring).

  Returns:
    [m, n] float32. The gradient (w.r.t. lhs and rhs) is the reference's
    (custom_vjp).

  Raises:
    ValueError: bad shapes; "pallas" on GPU for float32 operands (no Mosaic
      GPU kernel; Triton only by name) or tiles Mosaic GPU cannot take.

  Example:
    >>> import jax.numpy as jnp
    >>> out = gmm(jnp.ones((4, 8)), jnp.ones((2, 8, 16)), jnp.array([1, 3], jnp.int32))
    >>> out.shape
    (4, 16)
  """
  if lhs.ndim != 2 or rhs.ndim != 3 or lhs.shape[1] != rhs.shape[1]:
    raise ValueError(f"gmm: need lhs [m, k] and rhs [g, k, n], got {lhs.shape} and {rhs.shape}")
  if group_sizes.shape != (rhs.shape[0],) or not jnp.issubdtype(group_sizes.dtype, jnp.integer):
    raise ValueError(f"gmm: group_sizes must be int [{rhs.shape[0]}], got "
                     f"{group_sizes.dtype}{list(group_sizes.shape)}")
  sixteen = lhs.dtype == rhs.dtype and lhs.dtype.itemsize == 2
  backend = _common.resolve("gmm", implementation, interpret=interpret, platform=platform,
                            variants=GMM_VARIANTS if sixteen else GMM_VARIANTS_F32)
  if backend.is_xla:
    return reference.gmm_reference(lhs, rhs, group_sizes)
  if block is None:
    tuned = tuning.lookup(TUNING_OP, (*lhs.shape, rhs.shape[2], rhs.shape[0]), lhs.dtype,
                          platform)
    block = GmmBlockSizes() if tuned is None else GmmBlockSizes(
        m=tuned.block_m, k=tuned.block_k, n=tuned.block_n)
  if backend.kind == _common.MOSAIC_GPU and implementation is None:
    tiles = _tiles(lhs, rhs, block)  # a malformed block still raises
    try:
      mgpu.check_tiles(*tiles, lhs.dtype)
    except ValueError:  # tiles Mosaic GPU cannot take: the reference, never Triton
      return reference.gmm_reference(lhs, rhs, group_sizes)
  return _gmm(lhs, rhs, group_sizes.astype(jnp.int32), block, backend)


@functools.partial(jax.jit, static_argnames=("mode", "k", "k0", "p", "max_p", "backend"))
def _route_pallas(probs, *, mode, k, k0, p, max_p, backend):
  b, n = probs.shape
  mask, w = pl.pallas_call(
      functools.partial(kernel.route_kernel, mode=mode, k=k, k0=k0, p=p, max_p=max_p),
      out_shape=(jax.ShapeDtypeStruct((b, n), jnp.int32),
                 jax.ShapeDtypeStruct((b, n), jnp.float32)),
      compiler_params=_common.compiler_params(backend), interpret=backend.interpret,
      name=f"jaxlab_moe_route_{mode}")(probs)
  return mask.astype(bool), w


# The reference as one jitted XLA program, so eager `implementation=None`
# calls on CPU do not dispatch its ops one by one.
_route_xla = jax.jit(reference.route_reference,
                     static_argnames=("routing_name", "k", "k0", "p", "max_p"))


def route(logits: Float[Array, "b n"], *, routing: str, k: int, k0: int | None = None,
          p: float = 1.0, max_p: int | None = None, implementation: str | None = None,
          interpret: bool | None = None, platform: str | None = None
          ) -> tuple[Bool[Array, "b n"], Float[Array, "b n"]]:
  """Routing mask and renormalized weights of one batch, equal to `jaxlab.moe.route`.

  The softmax runs in XLA (bit-identical to the reference); the kernel ranks
  the experts and builds the top-k / pruned / OEA mask in one program holding
  the whole batch (OEA pools the batch's base experts). A non-finite logit row
  follows the reference's rule (no experts, NaN weights, left out of the OEA
  union): its softmax row is all NaN, which the kernel detects.

  Args:
    logits: [b, N] router logits (one batch).
    routing, k, k0, p, max_p: as `jaxlab.moe.route`.
    implementation: None (best backend: Mosaic TPU on TPU, else XLA),
      "pallas" (no GPU kernel: raises on GPU), "mosaic_tpu", "triton"
      (deprecated; by name only) or "xla" (the reference).
    interpret: True runs the kernel in interpret mode; None = only when it
      runs on this host's CPU.
    platform: kernel variant / compiler params (see module docstring).

  Returns:
    (mask [b, N] bool, weights [b, N] float32).

  Example:
    >>> import jax
    >>> mask, w = route(jax.random.normal(jax.random.key(0), (8, 16)), routing="oea", k=4, k0=2)
    >>> mask.shape
    (8, 16)
  """
  backend = _common.resolve("route", implementation, interpret=interpret, platform=platform,
                            variants=ROUTE_VARIANTS)
  if backend.is_xla:
    return _route_xla(logits, routing_name=routing, k=k, k0=k0, p=p, max_p=max_p)
  # Validates every argument exactly as the reference does (and is cheap to trace).
  jax.eval_shape(lambda x: reference.route_reference(x, routing_name=routing, k=k, k0=k0, p=p,
                                                     max_p=max_p), logits)
  n = logits.shape[-1]
  probs = jax.nn.softmax(logits.astype(jnp.float32), axis=-1)
  return _route_pallas(probs, mode=routing, k=k, k0=k0 if k0 is not None else k, p=float(p),
                       max_p=n if max_p is None else max_p, backend=backend)
