"""The MoE FFN: implementations agree, routing per position, aux loss, transformer."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab import moe
from jaxlab.nn import Transformer, TransformerConfig

X = jax.random.normal(jax.random.key(1), (4, 3, 8))


def _apply(impl, routing, k0, x=X):
  layer = moe.MoE(num_experts=8, k=3, d_ff=16, routing=routing, k0=k0, impl=impl)
  params = layer.init(jax.random.key(0), x)["params"]
  y, inter = layer.apply({"params": params}, x, mutable=["intermediates"])
  return layer, params, y, inter["intermediates"]


@pytest.mark.parametrize("routing,k0", [("topk", None), ("pruned", 1), ("oea", 2)])
def test_impls_agree(routing, k0):
  ys = [_apply(impl, routing, k0)[2] for impl in moe.IMPLS]
  for y in ys[1:]:
    np.testing.assert_allclose(y, ys[0], rtol=1e-5, atol=1e-5)


def test_matches_explicit_per_token_sum_and_oea_pools_each_position():
  layer, params, y, inter = _apply("dense", "oea", 1)
  unboxed = nn.meta.unbox(params)
  logits = jnp.einsum("btd,dn->btn", X, unboxed["router"]["kernel"])
  expected = np.zeros(X.shape, np.float32)
  actives = []
  for t in range(X.shape[1]):  # position t = one decode step of batch 4
    mask, w = moe.oea_route(logits[:, t], k0=1, k_max=3)
    actives.append(int(moe.num_active_experts(mask)))
    for i in range(X.shape[0]):
      for e in np.flatnonzero(mask[i]):
        x = X[i, t]
        h = nn.silu(x @ unboxed["w_gate"][e]) * (x @ unboxed["w_up"][e])
        expected[i, t] += float(w[i, e]) * np.asarray(h @ unboxed["w_down"][e])
  np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(inter["active_experts"][0], np.mean(actives), rtol=1e-6)


def test_gradients_agree_and_params_name_the_expert_axis():
  def loss(impl):
    layer = moe.MoE(num_experts=8, k=2, d_ff=16, impl=impl)
    params = layer.init(jax.random.key(0), X)["params"]
    f = lambda p: (layer.apply({"params": p}, X) ** 2).sum()
    return params, jax.grad(f)(params)
  params, g_dense = loss("dense")
  _, g_rd = loss("ragged_dot")
  _, g_pl = loss("pallas")
  assert params["w_gate"].names == ("expert", None, None)
  for g in (g_rd, g_pl):
    for a, b in zip(jax.tree.leaves(nn.meta.unbox(g)), jax.tree.leaves(nn.meta.unbox(g_dense)),
                    strict=True):
      np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_in_transformer_with_aux_loss():
  cfg = TransformerConfig(d_model=16, num_layers=2, num_heads=2, num_kv_heads=1,
                          ffn=moe.MoEFFN(num_experts=8, k=2, d_ff=16, impl="dense"))
  model = Transformer(cfg)
  tokens = jnp.arange(12, dtype=jnp.int32).reshape(2, 6)
  params = nn.meta.unbox(model.init(jax.random.key(0), tokens)["params"])
  logits, inter = model.apply({"params": params}, tokens, mutable=["intermediates"])
  assert logits.shape == (2, 6, 256)
  aux = moe.load_balance_loss(inter)
  per_layer = [float(inter["intermediates"][f"block_{i}"]["mlp"]["load_balance_loss"][0])
               for i in range(2)]
  np.testing.assert_allclose(aux, sum(per_layer), rtol=1e-6)
  assert all(v >= 1.0 - 1e-5 for v in per_layer)  # N * sum f P >= 1 at near-uniform P
  assert 2.0 <= float(moe.mean_active_experts(inter)) <= 4.0  # 2 rows x top-2


@pytest.mark.parametrize("impl", moe.IMPLS)
def test_nonfinite_token_is_its_own_problem(impl, routing="oea", k0=1):
  # Issue 17 finding 3: one NaN token changed the other tokens' outputs (its
  # all-N mask broke the expert grouping) and raised T. One position = one batch.
  x = X[:, :1]
  x_bad = x.at[1, 0, 0].set(jnp.nan)  # token 1's router logits are all NaN
  layer, params, y_bad, inter_bad = _apply(impl, routing, k0, x_bad)
  others = jnp.array([0, 2, 3])
  y_ref, inter_ref = layer.apply({"params": params}, x[others], mutable=["intermediates"])
  np.testing.assert_allclose(y_bad[others], y_ref, rtol=1e-6, atol=1e-6)
  assert np.isnan(np.asarray(y_bad[1])).all(), "the bad token's output must be NaN"
  np.testing.assert_array_equal(inter_bad["active_experts"][0],
                                inter_ref["intermediates"]["active_experts"][0])


def test_bad_config():
  with pytest.raises(ValueError, match="routing"):
    _apply("dense", "lynx", 1)
  with pytest.raises(ValueError, match="impl"):
    _apply("cuda", "topk", None)
