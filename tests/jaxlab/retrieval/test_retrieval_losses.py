"""InfoNCE (Sample4Geo) and Soft InfoNCE: reference formulas, soft targets, input errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jaxtyping import TypeCheckError

from jaxlab.retrieval import losses

# Jitted once per shape: eager calls would compile every primitive separately (slow on CI).
soft_targets = jax.jit(losses.soft_targets, static_argnames=("num_hard", "temperature"))
soft_infonce = jax.jit(losses.soft_infonce)
infonce = jax.jit(losses.infonce, static_argnames=("label_smoothing",))


def _xent(logits, targets):
  logits = np.asarray(logits, np.float64)
  logp = logits - logits.max(-1, keepdims=True)
  logp = logp - np.log(np.exp(logp).sum(-1, keepdims=True))
  return -(targets * logp).sum(-1)


def _sims(b=6, seed=0):
  rng = np.random.default_rng(seed)
  q = rng.standard_normal((b, 4))
  r = q + 0.7 * rng.standard_normal((b, 4))
  q /= np.linalg.norm(q, axis=1, keepdims=True)
  r /= np.linalg.norm(r, axis=1, keepdims=True)
  return jnp.asarray(q @ r.T, jnp.float32)


@pytest.mark.parametrize("ls", [0.0, 0.1])
def test_infonce_matches_torch_style_symmetric_cross_entropy(ls):
  s = _sims()
  b = s.shape[0]
  logits = 14.3 * s
  t = (1 - ls) * np.eye(b) + ls / b   # torch CrossEntropyLoss(label_smoothing=ls)
  want = 0.5 * (_xent(logits, t) + _xent(np.asarray(logits).T, t))
  np.testing.assert_allclose(infonce(logits=logits, label_smoothing=ls), want, rtol=1e-5)


def test_soft_infonce_with_zero_epsilon_equals_infonce():
  s = _sims(8, seed=3)
  t = soft_targets(s, jnp.zeros(8), num_hard=3)
  np.testing.assert_array_equal(t, np.eye(8))
  np.testing.assert_allclose(soft_infonce(logits=10 * s, targets=t),
                             infonce(logits=10 * s, label_smoothing=0.0), rtol=1e-6)


def test_soft_targets_rows_sum_to_one_and_go_to_the_hardest_negatives():
  s = _sims(7, seed=1)
  eps = jnp.linspace(0.0, 0.6, 7)
  t = np.asarray(soft_targets(s, eps, num_hard=2, temperature=0.2))
  np.testing.assert_allclose(t.sum(-1), 1.0, rtol=1e-6)
  np.testing.assert_allclose(np.diag(t), 1 - np.asarray(eps), rtol=1e-6)
  sn = np.asarray(s, np.float64).copy()
  np.fill_diagonal(sn, -np.inf)
  for i in range(1, 7):
    hard = np.argsort(-sn[i])[:2]
    w = np.exp(sn[i, hard] / 0.2)
    np.testing.assert_allclose(t[i, hard], float(eps[i]) * w / w.sum(), rtol=1e-5)
    others = np.setdiff1d(np.arange(7), np.append(hard, i))
    assert np.all(t[i, others] == 0)
  assert (t >= 0).all()


def test_soft_targets_respect_candidates_and_rows_without_any():
  s = _sims(5, seed=2)
  cand = np.zeros((5, 5), bool)
  cand[0, 3] = True                     # row 0: one candidate; row 1..4: none
  t = np.asarray(soft_targets(s, jnp.full(5, 0.4), num_hard=2,
                                     candidates=jnp.asarray(cand)))
  np.testing.assert_allclose(t.sum(-1), 1.0, rtol=1e-6)
  np.testing.assert_allclose(t[0], [0.6, 0, 0, 0.4, 0], rtol=1e-6)
  np.testing.assert_allclose(t[1:], np.eye(5)[1:])
  assert np.all(np.isfinite(t))


def test_targets_carry_no_gradient_and_soft_loss_is_differentiable():
  s = _sims(6)
  g = jax.jit(jax.grad(lambda x: soft_targets(x, jnp.full(6, 0.3), num_hard=2)[:, 1].sum()))(s)
  np.testing.assert_array_equal(g, 0.0)

  def loss(x):
    t = soft_targets(x, jnp.full(6, 0.3), num_hard=2)
    return soft_infonce(logits=10 * x, targets=t).mean()

  assert np.all(np.isfinite(jax.jit(jax.grad(loss))(s)))


def test_softening_lowers_the_push_on_hard_negatives():
  s = _sims(6)
  hard = soft_targets(s, jnp.full(6, 0.3), num_hard=2)

  def grad_wrt_logits(t):
    return jax.jit(jax.grad(lambda z: soft_infonce(logits=z, targets=t).sum()))(10 * s)

  g_hard, g_plain = grad_wrt_logits(hard), grad_wrt_logits(jnp.eye(6))
  mask = np.asarray(hard) > 0
  np.fill_diagonal(mask, False)
  # Gradient descent lowers a logit with positive gradient: soft targets push less.
  assert np.all(np.asarray(g_hard)[mask] < np.asarray(g_plain)[mask])


def test_squash_uncertainty():
  u = jnp.array([0.5, 1.0, 2.0, 4.0, 8.0])
  np.testing.assert_allclose(losses.squash_uncertainty(u), u / (u + 2.0), rtol=1e-6)
  np.testing.assert_array_equal(losses.squash_uncertainty(jnp.zeros(4)), 0.0)


def test_bad_inputs_raise():
  # Shape errors: a ValueError from the function, or the test-wide jaxtyping check first.
  with pytest.raises((ValueError, TypeCheckError), match="logits"):
    losses.infonce(logits=jnp.zeros((3, 4)))
  with pytest.raises(ValueError, match="label_smoothing"):
    losses.infonce(logits=jnp.zeros((3, 3)), label_smoothing=1.0)
  with pytest.raises(ValueError, match="num_hard"):
    losses.soft_targets(jnp.zeros((3, 3)), jnp.zeros(3), num_hard=3)
  with pytest.raises((ValueError, TypeCheckError), match="epsilon"):
    losses.soft_targets(jnp.zeros((3, 3)), jnp.zeros(2))
  with pytest.raises((ValueError, TypeCheckError), match="targets"):
    losses.soft_infonce(logits=jnp.zeros((3, 3)), targets=jnp.eye(2))


def test_soft_infonce_column_without_mass_adds_zero_and_keeps_gradients_finite():
  # Rows on the simplex but no query targets reference 0: its column term is 0.
  logits = jnp.array([[1.0, 2.0], [3.0, 0.0]])
  t = jnp.array([[0.0, 1.0], [0.0, 1.0]])
  per_pair = lambda x, y: losses.soft_infonce(logits=x, targets=y)
  value_and_grads = jax.jit(lambda x, y: (per_pair(x, y), jax.grad(
      lambda a, b: per_pair(a, b).sum(), argnums=(0, 1))(x, y)))
  got, grads = value_and_grads(logits, t)
  rows = _xent(logits, np.asarray(t))
  cols = _xent(np.asarray(logits).T, np.array([[0.0, 0.0], [0.5, 0.5]]))
  np.testing.assert_allclose(got, 0.5 * (rows + cols), rtol=1e-6)
  assert all(np.isfinite(np.asarray(g)).all() for g in grads)


def test_a_nan_similarity_makes_its_row_of_targets_nan():
  # top_k ranks a NaN first; it used to count as "no candidate", putting the row's whole
  # mass on the positive (finite targets from a NaN input).
  s = jnp.eye(4).at[0, 3].set(jnp.nan)
  t = np.asarray(soft_targets(s, jnp.full(4, 0.2), num_hard=1))
  assert np.isnan(t[0]).all() and np.isfinite(t[1:]).all()


def test_squash_uncertainty_rejects_negative_or_non_finite_u():
  with pytest.raises(ValueError, match="u must be >= 0.*-1.0"):
    losses.squash_uncertainty(jnp.array([-1.0, 1.0, 1.0]))
  with pytest.raises(ValueError, match="u must be finite"):
    losses.squash_uncertainty(jnp.array([1.0, jnp.nan, 3.0]))


@pytest.mark.parametrize("eps", [-0.1, 1.0, 1.5, float("nan")])
def test_soft_targets_rejects_epsilon_outside_unit_interval(eps):
  with pytest.raises(ValueError, match="epsilon must"):
    losses.soft_targets(jnp.eye(3), jnp.full(3, eps), num_hard=1)
