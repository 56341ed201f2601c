"""SentenceBert's parts on a tiny random config: masking, pooling, config checks."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab import text

TINY = text.BertConfig(vocab_size=50, hidden_size=16, num_layers=2, num_heads=4,
                       intermediate_size=32, max_position_embeddings=32)


class _Jitted:
  """A module whose apply is jitted: eager linen dispatches op by op, far slower."""

  def __init__(self, module):
    self.module = module
    self.apply = jax.jit(module.apply)


def _init(cfg=TINY):
  model = text.SentenceBert(cfg)
  ids = jnp.ones((1, 8), jnp.int32)
  params = jax.jit(model.init)(jax.random.key(0), ids, jnp.ones_like(ids))["params"]
  return _Jitted(model), params


def test_padding_does_not_change_the_embedding():
  model, params = _init()
  ids = jax.random.randint(jax.random.key(1), (2, 5), 1, 50, jnp.int32)
  short = model.apply({"params": params}, ids, jnp.ones_like(ids))
  padded_ids = jnp.concatenate([ids, jax.random.randint(jax.random.key(2), (2, 7), 1, 50)], 1)
  mask = jnp.concatenate([jnp.ones((2, 5), jnp.int32), jnp.zeros((2, 7), jnp.int32)], 1)
  padded = model.apply({"params": params}, padded_ids, mask)
  np.testing.assert_allclose(padded, short, atol=1e-6)
  np.testing.assert_allclose(jnp.linalg.norm(short, axis=1), 1.0, rtol=1e-6)
  # The mask matters: without it the padding tokens change the result.
  unmasked = model.apply({"params": params}, padded_ids, jnp.ones_like(padded_ids))
  assert np.abs(np.asarray(unmasked - short)).max() > 1e-3


def test_all_padding_row_is_finite():
  model, params = _init()
  ids = jnp.zeros((2, 8), jnp.int32)
  mask = jnp.zeros((2, 8), jnp.int32).at[0, :3].set(1)
  out = model.apply({"params": params}, ids, mask)
  assert np.isfinite(np.asarray(out)).all()
  np.testing.assert_array_equal(out[1], 0.0)  # nothing to pool: zeros, not NaN


def test_mean_pool_and_normalize_closed_form():
  hidden = jnp.arange(12, dtype=jnp.float32).reshape(1, 3, 4)
  mask = jnp.array([[1, 1, 0]], jnp.int32)
  np.testing.assert_allclose(text.mean_pool(hidden, mask), [[2.0, 3.0, 4.0, 5.0]])
  np.testing.assert_allclose(text.l2_normalize(jnp.array([[3.0, 4.0]])), [[0.6, 0.8]])


def test_bfloat16_compute_keeps_float32_output():
  cfg = dataclasses.replace(TINY, dtype=jnp.bfloat16)
  model, params = _init(cfg)
  _, params32 = _init()
  ids = jnp.arange(1, 9, dtype=jnp.int32)[None]
  out = model.apply({"params": params}, ids, jnp.ones_like(ids))
  ref = jax.jit(text.SentenceBert(TINY).apply)({"params": params32}, ids, jnp.ones_like(ids))
  assert out.dtype == jnp.float32
  assert float(jnp.sum(out * ref)) > 0.99


def test_config_checks():
  with pytest.raises(ValueError, match="divisible"):
    text.BertConfig(hidden_size=10, num_heads=4)
  with pytest.raises(ValueError, match="num_layers"):
    text.BertConfig(num_layers=0)
  with pytest.raises(ValueError, match="hidden_act"):
    text.BertConfig.from_hf({"hidden_act": "relu"})
  with pytest.raises(ValueError, match="position"):
    text.BertConfig.from_hf({"position_embedding_type": "relative_key"})


def test_too_long_input():
  model, params = _init()
  ids = jnp.ones((1, 33), jnp.int32)
  with pytest.raises(ValueError, match="max_position_embeddings"):
    model.apply({"params": params}, ids, jnp.ones_like(ids))
