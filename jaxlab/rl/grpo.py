"""GRPO / DAPO building blocks: group-relative advantages, clipped surrogate, dynamic sampling.

Pure functions over any policy's log-probabilities. A batch holds `b` prompts
(groups), each answered by `g` sampled rollouts; a rollout's outcome is one of
`CORRECT`, `WRONG`, `UNCERTAIN` ("I don't know", used by UCPO), and its scalar
reward is `outcome_rewards(...)`.

  * `group_advantages`: GRPO's `A_i = (r_i - mean_G r) / (std_G r + eps)`
    (population std over the group, the DeepSeekMath / DAPO form).
  * `clipped_surrogate_loss`: the PPO clipped objective with DAPO's decoupled
    clip range `[1 - eps_low, 1 + eps_high]` and the token-level mean (every
    valid token of the batch weighs the same, whatever its sequence's length).
  * `dynamic_sampling_mask`: DAPO's dynamic sampling as a mask: groups whose
    rewards are all equal carry no gradient signal and are dropped. DAPO
    over-samples to refill the batch; a fixed-shape mask keeps the step jittable
    (jaxlab interpretation; the surviving groups are averaged at token level).

Non-finite values: a NaN / Inf reward makes its own group's advantages NaN and
never touches another group; `dynamic_sampling_mask` drops such a group, and
`clipped_surrogate_loss` ignores masked-out tokens even when their inputs are
NaN (selected with `where`, not multiplied by zero).

Out-of-range inputs are never clamped: outside `jit` an outcome code other than
0, 1, 2, or a float mask entry other than 0 or 1, is a ValueError naming the
argument; under `jit` (where no exception can be raised) an out-of-range code
gets a NaN reward (so its group's advantages are NaN, and the group is dropped
as above), and a bad mask entry makes the loss NaN.

Example:
  >>> import jax.numpy as jnp
  >>> from jaxlab.rl import grpo
  >>> outcomes = jnp.array([[grpo.CORRECT, grpo.WRONG, grpo.UNCERTAIN, grpo.CORRECT]])
  >>> r = grpo.outcome_rewards(outcomes, uncertain=0.5)
  >>> adv = grpo.group_advantages(r)
  >>> bool(adv[0, 2] < 0)    # mean reward 0.625 > r_u = 0.5: abstaining is pushed down
  True
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array
from jaxtyping import Bool, Float, Int

from jaxlab import validation

# Outcome codes of one rollout.
CORRECT, WRONG, UNCERTAIN = 0, 1, 2
NUM_OUTCOMES = 3


def check_outcomes(outcomes: Int[Array, "b g"], name: str = "outcomes") -> None:
  """Raises a ValueError unless `outcomes` is an int [b, g] array of codes 0, 1, 2.

  The value range is checked only for concrete arrays (outside `jit`); under
  `jit`, an out-of-range code gives its group NaN rewards and advantages (loud,
  not silent; `valid_groups`).
  """
  if np.ndim(outcomes) != 2:
    raise ValueError(f"{name} must have shape [groups, group_size], got {np.shape(outcomes)}")
  if not jnp.issubdtype(jnp.asarray(outcomes).dtype, jnp.integer):
    raise ValueError(f"{name} must be integer outcome codes, got dtype {jnp.asarray(outcomes).dtype}")
  o = validation.concrete(outcomes)
  if o is not None:
    if o.size and (o.min() < 0 or o.max() >= NUM_OUTCOMES):
      raise ValueError(f"{name} must be codes CORRECT=0, WRONG=1, UNCERTAIN=2, got values "
                       f"in [{o.min()}, {o.max()}]")


def valid_groups(outcomes: Int[Array, "b g"]) -> Bool[Array, "b"]:
  """True for the groups whose every code is CORRECT, WRONG or UNCERTAIN.

  Under `jit` an out-of-range code cannot raise; the functions of `grpo` and
  `ucpo` give its group NaN (rewards, advantages, fractions) and leave it out of
  every statistic shared with other groups, so it never becomes WRONG (or any
  other outcome) and never changes what the other groups get.

  Example:
    >>> valid_groups(jnp.array([[0, 1, 2], [0, 7, 1]])).tolist()
    [True, False]
  """
  return ((outcomes >= 0) & (outcomes < NUM_OUTCOMES)).all(axis=1)


def _check_rewards(rewards, name: str = "rewards") -> None:
  if np.ndim(rewards) != 2:
    raise ValueError(f"{name} must have shape [groups, group_size], got {np.shape(rewards)}")
  if np.shape(rewards)[1] < 2:
    raise ValueError(f"{name}: a group needs >= 2 rollouts, got group_size {np.shape(rewards)[1]}")


def outcome_rewards(outcomes: Int[Array, "b g"], *, correct: float | Float[Array, ""] = 1.0,
                    wrong: float | Float[Array, ""] = 0.0,
                    uncertain: float | Float[Array, ""] = 0.0) -> Float[Array, "b g"]:
  """Scalar rewards of ternary outcomes.

  `uncertain=0` is binary GRPO (abstaining is as bad as a wrong answer); a fixed
  `uncertain=r_u` in (0, 1) is the fixed-uncertainty-reward baseline UCPO
  diagnoses. The rewards may be traced arrays (e.g. one r_u per vmapped arm).

  Args:
    outcomes: int codes `CORRECT`, `WRONG`, `UNCERTAIN`, shape [b, g].
    correct: reward of a correct answer.
    wrong: reward of a wrong answer.
    uncertain: reward of an abstention.

  Returns:
    float32 rewards [b, g]; NaN where a code is out of range (under `jit` only;
    outside it, a ValueError).

  Example:
    >>> outcome_rewards(jnp.array([[0, 1, 2]]), uncertain=0.3).tolist()
    [[1.0, 0.0, 0.30000001192092896]]
  """
  check_outcomes(outcomes)
  table = jnp.stack([jnp.asarray(v, jnp.float32) for v in (correct, wrong, uncertain)])
  valid = (outcomes >= 0) & (outcomes < NUM_OUTCOMES)
  return jnp.where(valid, table[jnp.clip(outcomes, 0, NUM_OUTCOMES - 1)], jnp.nan)


def group_advantages(rewards: Float[Array, "b g"], *, eps: float = 1e-6,
                     normalize_std: bool = True) -> Float[Array, "b g"]:
  """GRPO's group-relative advantages `(r_i - mean_G r) / (std_G r + eps)`.

  Args:
    rewards: one reward per rollout, shape [groups, group_size >= 2].
    eps: added to the group's std (population std, ddof=0); > 0.
    normalize_std: False gives the mean-centred "Dr. GRPO" variant (no division).

  Returns:
    Advantages [b, g]: zero where a group's rewards are all equal; NaN for every
    rollout of a group containing a non-finite reward (other groups unaffected).

  Example:
    >>> group_advantages(jnp.array([[1.0, 0.0, 0.0, 1.0]])).round(3).tolist()
    [[1.0, -1.0, -1.0, 1.0]]
  """
  _check_rewards(rewards)
  if not eps > 0:
    raise ValueError(f"eps must be > 0, got {eps}")
  rewards = jnp.asarray(rewards, jnp.float32)
  centred = rewards - rewards.mean(axis=1, keepdims=True)
  if not normalize_std:
    return centred
  return centred / (rewards.std(axis=1, keepdims=True) + eps)


def dynamic_sampling_mask(rewards: Float[Array, "b g"]) -> Bool[Array, "b"]:
  """DAPO dynamic sampling: True for groups whose rewards are not all equal.

  A group with identical rewards (all solved, all failed) has zero advantage
  everywhere and only dilutes the token-level mean; DAPO drops it. Groups with
  a non-finite reward are dropped too.

  Args:
    rewards: shape [groups, group_size].

  Returns:
    bool [groups].

  Example:
    >>> dynamic_sampling_mask(jnp.array([[1.0, 1.0], [1.0, 0.0]])).tolist()
    [False, True]
  """
  _check_rewards(rewards)
  rewards = jnp.asarray(rewards)
  finite = jnp.isfinite(rewards).all(axis=1)
  return finite & (rewards.max(axis=1) > rewards.min(axis=1))


def clipped_surrogate_loss(logp: Float[Array, "n t"], old_logp: Float[Array, "n t"],
                           advantages: Float[Array, "n"],
                           mask: Bool[Array, "n t"] | Float[Array, "n t"] | None = None, *,
                           eps_low: float = 0.2, eps_high: float = 0.28) -> Float[Array, ""]:
  """The GRPO / DAPO clipped policy-gradient loss with a token-level mean.

  With `ratio = exp(logp - old_logp)` per token,

    loss = - sum_{valid tokens} min(ratio * A, clip(ratio, 1 - eps_low, 1 + eps_high) * A)
           / (number of valid tokens),

  where each token carries its sequence's advantage. DAPO's "clip-higher" uses
  `eps_high > eps_low` (0.28 vs 0.2); `eps_high = eps_low` is PPO / GRPO.

  Args:
    logp: log-probabilities of the sampled tokens under the policy being
      optimised, shape [sequences, tokens] (a single-token answer: t = 1).
    old_logp: the same under the sampling policy (no gradient flows through it).
    advantages: one advantage per sequence, shape [sequences].
    mask: which tokens count (bool, or a number that is 0 or 1), shape
      [sequences, tokens]; None: all. Use it to drop padding and whole groups
      (dynamic sampling, NTF). A fractional weight (0.5) is no mask: outside
      `jit` it is a ValueError, under `jit` it makes the loss NaN.
    eps_low: lower clip width, in [0, 1).
    eps_high: upper clip width, >= 0.

  Returns:
    The scalar loss (0 when no token is valid; NaN when a `mask` entry is
    neither 0 nor 1, e.g. 0.5 or NaN, under `jit`).

  Example:
    >>> lp = jnp.log(jnp.array([[0.5], [0.25]]))
    >>> float(clipped_surrogate_loss(lp, lp, jnp.array([1.0, 0.0])))  # ratio 1: -mean(A)
    -0.5
  """
  if np.ndim(logp) != 2:
    raise ValueError(f"logp must have shape [sequences, tokens], got {np.shape(logp)}")
  if np.shape(old_logp) != np.shape(logp):
    raise ValueError(f"old_logp must have logp's shape {np.shape(logp)}, got {np.shape(old_logp)}")
  if np.shape(advantages) != np.shape(logp)[:1]:
    raise ValueError(f"advantages must have shape [sequences] = {np.shape(logp)[:1]}, "
                     f"got {np.shape(advantages)}")
  if mask is not None and np.shape(mask) != np.shape(logp):
    raise ValueError(f"mask must have logp's shape {np.shape(logp)}, got {np.shape(mask)}")
  if not 0.0 <= eps_low < 1.0 or not eps_high >= 0.0:
    raise ValueError(f"need 0 <= eps_low < 1 and eps_high >= 0, got {eps_low}, {eps_high}")
  if mask is None:
    valid, bad_mask = jnp.ones(np.shape(logp), bool), jnp.zeros((), bool)
  else:
    m = validation.concrete(mask)
    if m is not None and m.dtype != bool and not np.all((m == 0) | (m == 1)):
      bad = m[(m != 0) & (m != 1)]
      raise ValueError(f"mask must be bool or hold only 0 and 1, got {bad.size} other "
                       f"value(s), e.g. {bad.flat[0]!r}")
    mask = jnp.asarray(mask)
    valid = mask != 0
    bad_mask = ((mask != 0) & (mask != 1)).any()  # only reachable under jit
  old_logp = jax.lax.stop_gradient(old_logp)
  # Masked tokens may hold NaN (a dropped group): select them away before the exp.
  log_ratio = jnp.where(valid, logp - old_logp, 0.0)
  ratio = jnp.exp(log_ratio)
  adv = jnp.where(valid, advantages[:, None], 0.0)
  unclipped = ratio * adv
  clipped = jnp.clip(ratio, 1.0 - eps_low, 1.0 + eps_high) * adv
  per_token = jnp.where(valid, jnp.minimum(unclipped, clipped), 0.0)
  loss = -per_token.sum() / jnp.maximum(valid.sum(), 1)
  return jnp.where(bad_mask, jnp.nan, loss)
