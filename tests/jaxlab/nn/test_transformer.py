"""Transformer shapes, plug points, and KV-cache decoding == full forward."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.nn import Transformer, TransformerConfig, generate, init_cache

CFG = TransformerConfig(d_model=32, num_layers=2, num_heads=4, num_kv_heads=2, d_ff=48,
                        max_len=32)
# Cached and full paths run the same float32 ops on differently shaped (masked)
# key sets; their logits agree to float32 rounding.
ATOL = 1e-5


@pytest.fixture(scope="module")
def setup():
  model = Transformer(CFG)
  tokens = jax.random.randint(jax.random.key(1), (3, 12), 0, 256)
  params = model.init(jax.random.key(0), tokens)["params"]
  return model, params, tokens


@pytest.fixture(scope="module")
def apply(setup):
  return jax.jit(setup[0].apply)  # one compile per shape instead of op-by-op dispatch


def test_shapes_and_names(setup):
  model, params, tokens = setup
  logits = model.apply({"params": params}, tokens)
  assert logits.shape == (3, 12, 256) and logits.dtype == jnp.float32
  attn = params["block_0"]["attn"]
  assert attn["q"]["kernel"].shape == (32, 32)
  assert attn["k"]["kernel"].shape == (32, 16)  # 2 kv heads x head_dim 8
  assert set(params["block_1"]["mlp"]) == {"gate", "up", "down"}
  assert "lm_head" in params and "embed" in params


def test_causal(setup, apply):
  model, params, tokens = setup
  changed = tokens.at[:, 8:].set((tokens[:, 8:] + 1) % 256)
  a = apply({"params": params}, tokens)
  b = apply({"params": params}, changed)
  np.testing.assert_array_equal(a[:, :8], b[:, :8])
  assert not np.allclose(a[:, 8:], b[:, 8:])


def test_prefill_then_decode_equals_full_forward(setup, apply):
  model, params, tokens = setup
  full = apply({"params": params}, tokens)
  cache = init_cache(CFG, 3, 16)
  logits, cache = apply({"params": params}, tokens[:, :7], cache=cache)
  pieces = [logits]
  for i in range(7, 12):
    logits, cache = apply({"params": params}, tokens[:, i:i + 1], cache=cache)
    pieces.append(logits)
  np.testing.assert_allclose(jnp.concatenate(pieces, 1), full, atol=ATOL, rtol=0)
  np.testing.assert_array_equal(cache.lengths, [12, 12, 12])


def test_rows_at_different_lengths(setup, apply):
  """Slot-style use: each row decodes at its own offset."""
  model, params, tokens = setup
  cache = init_cache(CFG, 2, 16)
  # Row 0 prefilled with 5 tokens, row 1 with 9: write both with per-row lengths.
  _, c0 = apply({"params": params}, tokens[:1, :5], cache=init_cache(CFG, 1, 16))
  _, c1 = apply({"params": params}, tokens[1:2, :9], cache=init_cache(CFG, 1, 16))
  cache = jax.tree.map(lambda a, b: jnp.concatenate([a, b], axis=1 if a.ndim > 1 else 0), c0, c1)
  cache = cache._replace(lengths=jnp.array([5, 9], jnp.int32))
  step_tokens = jnp.stack([tokens[0, 5:6], tokens[1, 9:10]])
  logits, cache = apply({"params": params}, step_tokens, cache=cache)
  full0 = apply({"params": params}, tokens[:1, :6])[0, -1]
  full1 = apply({"params": params}, tokens[1:2, :10])[0, -1]
  np.testing.assert_allclose(logits[:, 0], jnp.stack([full0, full1]), atol=ATOL, rtol=0)
  np.testing.assert_array_equal(cache.lengths, [6, 10])


def test_jit_and_bfloat16(setup):
  _, _, tokens = setup
  cfg = TransformerConfig(d_model=32, num_layers=1, num_heads=4, num_kv_heads=1, d_ff=48,
                          dtype=jnp.bfloat16)
  model = Transformer(cfg)
  params = model.init(jax.random.key(0), tokens)["params"]
  logits = jax.jit(model.apply)({"params": params}, tokens)
  assert logits.dtype == jnp.float32 and bool(jnp.isfinite(logits).all())
  assert params["embed"]["embedding"].dtype == jnp.float32


def test_dense_and_ffn_plug_points(setup):
  _, _, tokens = setup
  built = []

  def recording_dense(features, *, name, dtype, param_dtype):
    built.append(name)
    return nn.Dense(features, use_bias=True, dtype=dtype, param_dtype=param_dtype, name=name)

  class Zero(nn.Module):
    @nn.compact
    def __call__(self, x):
      return jnp.zeros_like(x)

  cfg = TransformerConfig(d_model=32, num_layers=1, num_heads=4, num_kv_heads=2, d_ff=48,
                          dense=recording_dense, ffn=lambda config, name: Zero(name=name))
  params = Transformer(cfg).init(jax.random.key(0), tokens)["params"]
  assert {"q", "k", "v", "o", "lm_head"} <= set(built)
  assert "bias" in params["block_0"]["attn"]["q"]
  assert "mlp" not in params["block_0"]  # the FFN had no parameters


def test_generate_greedy_is_deterministic(setup):
  model, params, tokens = setup
  a = generate(model, params, tokens[:, :4], jax.random.key(0), num_tokens=6, temperature=0.0)
  b = generate(model, params, tokens[:, :4], jax.random.key(1), num_tokens=6, temperature=0.0)
  np.testing.assert_array_equal(a, b)
  assert a.shape == (3, 6)
  # The greedy token equals the argmax of the full forward at each step.
  seq = jnp.concatenate([tokens[:, :4], a], axis=1)
  full = model.apply({"params": params}, seq)
  np.testing.assert_array_equal(jnp.argmax(full[:, 3:-1], -1), a)


@pytest.mark.parametrize("kwargs,match", [
    (dict(d_model=30, num_heads=4), "divisible by num_heads"),
    (dict(num_heads=4, num_kv_heads=3), "divisible by num_kv_heads"),
    (dict(num_layers=0), "num_layers"),
    (dict(d_model=12, num_heads=4, num_kv_heads=1), "even"),
])
def test_bad_config(kwargs, match):
  with pytest.raises(ValueError, match=match):
    TransformerConfig(**kwargs)


def test_bad_tokens(setup):
  model, params, tokens = setup
  # Under the tests' jaxtyping hook the annotation fails first (a TypeError
  # naming `tokens`); without it, the module's own ValueError does.
  with pytest.raises((ValueError, TypeError), match="tokens"):
    model.apply({"params": params}, tokens[0])
  with pytest.raises((ValueError, TypeError), match="tokens"):
    model.apply({"params": params}, tokens.astype(jnp.float32))
  with pytest.raises(ValueError, match="cache holds"):
    model.apply({"params": params}, tokens, cache=init_cache(CFG, 2, 16))
