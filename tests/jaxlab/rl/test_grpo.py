"""GRPO building blocks: advantages (incl. the fixed-r_u sign flip), surrogate, filtering."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.rl import grpo

C, W, U = grpo.CORRECT, grpo.WRONG, grpo.UNCERTAIN
# Wrong ranks / dtypes: the tests' jaxtyping hook rejects them first (a TypeError); without
# it the functions' own checks raise a ValueError. Value errors below are ValueErrors always.
SHAPE_ERRORS = (ValueError, TypeError)


def _group(num_correct: int, num_wrong: int, num_uncertain: int = 1) -> list[int]:
  return [C] * num_correct + [W] * num_wrong + [U] * num_uncertain


@pytest.mark.parametrize("r_u", [0.3, 0.5, 0.7])
def test_fixed_reward_uncertain_advantage_flips_sign_with_group_accuracy(r_u):
  # Groups of 8: one abstention, the other 7 answers from all wrong to all correct.
  groups = jnp.array([_group(c, 7 - c) for c in range(8)], jnp.int32)
  adv = grpo.group_advantages(grpo.outcome_rewards(groups, uncertain=r_u))
  mean_reward = np.asarray(grpo.outcome_rewards(groups, uncertain=r_u)).mean(axis=1)
  a_u = np.asarray(adv[:, -1])
  above, below = mean_reward > r_u + 1e-6, mean_reward < r_u - 1e-6
  assert above.any() and below.any()
  assert (a_u[above] < 0).all(), (a_u, mean_reward)   # majority suppression
  assert (a_u[below] > 0).all(), (a_u, mean_reward)   # evasion pays in hard groups
  # Closed form: (r_u - mean) / std.
  rewards = np.asarray(grpo.outcome_rewards(groups, uncertain=r_u))
  np.testing.assert_allclose(a_u, (r_u - rewards.mean(1)) / (rewards.std(1) + 1e-6), rtol=1e-5)


def test_binary_grpo_rewards_and_advantages():
  r = grpo.outcome_rewards(jnp.array([[C, W, U, C]]))
  np.testing.assert_array_equal(np.asarray(r), [[1, 0, 0, 1]])
  adv = grpo.group_advantages(r)
  np.testing.assert_allclose(np.asarray(adv), [[1, -1, -1, 1]], atol=1e-5)
  np.testing.assert_array_equal(np.asarray(grpo.group_advantages(jnp.ones((2, 4)))), 0.0)


def test_nan_reward_stays_in_its_group():
  r = jnp.array([[1.0, jnp.nan, 0.0], [1.0, 0.0, 0.0]])
  adv = np.asarray(grpo.group_advantages(r))
  assert np.isnan(adv[0]).all() and np.isfinite(adv[1]).all()
  assert grpo.dynamic_sampling_mask(r).tolist() == [False, True]


def test_dynamic_sampling_drops_constant_groups():
  r = jnp.array([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0], [0.5, 0.5, 0.5], [1.0, 0.0, 0.0]])
  assert grpo.dynamic_sampling_mask(r).tolist() == [False, False, False, True]


def _surrogate_inputs():
  k1, k2, k3 = jax.random.split(jax.random.key(0), 3)
  logp = -jax.random.uniform(k1, (6, 3), minval=0.1, maxval=2.0)
  old = logp + 0.3 * jax.random.normal(k2, (6, 3))  # ratios both inside and outside the clip
  adv = jax.random.normal(k3, (6,))
  mask = jnp.array([[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1], [0, 0, 0], [1, 1, 1]], bool)
  return logp, old, adv, mask


def test_surrogate_matches_reference_formula():
  logp, old, adv, mask = _surrogate_inputs()
  loss = grpo.clipped_surrogate_loss(logp, old, adv, mask, eps_low=0.2, eps_high=0.28)
  ratio = np.exp(np.asarray(logp) - np.asarray(old))
  a = np.asarray(adv)[:, None]
  per_tok = np.minimum(ratio * a, np.clip(ratio, 0.8, 1.28) * a)
  m = np.asarray(mask)
  np.testing.assert_allclose(float(loss), -(per_tok * m).sum() / m.sum(), rtol=1e-5)


def test_surrogate_gradient_matches_finite_differences():
  logp, old, adv, mask = _surrogate_inputs()
  f = lambda x: grpo.clipped_surrogate_loss(x, old, adv, mask, eps_low=0.2, eps_high=0.28)
  grad = np.asarray(jax.grad(f)(logp))
  h = 1e-3
  x0 = np.asarray(logp, np.float64)
  fd = np.zeros_like(x0)
  for i in range(x0.shape[0]):
    for j in range(x0.shape[1]):
      xp, xm = x0.copy(), x0.copy()
      xp[i, j] += h
      xm[i, j] -= h
      fd[i, j] = (float(f(jnp.asarray(xp, jnp.float32))) - float(f(jnp.asarray(xm, jnp.float32)))
                  ) / (2 * h)
  np.testing.assert_allclose(grad, fd, atol=2e-3)
  # Masked tokens and clipped tokens (ratio outside the range, in the min's clipped branch)
  # get no gradient; the others get ratio * A / num_valid.
  assert (grad[~np.asarray(mask)] == 0).all()
  assert (grad != 0).any()


def test_masked_nan_does_not_leak():
  logp, old, adv, mask = _surrogate_inputs()
  old = old.at[4].set(jnp.nan)  # row 4 is fully masked
  assert np.isfinite(float(grpo.clipped_surrogate_loss(logp, old, adv, mask)))
  assert np.isfinite(np.asarray(jax.grad(grpo.clipped_surrogate_loss)(logp, old, adv, mask))).all()


def test_bad_inputs_raise():
  with pytest.raises(ValueError, match="outcomes must be codes"):
    grpo.outcome_rewards(jnp.array([[0, 3]]))
  with pytest.raises(SHAPE_ERRORS):
    grpo.outcome_rewards(jnp.array([[0.0, 1.0]]))
  with pytest.raises(ValueError, match="group needs >= 2"):
    grpo.group_advantages(jnp.ones((3, 1)))
  with pytest.raises(SHAPE_ERRORS):
    grpo.dynamic_sampling_mask(jnp.ones((4,)))
  logp = jnp.zeros((2, 3))
  with pytest.raises(SHAPE_ERRORS):
    grpo.clipped_surrogate_loss(logp, logp, jnp.zeros((3,)))
  with pytest.raises(SHAPE_ERRORS):
    grpo.clipped_surrogate_loss(logp, jnp.zeros((2, 2)), jnp.zeros((2,)))
  with pytest.raises(ValueError, match="eps_low"):
    grpo.clipped_surrogate_loss(logp, logp, jnp.zeros((2,)), eps_low=1.0)


def test_out_of_range_codes_under_jit_are_nan():
  r = jax.jit(lambda o: grpo.outcome_rewards(o, uncertain=0.5))(jnp.array([[0, 5]]))
  assert np.isnan(np.asarray(r)[0, 1]) and float(r[0, 0]) == 1.0
