"""The pure-JAX envs match gymnax's dynamics; auto-reset and evaluation."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.rl import envs


@pytest.mark.parametrize("name, gym_name", [("pendulum", "Pendulum-v1"),
                                            ("cartpole", "CartPole-v1")])
def test_matches_gymnax_step_env(name, gym_name):
  gymnax = pytest.importorskip("gymnax")
  genv, gparams = gymnax.make(gym_name)
  env = envs.make(name)
  params = env.default_params
  for f in type(gparams).__dataclass_fields__:
    assert getattr(gparams, f) == pytest.approx(getattr(params, f)), f
  step_fn = jax.jit(env.step)
  gstep_fn = jax.jit(genv.step_env)
  key = jax.random.key(0)
  obs, state = env.reset(key, params)
  gobs, gstate = genv.reset_env(key, gparams)
  np.testing.assert_allclose(obs, gobs, rtol=1e-6)
  for i in range(30):
    key, k = jax.random.split(key)
    if env.num_actions:
      a = jnp.int32(i % 2)
    else:
      a = jax.random.uniform(k, (1,), minval=-3.0, maxval=3.0)
    step = step_fn(k, state, a, params)
    gobs, gstate, greward, gdone, _ = gstep_fn(k, gstate, a, gparams)
    np.testing.assert_allclose(step.final_obs, gobs, rtol=1e-5, atol=1e-6)
    assert float(step.reward) == pytest.approx(float(greward), rel=1e-5)
    if bool(gdone):
      break
    state = step.state


def test_pendulum_truncates_and_resets():
  env = envs.Pendulum()
  params = env.default_params.replace(max_steps_in_episode=3)
  _, state = env.reset(jax.random.key(0), params)
  flags = []
  for i in range(4):
    step = env.step(jax.random.key(i), state, jnp.zeros((1,)), params)
    flags.append((bool(step.truncated), int(step.state.time)))
    state = step.state
  assert flags == [(False, 1), (False, 2), (True, 0), (False, 1)]


def test_cartpole_terminates():
  env = envs.CartPole()
  _, state = env.reset(jax.random.key(0), env.default_params)
  state = state.replace(theta=jnp.float32(0.3))
  step = env.step(jax.random.key(1), state, jnp.int32(1), env.default_params)
  assert bool(step.terminated) and int(step.state.time) == 0


def test_multigoal_reward_is_minus_distance():
  env = envs.MultiGoal()
  p = env.default_params
  _, state = env.reset(jax.random.key(0), p)
  state = state.replace(pos=jnp.array([0.9, 0.0]))
  step = env.step(jax.random.key(1), state, jnp.array([1.0, 0.0]), p)
  assert float(step.reward) == pytest.approx(-0.0 - 0.1 * 1.0, abs=1e-6)


def test_evaluate_constant_policy():
  env = envs.CartPole()
  ret = envs.evaluate(env, env.default_params,
                      lambda o: jnp.ones(o.shape[0], jnp.int32),
                      jax.random.key(0), 4)
  assert 5 <= float(ret) <= 20  # always pushing right falls fast
  with pytest.raises(ValueError, match="env"):
    envs.make("acrobot")
