"""UCPO: ternary advantage decoupling (TAD), dynamic uncertainty reward (DURA), NTF.

UCPO (Zeng et al., ICML 2026, arXiv 2601.22648) trains a policy that may answer
"I don't know". Under plain GRPO with a fixed abstention reward `r_u`, the sign
of an abstention's advantage `(r_u - mean_G r) / std_G r` depends on the
group's accuracy (`grpo.group_advantages`): negative in easy groups (the policy
learns never to abstain), positive in hard ones (it learns to dodge). UCPO
decouples the two channels. Everything below beyond that concept is a
**jaxlab interpretation** (the paper's code was not available; see
`shared/papers/uncertainty_rl.md` §3), and every constant is an argument:

  * TAD (`tad_advantages`): the deterministic rollouts D (correct or wrong,
    rewards 1 / 0) are z-scored among themselves only; every uncertain rollout
    of the group gets the group's uncertain-channel advantage `a_U`, not a
    z-score against D.
  * DURA (`dura_uncertain_advantage`): `a_U = s * tanh(k * (rho_w - rho_c) +
    b * (0.5 - g_t))` with the group's fractions of wrong / correct rollouts
    (instance difficulty) and `g_t`, an EMA over steps of the batch accuracy
    (model capability, `update_accuracy_ema`). Positive when a prompt is
    mostly failed, negative when it is mostly solved.
  * NTF (`ntf_mask`): groups whose G outcomes are all identical carry no
    contrast and are dropped (DAPO dynamic sampling over ternary outcomes).

`ucpo_advantages` combines them; the loss is `grpo.clipped_surrogate_loss`.

Example:
  >>> import jax.numpy as jnp
  >>> from jaxlab.rl import grpo, ucpo
  >>> C, W, U = grpo.CORRECT, grpo.WRONG, grpo.UNCERTAIN
  >>> outcomes = jnp.array([[C, C, C, W, U, U, C, W]])      # mostly solved
  >>> adv, keep = ucpo.ucpo_advantages(outcomes, accuracy_ema=0.5)
  >>> bool(adv[0, 4] < 0), bool(keep[0])                    # abstaining discouraged here
  (True, True)
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

  Example:
    >>> outcome_fractions(jnp.array([[0, 0, 1, 2]])).tolist()
    [[0.5, 0.25, 0.25]]
  """
  grpo.check_outcomes(outcomes)
  return jnp.stack([(outcomes == c).mean(axis=1) for c in (CORRECT, WRONG, UNCERTAIN)],
                   axis=1).astype(jnp.float32)


def dura_uncertain_advantage(outcomes: Int[Array, "b g"],
                             accuracy_ema: float | Float[Array, ""], *,
                             scale: float | Float[Array, ""] = 1.0,
                             k: float | Float[Array, ""] = 2.0,
                             b: float | Float[Array, ""] = 0.0) -> Float[Array, "b"]:
  """DURA's uncertain-channel advantage per group (jaxlab interpretation).

  `a_U = scale * tanh(k * (rho_w - rho_c) + b * (0.5 - accuracy_ema))`: the
  paper's concept (a gain recomputed per group from its outcome ratios and
  evolving with the model; a tanh squashing and a smoothing step) with our
  functional form. The defaults (1, 2, 0) are the spec's and unverified.

  `scale` and `accuracy_ema` are range-checked when concrete (outside `jit`);
  traced values are not checked. A concrete `b == 0` drops the capability term
  entirely, so `accuracy_ema` (even a traced NaN) cannot reach a_U then.

  Args:
    outcomes: outcome codes [b, g].
    accuracy_ema: the smoothed batch accuracy g_t in [0, 1] (a scalar).
    scale: s, the largest |a_U| (a_U is in (-s, s)); finite and >= 0.
    k: k, gain on the group's difficulty rho_w - rho_c.
    b: b, gain on the model-capability term 0.5 - g_t (0 turns it off).

  Returns:
    a_U per group, float32 [b].

  Raises:
    ValueError: if `accuracy_ema` is not a scalar, or a concrete `accuracy_ema`
      is outside [0, 1] (or NaN), or a concrete `scale` is not a finite number >= 0.

  Example:
    >>> o = jnp.array([[1, 1, 1, 0], [0, 0, 0, 1]])
    >>> [round(float(a), 3) for a in dura_uncertain_advantage(o, 0.5)]    # tanh(+-1)
    [0.762, -0.762]
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


def tad_advantages(outcomes: Int[Array, "b g"], uncertain_advantage: Float[Array, "b"], *,
                   eps: float = 1e-6) -> Float[Array, "b g"]:
  """Ternary advantage decoupling: D z-scored on its own, U from its own channel.

  For the deterministic rollouts D (correct: reward 1, wrong: 0) of a group,
  `A_i = (r_i - mean_D r) / (std_D r + eps)` (population std over D only), so
  D's advantages have zero mean and unit std whenever D holds both outcomes
  (all zero when D is one-sided or empty). Each uncertain rollout gets the
  group's `uncertain_advantage` (DURA's a_U, or a constant for "TAD only").

  Args:
    outcomes: outcome codes [b, g].
    uncertain_advantage: a_U per group [b].
    eps: added to D's std; > 0.

  Returns:
    Advantages [b, g].

  Example:
    >>> o = jnp.array([[0, 1, 2, 2]])
    >>> [[round(float(a), 3) for a in row] for row in tad_advantages(o, jnp.array([0.3]))]
    [[1.0, -1.0, 0.3, 0.3]]
  """
  grpo.check_outcomes(outcomes)
  if np.shape(uncertain_advantage) != np.shape(outcomes)[:1]:
    raise ValueError(f"uncertain_advantage must have shape [groups] = {np.shape(outcomes)[:1]}, "
                     f"got {np.shape(uncertain_advantage)}")
  if not eps > 0:
    raise ValueError(f"eps must be > 0, got {eps}")
  in_d = outcomes != UNCERTAIN
  r = (outcomes == CORRECT).astype(jnp.float32)
  n_d = jnp.maximum(in_d.sum(axis=1, keepdims=True), 1)
  mean_d = jnp.where(in_d, r, 0.0).sum(axis=1, keepdims=True) / n_d
  var_d = jnp.where(in_d, (r - mean_d) ** 2, 0.0).sum(axis=1, keepdims=True) / n_d
  a_d = (r - mean_d) / (jnp.sqrt(var_d) + eps)
  return jnp.where(in_d, a_d, jnp.asarray(uncertain_advantage, jnp.float32)[:, None])


def ntf_mask(outcomes: Int[Array, "b g"]) -> Bool[Array, "b"]:
  """NTF: True for groups whose outcomes are not all identical (jaxlab interpretation).

  Example:
    >>> ntf_mask(jnp.array([[2, 2, 2], [0, 0, 0], [0, 1, 1], [1, 2, 1]])).tolist()
    [False, False, True, True]
  """
  grpo.check_outcomes(outcomes)
  return (outcomes != outcomes[:, :1]).any(axis=1)


def update_accuracy_ema(accuracy_ema: float | Float[Array, ""], outcomes: Int[Array, "b g"], *,
                        decay: float = 0.9) -> Float[Array, ""]:
  """DURA's model-capability term: `decay * g + (1 - decay) * (batch accuracy)`.

  Batch accuracy = the fraction of the batch's rollouts that are correct.

  Example:
    >>> float(update_accuracy_ema(0.0, jnp.array([[0, 0, 1, 2]]), decay=0.5))
    0.25
  """
  if not 0.0 <= decay < 1.0:
    raise ValueError(f"decay must be in [0, 1), got {decay}")
  grpo.check_outcomes(outcomes)
  acc = (outcomes == CORRECT).mean().astype(jnp.float32)
  return decay * jnp.asarray(accuracy_ema, jnp.float32) + (1.0 - decay) * acc


def ucpo_advantages(outcomes: Int[Array, "b g"], accuracy_ema: float | Float[Array, ""], *,
                    dura: bool | Bool[Array, ""] = True,
                    uncertain_advantage: float | Float[Array, ""] = 0.0,
                    scale: float | Float[Array, ""] = 1.0, k: float | Float[Array, ""] = 2.0,
                    b: float | Float[Array, ""] = 0.0,
                    eps: float = 1e-6) -> tuple[Float[Array, "b g"], Bool[Array, "b"]]:
  """UCPO's advantages and NTF group mask (TAD + DURA; `dura=False`: TAD only).

  Args:
    outcomes: outcome codes [b, g].
    accuracy_ema: DURA's g_t (see `update_accuracy_ema`).
    dura: True: a_U from `dura_uncertain_advantage`; False: the constant
      `uncertain_advantage` ("TAD only"). May be a traced bool (vmapped arms).
    uncertain_advantage: a_U when `dura` is False (jaxlab interpretation: a
      group-independent value, 0 = abstaining neither rewarded nor punished).
    scale, k, b: DURA's constants (see `dura_uncertain_advantage`).
    eps: TAD's std epsilon.

  Returns:
    (advantages [b, g], keep [b]): weight the surrogate by `keep` (NTF).
  """
  a_dura = dura_uncertain_advantage(outcomes, accuracy_ema, scale=scale, k=k, b=b)
  a_u = jnp.where(dura, a_dura, jnp.asarray(uncertain_advantage, jnp.float32))
  return tad_advantages(outcomes, a_u, eps=eps), ntf_mask(outcomes)
