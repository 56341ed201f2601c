"""APC training: SFT on placeholder targets, then GRPO with the cost reward.

* `sft_sequences` packs (prompt, target with `<PH>`, newline) into fixed-length
  rows with a loss mask on the target and its newline; `sft_loss` is the masked
  next-byte cross-entropy.
* `grpo_step` samples `group_size` completions per prompt from the current
  policy (softmax(logits / temperature), whose log-probs the surrogate
  differentiates), scores each with the simulated user (`cost.editing_cost`), turns the
  `cost_reward`s into group-relative advantages (`jaxlab.rl.grpo`) and takes one
  clipped-surrogate step. One update per batch, so the sampling policy is the
  current one and the ratio is 1 at the update (old log-probs are the stopped
  current ones: jaxlab interpretation; the surrogate then equals REINFORCE with
  the group baseline).

Example:
  >>> step = make_grpo_step(model, tx, costs, num_tokens=24,
  ...                       group_size=8)                        # doctest: +SKIP
  >>> params, opt_state, metrics = step(params, opt_state, prompts, targets, lens,
  ...                                   key)                     # doctest: +SKIP
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import Array
from jaxtyping import Float, Int

from jaxlab.codecomp import cost as cost_lib
from jaxlab.codecomp.data import NEWLINE
from jaxlab.codecomp.decode import decode, sequence_logp
from jaxlab.nn import Transformer
from jaxlab.rl import grpo


def sft_sequences(prompts: np.ndarray, targets: list[list[int]],
                  max_target_len: int) -> tuple[np.ndarray, np.ndarray]:
  """Rows `prompt + target + newline` (zero-padded) and their loss masks.

  Args:
    prompts: int [k, p].
    targets: k token lists (placeholders allowed), each at most
      `max_target_len` long (longer ones are truncated and lose their newline).
    max_target_len: the completion budget n; rows have p + n + 1 tokens.

  Returns:
    (tokens int32 [k, p + n + 1], mask float32 [k, p + n]): mask[i, t] = 1 where
    token t + 1 is part of the target or its newline.
  """
  k, p = np.shape(prompts)
  if len(targets) != k:
    raise ValueError(f"need one target per prompt, got {len(targets)} for {k} prompts")
  n = max_target_len
  rows = np.zeros((k, p + n + 1), np.int32)
  mask = np.zeros((k, p + n), np.float32)
  rows[:, :p] = prompts
  for i, t in enumerate(targets):
    body = list(t)[:n] + ([NEWLINE] if len(t) < n + 1 else [])
    body = body[:n + 1]
    rows[i, p:p + len(body)] = body
    mask[i, p - 1:p - 1 + len(body)] = 1.0
  return rows, mask


def sft_loss(model: Transformer):
  """`loss(params, rows, mask)`: masked mean next-byte cross-entropy (nats)."""
  def loss_fn(params, rows: Int[Array | np.ndarray, "b t1"],
              mask: Float[Array | np.ndarray, "b t"]) -> Float[Array, ""]:
    logits = model.apply({"params": params}, rows[:, :-1])
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, rows[:, 1:])
    return (ce * mask).sum() / jnp.maximum(mask.sum(), 1.0)
  return loss_fn


def make_sft_step(model: Transformer, tx: optax.GradientTransformation):
  """A jitted `step(params, opt_state, rows, mask) -> (params, opt_state, loss)`."""
  loss_fn = sft_loss(model)

  @jax.jit
  def step(params, opt_state, rows, mask):
    loss, grads = jax.value_and_grad(loss_fn)(params, rows, mask)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss
  return step


def make_grpo_step(model: Transformer, tx: optax.GradientTransformation,
                   costs: cost_lib.CostModel, *, num_tokens: int, group_size: int,
                   temperature: float = 1.0, eps_low: float = 0.2, eps_high: float = 0.28,
                   malformed_penalty: float = 1.0):
  """A jitted cost-reward GRPO step.

  `step(params, opt_state, prompts [b, p], targets [b, m], target_lens [b], key)`
  returns `(params, opt_state, metrics)` with the batch's mean reward, cost and
  placeholder spans per completion. Completions are sampled at `temperature`
  (> 0: greedy groups would be identical) and the surrogate differentiates the
  log-probabilities of that same distribution, softmax(logits / temperature),
  so the policy gradient is that of the sampling policy.
  """
  if group_size < 2:
    raise ValueError(f"group_size must be >= 2, got {group_size}")
  if not temperature > 0:
    raise ValueError(f"temperature must be > 0, got {temperature}")

  @jax.jit
  def step(params, opt_state, prompts, targets, target_lens, key):
    b = prompts.shape[0]
    rep = lambda x: jnp.repeat(x, group_size, axis=0)
    p_rep, t_rep, l_rep = rep(prompts), rep(targets), rep(target_lens)
    out = decode(model, params, p_rep, key, num_tokens=num_tokens, temperature=temperature)
    c = jax.vmap(lambda s, n, t, m: cost_lib.editing_cost(s, n, t, m, costs))(
        out.tokens, out.lengths, t_rep, l_rep)
    reward = cost_lib.cost_reward(c, l_rep, costs, malformed=~out.ended,
                                  malformed_penalty=malformed_penalty)
    adv = grpo.group_advantages(reward.reshape(b, group_size)).reshape(-1)
    # The completion's tokens and its newline carry the advantage.
    mask = jnp.arange(num_tokens)[None, :] <= out.lengths[:, None]

    def loss_fn(params):
      logp = sequence_logp(model, params, p_rep, out.tokens, temperature=temperature)
      return grpo.clipped_surrogate_loss(logp, jax.lax.stop_gradient(logp), adv, mask,
                                         eps_low=eps_low, eps_high=eps_high)

    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    valid = jnp.arange(num_tokens)[None, :] < out.lengths[:, None]
    ph = ((out.tokens == cost_lib.PLACEHOLDER) & valid).sum(1)
    metrics = dict(loss=loss, reward=reward.mean(), cost=c.mean(),
                   placeholders=ph.mean().astype(jnp.float32),
                   ended=out.ended.mean().astype(jnp.float32))
    return optax.apply_updates(params, updates), opt_state, metrics
  return step


@functools.partial(jax.jit, static_argnames=("model", "num_tokens"))
def hard_completion(model: Transformer, params, prompts: Int[Array | np.ndarray, "b p"], *,
                    num_tokens: int):
  """Greedy completion without placeholders (the suggestions behind the edit logs)."""
  return decode(model, params, prompts, jax.random.key(0), num_tokens=num_tokens,
                allow_placeholder=False)
