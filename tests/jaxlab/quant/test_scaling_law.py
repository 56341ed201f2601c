"""The QAT scaling law: the spec's anchor table and the Huber + L-BFGS fit."""

import jax
import numpy as np
import pytest

from jaxlab.quant import scaling_law as sl

# Spec section 3(b), "Anchors [D], from the law" (3 decimals).
ANCHORS = [  # N, D, L_BF16, delta W4A4 at G=32/128, delta W4A4 FC2-8b at G=32/128
    (74e6, 10e9, 3.490, (0.059, 0.076), (0.047, 0.053)),
    (595e6, 100e9, 2.741, (0.044, 0.057), (0.034, 0.038)),
    (973e6, 200e9, 2.614, (0.042, 0.054), None),
    (70e9, 15e12, None, (0.023, 0.029), None),
]


@pytest.mark.parametrize("n,d,loss,w4a4,fc2", ANCHORS)
def test_law_matches_anchor_table(n, d, loss, w4a4, fc2):
  if loss is not None:
    assert round(float(sl.chinchilla_loss(n, d)), 3) == pytest.approx(loss, abs=1e-3)
  for g, want in zip((32, 128), w4a4, strict=True):
    assert round(float(sl.qat_error(n, d, g, sl.W4A4)), 3) == pytest.approx(want, abs=1e-3)
  if fc2 is not None:
    for g, want in zip((32, 128), fc2, strict=True):
      got = float(sl.qat_error(n, d, g, sl.W4A4_FC2_INT8))
      assert round(got, 3) == pytest.approx(want, abs=1e-3)


def test_epm_anchor_and_qat_loss():
  epm = [float(sl.effective_param_multiplier(74e6, 10e9, g)) for g in (32, 128, 256)]
  np.testing.assert_allclose(epm, [0.83, 0.78, 0.76], atol=0.005)
  assert float(sl.qat_loss(74e6, 10e9, 32)) == pytest.approx(3.490 + 0.0586, abs=1e-3)
  with pytest.raises(ValueError, match="G must be >= 2"):
    sl.qat_error(74e6, 10e9, 1)


@pytest.mark.parametrize("n,d", [(0, 10e9), (-1e6, 10e9), (74e6, -1.0), (74e6, 0.0),
                                 (np.inf, 10e9), (74e6, np.nan), (np.array([74e6, 0.0]), 10e9)])
def test_off_domain_counts_raise(n, d):
  # Before: N = 0 gave inf and D < 0 gave NaN, silently.
  for fn in (sl.qat_error, sl.qat_loss, sl.effective_param_multiplier):
    with pytest.raises(ValueError, match=r"must be finite and > 0"):
      fn(n, d, 32)
  with pytest.raises(ValueError, match=r"must be finite and > 0"):
    sl.chinchilla_loss(n, d)


def test_off_domain_counts_under_jit_are_nan_only_where_bad():
  n = np.array([74e6, 0.0, 74e6, 595e6], np.float32)
  d = np.array([10e9, 10e9, -5.0, 100e9], np.float32)
  got = np.asarray(jax.jit(sl.qat_error)(n, d, np.full(4, 32.0, np.float32)))
  assert np.isnan(got[1]) and np.isnan(got[2])
  np.testing.assert_allclose(got[[0, 3]], [float(sl.qat_error(74e6, 10e9, 32)),
                                          float(sl.qat_error(595e6, 100e9, 32))], rtol=1e-6)
  loss = np.asarray(jax.jit(sl.chinchilla_loss)(n, d))
  assert np.isnan(loss[1]) and np.isnan(loss[2]) and np.isfinite(loss[[0, 3]]).all()


@pytest.mark.parametrize("name", sorted(sl.TABLE1))
def test_fit_recovers_table1_without_noise(name):
  n, d, g = sl.paper_grid()
  law = sl.TABLE1[name]
  res = sl.fit_qat_law(n, d, g, np.asarray(sl.qat_error(n, d, g, law)), space="log")
  np.testing.assert_allclose(np.array(res.law), np.array(law), rtol=0.01)
  assert res.r2 > 0.999


def _noisy_fit(seed, space="linear"):
  n, d, g = sl.paper_grid()
  true = np.asarray(sl.qat_error(n, d, g, sl.W4A4), np.float64)
  obs = true * (1 + 0.03 * np.random.default_rng(seed).standard_normal(true.shape))
  res = sl.fit_qat_law(n, d, g, obs, space=space)
  return np.abs(np.array(res.law) / np.array(sl.W4A4) - 1), res


def test_fit_recovers_w4a4_with_3pct_noise_seed0():
  """Paper grid (4 N x 4 D x 4 G), Table 1 W4A4, 3% Gaussian noise, seed 0.

  Log-space residuals (the Chinchilla convention). The same seed with linear
  residuals puts gamma_D 13% off; over 20 seeds all four constants land within
  10% in about half the seeds with either residual (see the test below).
  """
  rel, res = _noisy_fit(0, space="log")
  assert rel.max() < 0.10, rel  # k, gamma_N, gamma_D, gamma_G
  assert res.r2 > 0.95


def test_fit_noise_recovery_over_seeds():
  """Over 20 seeds: gamma_N and gamma_G always within 10%, gamma_D in >= 80% of seeds.

  k is an extrapolation to N = D = 1 (log D ~ 23 away from the grid) and carries
  gamma_D's error times log D: even ordinary least squares on log delta recovers
  it within 10% only about half the time at 3% noise, so no per-seed bound on k
  is asserted here; the fitted law's predictions on the grid are.
  """
  n, d, g = sl.paper_grid()
  true = np.asarray(sl.qat_error(n, d, g, sl.W4A4), np.float64)
  gd_ok = 0
  for seed in range(20):
    rel, res = _noisy_fit(seed)
    assert rel[1] < 0.10 and rel[3] < 0.10, (seed, rel)
    gd_ok += rel[2] < 0.10
    pred = np.asarray(sl.qat_error(n, d, g, res.law))
    assert np.max(np.abs(pred / true - 1)) < 0.03, seed
  assert gd_ok >= 16, gd_ok


def test_fit_input_errors():
  with pytest.raises(ValueError, match="same|length"):
    sl.fit_qat_law([1e6, 2e6], [1e9], [32, 64], [0.1, 0.1])
  with pytest.raises(ValueError, match="delta > 0"):
    sl.fit_qat_law([1e6, 2e6], [1e9, 1e9], [32, 64], [0.1, -0.1], space="log")
  with pytest.raises(ValueError, match="fit_exponents"):
    sl.fit_qat_law([1e6, 2e6], [1e9, 1e9], [32, 64], [0.1, 0.1], fit_exponents=("gamma_x",))
