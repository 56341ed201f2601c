"""Tests for drift schedules and their application to env params."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.rl import drift, envs

T = 1200


def test_abrupt_jumps_at_thirds():
  z = np.asarray(drift.drift_schedule("abrupt", T))
  assert np.all(z[:400] == 0) and np.all(z[400:800] == 1) and np.all(z[800:] == 0)
  z = np.asarray(drift.drift_schedule("abrupt", T, levels=(0.0, 1.0, 0.5)))
  assert z[799] == 1.0 and z[800] == 0.5


def test_ramp_is_linear_between_start_and_end():
  z = np.asarray(drift.drift_schedule("ramp", T))
  assert np.all(z[:400] == 0) and np.all(z[800:] == 1)
  np.testing.assert_allclose(z[400:800], (np.arange(400, 800) - 400) / 400,
                             atol=1e-6)


def test_periodic_has_the_given_period():
  z = np.asarray(drift.drift_schedule("periodic", T, period=0.25))
  assert np.all(z[:400] == 0)
  assert z[400] == pytest.approx(0.0, abs=1e-6)
  assert z[400 + 150] == pytest.approx(1.0, abs=1e-5)   # half a period (300)
  assert z[400 + 300] == pytest.approx(0.0, abs=1e-5)   # a full period
  assert z.min() >= 0 and z.max() <= 1


def test_random_walk_is_bounded_and_has_the_given_scale():
  n = 60_000
  z = np.asarray(drift.drift_schedule("random_walk", n, start=0.0, sigma=0.05,
                                      key=jax.random.key(0)))
  assert z.min() >= 0 and z.max() <= 1
  inc = np.diff(z)
  inner = (z[:-1] > 0.05) & (z[:-1] < 0.95)  # away from the reflecting clips
  np.testing.assert_allclose(inc[inner].std() * np.sqrt(1000), 0.05, rtol=0.05)
  z2 = np.asarray(drift.drift_schedule("random_walk", T, key=jax.random.key(1)))
  assert np.all(z2[:400] == 0) and np.abs(z2[400:]).max() > 0
  with pytest.raises(ValueError, match="key"):
    drift.drift_schedule("random_walk", T)


def test_apply_drift_changes_only_the_named_fields():
  base = envs.Pendulum.default_params
  p = drift.apply_drift(base, {"g": 5.0, "m": 0.5}, 1.0)
  assert float(p.g) == 15.0 and float(p.m) == 1.5
  assert p.l == base.l and p.max_torque == base.max_torque
  p = drift.apply_drift(base, {"g": 5.0}, 0.5)
  assert float(p.g) == 12.5


def test_cartpole_derived_fields_follow_drift():
  base = envs.CartPole.default_params
  p = drift.apply_drift(base, {"length": 0.5, "masspole": 0.1}, 1.0)
  assert float(p.polemass_length) == pytest.approx(0.2 * 1.0)
  assert float(p.total_mass) == pytest.approx(1.2)


def test_drift_params_at_each_mode():
  base = envs.Pendulum.default_params
  for mode, t, g in [("none", 600, 10.0), ("abrupt", 600, 15.0),
                     ("abrupt", 900, 10.0), ("ramp", 600, 12.5),
                     ("ramp", 1000, 15.0), ("periodic", 550, 15.0)]:
    d = drift.make_drift(base, {"g": 5.0}, mode, T)
    got = jax.jit(d.params_at)(jnp.int32(t)).g
    assert float(got) == pytest.approx(g, abs=1e-4), (mode, t)
  assert drift.make_drift(base, {"g": 5.0}, "abrupt", T).change_points() == (
      400, 800)


def test_multigoal_rotation_moves_goals():
  env = envs.MultiGoal()
  p = drift.apply_drift(env.default_params, {"goal_angle": np.pi / 2}, 1.0)
  np.testing.assert_allclose(env.goals(p)[0], [0.0, 1.0], atol=1e-6)


@pytest.mark.parametrize("kwargs, match", [
    (dict(mode="sideways"), "mode"),
    (dict(mode="abrupt", num_steps=0), "num_steps"),
    (dict(mode="abrupt", start=0.7, end=0.5), "end"),
    (dict(mode="periodic", period=0.0), "period"),
    (dict(mode="random_walk", sigma=-1.0), "sigma"),
])
def test_invalid_schedule_raises(kwargs, match):
  kwargs.setdefault("num_steps", T)
  with pytest.raises(ValueError, match=match):
    drift.drift_schedule(**kwargs)


def test_unknown_field_raises():
  with pytest.raises(ValueError, match="gravity"):
    drift.make_drift(envs.Pendulum.default_params, {"gravity": 1.0}, "abrupt", T)


def test_works_on_gymnax_params():
  gymnax = pytest.importorskip("gymnax")
  _, params = gymnax.make("CartPole-v1")
  p = drift.apply_drift(params, {"force_mag": -20.0}, 1.0)
  assert float(p.force_mag) == -10.0
