"""MoE Pallas kernels vs their references (interpret mode) and cross-lowering.

Kernel tests ask for the kernel (`implementation="pallas"` or `interpret=True`):
on CPU `implementation=None` is the XLA reference itself.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pallas_kernels import moe as pm

BLOCK = pm.GmmBlockSizes(m=8, k=16, n=16)
LHS = jax.random.normal(jax.random.key(0), (30, 32))  # 30 rows: not a multiple of the tile
RHS = jax.random.normal(jax.random.key(1), (5, 32, 16))


@pytest.mark.parametrize("platform", [None, "cuda"])  # TPU (scalar prefetch) / GPU variants
@pytest.mark.parametrize("sizes", [[5, 0, 12, 0, 9], [0, 0, 0, 0, 0], [30, 0, 0, 0, 0],
                                   [1, 2, 3, 4, 5]])
def test_gmm_matches_ragged_dot(platform, sizes):
  gs = jnp.asarray(sizes, jnp.int32)
  impl = "triton" if platform else None  # the Mosaic GPU variant needs a GPU to run
  out = pm.gmm(LHS, RHS, gs, block=BLOCK, platform=platform, interpret=True, implementation=impl)
  np.testing.assert_allclose(out, pm.gmm_reference(LHS, RHS, gs), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("platform", [None, "cuda"])
def test_gmm_pads_k_and_n_that_the_tiles_do_not_divide(platform):
  """K = 40, N = 24 with 16-wide tiles (and the default 128 tiles against K = 200): zero
  columns pad both (before, a ValueError: the default tiles could not run d_model = 200)."""
  gs = jnp.asarray([3, 0, 7], jnp.int32)
  impl = "triton" if platform else None
  for k, block in ((40, BLOCK), (200, None)):
    lhs = jax.random.normal(jax.random.key(2), (10, k))
    rhs = jax.random.normal(jax.random.key(3), (3, k, 24))
    out = pm.gmm(lhs, rhs, gs, block=block, platform=platform, interpret=True,
                 implementation=impl)
    assert out.shape == (10, 24)
    np.testing.assert_allclose(out, pm.gmm_reference(lhs, rhs, gs), rtol=1e-5, atol=1e-5)


def test_gmm_gradient_matches_reference():
  gs = jnp.asarray([7, 0, 13, 0, 6], jnp.int32)
  f = lambda a, b: (jnp.sin(pm.gmm(a, b, gs, block=BLOCK, implementation="pallas")) ** 2).sum()
  fr = lambda a, b: (jnp.sin(pm.gmm_reference(a, b, gs)) ** 2).sum()
  for g, gr in zip(jax.grad(f, (0, 1))(LHS, RHS), jax.grad(fr, (0, 1))(LHS, RHS),
                   strict=True):
    np.testing.assert_allclose(g, gr, rtol=1e-4, atol=1e-4)


def test_metadata_visits_only_non_empty_groups():
  gs = jnp.asarray([5, 0, 12, 0, 9], jnp.int32)
  offsets, group_ids, m_tile_ids, num_work = pm.make_group_metadata(gs, 32, 8)
  nw = int(num_work[0])
  # Group 0 rows 0-4 (tile 0); group 2 rows 5-16 (tiles 0-2); group 4 rows 17-25 (tiles 2-3).
  assert nw == 1 + 3 + 2 and group_ids.shape == (4 + 5 - 1,)
  np.testing.assert_array_equal(group_ids[:nw], [0, 2, 2, 2, 4, 4])
  np.testing.assert_array_equal(m_tile_ids[:nw], [0, 0, 1, 2, 2, 3])
  np.testing.assert_array_equal(offsets, [0, 5, 5, 17, 17, 26])
  # Padding items repeat the last one (no new weight tile is fetched).
  assert (group_ids[nw:] == 4).all() and (m_tile_ids[nw:] == 3).all()


@pytest.mark.parametrize("routing,k0,p,max_p", [("topk", None, 1.0, None), ("pruned", 2, 1.0, None),
                                                ("oea", 1, 1.0, None), ("oea", 3, 0.4, 6)])
def test_route_kernel_matches_jnp_router(routing, k0, p, max_p):
  logits = jax.random.normal(jax.random.key(2), (8, 16)) * 2
  logits = logits.at[0, :4].set(1.0)  # ties
  mask, w = pm.route(logits, routing=routing, k=4, k0=k0, p=p, max_p=max_p, interpret=True)
  mask_r, w_r = pm.route_reference(logits, routing_name=routing, k=4, k0=k0, p=p, max_p=max_p)
  np.testing.assert_array_equal(mask, mask_r)
  np.testing.assert_allclose(w, w_r, rtol=1e-6, atol=1e-7)


def test_route_kernel_follows_the_nonfinite_rule():
  # Rows 1-3 are non-finite (NaN, +Inf, all -Inf); row 4 has an ordinary -Inf expert.
  logits = np.array(jax.random.normal(jax.random.key(3), (8, 16)), np.float32) * 2
  logits[1, 3], logits[2, 7], logits[3, :], logits[4, 0] = np.nan, np.inf, -np.inf, -np.inf
  for routing, k0 in (("topk", None), ("oea", 1)):
    mask, w = pm.route(jnp.asarray(logits), routing=routing, k=4, k0=k0, interpret=True)
    mask_r, w_r = pm.route_reference(jnp.asarray(logits), routing_name=routing, k=4, k0=k0)
    np.testing.assert_array_equal(mask, mask_r)
    np.testing.assert_allclose(w, w_r, rtol=1e-6, atol=1e-7)  # NaN == NaN here
    assert not np.asarray(mask)[1:4].any() and np.isnan(np.asarray(w)[1:4]).all()
    assert np.isfinite(np.asarray(w)[[0, 4, 5, 6, 7]]).all()


def test_dispatch_none_is_xla_on_cpu():
  if jax.default_backend() != "cpu":
    pytest.skip("CPU dispatch")
  gs = jnp.asarray([5, 0, 12, 0, 9], jnp.int32)
  jaxpr = lambda f: str(jax.make_jaxpr(f)(LHS))
  assert "pallas_call" not in jaxpr(lambda a: pm.gmm(a, RHS, gs))
  assert "pallas_call" in jaxpr(lambda a: pm.gmm(a, RHS, gs, block=BLOCK, implementation="pallas"))
  assert "pallas_call" not in jaxpr(lambda a: pm.route(a[:, :16], routing="topk", k=2)[1])
  assert "pallas_call" in jaxpr(lambda a: pm.route(a[:, :16], routing="topk", k=2,
                                                    interpret=True)[1])


def test_bad_inputs():
  with pytest.raises(ValueError, match="block"):
    pm.gmm(LHS, RHS, jnp.zeros((5,), jnp.int32), block=pm.GmmBlockSizes(8, 0, 16),
           implementation="pallas")
  with pytest.raises(ValueError, match="not available"):
    pm.route(jnp.zeros((4, 8)), routing="topk", k=2, implementation="mosaic_gpu")
  with pytest.raises(ValueError, match="k0"):
    pm.route(jnp.zeros((4, 8)), routing="oea", k=2, k0=3)


def test_gmm_mosaic_gpu_lowers_from_cpu_and_is_the_16_bit_gpu_default(lowering_target):
  lhs = jax.ShapeDtypeStruct((200, 256), jnp.bfloat16)  # 200 rows: padded to the 128-row tile
  rhs = jax.ShapeDtypeStruct((4, 256, 256), jnp.bfloat16)
  gs = jax.ShapeDtypeStruct((4,), jnp.int32)
  with lowering_target("cuda"):
    low = jax.jit(lambda a, b, c: pm.gmm(a, b, c, interpret=False, platform="cuda")
                  ).trace(lhs, rhs, gs).lower(lowering_platforms=("cuda",))
  assert "mosaic_gpu" in low.as_text() and "triton" not in low.as_text()
  with pytest.raises(ValueError, match="tiles need m % 64"):
    pm.gmm(jnp.ones((64, 64), jnp.bfloat16), jnp.ones((2, 64, 64), jnp.bfloat16),
           jnp.array([32, 32], jnp.int32), block=pm.GmmBlockSizes(m=32, k=64, n=64),
           implementation="mosaic_gpu", interpret=False, platform="cuda")
  with pytest.raises(ValueError, match="not available"):  # float32: Triton only on GPU
    pm.gmm(LHS, RHS, jnp.zeros((5,), jnp.int32), implementation="mosaic_gpu", platform="cuda")


def test_gmm_mosaic_gpu_variant_interpreted_matches_reference():
  # JAX's GPU interpreter runs the plgpu kernel itself (TMA pipeline, wgmma, per-item masking);
  # an empty group and a group crossing the 128-row tile boundary exercise the metadata.
  k1, k2 = jax.random.split(jax.random.key(3))
  lhs = jax.random.normal(k1, (128, 128), jnp.bfloat16)
  rhs = jax.random.normal(k2, (3, 128, 64), jnp.bfloat16)
  gs = jnp.array([40, 0, 88], jnp.int32)
  out = pm.gmm(lhs, rhs, gs, implementation="mosaic_gpu", interpret=True, platform="cuda")
  ref = pm.gmm(lhs, rhs, gs, implementation="xla")
  np.testing.assert_allclose(np.asarray(out, np.float32), np.asarray(ref, np.float32),
                             rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("platform,marker", [("tpu", "tpu_custom_call"), ("cuda", "triton")])
def test_kernels_lower_for_tpu_and_gpu_from_cpu(platform, marker, lowering_target):
  impl = "triton" if platform == "cuda" else None
  lhs = jax.ShapeDtypeStruct((256, 256), jnp.float32)
  rhs = jax.ShapeDtypeStruct((4, 256, 256), jnp.float32)
  gs = jax.ShapeDtypeStruct((4,), jnp.int32)
  logits = jax.ShapeDtypeStruct((16, 32), jnp.float32)
  with lowering_target(platform):
    low = jax.jit(lambda a, b, c: pm.gmm(a, b, c, interpret=False, platform=platform,
                                         implementation=impl)
                  ).trace(lhs, rhs, gs).lower(lowering_platforms=(platform,))
    assert marker in low.as_text().lower()
    low = jax.jit(lambda x: pm.route(x, routing="oea", k=4, k0=2, interpret=False,
                                     platform=platform, implementation=impl)).trace(logits).lower(
                                         lowering_platforms=(platform,))
    assert marker in low.as_text().lower()
