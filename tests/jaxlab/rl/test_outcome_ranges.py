"""Out-of-range outcome codes and masks in GRPO / UCPO: a ValueError eagerly, NaN under jit.

Before: under `jit`, codes 7 and -4 were scored WRONG by TAD, NTF, the outcome
fractions and the accuracy EMA (finite advantages, a group trained on); and a
mask entry of 0.5 counted as 1 in the clipped surrogate loss.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.rl import grpo, ucpo

C, W, U = grpo.CORRECT, grpo.WRONG, grpo.UNCERTAIN
GOOD = jnp.array([[C, C, W, U], [W, W, C, U], [C, W, U, U]])
# Row 1 of GOOD with one code out of range (7, then -4).
BAD = {code: GOOD.at[1, 1].set(code) for code in (7, -4)}


@pytest.mark.parametrize("code", [7, -4])
def test_eager_out_of_range_codes_raise_naming_outcomes(code):
  o = BAD[code]
  for fn in (grpo.outcome_rewards, ucpo.outcome_fractions, ucpo.ntf_mask,
             lambda o: ucpo.update_accuracy_ema(0.5, o),
             lambda o: ucpo.dura_uncertain_advantage(o, 0.5),
             lambda o: ucpo.tad_advantages(o, jnp.zeros(3)),
             lambda o: ucpo.ucpo_advantages(o, 0.5)):
    with pytest.raises(ValueError, match=r"outcomes must be codes CORRECT=0, WRONG=1"):
      fn(o)


@pytest.mark.parametrize("code", [7, -4])
def test_out_of_range_codes_under_jit_make_their_group_nan_and_leave_the_others(code):
  o = BAD[code]
  rho = np.asarray(jax.jit(ucpo.outcome_fractions)(o))
  assert np.isnan(rho[1]).all() and np.isfinite(rho[[0, 2]]).all()
  assert jax.jit(ucpo.ntf_mask)(o).tolist() == [True, False, True]  # dropped, not trained on
  r_u = np.asarray(jax.jit(lambda o: ucpo.dura_uncertain_advantage(o, 0.5))(o))
  assert np.isnan(r_u[1]) and np.isfinite(r_u[[0, 2]]).all()

  adv, keep = jax.jit(lambda o: ucpo.ucpo_advantages(o, 0.5))(o)
  adv = np.asarray(adv)
  assert np.isnan(adv[1]).all() and keep.tolist() == [True, False, True]
  # The other groups get what they get without the bad group (it leaves the uncertain pool).
  ref, _ = ucpo.ucpo_advantages(GOOD[jnp.array([0, 2])], 0.5)
  np.testing.assert_allclose(adv[[0, 2]], np.asarray(ref), rtol=1e-6, atol=1e-6)
  tad = np.asarray(jax.jit(lambda o: ucpo.tad_advantages(o, jnp.array([0.3, 0.1, -0.2])))(o))
  ref = ucpo.tad_advantages(GOOD[jnp.array([0, 2])], jnp.array([0.3, -0.2]))
  assert np.isnan(tad[1]).all()
  np.testing.assert_allclose(tad[[0, 2]], np.asarray(ref), rtol=1e-6, atol=1e-6)

  # Batch accuracy over the valid groups only (3 correct of their 8 rollouts).
  ema = float(jax.jit(lambda o: ucpo.update_accuracy_ema(0.0, o, decay=0.5))(o))
  assert ema == pytest.approx(0.5 * 3 / 8)
  assert np.isnan(float(jax.jit(lambda o: ucpo.update_accuracy_ema(0.0, o))(o[1:2])))


def test_a_fractional_or_nan_mask_is_refused_eagerly_and_nan_under_jit():
  logp = jnp.log(jnp.full((2, 3), 0.5))
  adv = jnp.array([1.0, -1.0])
  ok = jnp.array([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
  loss = grpo.clipped_surrogate_loss(logp, logp, adv, ok)
  assert float(loss) == pytest.approx(-1.0 / 3.0)
  assert float(grpo.clipped_surrogate_loss(logp, logp, adv, ok > 0)) == float(loss)
  jitted = jax.jit(grpo.clipped_surrogate_loss)
  for bad in (ok.at[0, 2].set(0.5), ok.at[1, 1].set(jnp.nan), ok.at[0, 0].set(-1.0)):
    with pytest.raises(ValueError, match="mask must be bool or hold only 0 and 1"):
      grpo.clipped_surrogate_loss(logp, logp, adv, bad)
    assert np.isnan(float(jitted(logp, logp, adv, bad)))
  assert float(jitted(logp, logp, adv, ok)) == pytest.approx(-1.0 / 3.0)


def test_a_fractional_pool_is_refused_eagerly_and_nan_under_jit():
  r_u = jnp.array([0.3, 0.1, -0.2])
  with pytest.raises(ValueError, match="pool must be bool or hold only 0 and 1"):
    ucpo.tad_advantages(GOOD, r_u, pool=jnp.array([1.0, 0.5, 1.0]))
  adv = np.asarray(jax.jit(ucpo.tad_advantages)(GOOD, r_u, pool=jnp.array([1.0, 0.5, 1.0])))
  assert np.isnan(adv[1]).all() and np.isfinite(adv[[0, 2]]).all()
  as_floats = ucpo.tad_advantages(GOOD, r_u, pool=jnp.array([1.0, 0.0, 1.0]))
  as_bools = ucpo.tad_advantages(GOOD, r_u, pool=jnp.array([True, False, True]))
  np.testing.assert_array_equal(np.asarray(as_floats), np.asarray(as_bools))
