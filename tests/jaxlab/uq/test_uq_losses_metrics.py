"""Losses, baselines and metrics of jaxlab.uq against closed forms and sklearn."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jaxtyping import TypeCheckError
from scipy import special

from jaxlab import uq


def _params(seed, b, k):
  rng = np.random.default_rng(seed)
  alpha = np.exp(rng.normal(size=(b, k))).astype(np.float32)
  tau = (3 * rng.uniform(size=(b, k))).astype(np.float32)
  w = rng.dirichlet(np.ones(k), size=b).astype(np.float32)
  y = np.eye(k, dtype=np.float32)[rng.integers(0, k, size=b)]
  return alpha, tau, w, y


def test_brier_loss_matches_definition():
  alpha, tau, w, y = _params(0, 8, 4)
  mom = uq.modex_moments(alpha, tau, w)
  want = (((y - mom.mean) ** 2 + mom.variance).sum(-1) + 0.5 * ((y - w) ** 2).sum(-1))
  got = uq.modex_brier_loss(alpha=alpha, tau=tau, omega=w, targets=y, omega_weight=0.5)
  np.testing.assert_allclose(got, want, rtol=1e-5)
  # The expected Brier part equals E||y - pi||^2 = ||y - mu||^2 + sum Var (check via E[pi^2]).
  e_brier = (y - 2 * y * mom.mean + mom.second_moment).sum(-1)
  np.testing.assert_allclose(got - 0.5 * ((y - w) ** 2).sum(-1), e_brier, rtol=1e-4)


def test_nll_loss_is_cross_entropy_of_mixture_mean():
  alpha, tau, w, y = _params(1, 8, 3)
  mu = np.asarray(uq.modex_moments(alpha, tau, w).mean)
  got = uq.modex_nll_loss(alpha=alpha, tau=tau, omega=w, targets=y)
  np.testing.assert_allclose(got, -(y * np.log(mu)).sum(-1), rtol=1e-5)


def test_dirichlet_kl_uniform_matches_scipy_formula():
  alpha = np.array([[0.5, 2.0, 3.0], [1.0, 1.0, 1.0], [10.0, 0.1, 1.0]], np.float64)
  s = alpha.sum(-1)
  want = (special.gammaln(s) - special.gammaln(3.0) - special.gammaln(alpha).sum(-1)
          + ((alpha - 1) * (special.digamma(alpha) - special.digamma(s)[:, None])).sum(-1))
  np.testing.assert_allclose(uq.dirichlet_kl_uniform(alpha.astype(np.float32)), want, rtol=1e-4,
                             atol=1e-5)


def test_edl_loss_matches_sensoy_and_annealing():
  alpha = np.array([[5.0, 1.0, 2.0]], np.float32)
  y = np.array([[1.0, 0.0, 0.0]], np.float32)
  s = alpha.sum()
  p = alpha / s
  mse = ((y - p) ** 2 + p * (1 - p) / (s + 1)).sum()
  alpha_tilde = np.array([[1.0, 1.0, 2.0]], np.float32)  # y + (1 - y) * alpha
  kl = float(uq.dirichlet_kl_uniform(alpha_tilde)[0])
  np.testing.assert_allclose(uq.edl_loss(alpha=alpha, targets=y, kl_weight=0.3), [mse + 0.3 * kl],
                             rtol=1e-5)
  np.testing.assert_allclose([float(uq.edl_kl_weight(e)) for e in (0, 5, 10, 20)],
                             [0.0, 0.5, 1.0, 1.0])
  with pytest.raises(ValueError, match="anneal_epochs"):
    uq.edl_kl_weight(1.0, anneal_epochs=0.0)


def test_loss_target_errors():
  alpha, tau, w, y = _params(2, 4, 3)
  with pytest.raises(ValueError, match="targets must lie on the probability simplex"):
    uq.modex_brier_loss(alpha=alpha, tau=tau, omega=w, targets=2 * y)
  with pytest.raises(Exception, match="targets"):
    uq.edl_loss(alpha=alpha, targets=y[:, :2])


def test_dirichlet_and_softmax_uncertainty():
  alpha = np.array([[1.0, 1.0, 1.0], [50.0, 1.0, 1.0]], np.float32)
  u = uq.dirichlet_uncertainty(alpha)
  s = alpha.sum(-1)
  np.testing.assert_allclose(u.epistemic, (1 - ((alpha / s[:, None]) ** 2).sum(-1)) / (s + 1),
                             rtol=1e-5)
  np.testing.assert_allclose(u.mi_disagreement, 0.0, atol=1e-6)
  assert u.epistemic[0] > u.epistemic[1]  # more evidence, less epistemic uncertainty
  logits = np.array([[0.0, 0.0], [1e4, -1e4]], np.float32)
  su = uq.softmax_uncertainty(logits)
  np.testing.assert_allclose(su.entropy, [np.log(2), 0.0], atol=1e-6)
  np.testing.assert_allclose(su.max_prob, [0.5, 1.0])


def test_metrics_against_sklearn_and_hand_values():
  from sklearn.metrics import average_precision_score, roc_auc_score
  rng = np.random.default_rng(0)
  a, b = rng.normal(1.0, 1.0, 50), rng.normal(0.0, 1.0, 70)
  labels = np.r_[np.ones(50), np.zeros(70)]
  np.testing.assert_allclose(uq.ood_auroc(a, b), roc_auc_score(labels, np.r_[a, b]))
  np.testing.assert_allclose(uq.ood_aupr(a, b), average_precision_score(labels, np.r_[a, b]))
  probs = np.array([[0.9, 0.1], [0.6, 0.4], [0.3, 0.7], [0.2, 0.8]])
  y = np.array([0, 1, 1, 1])
  assert uq.accuracy(probs, y) == 0.75
  # ECE with 10 bins: bins {0.9}: acc 1; {0.6}: acc 0; {0.7}: 1; {0.8}: 1.
  want = (abs(1 - 0.9) + abs(0 - 0.6) + abs(1 - 0.7) + abs(1 - 0.8)) / 4
  np.testing.assert_allclose(uq.expected_calibration_error(probs, y, num_bins=10), want)
  np.testing.assert_allclose(uq.brier_score(probs, y),
                             np.mean(((np.eye(2)[y] - probs) ** 2).sum(-1)))
  correct = probs.argmax(-1) == y
  np.testing.assert_allclose(uq.misclassification_auroc(probs.max(-1), correct), 1.0)
  assert np.isnan(uq.misclassification_auroc(probs.max(-1), np.ones(4, bool)))
  with pytest.raises(ValueError, match="both positives and negatives"):
    uq.auroc(np.ones(3), np.arange(3.0))
  with pytest.raises(ValueError, match="id_confidence must be finite"):
    uq.ood_auroc(np.array([np.nan, 1.0]), np.array([0.0]))
  with pytest.raises(ValueError, match="probs must lie on the probability simplex"):
    uq.accuracy(2 * probs, y)


def test_a_tie_for_the_top_class_is_a_wrong_prediction():
  # argmax's first-index tie-break gave a collapsed (uniform) model class 0's samples.
  probs = np.array([[0.5, 0.5, 0.0], [1 / 3, 1 / 3, 1 / 3], [0.2, 0.7, 0.1], [0.4, 0.2, 0.4]])
  labels = np.array([0, 0, 1, 2])
  assert uq.accuracy(probs, labels) == 0.25
  uniform = np.full((6, 3), 1 / 3)
  assert uq.accuracy(uniform, np.zeros(6, int)) == 0.0
  # Every confidence 1/3 falls in one bin whose accuracy is 0: ECE = 1/3.
  np.testing.assert_allclose(uq.expected_calibration_error(uniform, np.zeros(6, int)), 1 / 3)
  np.testing.assert_array_equal(uq.top1_correct(probs, labels), [False, False, True, False])


def test_heads_shapes_and_ranges():
  h = jnp.asarray(np.random.default_rng(0).normal(size=(5, 7)), jnp.float32)
  head = uq.MoDEXHead(num_classes=4, hidden_dim=8, num_layers=1)
  p = jax.jit(head.apply)(jax.jit(head.init)(jax.random.key(0), h), h)
  assert p.alpha.shape == p.tau.shape == p.omega.shape == (5, 4)
  assert np.all(p.alpha > 0) and np.all(p.tau >= 0)
  np.testing.assert_allclose(p.omega.sum(-1), 1.0, rtol=1e-5)
  with pytest.raises(ValueError, match="evidence"):
    uq.EDLHead(num_classes=3, evidence="sigmoid").init(jax.random.key(0), h)


def test_binary_metrics_accept_only_bool_or_zero_one_labels():
  s = np.array([0.1, 0.2, 0.3, 0.9])
  np.testing.assert_allclose(uq.auroc(np.array([0.0, 1.0, 0.0, 1.0]), s), 0.75)
  np.testing.assert_allclose(uq.auroc(np.array([False, True, False, True]), s), 0.75)
  with pytest.raises(ValueError, match=r"labels must be bool or 0/1, got values \[0, 1, 2\]"):
    uq.auroc([0, 1, 2, 2], s)
  with pytest.raises(ValueError, match=r"labels must be bool or 0/1, got values \[1, 2\]"):
    uq.aupr([1, 2, 1, 2], s)
  # `correct` is annotated Bool: the test-wide jaxtyping check may refuse it first.
  with pytest.raises((ValueError, TypeCheckError), match="correct"):
    uq.misclassification_auroc(s, [0, 1, 2, 2])


def test_edl_kl_weight_works_under_jit_with_traced_anneal_epochs():
  w = jax.jit(lambda e, n: uq.edl_kl_weight(e, anneal_epochs=n))(3.0, 10.0)
  np.testing.assert_allclose(w, 0.3, rtol=1e-6)
  with pytest.raises(ValueError, match="anneal_epochs must be > 0"):
    uq.edl_kl_weight(1.0, anneal_epochs=jnp.float32(-2.0))
