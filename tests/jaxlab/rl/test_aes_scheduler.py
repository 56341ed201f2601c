"""Tests for the AES scheduler: the square-root rule, clips, tracker, errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.rl import aes_scheduler as aes


def test_lambda_monotone_and_clipped():
  d = jnp.linspace(0.0, 100.0, 2001)
  lam = np.asarray(aes.lambda_from_proxy(d, 0.1, kappa=4.0, lambda_min=0.05,
                                         lambda_max=1.0))
  assert np.all(np.diff(lam) >= 0)
  assert lam.min() >= 0.05 - 1e-7 and lam.max() <= 1.0 + 1e-7
  assert lam[0] == pytest.approx(0.1)       # lambda_0 at zero drift
  assert lam[-1] == pytest.approx(1.0)      # clipped at lambda_max
  # Negative proxies count as zero; lambda_min clips from below.
  assert float(aes.lambda_from_proxy(jnp.float32(-3.0), 0.1)) == pytest.approx(
      0.1)
  assert float(aes.lambda_from_proxy(jnp.float32(0.0), 0.1, lambda_min=0.2,
                                     lambda_max=0.5)) == pytest.approx(0.2)


def test_lambda_square_root_in_mid_range():
  # Away from both clips, lambda^2 is affine in d with slope lambda_0^2 kappa,
  # and quadrupling a large proxy doubles lambda.
  lam0, kappa = 0.1, 4.0
  d = jnp.array([1.0, 2.0, 5.0, 10.0, 20.0])
  lam = np.asarray(aes.lambda_from_proxy(d, lam0, kappa=kappa, lambda_max=100.))
  np.testing.assert_allclose(lam ** 2, lam0 ** 2 * (1 + kappa * np.asarray(d)),
                             rtol=1e-5)
  big = aes.lambda_from_proxy(jnp.array([1e4, 4e4]), lam0, kappa=kappa,
                              lambda_max=1e6)
  assert float(big[1] / big[0]) == pytest.approx(2.0, rel=1e-4)


def test_sqrt_rule_closed_form_and_goes_below_lambda_0():
  # lambda = clip(lambda_0 sqrt(d / d_ref), lambda_0 / 10, 10 lambda_0) by default.
  d = jnp.array([0.0, 0.0025, 0.04, 0.25, 1.0, 100.0])
  lam = np.asarray(aes.lambda_from_proxy(d, 0.1, rule="sqrt", d_ref=0.25))
  np.testing.assert_allclose(lam, [0.01, 0.01, 0.04, 0.1, 0.2, 1.0], rtol=1e-5)
  # Default d_ref = 1 / kappa: the two rules agree once kappa d >> 1.
  big = jnp.array([1e3])
  np.testing.assert_allclose(
      aes.lambda_from_proxy(big, 0.1, kappa=4.0, rule="sqrt", lambda_max=1e3),
      aes.lambda_from_proxy(big, 0.1, kappa=4.0, lambda_max=1e3), rtol=1e-3)
  sched = aes.aes_scheduler(0.1, rule="sqrt", d_ref=0.25)
  assert float(sched.init().lam) == pytest.approx(0.01)  # zero drift: the lower clip
  lam, state = sched.update(sched.init(), jnp.ones(8))
  assert float(lam) == pytest.approx(0.01)
  lam, state = sched.update(state, 50.0 * jnp.ones(8))  # proxy jumps: lambda rises
  assert float(lam) == pytest.approx(float(aes.lambda_from_proxy(
      state.proxy, 0.1, rule="sqrt", d_ref=0.25)), rel=1e-5)
  assert float(lam) > 0.1


def test_tracker_reacts_to_td_jump_and_decays():
  sched = aes.aes_scheduler(0.1, fast_decay=0.9, slow_decay=0.99)
  update = jax.jit(sched.update)
  state = sched.init()
  key = jax.random.key(0)
  for _ in range(200):  # stationary TD errors: lambda stays at lambda_0
    key, k = jax.random.split(key)
    lam, state = update(state, jax.random.normal(k, (64,)))
  assert float(lam) < 0.12
  lams = []
  for _ in range(30):  # TD errors jump 5x: proxy and lambda rise
    key, k = jax.random.split(key)
    lam, state = update(state, 5.0 * jax.random.normal(k, (64,)))
    lams.append(float(lam))
  assert max(lams) > 0.2
  for _ in range(2000):  # stationary again: the slow EMA catches up
    key, k = jax.random.split(key)
    lam, state = update(state, 5.0 * jax.random.normal(k, (64,)))
  assert float(lam) < 0.12
  assert int(state.count) == 2230


def test_tracker_ignores_nonfinite_and_vmaps():
  sched = aes.aes_scheduler(0.1)
  state = sched.init()
  lam, state = sched.update(state, jnp.array([1.0, jnp.nan, jnp.inf, 2.0]))
  assert np.isfinite(float(state.fast)) and int(state.count) == 1
  lam2, state2 = sched.update(state, jnp.full((4,), jnp.nan))
  assert int(state2.count) == 1 and float(lam2) == float(lam)
  states = jax.vmap(lambda _: sched.init())(jnp.arange(3))
  lams, _ = jax.vmap(sched.update)(states, jnp.ones((3, 8)))
  assert lams.shape == (3,)


@pytest.mark.parametrize("kwargs, match", [
    (dict(lambda_0=0.0), "lambda_0"),
    (dict(lambda_0=-1.0), "lambda_0"),
    (dict(lambda_0=0.1, kappa=-1.0), "kappa"),
    (dict(lambda_0=0.1, quantile=0.0), "quantile"),
    (dict(lambda_0=0.1, quantile=1.5), "quantile"),
    (dict(lambda_0=0.1, fast_decay=0.999, slow_decay=0.99), "fast_decay"),
    (dict(lambda_0=0.1, slow_decay=1.0), "slow_decay"),
    (dict(lambda_0=0.1, lambda_min=0.6, lambda_max=0.5), "lambda_min"),
    (dict(lambda_0=0.1, lambda_min=0.0, lambda_max=0.05), "lambda_0 <= lambda_max"),
    (dict(lambda_0=0.1, eps=0.0), "eps"),
    (dict(lambda_0=0.1, rule="linear"), "rule"),
    (dict(lambda_0=0.1, rule="sqrt", d_ref=0.0), "d_ref"),
    (dict(lambda_0=0.1, rule="sqrt", kappa=0.0), "d_ref"),
    (dict(lambda_0=0.1, rule="sqrt", lambda_min=0.2), "lambda_min <= lambda_0"),
])
def test_invalid_settings_raise(kwargs, match):
  with pytest.raises(ValueError, match=match):
    aes.aes_scheduler(**kwargs)


@pytest.mark.parametrize("kwargs, match", [
    (dict(lambda_0=float("inf")), "lambda_0"),
    (dict(lambda_0=float("nan")), "lambda_0"),
    (dict(lambda_0=0.1, kappa=float("inf")), "kappa"),
    (dict(lambda_0=0.1, kappa=float("nan")), "kappa"),
    (dict(lambda_0=0.1, eps=float("inf")), "eps"),
    (dict(lambda_0=0.1, rule="sqrt", d_ref=float("inf")), "d_ref"),
    (dict(lambda_0=0.1, lambda_min=float("inf"), lambda_max=float("inf")), "lambda_min"),
])
def test_non_finite_settings_raise(kwargs, match):
  # kappa=inf gave NaN (inf * 0) and lambda_0=inf an infinite lambda from init on.
  with pytest.raises(ValueError, match=match):
    aes.aes_scheduler(**kwargs)
  lambda_0 = kwargs.pop("lambda_0")
  kwargs.pop("eps", None)
  if kwargs or lambda_0 != 0.1:
    with pytest.raises(ValueError, match=match):
      aes.lambda_from_proxy(jnp.zeros(2), lambda_0, **kwargs)


def test_infinite_lambda_max_means_no_upper_clip():
  lam = aes.lambda_from_proxy(jnp.array([0.0, 24.75]), 0.1, lambda_max=float("inf"))
  np.testing.assert_allclose(np.asarray(lam), [0.1, 1.0], rtol=1e-6)


def test_empty_td_errors_raise():
  sched = aes.aes_scheduler(0.1)
  with pytest.raises(ValueError, match="td_errors"):
    sched.update(sched.init(), jnp.zeros((0,)))
