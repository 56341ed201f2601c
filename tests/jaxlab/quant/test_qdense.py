"""QDense and QuantPolicy: full-precision equivalence, overrides by path, kurtosis."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.nn import Transformer, TransformerConfig
from jaxlab.quant import QDense, QuantPolicy, fake_quant, qdense_factory, runtime_knobs

CFG = dict(d_model=32, num_layers=1, num_heads=4, num_kv_heads=2, d_ff=64)


def test_qdense_16_bits_equals_dense():
  x = jax.random.normal(jax.random.key(0), (2, 5, 32))
  dense = nn.Dense(8, use_bias=False)
  params = dense.init(jax.random.key(1), x)
  q = QDense(8, policy=QuantPolicy(w_bits=16, a_bits=16))
  np.testing.assert_array_equal(q.apply(params, x), dense.apply(params, x))


def test_qdense_w4a4_is_fake_quant_matmul():
  x = jax.random.normal(jax.random.key(0), (3, 32))
  q = QDense(8, policy=QuantPolicy(w_bits=4, a_bits=4, group_size=16))
  params = q.init(jax.random.key(1), x)
  w = params["params"]["kernel"]
  want = fake_quant(x, bits=4, group_size=16) @ fake_quant(w.T, bits=4, group_size=16).T
  np.testing.assert_allclose(q.apply(params, x), want, rtol=1e-6, atol=1e-6)


def test_non_dividing_group_raises():
  q = QDense(8, policy=QuantPolicy(group_size=24))
  with pytest.raises(ValueError, match="does not divide"):
    q.init(jax.random.key(0), jnp.ones((2, 32)))


def test_policy_override_by_path():
  policy = QuantPolicy(w_bits=4, a_bits=4, group_size=16, overrides={"mlp/down": {"a_bits": 8}})
  assert policy.resolve("block_1/mlp/down").a_bits == 8
  assert policy.resolve("block_1/mlp/up").a_bits == 4
  with pytest.raises(ValueError, match="unknown fields"):
    QuantPolicy(overrides={"mlp/down": {"bits": 8}})
  x = jax.random.normal(jax.random.key(0), (3, 32))
  params = QDense(8, policy=QuantPolicy(w_bits=16, a_bits=16)).init(jax.random.key(1), x)
  w4 = fake_quant(params["params"]["kernel"].T, bits=4, group_size=16).T
  for path, a_bits in (("block_0/mlp/down", 8), ("block_0/mlp/up", 4)):
    got = QDense(8, policy=policy, path_name=path).apply(params, x)
    np.testing.assert_allclose(got, fake_quant(x, bits=a_bits, group_size=16) @ w4, atol=1e-6)
  # In the model, the module's own scope path is matched: the override changes the output.
  tokens = jax.random.randint(jax.random.key(2), (2, 8), 0, 256)
  plain = Transformer(TransformerConfig(**CFG, dense=qdense_factory(
      QuantPolicy(w_bits=4, a_bits=4, group_size=16))))
  over = Transformer(TransformerConfig(**CFG, dense=qdense_factory(policy)))
  params = plain.init(jax.random.key(3), tokens)["params"]
  a, b = (m.apply({"params": params}, tokens) for m in (plain, over))
  assert not np.allclose(a, b)


def test_lm_head_stays_full_precision_and_kurtosis_sown():
  tokens = jax.random.randint(jax.random.key(2), (2, 8), 0, 256)
  model = Transformer(TransformerConfig(**CFG, dense=qdense_factory(QuantPolicy(group_size=16))))
  params = model.init(jax.random.key(0), tokens)["params"]
  _, state = model.apply({"params": params}, tokens, mutable=["kurtosis"])
  kurt = state["kurtosis"]["block_0"]
  assert set(kurt["attn"]) == {"q", "k", "v", "o"} and set(kurt["mlp"]) == {"gate", "up", "down"}
  assert "lm_head" not in state["kurtosis"]
  assert set(params["lm_head"]) == {"kernel"}


def test_runtime_knobs_match_static_policies():
  x = jax.random.normal(jax.random.key(4), (3, 32))
  dyn = QDense(8, policy=QuantPolicy(group_size=8, runtime_group_sizes=(8, 32, None)),
               path_name="mlp/down")
  variables = dyn.init(jax.random.key(0), x)
  apply = jax.jit(dyn.apply)
  for policy in (QuantPolicy(w_bits=16, a_bits=16), QuantPolicy(w_bits=4, a_bits=4, group_size=8),
                 QuantPolicy(w_bits=4, a_bits=16, group_size=None),
                 QuantPolicy(w_bits=4, a_bits=4, group_size=32,
                             overrides={"mlp/down": {"a_bits": 8}})):
    static = QDense(8, policy=policy, path_name="mlp/down")
    want = static.apply({"params": variables["params"]}, x)
    got = apply({"params": variables["params"],
                 "qat": runtime_knobs(policy, variables["qat"], prefix="mlp/down")}, x)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_runtime_group_sizes_refuse_an_unlisted_group():
  # Old code: G = 8 with runtime_group_sizes (16, None) was accepted everywhere and the
  # model silently ran per-channel groups (the jnp.select default), not G = 8.
  with pytest.raises(ValueError, match=r"w_group_size/group_size=8 is not one of runtime"):
    QuantPolicy(w_bits=4, a_bits=4, group_size=8, runtime_group_sizes=(16, None))
  with pytest.raises(ValueError, match=r"overrides\['mlp/down'\]: a_group_size/group_size=8"):
    QuantPolicy(group_size=16, runtime_group_sizes=(16, None),
                overrides={"mlp/down": {"a_group_size": 8}})
  with pytest.raises(ValueError, match="runtime_group_sizes entries"):
    QuantPolicy(group_size=16, runtime_group_sizes=(16, 0))
  QuantPolicy(w_bits=16, a_bits=16, runtime_group_sizes=(16,))  # full precision: G unused
  # Shapes only (jax.eval_shape): the checks run at trace time, nothing is compiled.
  x = jax.ShapeDtypeStruct((2, 32), jnp.float32)
  dyn = QDense(4, policy=QuantPolicy(group_size=16, runtime_group_sizes=(16, None)),
               path_name="mlp/down")
  variables = jax.eval_shape(dyn.init, jax.random.key(0), x)
  g8 = QuantPolicy(w_bits=4, a_bits=4, group_size=8)
  with pytest.raises(ValueError, match=r"runtime_knobs at 'mlp/down': w_group_size/group_size=8"):
    runtime_knobs(g8, variables["qat"], prefix="mlp/down", group_sizes=(16, None))
  # Without the sizes runtime_knobs cannot tell; under jit the model gives NaN, not another G.
  qat = runtime_knobs(g8, variables["qat"], prefix="mlp/down")
  params = {"kernel": jnp.full((32, 4), 0.1)}
  y = jax.jit(dyn.apply)({"params": params, "qat": qat}, jnp.ones((2, 32)))
  assert np.isnan(np.asarray(y)).all()
