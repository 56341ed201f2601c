"""`GymnaxEnv` steps exactly like gymnax's own `env.step`, and SAC/PPO train through it."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.rl import ppo, sac
from jaxlab.rl.gymnax_adapter import GymnaxEnv

gymnax = pytest.importorskip("gymnax", reason="gymnax is not installed (the `gymnax` extra)")


def _action(env, key, i):
  if env.num_actions:
    return jnp.int32(i % env.num_actions)
  return jax.random.uniform(key, (env.action_dim,), minval=-3.0, maxval=3.0)


@pytest.mark.parametrize("name", ["Pendulum-v1", "CartPole-v1"])
def test_step_matches_gymnax_step(name):
  genv, gparams = gymnax.make(name)
  # A short time limit so that the run crosses an auto-reset by truncation.
  gparams = gparams.replace(max_steps_in_episode=20)
  env = GymnaxEnv(genv, gparams)
  step_fn, gstep_fn = jax.jit(env.step), jax.jit(genv.step)
  key = jax.random.key(0)
  obs, _ = env.reset(key, gparams)
  gobs, gstate = genv.reset(key, gparams)
  np.testing.assert_array_equal(obs, gobs)
  # Both step from gymnax's state each time (no drift between the trajectories).
  # The two are separately compiled XLA programs, which may fuse float32 math
  # differently: equal up to a few ulps, hence rtol 1e-6.
  close = dict(rtol=1e-6, atol=1e-6)
  resets = 0
  for i in range(45):
    key, k_step, k_act = jax.random.split(key, 3)
    a = _action(env, k_act, i)
    step = step_fn(k_step, gstate, a, gparams)
    gobs, gstate, greward, *gdone, _ = gstep_fn(k_step, gstate, a, gparams)
    np.testing.assert_allclose(step.obs, gobs, **close)
    for leaf, gleaf in zip(jax.tree.leaves(step.state), jax.tree.leaves(gstate), strict=True):
      np.testing.assert_allclose(leaf, gleaf, **close)
    np.testing.assert_allclose(step.reward, greward, **close)
    done = bool(step.terminated | step.truncated)
    assert done == bool(np.any(gdone))  # (terminated, truncated) or the older single `done`
    if len(gdone) == 2:  # gymnax with separate truncation: the flags agree one by one
      assert bool(step.terminated) == bool(gdone[0])
    if done:
      resets += 1
      assert int(step.state.time) == 0
      # final_obs is the observation the action reached, before the reset.
      assert not np.array_equal(step.final_obs, step.obs)
    else:
      np.testing.assert_allclose(step.final_obs, step.obs, **close)
  assert resets >= 2
  if name == "Pendulum-v1":  # never terminates: every reset is a truncation at t = 20
    assert resets == 2


def test_interface_fields_and_errors():
  pend = GymnaxEnv(*gymnax.make("Pendulum-v1"))
  assert (pend.obs_dim, pend.action_dim, pend.num_actions, pend.action_scale) == (3, 1, 0, 2.0)
  cart = GymnaxEnv(*gymnax.make("CartPole-v1"))
  assert (cart.obs_dim, cart.num_actions, cart.action_scale) == (4, 2, 1.0)
  assert int(cart.default_params.max_steps_in_episode) == 500
  genv, gparams = gymnax.make("CartPole-v1")
  with pytest.raises(ValueError, match="max_steps_in_episode"):
    GymnaxEnv(genv, object())

  class Shifted:  # an action Box not symmetric about 0
    low, high, shape = 0.0, 1.0, (1,)

  class FakeEnv:
    def observation_space(self, params):
      return genv.observation_space(params)

    def action_space(self, params):
      return Shifted()

  with pytest.raises(ValueError, match="symmetric about 0"):
    GymnaxEnv(FakeEnv(), gparams)


def test_ppo_trains_on_gymnax_cartpole():
  env = GymnaxEnv(*gymnax.make("CartPole-v1"))
  cfg = ppo.PPOConfig(num_envs=4, num_steps=16, total_updates=2, num_evals=1, eval_envs=2,
                      update_epochs=1, num_minibatches=2, hidden=16)
  out = jax.jit(ppo.make_train(env, cfg))(jax.random.key(0), ppo.ent_mode_index("fixed"))
  m = jax.tree.map(np.asarray, out.metrics)
  assert int(m["step"][0]) == 2 * 16
  # A random-ish CartPole policy finishes episodes of ~10-30 steps within 32 steps.
  assert np.isfinite(m["train_return"]).all() and 5 <= m["train_return"][0] <= 32
  assert 5 <= m["eval_return"][0] <= 500
  assert np.isfinite(np.asarray(out.state.params)).all()


@pytest.mark.slow
def test_sac_trains_on_gymnax_pendulum():
  genv, gparams = gymnax.make("Pendulum-v1")
  env = GymnaxEnv(genv, gparams.replace(max_steps_in_episode=10))
  cfg = sac.SACConfig(num_envs=2, total_steps=20, learning_starts=10, num_evals=1, eval_envs=2,
                      buffer_size=64, batch_size=8, hidden=16, num_layers=1)
  out = jax.jit(sac.make_train(env, cfg))(jax.random.key(0), sac.alpha_mode_index("auto"))
  m = jax.tree.map(np.asarray, out.metrics)
  assert int(m["step"][0]) == 20
  # Pendulum rewards are in [-(pi^2 + 6.4 + 0.004), 0] per step; 10-step episodes ended.
  worst = -10 * (math.pi ** 2 + 0.1 * 8.0 ** 2 + 0.001 * 2.0 ** 2)
  assert worst <= m["train_return"][0] <= 0 and worst <= m["eval_return"][0] <= 0
  assert np.isfinite(m["critic_loss"]).all()
  assert np.isfinite(np.asarray(out.state.actor)).all()
