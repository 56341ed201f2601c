"""MoDEX moments / uncertainty: Monte Carlo, F-EDL equivalence, identities, errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jaxtyping import TypeCheckError

from jaxlab import uq

# Monte Carlo tolerance: |closed form - MC estimate| <= 5 standard errors of the
# MC estimate (a false alarm has probability < 1e-6 per entry) + 1e-5 (float32).
MC_SAMPLES = 60_000
MC_Z = 5.0


def _random_params(seed, batch, k, *, tau_scale=3.0):
  """float32 numpy parameters (numpy keeps the tests free of eager-op compiles)."""
  rng = np.random.default_rng(seed)
  alpha = np.exp(rng.normal(size=(batch, k)))                       # spans ~0.1 .. 10
  tau = tau_scale * rng.uniform(size=(batch, k))
  z = 2.0 * rng.normal(size=(batch, k))
  omega = np.exp(z - z.max(-1, keepdims=True))
  omega /= omega.sum(-1, keepdims=True)
  return tuple(x.astype(np.float32) for x in (alpha, tau, omega))


def _sample_mixture(rng, alpha, tau, omega):
  """[n, k] float64 samples of pi ~ sum_k omega_k Dir(alpha + tau_k e_k) (numpy)."""
  k = alpha.shape[-1]
  counts = rng.multinomial(MC_SAMPLES, omega.astype(np.float64) / omega.sum())
  parts = [rng.dirichlet(alpha + tau[c] * np.eye(k)[c], size=n) for c, n in enumerate(counts)]
  return np.concatenate(parts, 0)


def test_moments_match_monte_carlo():
  rng = np.random.default_rng(123)
  for k, seed in ((4, 0), (2, 1)):
    alpha, tau, omega = _random_params(seed, 3, k)
    mom = uq.modex_moments(alpha, tau, omega)
    unc = uq.modex_uncertainty(alpha, tau, omega)
    se = lambda x: x.std(0) / np.sqrt(MC_SAMPLES)
    for i in range(alpha.shape[0]):
      pi = _sample_mixture(rng, alpha[i].astype(np.float64), tau[i].astype(np.float64), omega[i])
      h = -np.sum(np.where(pi > 0, pi * np.log(np.where(pi > 0, pi, 1.0)), 0.0), axis=-1)
      for name, closed, samples in (
          ("mean", mom.mean[i], pi), ("second moment", mom.second_moment[i], pi**2),
          ("variance", mom.variance[i], (pi - pi.mean(0))**2),
          ("expected entropy", unc.expected_entropy[i], h)):
        err = np.abs(np.asarray(closed, np.float64) - samples.mean(0))
        assert np.all(err <= MC_Z * se(samples) + 1e-5), (k, i, name, err, se(samples))


def test_equal_tau_equals_fedl():
  alpha, _, omega = _random_params(0, 16, 5)
  tau = (4.0 * np.random.default_rng(1).uniform(size=16)).astype(np.float32)
  ours = uq.modex_moments(alpha, np.broadcast_to(tau[:, None], alpha.shape), omega)
  ref = uq.fedl_moments(alpha, tau, omega)
  for a, b in zip(ours, ref, strict=True):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-5, atol=1e-6)


def test_fedl_head_has_equal_tau_and_matches_modex_formula():
  h = jnp.asarray(np.random.default_rng(0).normal(size=(8, 12)), jnp.float32)
  head = uq.FEDLHead(num_classes=4, hidden_dim=16)
  p = jax.jit(head.apply)(jax.jit(head.init)(jax.random.key(1), h), h)
  np.testing.assert_array_equal(np.asarray(p.tau), np.asarray(p.tau[:, :1]).repeat(4, 1))
  fedl = uq.fedl_moments(p.alpha, p.tau[:, 0], p.omega)
  np.testing.assert_allclose(uq.modex_moments(*p).mean, fedl.mean, rtol=2e-5, atol=1e-7)
  mod = uq.MoDEXHead(num_classes=4, hidden_dim=16)
  q = jax.jit(mod.apply)(jax.jit(mod.init)(jax.random.key(1), h), h)
  assert not np.allclose(q.tau, q.tau[:, :1])  # per-class advocacy differs


def test_tau_zero_is_a_single_dirichlet():
  alpha, _, omega = _random_params(3, 8, 3)
  m = uq.modex_moments(alpha, np.zeros_like(alpha), omega)
  s = alpha.sum(-1, keepdims=True)
  np.testing.assert_allclose(m.mean, alpha / s, rtol=1e-6)
  np.testing.assert_allclose(m.variance, alpha * (s - alpha) / (s**2 * (s + 1)), rtol=1e-5)


def test_decompositions_and_reference_formulas():
  alpha, tau, omega = _random_params(4, 32, 6)
  u = uq.modex_uncertainty(alpha, tau, omega)
  # Independent float64 reference: E[pi^2] = sum_k w_k B(B+1) / (S(S+1)).
  a, t, w = (np.asarray(x, np.float64) for x in (alpha, tau, omega))
  b = a[:, None, :] + t[:, :, None] * np.eye(6)
  s = a.sum(-1)[:, None] + t
  mu = np.einsum("bk,bkj->bj", w, b / s[..., None])
  e2 = np.einsum("bk,bkj->bj", w, b * (b + 1) / (s * (s + 1))[..., None])
  np.testing.assert_allclose(u.total, 1 - (mu**2).sum(-1), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(u.aleatoric, 1 - e2.sum(-1), rtol=1e-4, atol=1e-6)
  np.testing.assert_allclose(u.epistemic, (e2 - mu**2).sum(-1), rtol=1e-4, atol=1e-6)
  np.testing.assert_allclose(u.total, u.epistemic + u.aleatoric, rtol=1e-6, atol=1e-7)
  np.testing.assert_allclose(u.epistemic, u.epistemic_disagreement + u.epistemic_within, rtol=1e-6)
  np.testing.assert_allclose(u.entropy, u.expected_entropy + u.mutual_information, rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose(u.mutual_information, u.mi_disagreement + u.mi_within, rtol=1e-5, atol=1e-6)
  for f in (u.epistemic, u.aleatoric, u.epistemic_disagreement, u.epistemic_within,
            u.mutual_information, u.mi_disagreement, u.mi_within):
    assert np.all(np.asarray(f) >= -1e-6)


def test_jit_and_vmap_match_eager():
  alpha, tau, omega = _random_params(5, 6, 3)
  eager = uq.modex_uncertainty(alpha, tau, omega)
  jitted = jax.jit(uq.modex_uncertainty)(alpha, tau, omega)
  vmapped = jax.vmap(uq.modex_uncertainty)(alpha, tau, omega)
  for e, j, v in zip(eager, jitted, vmapped, strict=True):
    np.testing.assert_allclose(j, e, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(v, e, rtol=1e-5, atol=1e-6)


def test_gradients_finite_for_extreme_logits():
  # Raw logits of +-1e30 through the activations, uncertainty and losses of
  # MoDEX, EDL (softplus evidence + 1) and softmax, all in one program.
  z = 1e30 * jnp.array([[1.0, -1.0, 0.0], [-1.0, -1.0, -1.0], [1.0, 1.0, -1.0]])
  y = jnp.eye(3)
  perms = [jnp.roll(z, i, axis=1) for i in range(3)]

  @jax.jit
  def loss(za, zt, zw):
    p = uq.modex_activations(za, zt, zw)
    u = uq.modex_uncertainty(*p)
    brier = uq.modex_brier_loss(alpha=p.alpha, tau=p.tau, omega=p.omega, targets=y)
    nll = uq.modex_nll_loss(alpha=p.alpha, tau=p.tau, omega=p.omega, targets=y)
    alpha_edl = jax.nn.softplus(za) + 1.0
    edl = uq.edl_loss(alpha=alpha_edl, targets=y, kl_weight=1.0)
    return jnp.sum(brier + nll + u.mutual_information + u.epistemic + u.entropy + edl
                   + uq.dirichlet_uncertainty(alpha_edl).mutual_information
                   + uq.softmax_uncertainty(zw).entropy)

  val, grads = jax.value_and_grad(loss, argnums=(0, 1, 2))(*perms)
  assert np.isfinite(float(val))
  assert all(np.all(np.isfinite(g)) for g in grads)

  # The MoDEX head itself fed huge features (pre-activations ~1e6).
  h = jnp.asarray(1e6 * np.random.default_rng(0).normal(size=(8, 10)), jnp.float32)
  yb = jnp.asarray(np.eye(3)[np.arange(8) % 3], jnp.float32)
  head = uq.MoDEXHead(num_classes=3, hidden_dim=16, num_layers=1)
  v_head = jax.jit(head.init)(jax.random.key(1), h)

  @jax.jit
  def head_loss(v):
    p = head.apply(v, h)
    return jnp.mean(uq.modex_brier_loss(alpha=p.alpha, tau=p.tau, omega=p.omega, targets=yb))

  grads = jax.grad(head_loss)(v_head)
  assert all(np.all(np.isfinite(g)) for g in jax.tree.leaves(grads))


def test_extreme_parameter_values_give_finite_uncertainty():
  alpha = jnp.array([[1e-8, 1e-8, 1e-8], [1e8, 1e-8, 1.0]])
  tau = jnp.array([[0.0, 1e8, 0.0], [1e8, 1e8, 1e8]])
  omega = jnp.array([[1.0, 0.0, 0.0], [0.0, 0.5, 0.5]])
  u = uq.modex_uncertainty(alpha, tau, omega)
  assert all(np.all(np.isfinite(f)) for f in u)
  assert np.all(np.isfinite(uq.modex_log_mean(alpha, tau, omega)))


def test_shape_errors():
  a = np.ones((4, 3), np.float32)
  with pytest.raises((ValueError, TypeCheckError), match="tau"):
    uq.modex_moments(a, np.ones((4, 2)), np.full((4, 3), 1 / 3))
  with pytest.raises((ValueError, TypeCheckError)):
    uq.modex_uncertainty(a, np.ones((5, 3)), np.full((4, 3), 1 / 3))
  with pytest.raises((ValueError, TypeCheckError)):
    uq.fedl_moments(a, np.ones((4, 3)), np.full((4, 3), 1 / 3))
  with pytest.raises(ValueError, match="num_classes >= 2"):
    uq.modex_moments(np.ones((4, 1)), np.ones((4, 1)), np.ones((4, 1)))
  with pytest.raises(ValueError, match="num_classes"):
    head = uq.MoDEXHead(num_classes=1)
    head.init(jax.random.key(0), jnp.zeros((2, 3)))


def test_private_shape_check_messages():
  # The same checks without the runtime type checker of the test suite.
  from jaxlab import validation
  with pytest.raises(ValueError, match=r"alpha\(4, 3\), tau\(4, 2\)"):
    validation.check_same_shape(("alpha", "tau"), np.ones((4, 3)), np.ones((4, 2)))


def test_value_errors():
  a, t, w = np.ones((2, 3)), np.ones((2, 3)), np.full((2, 3), 1 / 3)
  with pytest.raises(ValueError, match="omega must lie on the probability simplex"):
    uq.modex_moments(a, t, np.full((2, 3), 0.5))
  with pytest.raises(ValueError, match="omega.*non-negative"):
    uq.modex_uncertainty(a, t, jnp.array([[1.5, -0.5, 0.0]] * 2))
  def with_value(x, idx, v):
    x = x.copy()
    x[idx] = v
    return x
  with pytest.raises(ValueError, match="alpha must be > 0"):
    uq.modex_moments(with_value(a, (0, 0), 0.0), t, w)
  with pytest.raises(ValueError, match="tau must be >= 0"):
    uq.modex_moments(a, with_value(t, (1, 2), -1.0), w)
  with pytest.raises(ValueError, match="alpha must be finite"):
    uq.modex_uncertainty(with_value(a, (0, 0), np.nan), t, w)
  with pytest.raises(ValueError, match="p must lie on the probability simplex"):
    uq.fedl_moments(a, np.ones((2,)), np.full((2, 3), 0.2))


@pytest.mark.parametrize("field,row,value", [
    ("alpha", 1, -0.5), ("alpha", 1, 0.0), ("tau", 2, -1.0), ("omega", 0, np.nan),
    ("alpha", 3, np.inf)])
def test_traced_off_domain_rows_are_nan_and_others_exact(field, row, value):
  # Before: under jit an off-domain row gave finite garbage or NaN with no rule
  # (eager calls already raised). Now: exactly that row is NaN in every output.
  params = dict(zip(("alpha", "tau", "omega"), _random_params(7, 5, 3), strict=True))
  good = {k: v.copy() for k, v in params.items()}
  params[field] = params[field].copy()
  params[field][row, 1] = value
  keep = np.arange(5) != row
  for fn in (uq.modex_moments, uq.modex_uncertainty, uq.modex_log_mean):
    bad_out = jax.jit(fn)(params["alpha"], params["tau"], params["omega"])
    ref_out = jax.jit(fn)(good["alpha"], good["tau"], good["omega"])
    for b, r in zip(jax.tree.leaves(bad_out), jax.tree.leaves(ref_out), strict=True):
      b, r = np.asarray(b), np.asarray(r)
      assert np.isnan(b[row]).all(), fn.__name__
      np.testing.assert_array_equal(b[keep], r[keep])
    with pytest.raises(ValueError, match=field):
      fn(params["alpha"], params["tau"], params["omega"])


def test_traced_omega_off_the_simplex_is_nan():
  alpha, tau, omega = _random_params(8, 3, 4)
  omega = omega.copy()
  omega[2] *= 1.5  # sums to 1.5
  u = jax.jit(uq.modex_uncertainty)(alpha, tau, omega)
  assert np.isnan(np.asarray(u.total)[2]) and np.isfinite(np.asarray(u.total)[:2]).all()


def test_traced_fedl_off_domain_rows_are_nan():
  alpha, _, p = _random_params(9, 4, 3)
  tau = np.array([1.0, -2.0, 0.5, 3.0], np.float32)
  m = jax.jit(uq.fedl_moments)(alpha, tau, p)
  for leaf in m:
    leaf = np.asarray(leaf)
    assert np.isnan(leaf[1]).all() and np.isfinite(leaf[[0, 2, 3]]).all()
