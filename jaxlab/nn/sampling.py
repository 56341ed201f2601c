"""Autoregressive sampling with the KV cache: one prefill, then scanned decode."""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array
from jaxtyping import Int

from jaxlab.nn.transformer import Transformer, init_cache


@functools.partial(jax.jit, static_argnames=("model", "num_tokens", "temperature"))
def generate(model: Transformer, params, prompt: Int[Array | np.ndarray, "b p"], key: Array, *,
             num_tokens: int, temperature: float = 1.0) -> Int[Array, "b n"]:
  """Samples `num_tokens` continuations of `prompt` (temperature 0 = greedy).

  Example:
    >>> from jaxlab.nn.transformer import TransformerConfig
    >>> model = Transformer(TransformerConfig(d_model=32, num_layers=1, num_heads=2,
    ...                                       num_kv_heads=1, d_ff=64))
    >>> prompt = jnp.array([[104, 105]], jnp.int32)
    >>> params = model.init(jax.random.key(0), prompt)["params"]
    >>> generate(model, params, prompt, jax.random.key(1), num_tokens=8).shape
    (1, 8)
  """
  if num_tokens < 1:
    raise ValueError(f"num_tokens must be >= 1, got {num_tokens}")
  if not (temperature >= 0 and math.isfinite(temperature)):
    raise ValueError(f"temperature must be a finite number >= 0, got {temperature}")
  b, p = prompt.shape
  cache = init_cache(model.config, b, p + num_tokens)
  logits, cache = model.apply({"params": params}, prompt, cache=cache)

  def pick(logits, key):
    if temperature == 0:
      return jnp.argmax(logits, -1).astype(jnp.int32)
    return jax.random.categorical(key, logits / temperature).astype(jnp.int32)

  def step(carry, key):
    last_logits, cache = carry
    token = pick(last_logits, key)
    logits, cache = model.apply({"params": params}, token[:, None], cache=cache)
    return (logits[:, -1], cache), token

  _, tokens = jax.lax.scan(step, (logits[:, -1], cache), jax.random.split(key, num_tokens))
  return tokens.T
