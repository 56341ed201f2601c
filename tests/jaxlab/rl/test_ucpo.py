"""UCPO pieces (TAD, DURA, NTF) and the knowledge-boundary task."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.rl import grpo, ucpo
from jaxlab.rl import knowledge_task as kt

C, W, U = grpo.CORRECT, grpo.WRONG, grpo.UNCERTAIN


def _random_outcomes(key, b=64, g=8):
  return jax.random.randint(key, (b, g), 0, 3)


def test_tad_deterministic_channel_zero_mean_unit_std():
  o = _random_outcomes(jax.random.key(0))
  a_u = jnp.linspace(-1, 1, o.shape[0])
  o_np = np.asarray(o)
  for normalize in (True, False):
    adv = np.asarray(ucpo.tad_advantages(o, a_u, normalize_uncertain=normalize))
    checked = 0
    for i in range(o_np.shape[0]):
      d = o_np[i] != U
      if (o_np[i][d] == C).any() and (o_np[i][d] == W).any():
        np.testing.assert_allclose(adv[i][d].mean(), 0.0, atol=1e-5)
        np.testing.assert_allclose(adv[i][d].std(), 1.0, atol=1e-4)
        checked += 1
      elif d.any():  # one-sided D: no contrast, no advantage
        np.testing.assert_array_equal(adv[i][d], 0.0)
      if not normalize:  # the spec's reading: r_U is the advantage
        np.testing.assert_allclose(adv[i][~d], float(a_u[i]), rtol=1e-6)
    assert checked > 10


def _zscore_over_uncertain(o, r_u, pool=None):
  """Closed form: r_U of each uncertain rollout z-scored over the pool's uncertain rollouts."""
  o, r_u = np.asarray(o), np.asarray(r_u, np.float64)
  pool = np.ones(len(o), bool) if pool is None else np.asarray(pool)
  values = np.repeat(r_u[pool], (o[pool] == U).sum(axis=1))
  return (r_u - values.mean()) / (values.std() + 1e-6)


def test_tad_normalizes_uncertain_rollouts_among_themselves():
  # The paper's "independently normalize deterministic and uncertain rollouts": the
  # uncertain rollouts of the batch get zero mean and unit std among themselves.
  o = _random_outcomes(jax.random.key(1))
  r_u = jax.random.uniform(jax.random.key(2), (o.shape[0],), minval=-1, maxval=1)
  adv = np.asarray(ucpo.tad_advantages(o, r_u))
  u = np.asarray(o) == U
  np.testing.assert_allclose(adv[u].mean(), 0.0, atol=1e-5)
  np.testing.assert_allclose(adv[u].std(), 1.0, atol=1e-4)
  want = _zscore_over_uncertain(o, r_u)
  np.testing.assert_allclose(adv, np.where(u, want[:, None], adv), rtol=1e-4, atol=1e-5)
  # Independent: U's rewards never reach D's advantages, D's outcomes never reach U's.
  other = np.asarray(ucpo.tad_advantages(o, -3.0 * r_u))
  np.testing.assert_array_equal(other[~u], adv[~u])
  flipped = jnp.where(o == C, W, jnp.where(o == W, C, o))  # same U positions, D flipped
  np.testing.assert_allclose(np.asarray(ucpo.tad_advantages(flipped, r_u))[u], adv[u],
                             rtol=1e-6)
  # The pool: groups outside it do not move the statistics; a NaN reward stays in its group.
  pool = jnp.arange(o.shape[0]) % 3 != 0
  pooled = np.asarray(ucpo.tad_advantages(o, r_u, pool=pool))
  want = _zscore_over_uncertain(o, r_u, pool)
  np.testing.assert_allclose(pooled[u], np.broadcast_to(want[:, None], u.shape)[u], rtol=1e-4,
                             atol=1e-5)
  bad = np.asarray(ucpo.tad_advantages(o, r_u.at[0].set(jnp.nan), pool=pool))  # group 0: out
  np.testing.assert_array_equal(np.isnan(bad), u & (np.arange(o.shape[0]) == 0)[:, None])
  np.testing.assert_allclose(bad[1:], pooled[1:], rtol=1e-6)


def test_tad_uncertain_channel_does_not_flip_with_accuracy():
  # Groups of 8: one abstention and 7 answers, from all wrong to all correct, each with the
  # same uncertain reward +0.25; the pool also holds 8 abstentions rewarded -0.25.
  groups = jnp.array([[C] * c + [W] * (7 - c) + [U] for c in range(8)] * 2, jnp.int32)
  r_u = jnp.repeat(jnp.array([0.25, -0.25]), 8)
  adv = np.asarray(ucpo.tad_advantages(groups, r_u))[:, -1]
  # Normalized among the 16 abstentions (mean 0, std 0.25): +1 / -1 whatever the accuracy.
  np.testing.assert_allclose(adv, np.repeat([1.0, -1.0], 8), rtol=1e-4)
  # GRPO with a fixed r_u = 0.5 flips the sign of the same abstentions with the accuracy.
  fixed = np.asarray(grpo.group_advantages(grpo.outcome_rewards(groups[:8], uncertain=0.5)))
  assert (fixed[:, -1] > 0).any() and (fixed[:, -1] < 0).any()


def test_dura_closed_form_and_sign():
  o = jnp.array([[W] * 6 + [C, U], [C] * 6 + [W, U], [C, C, W, W, U, U, U, U]], jnp.int32)
  got = np.asarray(ucpo.dura_uncertain_advantage(o, 0.3, scale=0.8, k=2.0, b=1.5))
  rho_c = np.array([1, 6, 2]) / 8
  rho_w = np.array([6, 1, 2]) / 8
  np.testing.assert_allclose(got, 0.8 * np.tanh(2 * (rho_w - rho_c) + 1.5 * 0.2), rtol=1e-5)
  hard, easy = ucpo.dura_uncertain_advantage(o[:2], 0.5)
  assert hard > 0 > easy


def test_dura_default_moves_with_model_evolution():
  # Both of DURA's terms are on by default: the same group's r_U falls as the model's
  # smoothed accuracy g_t rises (b = 2, the spec's b = 0 would make these equal).
  o = jnp.array([[W] * 4 + [C] * 3 + [U], [C] * 6 + [W, U]], jnp.int32)
  weak = np.asarray(ucpo.dura_uncertain_advantage(o, 0.2))
  strong = np.asarray(ucpo.dura_uncertain_advantage(o, 0.8))
  rho = np.array([[3, 4], [6, 1]]) / 8  # (rho_c, rho_w)
  for g, got in ((0.2, weak), (0.8, strong)):
    np.testing.assert_allclose(got, np.tanh(2 * (rho[:, 1] - rho[:, 0]) + 2 * (0.5 - g)),
                               rtol=1e-5)
  assert (weak > strong + 0.2).all()
  assert kt.make_arm("ucpo").dura_b == 2.0


def test_dura_checks_concrete_scale_and_accuracy_ema():
  o = jnp.array([[W, W, W, C, U, U]], jnp.int32)
  for kwargs, match in [(dict(accuracy_ema=float("nan")), "accuracy_ema"),
                        (dict(accuracy_ema=7.0, b=1.0), "accuracy_ema"),
                        (dict(accuracy_ema=-0.1), "accuracy_ema"),
                        (dict(accuracy_ema=0.5, scale=-1.0), "scale"),
                        (dict(accuracy_ema=0.5, scale=float("inf")), "scale")]:
    with pytest.raises(ValueError, match=match):
      ucpo.dura_uncertain_advantage(o, **kwargs)
  with pytest.raises(ValueError, match="accuracy_ema"):
    ucpo.ucpo_advantages(o, jnp.float32(1.5))
  # The ends of the ranges are fine.
  assert np.all(np.isfinite(ucpo.dura_uncertain_advantage(o, 1.0, scale=0.0, b=1.0)))


def test_dura_traced_values_and_static_b_zero():
  o = jnp.array([[W, W, W, C, U, U], [C, C, C, W, U, U]], jnp.int32)
  # b == 0 (static) drops the capability term: a NaN g_t (traced, so unchecked) stays out.
  got = jax.jit(lambda g: ucpo.dura_uncertain_advantage(o, g, b=0.0))(jnp.float32(jnp.nan))
  np.testing.assert_allclose(np.asarray(got), np.tanh([2 * 2 / 6, -2 * 2 / 6]), rtol=1e-5)
  # Traced scale, g_t and b are not checked and follow the closed form.
  f = jax.jit(lambda g, s, b: ucpo.dura_uncertain_advantage(o, g, scale=s, b=b))
  got = f(jnp.float32(0.3), jnp.float32(0.8), jnp.float32(1.5))
  want = 0.8 * np.tanh(2 * np.array([2 / 6, -2 / 6]) + 1.5 * 0.2)
  np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5)


def test_ntf_drops_groups_with_identical_outcomes():
  o = jnp.array([[U] * 4, [C] * 4, [W] * 4, [C, C, C, W], [W, W, U, W], [C, U, U, U]], jnp.int32)
  assert ucpo.ntf_mask(o).tolist() == [False, False, False, True, True, True]
  adv, keep = ucpo.ucpo_advantages(o, 0.5)
  assert keep.tolist() == [False, False, False, True, True, True]
  # The dropped all-abstain group is left out of the uncertain channel's statistics.
  kept, _ = ucpo.ucpo_advantages(o[3:], 0.5)
  np.testing.assert_allclose(np.asarray(adv[3:]), np.asarray(kept), rtol=1e-6)


def test_accuracy_ema_and_tad_only():
  o = jnp.array([[C, W, U, U]], jnp.int32)
  np.testing.assert_allclose(float(ucpo.update_accuracy_ema(0.5, o, decay=0.9)),
                             0.9 * 0.5 + 0.1 * 0.25, rtol=1e-6)
  adv, _ = ucpo.ucpo_advantages(o, 0.5, dura=False, uncertain_reward=-0.1,
                                normalize_uncertain=False)
  np.testing.assert_allclose(np.asarray(adv), [[1, -1, -0.1, -0.1]], atol=1e-5)
  # Normalized among themselves, a constant uncertain reward carries no signal.
  adv, _ = ucpo.ucpo_advantages(o, 0.5, dura=False, uncertain_reward=-0.1)
  np.testing.assert_allclose(np.asarray(adv), [[1, -1, 0, 0]], atol=1e-5)


def test_ucpo_bad_inputs_raise():
  with pytest.raises((ValueError, TypeError)):  # TypeError: the tests' jaxtyping hook
    ucpo.tad_advantages(jnp.zeros((2, 4), jnp.int32), jnp.zeros((3,)))
  with pytest.raises((ValueError, TypeError)):
    ucpo.tad_advantages(jnp.zeros((2, 4), jnp.int32), jnp.zeros((2,)), pool=jnp.ones(3, bool))
  with pytest.raises((ValueError, TypeError)):
    ucpo.dura_uncertain_advantage(jnp.zeros((2, 4), jnp.int32), jnp.zeros((2,)))
  with pytest.raises(ValueError, match="decay"):
    ucpo.update_accuracy_ema(0.5, jnp.zeros((2, 4), jnp.int32), decay=1.0)
  with pytest.raises(ValueError, match="codes"):
    ucpo.ntf_mask(jnp.full((2, 4), -1))
  with pytest.raises(ValueError, match="fractions"):
    kt.TaskConfig(fractions=(0.5, 0.2, 0.2))
  with pytest.raises(ValueError, match="kind"):
    kt.PolicyConfig(kind="rnn")
  with pytest.raises(ValueError, match="multiple"):
    kt.RLConfig(num_steps=10, num_evals=3)
  with pytest.raises(ValueError, match="arm kind"):
    kt.make_arm("ppo")
  with pytest.raises(ValueError, match="dura_scale"):
    kt.make_arm("ucpo", dura_scale=-1.0)


def test_task_split_and_metrics():
  cfg = kt.TaskConfig(num_values=10)
  task = kt.make_task(cfg, seed=3)
  assert np.bincount(np.asarray(task.buckets), minlength=3).tolist() == [60, 20, 20]
  model = kt.make_policy(kt.PolicyConfig(kind="mlp", d_model=8, d_ff=16), cfg)
  params = kt.init_params(model, jax.random.key(0))
  table = kt.metrics_table(kt.evaluate(model, params, task, cfg))
  for g in kt.GROUPS:
    row = table[g]
    np.testing.assert_allclose(row["accuracy"] + row["abstention"] + row["hallucination"], 1.0,
                               atol=1e-5)
    np.testing.assert_allclose(row["paq"], row["accuracy"] / (1 - row["abstention"]), rtol=1e-4)
  # An unlearnable answer is a fresh uniform draw: PAQ = 1/K whatever the policy.
  np.testing.assert_allclose(table["unlearnable"]["paq"], 0.1, rtol=1e-5)


def test_sample_answers_matches_probabilities():
  logits = jnp.log(jnp.array([[0.5, 0.3, 0.2, 0.0], [0.0, 0.0, 0.1, 0.9]]) + 1e-12)
  draws = np.asarray(kt.sample_answers(jax.random.key(1), logits, 20_000))
  freq = np.stack([np.bincount(d, minlength=4) / d.size for d in draws])
  np.testing.assert_allclose(freq, [[0.5, 0.3, 0.2, 0.0], [0.0, 0.0, 0.1, 0.9]], atol=0.015)


def test_rl_step_is_one_program_for_every_arm():
  cfg = kt.TaskConfig(num_values=6)
  task = kt.make_task(cfg, seed=0)
  model = kt.make_policy(kt.PolicyConfig(kind="mlp", d_model=8, d_ff=16), cfg)
  rl_cfg = kt.RLConfig(num_steps=4, batch_prompts=4, num_evals=2, updates_per_batch=2)
  params = kt.init_params(model, jax.random.key(0))
  train = jax.jit(lambda p, a, k: kt.rl_train(model, p, task, a, k, cfg, rl_cfg))
  for arm in (kt.make_arm("grpo", reward_uncertain=0.5), kt.make_arm("ucpo"),
              kt.make_arm("ucpo", normalize_uncertain=False, dura_b=0.0)):
    new, curves = train(params, arm, jax.random.key(1))
    assert curves["eval"].shape == (2, 4, 5) and np.isfinite(np.asarray(curves["loss"])).all()
  assert train._cache_size() == 1
  moved = jax.tree.map(lambda a, b: float(jnp.abs(a - b).max()), params, new)
  assert max(jax.tree.leaves(moved)) > 0
