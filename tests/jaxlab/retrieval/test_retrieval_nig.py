"""NIG head and DER loss: closed forms, Monte Carlo, output constraints, input errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jaxtyping import TypeCheckError
from scipy import stats

from jaxlab.retrieval import nig

CASES = [  # (y, gamma, nu, alpha, beta)
    (0.3, 0.0, 1.0, 2.0, 1.0),
    (-1.5, 0.5, 0.2, 1.3, 0.4),
    (2.0, -1.0, 5.0, 7.0, 3.0),
    (0.0, 0.0, 0.05, 1.05, 0.01),
]


def test_der_nll_equals_student_t_closed_form():
  y, g, nu, a, b = (jnp.array(c, jnp.float32) for c in zip(*CASES, strict=True))
  got = nig.der_nll(y, g, nu, a, b)
  y, g, nu, a, b = (np.array(c, np.float64) for c in zip(*CASES, strict=True))
  want = -stats.t.logpdf(y, df=2 * a, loc=g, scale=np.sqrt(b * (1 + nu) / (nu * a)))
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", CASES[:3])
def test_der_nll_matches_monte_carlo(case):
  y, g, nu, a, b = case
  rng = np.random.default_rng(0)
  n = 400_000
  sigma2 = b / rng.gamma(a, 1.0, n)           # sigma^2 ~ InvGamma(alpha, beta)
  mu = g + np.sqrt(sigma2 / nu) * rng.standard_normal(n)  # mu ~ N(gamma, sigma^2 / nu)
  lik = np.exp(-0.5 * (y - mu) ** 2 / sigma2) / np.sqrt(2 * np.pi * sigma2)
  mc = -np.log(lik.mean())
  se = lik.std() / np.sqrt(n) / lik.mean()    # delta-method SE of -log(mean)
  got = float(nig.der_nll(*(jnp.float32(v) for v in case)))
  assert abs(got - mc) < 5 * se + 1e-4, (got, mc, se)


def test_regularizer_loss_and_uncertainties():
  p = nig.NIGParams(jnp.array([0.0, 1.0]), jnp.array([2.0, 0.5]), jnp.array([3.0, 1.5]),
                    jnp.array([1.0, 2.0]))
  y = jnp.array([1.0, 0.0])
  np.testing.assert_allclose(nig.der_regularizer(y, p.gamma, p.nu, p.alpha), [7.0, 2.5])
  np.testing.assert_allclose(
      nig.der_loss(y, p, reg_weight=0.5),
      nig.der_nll(y, *p) + 0.5 * np.array([7.0, 2.5]), rtol=1e-6)
  u = nig.nig_uncertainty(p)
  np.testing.assert_allclose(u["aleatoric"], [0.5, 4.0])
  np.testing.assert_allclose(u["epistemic"], [0.25, 8.0])
  np.testing.assert_allclose(u["total"], [0.75, 12.0])


def test_nll_is_minimised_at_the_target_and_has_finite_gradients():
  p = (jnp.float32(0.0), jnp.float32(1.0), jnp.float32(2.0), jnp.float32(1.0))
  losses = [float(nig.der_nll(jnp.float32(y), *p)) for y in (-1.0, 0.0, 1.0)]
  assert losses[1] < losses[0] and losses[1] < losses[2]
  grads = jax.grad(lambda q: nig.der_loss(jnp.float32(0.3), nig.NIGParams(*q)))(p)
  assert all(np.isfinite(g) for g in grads)


def test_shape_mismatch_is_a_clear_error():
  with pytest.raises((ValueError, TypeCheckError), match="nu"):
    nig.der_nll(jnp.zeros(3), jnp.zeros(3), jnp.ones(2), 2 * jnp.ones(3), jnp.ones(3))


def test_attention_statistics():
  uniform = nig.attention_statistics(jnp.full((1, 4), 0.25), top_k=2)
  np.testing.assert_allclose(uniform, [[1.0, 0.25, 0.0, 0.5]], atol=1e-6)
  onehot = nig.attention_statistics(jnp.array([[0.0, 1.0, 0.0]]), top_k=1)
  np.testing.assert_allclose(onehot, [[0.0, 1.0, np.std([0, 1, 0]), 1.0]], atol=1e-6)
  with pytest.raises(ValueError, match="top_k"):
    nig.attention_statistics(jnp.full((1, 4), 0.25), top_k=5)


def test_attention_entropy_never_drops_a_nan_or_a_negative_weight():
  # Only a zero weight adds 0 log 0 = 0; a NaN (or negative) one made the entropy a number.
  rows = jnp.array([[0.5, 0.5, 0.0], [jnp.nan, 0.5, 0.5], [1.5, -0.5, 0.0]])
  for stats_ in (nig.attention_statistics(rows), jax.jit(nig.attention_statistics)(rows)):
    np.testing.assert_allclose(stats_[0, 0], np.log(2) / np.log(3), rtol=1e-6)
    assert np.isnan(np.asarray(stats_[1:, 0])).all()


@pytest.fixture(scope="module")
def head():
  h = nig.NIGHead(hidden=8)
  cls, spatial = jnp.ones((3, 6)), jnp.ones((3, 5, 6))
  return h, jax.jit(h.init)(jax.random.key(0), cls, spatial)


@pytest.mark.parametrize("scale", [0.0, 1.0, 1e3, -1e3, 1e6])
def test_head_outputs_are_valid_nig_parameters_for_any_input(head, scale):
  h, params = head
  apply = jax.jit(h.apply)
  key = jax.random.key(1)
  cls = scale * jax.random.normal(key, (3, 6))
  spatial = scale * jax.random.normal(jax.random.fold_in(key, 1), (3, 5, 6))
  # Also with huge weights, so every softplus saturates or underflows.
  for p in (params, jax.tree.map(lambda w: 1e4 * w, params),
            jax.tree.map(lambda w: -1e4 * w, params)):
    out = apply(p, cls, spatial)
    assert np.all(np.isfinite(out.gamma))
    assert np.all(out.nu > 0) and np.all(out.alpha > 1) and np.all(out.beta > 0)
    np.testing.assert_allclose(out.attention.sum(-1), 1.0, rtol=1e-5)
    u = nig.nig_uncertainty(out.nig)
    assert np.all(np.isfinite(u["aleatoric"])) and np.all(u["aleatoric"] > 0)


def test_head_rejects_mismatched_tokens(head):
  h, params = head
  with pytest.raises((ValueError, TypeCheckError), match="spatial"):
    h.apply(params, jnp.ones((3, 6)), jnp.ones((2, 5, 6)))


@pytest.mark.parametrize("bad,match", [
    (dict(nu=-1.0), "nu must be > 0"), (dict(nu=0.0), "nu must be > 0"),
    (dict(alpha=0.5), "alpha must be > 1.*0.5"), (dict(alpha=1.0), "alpha must be > 1"),
    (dict(beta=-1.0), "beta must be > 0"), (dict(beta=np.nan), "beta must be finite")])
def test_concrete_out_of_domain_nig_parameters_raise(bad, match):
  v = dict(nu=1.0, alpha=2.0, beta=1.0) | bad
  p = nig.NIGParams(jnp.zeros(2),
                    *(jnp.full(2, v[k], jnp.float32) for k in ("nu", "alpha", "beta")))
  with pytest.raises(ValueError, match=match):
    nig.der_nll(jnp.zeros(2), *p)
  with pytest.raises(ValueError, match=match):
    nig.der_loss(jnp.zeros(2), p)
  with pytest.raises(ValueError, match=match):
    nig.nig_uncertainty(p)
