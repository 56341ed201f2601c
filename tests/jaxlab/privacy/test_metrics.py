"""Privacy / utility metrics: AUC, the linear face probe, ARD."""

import numpy as np
import pytest

from jaxlab.privacy import metrics


def test_snippet_auc_against_hand_count():
  scores = np.array([[0.1, 0.4], [0.35, 0.8]])
  labels = np.array([[0, 0], [1, 1]])
  # Pairs (pos, neg): (0.35>0.1), (0.35<0.4), (0.8>0.1), (0.8>0.4) -> 3/4.
  assert metrics.snippet_auc(scores, labels) == pytest.approx(0.75)
  with pytest.raises(ValueError, match="both classes"):
    metrics.snippet_auc(scores, np.zeros((2, 2), int))
  with pytest.raises(ValueError, match="non-finite"):
    metrics.snippet_auc(np.array([np.nan, 1.0]), np.array([0, 1]))


def test_face_probe_sees_a_linear_signal_and_not_noise():
  rng = np.random.default_rng(0)
  y = rng.random(400) < 0.5
  x = rng.standard_normal((400, 8))
  signal = x + 2.0 * y[:, None] * np.eye(8)[0]
  assert metrics.face_probe_accuracy(signal, y) > 0.8
  noise = metrics.face_probe_accuracy(x, y)
  assert abs(noise - metrics.chance_rate(y)) < 0.1
  with pytest.raises(ValueError, match="rows"):
    metrics.face_probe_accuracy(x[:6], y[:6])


def test_score_kl_is_zero_for_equal_sets_and_grows_with_shift():
  rng = np.random.default_rng(0)
  a = rng.standard_normal(300)
  assert metrics.score_kl(a, a) == pytest.approx(0.0, abs=1e-12)
  small, large = metrics.score_kl(a, a + 0.2), metrics.score_kl(a, a + 1.0)
  assert 0.0 < small < large
  # Gaussian KL for a mean shift of 1 is 0.5; the KDE widens both densities a little.
  assert 0.3 < large < 0.6
  assert np.isfinite(metrics.score_kl(np.zeros(10), np.ones(10)))
