"""KV-cache decode vs full-recompute decode of the tiny LM (greedy, same tokens)."""

import functools

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from jaxlab.benchmarking import ratio, time_interleaved
from jaxlab.nn import Transformer, TransformerConfig, generate


@functools.partial(jax.jit, static_argnames=("model", "num_tokens"))
def _generate_by_recompute(model, params, prompt, *, num_tokens):
  """Greedy decoding that reruns the whole prefix every step (no cache)."""
  b, p = prompt.shape
  buf = jnp.zeros((b, p + num_tokens), jnp.int32).at[:, :p].set(prompt)

  def step(buf, i):
    logits = model.apply({"params": params}, buf)  # causal: position p+i-1 ignores the future
    token = jnp.argmax(jax.lax.dynamic_index_in_dim(logits, p + i - 1, 1, False), -1)
    return jax.lax.dynamic_update_slice(buf, token[:, None].astype(jnp.int32), (0, p + i)), token

  _, tokens = jax.lax.scan(step, buf, jnp.arange(num_tokens))
  return tokens.T


def run_benchmark(config: ml_collections.ConfigDict) -> dict:
  """The timings and ratios of this benchmark (see the module docstring), as a dict."""
  model = Transformer(TransformerConfig(**config.model.to_dict()))
  prompt = jax.random.randint(jax.random.key(0), (config.batch_size, config.prompt_len), 0, 256)
  params = model.init(jax.random.key(1), prompt)["params"]
  cached = lambda: generate(model, params, prompt, jax.random.key(2),
                            num_tokens=config.new_tokens, temperature=0.0)
  recompute = lambda: _generate_by_recompute(model, params, prompt, num_tokens=config.new_tokens)
  same = bool(np.array_equal(np.asarray(cached()), np.asarray(recompute())))
  timings = time_interleaved({"kv_cache": cached, "recompute": recompute},
                             repeats=config.repeats)
  return {"timings": timings, "same_tokens": same,
          "ratios": {"recompute_over_kv_cache": ratio(timings, "recompute", "kv_cache")},
          "tokens_per_s_kv_cache": config.batch_size * config.new_tokens
                                   / timings["kv_cache"]["median_s"]}
