"""UCPO: ternary advantage decoupling (TAD), dynamic uncertainty reward (DURA), NTF.

UCPO (Zeng et al., ICML 2026, arXiv 2601.22648) trains a policy that may answer
"I don't know". Under plain GRPO with a fixed abstention reward `r_u`, the sign
of an abstention's advantage `(r_u - mean_G r) / std_G r` depends on the
group's accuracy (`grpo.group_advantages`): negative in easy groups (the policy
learns never to abstain), positive in hard ones (it learns to dodge). UCPO
separates deterministic and uncertain rollouts and normalizes each among
themselves (the paper's abstract). Everything below beyond that concept is a
**jaxlab interpretation** (the paper's code was not available; see
`shared/papers/uncertainty_rl.md` §3), and every constant is an argument:

  * TAD (`tad_advantages`): the deterministic rollouts D (correct or wrong,
    rewards 1 / 0) are z-scored among themselves, per group. Every uncertain
    rollout of a group carries the group's uncertain-channel reward r_U(G);
    the uncertain rollouts are z-scored among themselves over the batch (the
    default), or r_U(G) is used as their advantage directly
    (`normalize_uncertain=False`, jaxlab interpretation).
  * DURA (`dura_uncertain_advantage`): `r_U(G) = s * tanh(k * (rho_w - rho_c) +
    b * (0.5 - g_t))` with the group's fractions of wrong / correct rollouts
    (instance difficulty) and `g_t`, an EMA over steps of the batch accuracy
    (model evolution, `update_accuracy_ema`). Higher for a mostly failed prompt
    and while the model is weak, lower for a mostly solved prompt and as it
    improves. Both terms are on by default (k = b = 2).
  * NTF (`ntf_mask`): groups whose G outcomes are all identical carry no
    contrast and are dropped (DAPO dynamic sampling over ternary outcomes); the
    uncertain channel's statistics are taken over the kept groups.

`ucpo_advantages` combines them; the loss is `grpo.clipped_surrogate_loss`.

Out-of-range outcome codes (e.g. 7 or -4) are a ValueError outside `jit`. Under
`jit` a group holding one is never scored as if the code were another outcome:
its fractions, r_U and advantages are NaN, NTF drops it, and it is left out of
every statistic shared with other groups (the uncertain pool, the batch
accuracy), as the MoE router treats a NaN token (`grpo.valid_groups`).

Example:
  >>> import jax.numpy as jnp
  >>> from jaxlab.rl import grpo, ucpo
  >>> C, W, U = grpo.CORRECT, grpo.WRONG, grpo.UNCERTAIN
  >>> outcomes = jnp.array([[C, C, C, W, U, U, C, W],       # mostly solved
  ...                       [W, W, W, C, U, U, W, W]])      # mostly failed
  >>> adv, keep = ucpo.ucpo_advantages(outcomes, accuracy_ema=0.5)
  >>> bool(adv[0, 4] < 0 < adv[1, 4]), keep.tolist()        # abstain where it fails
  (True, [True, True])
"""

import jax.numpy as jnp
import numpy as np
from jax import Array
from jaxtyping import Bool, Float, Int

from jaxlab import validation
from jaxlab.rl import grpo
from jaxlab.rl.grpo import CORRECT, UNCERTAIN, WRONG


def outcome_fractions(outcomes: Int[Array, "b g"]) -> Float[Array, "b 3"]:
  """Per group, the fractions (rho_c, rho_w, rho_u) of correct / wrong / uncertain rollouts.

  NaN for a group holding an out-of-range code (under `jit`; outside it, a ValueError).

  Example:
    >>> outcome_fractions(jnp.array([[0, 0, 1, 2]])).tolist()
    [[0.5, 0.25, 0.25]]
  """
  grpo.check_outcomes(outcomes)
  rho = jnp.stack([(outcomes == c).mean(axis=1) for c in (CORRECT, WRONG, UNCERTAIN)],
                  axis=1).astype(jnp.float32)
  return jnp.where(grpo.valid_groups(outcomes)[:, None], rho, jnp.nan)


def dura_uncertain_advantage(outcomes: Int[Array, "b g"],
                             accuracy_ema: float | Float[Array, ""], *,
                             scale: float | Float[Array, ""] = 1.0,
                             k: float | Float[Array, ""] = 2.0,
                             b: float | Float[Array, ""] = 2.0) -> Float[Array, "b"]:
  """DURA's uncertain-channel value r_U per group (jaxlab interpretation).

  `r_U = scale * tanh(k * (rho_w - rho_c) + b * (0.5 - accuracy_ema))`: the
  paper's concept (uncertainty weights adapted "according to model evolution
  and instance difficulty", abstract; a tanh squashing and a smoothing step in
  a summary) with our functional form. `tad_advantages` z-scores it over the
  batch's uncertain rollouts, or uses it as their advantage directly. s = 1
  and k = 2 are jaxlab's reconstruction; b = 0 would switch the model-evolution
  term off, so b defaults to k (both terms on, equal gains; unverified).

  `scale` and `accuracy_ema` are range-checked when concrete (outside `jit`);
  traced values are not checked. A concrete `b == 0` drops the capability term
  entirely, so `accuracy_ema` (even a traced NaN) cannot reach a_U then.

  Args:
    outcomes: outcome codes [b, g].
    accuracy_ema: the smoothed batch accuracy g_t in [0, 1] (a scalar).
    scale: s, the largest abs(a_U) (a_U is in (-s, s)); finite and >= 0.
    k: k, gain on the group's difficulty rho_w - rho_c.
    b: b, gain on the model-evolution term 0.5 - g_t (0 turns it off).

  Returns:
    r_U per group, float32 [b].

  Raises:
    ValueError: if `accuracy_ema` is not a scalar, or a concrete `accuracy_ema`
      is outside [0, 1] (or NaN), or a concrete `scale` is not a finite number >= 0.

  Example:
    >>> o = jnp.array([[1, 1, 1, 0], [0, 0, 0, 1]])
    >>> [round(float(a), 3) for a in dura_uncertain_advantage(o, 0.5)]    # tanh(+-1)
    [0.762, -0.762]
    >>> [round(float(a), 3) for a in dura_uncertain_advantage(o, 0.75)]   # tanh(+-1 - 0.5)
    [0.462, -0.905]
  """
  if np.ndim(accuracy_ema) != 0:
    raise ValueError(f"accuracy_ema must be a scalar, got shape {np.shape(accuracy_ema)}")
  g = validation.concrete(accuracy_ema)
  if g is not None and not 0.0 <= g <= 1.0:
    raise ValueError(f"accuracy_ema must be in [0, 1], got {g.item()!r}")
  s = validation.concrete(scale)
  if s is not None and not (np.all(s >= 0.0) and np.all(np.isfinite(s))):
    raise ValueError(f"scale must be a finite number >= 0, got {s.tolist()!r}")
  rho = outcome_fractions(outcomes)
  logit = k * (rho[:, WRONG] - rho[:, CORRECT])
  b_value = validation.concrete(b)
  if b_value is None or np.any(b_value != 0):  # a concrete b == 0: no term, so no 0 * NaN
    logit = logit + b * (0.5 - accuracy_ema)
  return scale * jnp.tanh(logit)


def tad_advantages(outcomes: Int[Array, "b g"], uncertain_reward: Float[Array, "b"], *,
                   normalize_uncertain: bool | Bool[Array, ""] = True,
                   pool: Bool[Array, "b"] | Float[Array, "b"] | None = None,
                   eps: float = 1e-6) -> Float[Array, "b g"]:
  """Ternary advantage decoupling: D and U each normalized among themselves.

  The paper's abstract: TAD "separate[s] and independently normalize[s]
  deterministic and uncertain rollouts".

  * D (correct: reward 1, wrong: 0), per group: `A_i = (r_i - mean_D r) /
    (std_D r + eps)` (population std over the group's D only), so D's
    advantages have zero mean and unit std whenever D holds both outcomes (all
    zero when D is one-sided or empty). U's rewards never enter D's statistics.
  * U, `normalize_uncertain=True`: every uncertain rollout of a group carries
    the group's `uncertain_reward` (DURA's value, or a constant for "TAD
    only"), so within a group the uncertain rollouts are all alike; they are
    z-scored among themselves over the batch, i.e. over every uncertain rollout
    of the groups in `pool`: `A_i = (r_U(G_i) - mean_U r_U) / (std_U r_U + eps)`
    (population statistics, one term per uncertain rollout). Pooling over the
    batch is a jaxlab interpretation (the paper's code was not available): it is
    the only pool in which uncertain rollouts differ. A constant reward gives 0.
  * U, `normalize_uncertain=False`: `uncertain_reward` is the advantage itself
    (DURA's value as the uncertain channel's advantage: jaxlab interpretation).

  Non-finite values: a group whose `uncertain_reward` is NaN / Inf gets NaN on
  its own uncertain rollouts and is left out of the pool, so the others' are
  unchanged. A group holding an out-of-range code (under `jit`) gets NaN on
  every rollout and is left out of the pool too.

  Args:
    outcomes: outcome codes [b, g].
    uncertain_reward: the uncertain channel's value per group [b].
    normalize_uncertain: True: z-score U over the pool; False: use it directly.
      May be a traced bool (arms that share one compiled program).
    pool: the groups whose uncertain rollouts form U's statistics (the groups
      that are trained on, e.g. `ntf_mask`); bool, or 0 / 1; None: every group.
    eps: added to the stds; > 0.

  Returns:
    Advantages [b, g].

  Example:
    >>> o = jnp.array([[0, 1, 2, 2], [0, 1, 1, 2]])
    >>> r_u = jnp.array([0.6, -0.2])   # three uncertain rollouts: mean 1/3, std 0.377
    >>> [[round(float(a), 3) for a in row] for row in tad_advantages(o, r_u)]
    [[1.0, -1.0, 0.707, 0.707], [1.414, -0.707, -0.707, -1.414]]
    >>> [round(float(a), 3) for a in tad_advantages(o, r_u, normalize_uncertain=False)[:, -1]]
    [0.6, -0.2]
  """
  grpo.check_outcomes(outcomes)
  if np.shape(uncertain_reward) != np.shape(outcomes)[:1]:
    raise ValueError(f"uncertain_reward must have shape [groups] = {np.shape(outcomes)[:1]}, "
                     f"got {np.shape(uncertain_reward)}")
  if pool is not None and np.shape(pool) != np.shape(outcomes)[:1]:
    raise ValueError(f"pool must have shape [groups] = {np.shape(outcomes)[:1]}, "
                     f"got {np.shape(pool)}")
  if not eps > 0:
    raise ValueError(f"eps must be > 0, got {eps}")
  valid = grpo.valid_groups(outcomes)
  in_pool = valid
  if pool is not None:
    _check_group_mask(pool, "pool")
    pool = jnp.asarray(pool)
    valid = valid & ((pool == 0) | (pool == 1))  # 0.5 (under jit): NaN, never rounded
    in_pool = valid & (pool != 0)
  a_d = _zscore(outcomes != UNCERTAIN, (outcomes == CORRECT).astype(jnp.float32), eps, axis=1)
  r_u = jnp.asarray(uncertain_reward, jnp.float32)
  in_u = (outcomes == UNCERTAIN) & (in_pool & jnp.isfinite(r_u))[:, None]
  a_u = _zscore(in_u, jnp.broadcast_to(r_u[:, None], np.shape(outcomes)), eps, axis=None)
  a_u = jnp.where(normalize_uncertain, a_u[:, 0], r_u)
  adv = jnp.where(outcomes != UNCERTAIN, a_d, a_u[:, None])
  return jnp.where(valid[:, None], adv, jnp.nan)


def _check_group_mask(mask, name: str) -> None:
  """Raises a ValueError unless a concrete `mask` is bool or holds only 0 and 1."""
  m = validation.concrete(mask)
  if m is not None and m.dtype != bool and not np.all((m == 0) | (m == 1)):
    raise ValueError(f"{name} must be bool or hold only 0 and 1, got {m.tolist()!r}")


def _zscore(member: Bool[Array, "b g"], x: Float[Array, "b g"], eps: float,
            axis: int | None) -> Float[Array, "b g"]:
  """`(x - mean) / (std + eps)` with mean and population std over the members along `axis`.

  Computed for every entry (members or not); entries off the members never
  reach the statistics, even when they are NaN.
  """
  n = jnp.maximum(member.sum(axis=axis, keepdims=True), 1)
  mean = jnp.where(member, x, 0.0).sum(axis=axis, keepdims=True) / n
  var = jnp.where(member, (x - mean) ** 2, 0.0).sum(axis=axis, keepdims=True) / n
  return (x - mean) / (jnp.sqrt(var) + eps)


def ntf_mask(outcomes: Int[Array, "b g"]) -> Bool[Array, "b"]:
  """NTF: True for groups whose outcomes are not all identical (jaxlab interpretation).

  A group holding an out-of-range code (under `jit`) is dropped (False), as
  `grpo.dynamic_sampling_mask` drops a group with a non-finite reward.

  Example:
    >>> ntf_mask(jnp.array([[2, 2, 2], [0, 0, 0], [0, 1, 1], [1, 2, 1]])).tolist()
    [False, False, True, True]
  """
  grpo.check_outcomes(outcomes)
  return grpo.valid_groups(outcomes) & (outcomes != outcomes[:, :1]).any(axis=1)


def update_accuracy_ema(accuracy_ema: float | Float[Array, ""], outcomes: Int[Array, "b g"], *,
                        decay: float = 0.9) -> Float[Array, ""]:
  """DURA's model-capability term: `decay * g + (1 - decay) * (batch accuracy)`.

  Batch accuracy = the fraction of the batch's rollouts that are correct, over
  the groups without an out-of-range code (under `jit`; NaN when no group is
  left). Outside `jit` such a code is a ValueError.

  Example:
    >>> float(update_accuracy_ema(0.0, jnp.array([[0, 0, 1, 2]]), decay=0.5))
    0.25
  """
  if not 0.0 <= decay < 1.0:
    raise ValueError(f"decay must be in [0, 1), got {decay}")
  grpo.check_outcomes(outcomes)
  valid = grpo.valid_groups(outcomes)
  correct = ((outcomes == CORRECT) & valid[:, None]).sum()
  counted = valid.sum() * np.shape(outcomes)[1]
  acc = jnp.where(counted > 0, correct / jnp.maximum(counted, 1), jnp.nan).astype(jnp.float32)
  return decay * jnp.asarray(accuracy_ema, jnp.float32) + (1.0 - decay) * acc


def ucpo_advantages(outcomes: Int[Array, "b g"], accuracy_ema: float | Float[Array, ""], *,
                    dura: bool | Bool[Array, ""] = True,
                    uncertain_reward: float | Float[Array, ""] = 0.0,
                    normalize_uncertain: bool | Bool[Array, ""] = True,
                    scale: float | Float[Array, ""] = 1.0, k: float | Float[Array, ""] = 2.0,
                    b: float | Float[Array, ""] = 2.0,
                    eps: float = 1e-6) -> tuple[Float[Array, "b g"], Bool[Array, "b"]]:
  """UCPO's advantages and NTF group mask (TAD + DURA; `dura=False`: TAD only).

  Args:
    outcomes: outcome codes [b, g].
    accuracy_ema: DURA's g_t (see `update_accuracy_ema`).
    dura: True: r_U from `dura_uncertain_advantage`; False: the constant
      `uncertain_reward` ("TAD only"). May be a traced bool (vmapped arms).
    uncertain_reward: r_U when `dura` is False (jaxlab interpretation: a
      group-independent value; z-scored over the batch it gives 0, so abstaining
      is neither rewarded nor punished; used directly it is the advantage).
    normalize_uncertain: TAD's uncertain channel: z-scored over the kept
      groups' uncertain rollouts (True), or r_U directly (see `tad_advantages`).
    scale, k, b: DURA's constants (see `dura_uncertain_advantage`).
    eps: TAD's std epsilon.

  Returns:
    (advantages [b, g], keep [b]): weight the surrogate by `keep` (NTF).

  Example:
    >>> o = jnp.array([[0, 0, 0, 1, 2], [1, 1, 1, 0, 2], [0, 1, 2, 2, 2]])
    >>> adv, keep = ucpo_advantages(o, 0.5)
    >>> [round(float(a), 2) for a in adv[:, -1]]     # U: z-scored over the batch's five
    [-1.58, 1.58, 0.0]
  """
  keep = ntf_mask(outcomes)
  a_dura = dura_uncertain_advantage(outcomes, accuracy_ema, scale=scale, k=k, b=b)
  r_u = jnp.where(dura, a_dura, jnp.asarray(uncertain_reward, jnp.float32))
  return tad_advantages(outcomes, r_u, normalize_uncertain=normalize_uncertain, pool=keep,
                        eps=eps), keep
