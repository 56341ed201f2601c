"""Pallas kernel bodies: megablox-style grouped matmul and the routing mask.

Grouped matmul (TPU layout, also run by the CPU interpreter): grid
(tiles_n, work items, tiles_k). A work item is one (group, m-tile) pair whose
rows overlap; only non-empty groups get work items, so the weights of an
expert with no tokens are never loaded (megablox `visit_empty_groups=False`).
The metadata arrives by scalar prefetch and drives the BlockSpec index maps.
Work items past `num_work` repeat the last item's block indices (no new DMA)
and compute nothing.

GPU (Triton) has no scalar prefetch, so `gmm_gpu_kernel` takes one work item
per program, reads the metadata from an ordinary int32 input, loops over K
with dynamic slices of the full weight ref, and writes a per-item output tile
(`ops` sums the tiles of each m-tile; other groups' rows are masked to 0).
"""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def gmm_kernel(offsets_ref, group_ids_ref, m_tile_ids_ref, num_work_ref,  # scalar prefetch
               lhs_ref, rhs_ref, out_ref, acc_ref, *, tm: int, num_k: int):
  """TPU / interpret body: work item w, K step kk; accumulates lhs @ rhs[group] in `acc_ref`
  and writes the group's rows of the m-tile at the last K step (module docstring)."""
  w, kk = pl.program_id(1), pl.program_id(2)
  valid = w < num_work_ref[0]

  @pl.when(kk == 0)
  def _zero():
    acc_ref[...] = jnp.zeros_like(acc_ref)

  @pl.when(valid)
  def _accumulate():
    acc_ref[...] += jnp.dot(lhs_ref[...].astype(jnp.float32), rhs_ref[...].astype(jnp.float32),
                            preferred_element_type=jnp.float32)

  @pl.when(kk == num_k - 1)
  def _store():
    g, tile = group_ids_ref[w], m_tile_ids_ref[w]
    rows = tile * tm + jax.lax.broadcasted_iota(jnp.int32, out_ref.shape, 0)
    mine = (rows >= offsets_ref[g]) & (rows < offsets_ref[g + 1]) & valid
    # First visit of this m-tile: start from zeros (rows of no group stay 0).
    first = (w == 0) | (m_tile_ids_ref[jnp.maximum(w - 1, 0)] != tile)
    prev = jnp.where(first, jnp.zeros(out_ref.shape, out_ref.dtype), out_ref[...])
    out_ref[...] = jnp.where(mine, acc_ref[...].astype(out_ref.dtype), prev)


def gmm_gpu_kernel(meta_ref, lhs_ref, rhs_ref, out_ref, *, tm: int, tk: int, tn: int,
                   num_k: int, num_groups: int):
  """Triton body: one work item and one n-tile per program, K looped inside; writes the
  item's output tile with other groups' rows masked to 0 (module docstring)."""
  # meta = [offsets (g + 1), group_ids (W), m_tile_ids (W), num_work (1)].
  w, j = pl.program_id(0), pl.program_id(1)
  g = meta_ref[num_groups + 1 + w]
  tile = meta_ref[num_groups + 1 + pl.num_programs(0) + w]
  num_work = meta_ref[num_groups + 1 + 2 * pl.num_programs(0)]
  start, end = meta_ref[g], meta_ref[g + 1]

  def body(kk, acc):
    a = lhs_ref[pl.ds(tile * tm, tm), pl.ds(kk * tk, tk)]
    b = rhs_ref[g, pl.ds(kk * tk, tk), pl.ds(j * tn, tn)]
    return acc + jnp.dot(a.astype(jnp.float32), b.astype(jnp.float32))

  acc = jax.lax.fori_loop(0, num_k, body, jnp.zeros((tm, tn), jnp.float32))
  rows = tile * tm + jax.lax.broadcasted_iota(jnp.int32, (tm, tn), 0)
  mine = (rows >= start) & (rows < end) & (w < num_work)
  out_ref[...] = jnp.where(mine, acc, 0.0).astype(out_ref.dtype)


def route_kernel(probs_ref, mask_ref, w_ref, *, mode: str, k: int, k0: int, p: float,
                 max_p: int):
  """Routing mask of one whole batch [b, N] (OEA pools every row).

  Non-finite rows (the reference's rule) get an empty mask and NaN weights and
  are left out of the OEA union.

  Ranks and rank-ordered sums use a static loop over experts; column j is
  extracted by a masked row reduction (no sort, no slices, no 3-D
  temporaries: Triton has no lowering for `slice`), so it lowers on TPU and GPU.
  """
  raw = probs_ref[...]
  b, n = raw.shape
  # Non-finite logit rows arrive as all-NaN softmax rows (x != x is NaN's
  # test): zeroed so no NaN reaches the ranks, and dropped from every mask.
  bad = jnp.max((raw != raw).astype(jnp.int32), axis=1, keepdims=True) > 0  # [b, 1]
  probs = jnp.where(bad, 0.0, raw)
  col = jax.lax.broadcasted_iota(jnp.int32, (b, n), 1)

  def column(x, j):  # x[:, j:j + 1]
    return jnp.sum(jnp.where(col == j, x, jnp.zeros_like(x)), axis=1, keepdims=True)

  rank = jnp.zeros((b, n), jnp.int32)
  for j in range(n):
    pj = column(probs, j)
    rank += ((pj > probs) | ((pj == probs) & (j < col))).astype(jnp.int32)
  if mode in ("topk", "pruned"):
    mask = (rank < (k if mode == "topk" else k0)) & ~bad
  else:
    if p >= 1.0:
      n_base = jnp.full((b, 1), k0, jnp.int32)
    else:
      before = jnp.zeros((b, n), jnp.float32)
      for j in range(n):
        before += jnp.where(column(rank, j) < rank, column(probs, j), 0.0)
      t = jnp.sum((before < p).astype(jnp.int32), axis=1, keepdims=True)
      n_base = jnp.minimum(k0, t)
    base = (rank < n_base) & ~bad
    active = jnp.max(base.astype(jnp.int32), axis=0, keepdims=True) > 0  # [1, N]
    cand = active & ~base & (rank < max_p)
    order = jnp.zeros((b, n), jnp.int32)
    for j in range(n):
      cj = column(cand.astype(jnp.int32), j) > 0
      order += (cj & (column(rank, j) <= rank)).astype(jnp.int32)
    mask = (base | (cand & (order <= k - n_base))) & ~bad
  w = jnp.where(mask, probs, 0.0)
  total = jnp.sum(w, axis=1, keepdims=True)
  w = jnp.where(total > 0, w / jnp.where(total > 0, total, 1.0), 0.0)
  w_ref[...] = jnp.where(bad, jnp.nan, w)
  mask_ref[...] = mask.astype(jnp.int32)
