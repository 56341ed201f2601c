"""SAC: short runs improve the return in every temperature mode; errors."""

import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.rl import drift, envs, sac


@pytest.fixture(scope="module")
def short_run():
  env = envs.Pendulum()
  cfg = sac.SACConfig(total_steps=1600, num_evals=8, learning_starts=100,
                      buffer_size=8000, eval_envs=4)
  modes = jnp.stack([sac.alpha_mode_index(m) for m in ALL_MODES])
  train = jax.jit(jax.vmap(sac.make_train(env, cfg), in_axes=(None, 0)))
  return jax.device_get(train(jax.random.key(0), modes).metrics)


ALL_MODES = ("fixed", "auto", "aes", "aes_target", "aes_sqrt")


def test_short_run_improves_return_in_every_mode(short_run):
  ret = np.asarray(short_run["eval_return"])  # [modes, evals]
  assert np.all(np.isfinite(ret))
  early, late = ret[:, :2].mean(1), ret[:, -2:].mean(1)
  # Pendulum starts near -1300 (random policy); after 1600 steps (6000
  # transitions) every mode must have improved by a wide margin.
  assert np.all(late > early + 300), (early, late)


def test_alpha_follows_the_mode(short_run):
  alpha = np.asarray(short_run["alpha"])
  lam = np.asarray(short_run["lam"])
  np.testing.assert_allclose(alpha[0], 0.1, rtol=1e-6)        # fixed
  assert np.abs(alpha[1] - 0.1).max() > 1e-3                  # auto learns
  np.testing.assert_allclose(alpha[2], lam[2], rtol=1e-5)     # aes = lambda_t
  assert np.all(alpha[2] >= 0.1 - 1e-6) and np.all(alpha[2] <= 1.0 + 1e-6)
  # aes_sqrt follows the plain square-root rule on its own run's proxy: clipped to
  # [alpha / 10, 1] and, unlike the offset rule, below alpha where the proxy is small.
  lam_sqrt, proxy = np.asarray(short_run["lam_sqrt"]), np.asarray(short_run["proxy"])
  np.testing.assert_allclose(alpha[4], lam_sqrt[4], rtol=1e-5)
  assert np.all(alpha[4] >= 0.01 - 1e-7) and np.all(alpha[4] <= 1.0 + 1e-7)
  assert np.any(alpha[4] < 0.1 - 1e-3), alpha[4]
  assert np.all(np.isfinite(proxy[4]))


def test_invalid_config_raises():
  env = envs.Pendulum()
  with pytest.raises(ValueError, match="multiple of num_evals"):
    sac.make_train(env, sac.SACConfig(total_steps=1000, num_evals=7))
  with pytest.raises(ValueError, match="continuous"):
    sac.make_train(envs.CartPole(), sac.SACConfig())
  with pytest.raises(ValueError, match="alpha mode"):
    sac.alpha_mode_index("adaptive")
  with pytest.raises(ValueError, match="drift schedule"):
    sac.make_train(env, sac.SACConfig(total_steps=1000, num_evals=10),
                   drift.make_drift(env.default_params, {"g": 1.0}, "abrupt", 99))
  with pytest.raises(ValueError, match="lambda_0"):
    sac.make_train(env, sac.SACConfig(total_steps=1000, num_evals=10,
                                      alpha=0.0))


@pytest.mark.parametrize("name", sac.NETWORKS)
@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1.0])
def test_learning_rates_must_be_finite_and_non_negative(name, value):
  # Each network's optimizer is built from its section of `optimizer`, which names it.
  opt = dict(sac.DEFAULT_OPTIMIZER, **{name: dict(learning_rate=value)})
  with pytest.raises(ValueError, match=rf"optimizer\.{name}\.learning_rate must be"):
    sac.make_train(envs.Pendulum(), sac.SACConfig(), optimizer=opt)


@pytest.mark.slow
def test_sac_solves_stationary_pendulum():
  env = envs.Pendulum()
  cfg = sac.SACConfig(total_steps=6000, num_evals=30)
  train = jax.jit(jax.vmap(sac.make_train(env, cfg), in_axes=(0, None)))
  t0 = time.time()
  m = train(jax.random.split(jax.random.key(0), 3), sac.alpha_mode_index("auto"))
  ret = np.asarray(jax.device_get(m.metrics["eval_return"]))
  final = ret[:, -3:].mean()
  print(f"SAC Pendulum: final mean return {final:.1f} "
        f"(per seed {ret[:, -3:].mean(1)}) in {time.time() - t0:.1f} s")
  assert final > -250
