"""jaxlab.causal: GMRF sampler, Moran's I, grid helpers, the generator's effects, CVAE pieces."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxlab import causal


def test_gmrf_empirical_covariance_matches_inverse_precision():
  q = causal.gmrf_precision(3, 4, epsilon=0.3, connectivity=4)
  chol = causal.precision_cholesky(q)
  num = 40_000
  x = np.asarray(causal.sample_gmrf(jax.random.key(0), chol, num), np.float64)
  cov = np.linalg.inv(q)
  emp = x.T @ x / num                       # the field has mean zero
  # Monte Carlo standard error of each entry of a Gaussian sample covariance.
  se = np.sqrt((np.outer(np.diag(cov), np.diag(cov)) + cov ** 2) / num)
  assert np.max(np.abs(emp - cov) / se) < 5.0
  # The comparison has power: the precision itself (a sampler that forgot the inverse) fails.
  assert np.max(np.abs(emp - q) / se) > 50.0


def test_gmrf_precision_order_two_squares_and_smoothness_orders_correlation():
  m = causal.gmrf_precision(2, 3, epsilon=0.5)
  np.testing.assert_allclose(causal.gmrf_precision(2, 3, epsilon=0.5, order=2), m @ m)
  # Smaller epsilon = longer range: the neighbour correlation of the centre site grows.
  def corr(eps):
    cov = np.linalg.inv(causal.gmrf_precision(5, 5, epsilon=eps))
    return cov[12, 13] / np.sqrt(cov[12, 12] * cov[13, 13])
  assert corr(0.01) > corr(0.1) > corr(1.0) > 0


def _moran_reference(values, mask, connectivity, weights):
  """Moran's I from its textbook definition with an explicit dense weight matrix."""
  h, w = values.shape
  wm = causal.grid_adjacency(h, w, connectivity=connectivity)
  keep = mask.reshape(-1)
  wm = wm[np.ix_(keep, keep)]
  if weights == "row":
    rows = wm.sum(1, keepdims=True)
    wm = np.where(rows > 0, wm / np.where(rows > 0, rows, 1), 0)
  x = values.reshape(-1)[keep]
  z = x - x.mean()
  n = len(x)
  return n / wm.sum() * (z @ wm @ z) / (z @ z)


@pytest.mark.parametrize("connectivity", [4, 8])
@pytest.mark.parametrize("weights", ["row", "binary"])
def test_morans_i_matches_dense_reference(connectivity, weights):
  rng = np.random.default_rng(0)
  values = rng.standard_normal((5, 6)).cumsum(1)        # some autocorrelation
  mask = np.ones((5, 6), bool)
  mask[0, :2] = mask[3, 4] = False
  got = causal.morans_i(jnp.asarray(values, jnp.float32), mask=jnp.asarray(mask),
                        connectivity=connectivity, weights=weights)
  want = _moran_reference(values, mask, connectivity, weights)
  np.testing.assert_allclose(float(got), want, rtol=1e-5, atol=1e-6)


def test_morans_i_pinned_values():
  checker = (jnp.indices((4, 4)).sum(0) % 2).astype(jnp.float32)
  np.testing.assert_allclose(float(causal.morans_i(checker)), -1.0, atol=1e-6)
  stripes = jnp.tile(jnp.arange(4.0)[:, None], (1, 4))   # rows 0..3: smooth along columns
  assert float(causal.morans_i(stripes, weights="binary")) > 0.5
  with pytest.raises(ValueError, match="weights"):
    causal.morans_i(checker, weights="inverse")


def test_patches_neighbour_mean_and_interior():
  a = jnp.arange(16.0).reshape(4, 4)
  p = causal.extract_patches(a, 1)
  assert p.shape == (4, 4, 3, 3)
  np.testing.assert_array_equal(p[0, 0], [[0, 0, 0], [0, 0, 1], [0, 4, 5]])
  nb = causal.neighbour_mean(a, 1)
  np.testing.assert_allclose(nb[1, 1], (0 + 1 + 2 + 4 + 6 + 8 + 9 + 10) / 8)
  np.testing.assert_allclose(nb[0, 0], (1 + 4 + 5) / 3)       # corner: in-grid neighbours only
  np.testing.assert_array_equal(causal.interior_mask(4, 5, 1),
                                np.pad(np.ones((2, 3), bool), 1))
  with pytest.raises(ValueError, match="radius"):
    causal.extract_patches(a, -1)


def test_spline_basis_partition_of_unity_and_errors():
  b = causal.spline_basis(7, 9, 5)
  assert b.shape == (63, 25) and (b >= 0).all()
  np.testing.assert_allclose(b.sum(1), 1.0, atol=1e-5)
  with pytest.raises(ValueError, match="num_basis"):
    causal.spline_basis(7, 9, 3)


def test_bad_inputs_raise():
  with pytest.raises(ValueError, match="u_field"):
    causal.GridConfig(u_field="pink")
  with pytest.raises(ValueError, match="beta"):
    causal.GridConfig(beta=(1.0,))
  with pytest.raises(ValueError, match="epsilon"):
    causal.gmrf_precision(3, 3, epsilon=0.0)
  with pytest.raises(ValueError, match="positive definite"):
    causal.precision_cholesky(np.array([[1.0, 2.0], [2.0, 1.0]]))
  with pytest.raises(ValueError, match="z_dim"):
    causal.CVAEConfig(z_dim=0)
  with pytest.raises(ValueError, match="precision"):
    causal.gmrf_kl(jnp.zeros((1, 3, 3, 1)), jnp.zeros((1, 3, 3, 1)), jnp.eye(4), 1.0)


@pytest.fixture(scope="module")
def draws():
  """16 seeds of a 20 x 20 grid with a smooth U (one jit of the vmapped generator)."""
  cfg = causal.GridConfig(height=20, width=20, u_epsilon=0.1)
  data = jax.jit(jax.vmap(causal.make_generator(cfg)))(
      jax.random.split(jax.random.key(0), 16))
  return cfg, data


def test_generator_shapes_and_treatment_positivity(draws):
  cfg, data = draws
  assert data.y.shape == (16, 20, 20) and data.x.shape == (16, 20, 20, 3)
  np.testing.assert_allclose(data.u.std((1, 2)), 1.0, rtol=1e-4)   # standardised per draw
  share = float(data.a.mean())
  assert 0.2 < share < 0.8                                          # both arms populated
  np.testing.assert_allclose(data.a_neighbours, jax.vmap(causal.neighbour_mean, (0, None))(
      data.a, 1))


def test_oracle_recovers_tau_and_delta_within_sampling_error(draws):
  cfg, data = draws
  oracle = jax.vmap(lambda d: causal.ols_effects(d, d.u[..., None]))(data)
  for est, truth in ((oracle.tau, cfg.tau), (oracle.delta, cfg.delta)):
    est = np.asarray(est, np.float64)
    se = est.std(ddof=1) / np.sqrt(len(est))
    assert abs(est.mean() - truth) < 3 * se + 1e-3, (est.mean(), truth, se)
  # The same check rejects the naive fit, whose bias is far outside sampling error.
  naive = np.asarray(jax.vmap(lambda d: causal.ols_effects(d, spillover=False))(data).tau)
  assert naive.mean() - cfg.tau > 10 * naive.std(ddof=1) / np.sqrt(len(naive))
  e_tau, e_delta = jax.vmap(lambda t, dl, d: causal.effect_errors(t, dl, d, cfg))(
      oracle.tau, oracle.delta, data)
  assert float(e_tau.mean()) < 0.1 and float(e_delta.mean()) < 0.2


def _unconfounded():
  cfg = causal.GridConfig(height=20, width=20, a_u=0.0, y_u=0.0, y_sin=0.0)
  return cfg, jax.vmap(causal.make_generator(cfg))(jax.random.split(jax.random.key(1), 4))


def test_spatial_plus_recovers_effects_without_confounding():
  cfg, data = _unconfounded()
  basis = jnp.asarray(causal.spline_basis(20, 20, 5))
  sp = jax.vmap(lambda d: causal.spatial_plus_effects(d, basis))(data)
  np.testing.assert_allclose(np.mean(sp.tau), cfg.tau, atol=0.1)
  np.testing.assert_allclose(np.mean(sp.delta), cfg.delta, atol=0.25)


def test_underdetermined_design_raises():
  # Before: a 3x3 grid (1 interior site, 6 coefficients) returned tau-hat and delta-hat.
  data = jax.jit(causal.make_generator(causal.GridConfig(height=3, width=3)))(jax.random.key(0))
  with pytest.raises(ValueError, match=r"ols_effects: .*underdetermined, 1 interior site\(s\) "
                                       r"for 6 coefficients"):
    causal.ols_effects(data)
  est = jax.jit(causal.ols_effects)(data)  # traced: NaN, never a number
  assert np.isnan(float(est.tau)) and np.isnan(float(est.delta))


def test_collinear_design_raises_naming_the_columns(draws):
  # Before: the treatment passed again as `extra` split tau silently (about half each).
  _, data = draws
  one = jax.tree.map(lambda v: v[0], data)
  with pytest.raises(ValueError, match=r"columns A, extra\[0\] are collinear"):
    causal.ols_effects(one, one.a[..., None])
  with pytest.raises(ValueError, match=r"columns intercept, Abar_N, extra\[0\] are collinear"):
    causal.ols_effects(one, 2.0 * one.a_neighbours[..., None] + 1.0)
  # Vmapped over draws (nothing can raise there): NaN estimates for the collinear designs
  # (ols, and Spatial+ with a covariate passed again), numbers for the oracle.
  basis = jnp.asarray(causal.spline_basis(20, 20, 5))
  bad, bad_sp, good = jax.jit(jax.vmap(lambda d: (
      causal.ols_effects(d, d.a[..., None]),
      causal.spatial_plus_effects(d, basis, d.x[..., 1:2]),
      causal.ols_effects(d, d.u[..., None]))))(data)
  for est in (bad, bad_sp):
    assert np.isnan(np.asarray(est.tau)).all() and np.isnan(np.asarray(est.delta)).all()
  assert np.isfinite(np.asarray(good.tau)).all() and np.isfinite(np.asarray(good.delta)).all()


@pytest.mark.slow
def test_mlp_head_recovers_effects_without_confounding():
  cfg, data = _unconfounded()
  fit = causal.make_mlp_head(optax.adam(1e-2), hidden=16, num_steps=200)
  mlp = jax.jit(jax.vmap(lambda k, d: fit(k, d, None)))(jax.random.split(jax.random.key(2), 4),
                                                        data)
  np.testing.assert_allclose(np.mean(mlp.tau), cfg.tau, atol=0.15)
  assert mlp.residuals.shape == (4, 20, 20)
  assert float(jnp.abs(mlp.residuals * ~data.interior).max()) == 0.0


def test_gmrf_kl_equals_gaussian_kl_up_to_a_constant():
  q = jnp.asarray(causal.patch_prior_precision(1, epsilon=0.1))
  tau = 10.0

  def exact(mean, logvar):
    # KL(N(mu, diag s2) || N(0, (tau Q)^-1)) per channel, summed over channels.
    prec = tau * np.asarray(q, np.float64)
    total = 0.0
    for d in range(mean.shape[-1]):
      mu, s2 = mean[..., d].reshape(-1), np.exp(logvar[..., d].reshape(-1))
      total += 0.5 * (np.sum(np.diag(prec) * s2) + mu @ prec @ mu - len(mu)
                      - np.sum(np.log(s2)) - np.linalg.slogdet(prec)[1])
    return total

  rng = np.random.default_rng(0)
  gaps = []
  for _ in range(3):
    mean = rng.standard_normal((1, 3, 3, 2))
    logvar = rng.standard_normal((1, 3, 3, 2))
    ours = causal.gmrf_kl(jnp.asarray(mean, jnp.float32), jnp.asarray(logvar, jnp.float32),
                          q, tau)
    gaps.append(exact(mean[0], logvar[0]) - float(ours[0]) * 9 * 2)
  np.testing.assert_allclose(gaps, gaps[0], rtol=1e-4)


@pytest.mark.slow
def test_cvae_trains_vmapped_over_seeds_and_fits_the_treatment():
  cfg = causal.GridConfig(height=12, width=12, u_epsilon=0.1)
  keys = jax.random.split(jax.random.key(3), 2)
  data = jax.vmap(causal.make_generator(cfg))(keys)
  ccfg = causal.CVAEConfig(z_dim=2, hidden=8, num_steps=150, batch_size=64,
                           beta_warmup_steps=10)
  model, train = causal.make_cvae_trainer(ccfg, optax.adam(3e-3))
  params, losses = jax.jit(jax.vmap(train))(keys, data.a, data.x)
  assert losses.shape == (2, 150, 3) and bool(jnp.isfinite(losses).all())
  bce = np.asarray(losses[..., 1])
  assert (bce[:, -20:].mean(1) < bce[:, :5].mean(1) - 0.1).all()   # BCE falls
  z = jax.vmap(lambda p, a, x: causal.latent_means(model, p, a, x, 1))(params, data.a, data.x)
  assert z.shape == (2, 12, 12, 18) and bool(jnp.isfinite(z).all())


def test_patch_conv_matches_flax_conv():
  import flax.linen as nn
  x = jax.random.normal(jax.random.key(0), (4, 3, 3, 5))
  ours = causal.PatchConv3x3(7)
  params = ours.init(jax.random.key(1), x)
  ref = nn.Conv(7, (3, 3), padding="SAME")
  np.testing.assert_allclose(ours.apply(params, x), ref.apply(params, x), rtol=1e-5, atol=1e-5)
