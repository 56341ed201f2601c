"""Completion decoding that records the model's uncertainty, and its evaluation.

`decode` runs the byte decoder with the KV cache (one prefill, a scanned
decode), greedy or sampled, and keeps for every position the entropy and the
top probability of the next-token distribution: threshold APC and its sweep
are then post-processing of one hard completion. A completion ends at its
first newline. `score` measures completions against their targets with the
simulated user of `jaxlab.codecomp.cost`.

Example:
  >>> out = decode(model, params, prompts, jax.random.key(0), num_tokens=24)  # doctest: +SKIP
  >>> apc = threshold_placeholders(out.tokens, out.entropy, h_star)           # doctest: +SKIP
"""

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array
from jaxtyping import Bool, Float, Int

from jaxlab.codecomp import cost as cost_lib
from jaxlab.codecomp.data import NEWLINE
from jaxlab.nn import Transformer
from jaxlab.nn.transformer import init_cache


class Decoded(NamedTuple):
  """Completions of a batch and the uncertainty at each position.

  tokens: int32 [b, n]; entropy, p_max, logp (of the chosen token): float32
  [b, n], over the distribution actually decoded from: softmax(logits / T) when
  sampling at temperature T > 0, the model's softmax(logits) (T = 1) when
  greedy (whose point mass would carry no uncertainty: these are the values the
  APC thresholds read); lengths: int32 [b], tokens before the first newline (n
  if none); ended: bool [b], a newline came; guess: int32 [b, n], the greedy token
  with `<PH>` excluded at each position, given the same context (equal to
  `tokens` wherever a greedy decode emitted no placeholder): what the model would
  have guessed where it placed a placeholder.
  """
  tokens: Array
  entropy: Array
  p_max: Array
  logp: Array
  lengths: Array
  ended: Array
  guess: Array


def _mask_placeholder(logits: Array, allow_placeholder: bool) -> Array:
  if allow_placeholder:
    return logits
  return logits.at[..., cost_lib.PLACEHOLDER].set(-jnp.inf)


def completion_lengths(
    tokens: Int[Array | np.ndarray, "b n"]) -> tuple[Int[Array, "b"], Bool[Array, "b"]]:
  """(tokens before the first newline, whether a newline occurs) per row."""
  is_nl = tokens == NEWLINE
  ended = is_nl.any(axis=1)
  return jnp.where(ended, jnp.argmax(is_nl, axis=1), tokens.shape[1]).astype(jnp.int32), ended


@functools.partial(jax.jit, static_argnames=("model", "num_tokens", "temperature",
                                             "allow_placeholder"))
def decode(model: Transformer, params, prompts: Int[Array | np.ndarray, "b p"], key: Array, *,
           num_tokens: int, temperature: float = 0.0,
           allow_placeholder: bool = True) -> Decoded:
  """Decodes `num_tokens` tokens after each prompt, recording the uncertainty.

  Args:
    model: the byte decoder.
    params: its parameters.
    prompts: int32 [b, p].
    key: PRNG key (unused when greedy).
    num_tokens: completion length n >= 1.
    temperature: 0 = greedy (hard completion), > 0 samples from
      softmax(logits / temperature); the recorded entropy, p_max and logp are
      those of that distribution (of softmax(logits) when greedy).
    allow_placeholder: False removes `<PH>` from the distribution (the hard
      completion of a placeholder-trained model).

  Returns:
    `Decoded`.
  """
  if num_tokens < 1:
    raise ValueError(f"num_tokens must be >= 1, got {num_tokens}")
  if temperature < 0:
    raise ValueError(f"temperature must be >= 0, got {temperature}")
  if prompts.ndim != 2:
    raise ValueError(f"prompts must be [batch, prefix_len], got shape {prompts.shape}")
  b, p = prompts.shape
  cache = init_cache(model.config, b, p + num_tokens)
  logits, cache = model.apply({"params": params}, prompts, cache=cache)

  def step(carry, key):
    last, cache = carry
    logits = _mask_placeholder(last, allow_placeholder)
    guess = jnp.argmax(_mask_placeholder(last, False), -1).astype(jnp.int32)
    if temperature == 0:
      token = jnp.argmax(logits, -1).astype(jnp.int32)
    else:  # the recorded uncertainty is that of the sampling distribution
      logits = logits / temperature
      token = jax.random.categorical(key, logits).astype(jnp.int32)
    logp_all = jax.nn.log_softmax(logits, axis=-1)
    ent = cost_lib.entropy(logits)
    p_max = jnp.exp(logp_all.max(-1))
    logp = jnp.take_along_axis(logp_all, token[:, None], axis=-1)[:, 0]
    logits, cache = model.apply({"params": params}, token[:, None], cache=cache)
    return (logits[:, -1], cache), (token, ent, p_max, logp, guess)

  _, outs = jax.lax.scan(step, (logits[:, -1], cache), jax.random.split(key, num_tokens))
  tokens, ent, p_max, logp, guess = (x.T for x in outs)
  lengths, ended = completion_lengths(tokens)
  return Decoded(tokens, ent, p_max, logp, lengths, ended, guess)


def own_guesses(decoded: Decoded) -> tuple[Int[Array, "b n"], Int[Array, "b"]]:
  """The completion with each placeholder replaced by the model's own greedy guess there.

  The same model, inputs and context: only the placeholder positions change, to
  the token the greedy decode would have emitted there with `<PH>` excluded
  (`Decoded.guess`). This is APC without its placeholders (the mechanism
  ablation); a guessed newline ends the completion there.

  Args:
    decoded: a greedy `decode` with placeholders allowed.

  Returns:
    (tokens int32 [b, n] without placeholders, lengths int32 [b] before their
    first newline).

  Example:
    >>> out = decode(model, params, prompts, jax.random.key(0), num_tokens=24)  # doctest: +SKIP
    >>> tokens, lengths = own_guesses(out)                                      # doctest: +SKIP
  """
  tokens = jnp.where(decoded.tokens == cost_lib.PLACEHOLDER, decoded.guess, decoded.tokens)
  return tokens, completion_lengths(tokens)[0]


def sequence_logp(model: Transformer, params, prompts: Int[Array | np.ndarray, "b p"],
                  tokens: Int[Array | np.ndarray, "b n"], *,
                  temperature: float = 1.0) -> Float[Array | np.ndarray, "b n"]:
  """Teacher-forced log-probability of each completion token given the prompt.

  Under softmax(logits / temperature), the distribution `decode` samples from at
  that temperature (its `logp` when `allow_placeholder`), so a policy gradient
  differentiates the policy that produced the samples.
  """
  if not temperature > 0:
    raise ValueError(f"temperature must be > 0, got {temperature}")
  seq = jnp.concatenate([prompts, tokens], axis=1)
  logits = model.apply({"params": params}, seq[:, :-1])[:, prompts.shape[1] - 1:]
  logp = jax.nn.log_softmax(logits / temperature, axis=-1)
  return jnp.take_along_axis(logp, tokens[..., None], axis=-1)[..., 0]


class Scores(NamedTuple):
  """Per-completion measurements (float32 [b] each).

  cost: the simulated user's editing cost; exact: 1 if the non-placeholder text
  matches the target (placeholders as wildcards); similarity: 1 - unit edit
  distance of the non-placeholder text / max(its length, target length);
  spans: number of placeholder spans; placed / placed_wrong: placeholder
  positions, and those where the hard completion was wrong (position-wise).
  """
  cost: Array
  exact: Array
  similarity: Array
  spans: Array
  placed: Array
  placed_wrong: Array


@functools.partial(jax.jit, static_argnames=("costs",))
def score(suggestions: Int[Array | np.ndarray, "b n"], lengths: Int[Array | np.ndarray, "b"],
          targets: Int[Array | np.ndarray, "b m"],
          target_lens: Int[Array | np.ndarray, "b"], hard: Int[Array | np.ndarray, "b n"],
          costs: cost_lib.CostModel = cost_lib.DEFAULT_COSTS) -> Scores:
  """Scores completions (with placeholders) against their targets.

  Args:
    suggestions: completions, `<PH>` marking placeholders; [b, n].
    lengths: valid tokens per completion (before its newline).
    targets: the ground truth [b, m], valid up to `target_lens`.
    target_lens: [b].
    hard: the hard completion the placeholders are judged against (precision:
      a placeholder at position i is precise when `hard[i]` != `targets[i]`).
    costs: the `CostModel`.

  Returns:
    `Scores`.
  """
  cost = jax.vmap(lambda s, n, t, m: cost_lib.editing_cost(s, n, t, m, costs))(
      suggestions, lengths, targets, target_lens)
  dist = jax.vmap(cost_lib.wildcard_distance)(suggestions, lengths, targets, target_lens)
  n = suggestions.shape[1]
  valid = jnp.arange(n)[None, :] < lengths[:, None]
  is_ph = (suggestions == cost_lib.PLACEHOLDER) & valid
  starts = is_ph & ~jnp.pad(is_ph, ((0, 0), (1, 0)))[:, :-1]
  m = targets.shape[1]
  t_at = jnp.pad(targets, ((0, 0), (0, max(n - m, 0))))[:, :n]
  wrong = (hard != t_at) | (jnp.arange(n)[None, :] >= target_lens[:, None])
  non_ph = (valid & ~is_ph).sum(1)
  sim = 1.0 - dist / jnp.maximum(jnp.maximum(non_ph, target_lens), 1)
  return Scores(cost, (dist == 0).astype(jnp.float32), sim, starts.sum(1).astype(jnp.float32),
                is_ph.sum(1).astype(jnp.float32), (is_ph & wrong).sum(1).astype(jnp.float32))
