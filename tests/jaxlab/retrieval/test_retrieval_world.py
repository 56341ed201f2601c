"""The synthetic geo world, GPS-neighbour batches, retrieval metrics and the two-tower model."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from jaxlab.retrieval import losses, metrics, model, nig, sampling, training, world

CFG = world.WorldConfig(grid=12, num_features=16)


def _city(length_scale=3.0, noise=0.0, seed=0):
  return world.make_city(CFG, world.CitySpec(seed=1, length_scale=length_scale, noise=noise), seed)


def test_recall_at_k_by_hand():
  s = np.array([[0.9, 0.1, 0.0, 0.0],    # rank 0
                [0.8, 0.5, 0.9, 0.0],    # rank 2
                [0.0, 0.0, 0.7, 0.7],    # a tie counts against the query: rank 1
                [0.4, 0.3, 0.2, 0.1]])   # rank 3
  np.testing.assert_array_equal(metrics.ranks(s), [0, 2, 1, 3])
  assert metrics.recall_at_k(s, (1, 3), one_percent=True) == {
      "R@1": 0.25, "R@3": 0.75, "R@1%": 0.25}
  assert metrics.one_percent_k(256) == 3 and metrics.one_percent_k(10) == 1
  with pytest.raises(ValueError, match="square"):
    metrics.ranks(np.zeros((2, 3)))
  with pytest.raises(ValueError, match="k"):
    metrics.recall_at_k(s, (0,))


@pytest.mark.parametrize("n", [2, 7, 300])
def test_constant_scores_get_no_credit_from_ties(n):
  # A collapsed model scores every reference alike: each true reference ties with all n - 1
  # others and ranks last, so R@k is 0 for every k < n (a random ranker would get k / n).
  s = np.full((n, n), 0.25)
  np.testing.assert_array_equal(metrics.ranks(s), np.full(n, n - 1))
  r = metrics.recall_at_k(s, (1, 5, n - 1, n), one_percent=True)
  assert r["R@1"] == 0.0 and r["R@1%"] == 0.0 and r[f"R@{n - 1}"] == 0.0 and r[f"R@{n}"] == 1.0
  assert r["R@5"] == (1.0 if n <= 5 else 0.0)


def test_a_tie_with_one_other_reference_costs_one_rank():
  s = np.array([[0.3, 0.3, 0.1], [0.2, 0.6, 0.6], [0.0, 0.9, 0.9]])
  np.testing.assert_array_equal(metrics.ranks(s), [1, 1, 1])
  assert metrics.recall_at_k(s, (1, 2)) == {"R@1": 0.0, "R@2": 1.0}


def test_spearman_matches_scipy():
  rng = np.random.default_rng(0)
  a = rng.standard_normal(50)
  b = a + rng.standard_normal(50)
  b[:5] = b[0]  # ties
  np.testing.assert_allclose(metrics.spearman(a, b), stats.spearmanr(a, b).statistic, rtol=1e-10)
  assert metrics.spearman(a, np.ones(50)) == 0.0


def test_spearman_of_a_nan_is_nan():
  # A NaN has no rank: ranking it among the others gave a number (0.5 here).
  a, b = np.array([1.0, 2.0, 3.0, np.nan]), np.array([1.0, 3.0, 2.0, 4.0])
  assert np.isnan(metrics.spearman(a, b)) and np.isnan(metrics.spearman(b, a))
  assert np.isnan(metrics.spearman(np.ones(4), np.array([1.0, np.nan, 2.0, 3.0])))
  # +-inf still ranks as the extreme it is.
  assert metrics.spearman([1.0, 2.0, np.inf], [1.0, 2.0, 3.0]) == 1.0


def test_neighbour_batches_are_distinct_tiles_inside_the_area():
  keys = jax.random.split(jax.random.key(0), 5)
  batch = jax.jit(jax.vmap(lambda k: sampling.neighbour_batch(
      k, width=9, height=12, block=2, num_blocks=6, x0=1, y0=0)))
  for x in np.asarray(batch(keys)).astype(int):
    assert len({tuple(p) for p in x}) == 24
    assert x[:, 0].min() >= 1 and x[:, 0].max() < 10 and x[:, 1].min() >= 0
    assert x[:, 1].max() < 12
    for tile in x.reshape(6, 4, 2):  # each tile is a 2 x 2 square of neighbours
      assert np.ptp(tile[:, 0]) == 1 and np.ptp(tile[:, 1]) == 1
  with pytest.raises(ValueError, match="num_blocks"):
    sampling.neighbour_batch(keys[0], width=4, height=4, block=2, num_blocks=5)


def test_views_shapes_and_orientation_shift_is_a_circular_roll():
  city = _city()
  x = world.grid_locations(CFG, "test")
  assert x.shape == (3 * 12, 2) and float(x[:, 0].min()) == CFG.split
  render = jax.jit(lambda k: world.render_views(CFG, city, x, k))
  street, sat = (np.asarray(v) for v in render(jax.random.key(0)))
  assert street.shape == (36, 8, 8) and sat.shape == (36, 9, 8)
  other, sat2 = (np.asarray(v) for v in render(jax.random.key(1)))
  np.testing.assert_allclose(sat, sat2)  # noise-free satellite views do not depend on the key
  for i in range(36):  # street views are equal up to a circular shift of the ring
    assert any(np.allclose(np.roll(street[i], r, axis=0), other[i], atol=1e-5) for r in range(8))


def test_length_scale_controls_semi_positives_and_roughness():
  x = world.grid_locations(CFG)
  measure = jax.jit(lambda c: (world.semi_positive_density(CFG, c, x),
                               world.roughness(CFG, c, x).mean()))
  dens, rough = zip(*[[float(v) for v in measure(_city(ell))] for ell in (1.0, 3.0, 8.0)],
                    strict=True)
  assert dens[0] < dens[1] < dens[2], dens
  assert rough[0] > rough[1] > rough[2], rough


def test_cities_differ_and_are_reproducible():
  a, b = _city(seed=0), _city(seed=0)
  np.testing.assert_array_equal(a.omega, b.omega)
  shifted = world.make_city(CFG, world.CitySpec(seed=1, length_scale=3.0, noise=0.0,
                                                map_shift=0.5), 0)
  assert not np.allclose(a.street_map, shifted.street_map)
  assert not np.allclose(a.omega, _city(seed=1).omega)
  with pytest.raises(ValueError, match="length_scale"):
    world.CitySpec(seed=0, length_scale=0.0, noise=0.1)


@pytest.fixture(scope="module")
def views():
  render = jax.jit(lambda k: world.render_views(CFG, _city(noise=0.1),
                                                world.grid_locations(CFG, "test")[:8], k))
  return render(jax.random.key(0))


def test_model_embeddings_are_unit_and_head_stop_gradient_blocks_der(views):
  street, sat = views
  cfg = training.TrainConfig(num_steps=1, num_logs=1, num_hard=2)
  grads = {}
  for stop in (False, True):
    m = model.CVGLModel(hidden=8, embed_dim=8, head_hidden=8, head_stop_gradient=stop)
    params = jax.jit(m.init)(jax.random.key(0), street, sat)

    def der_only(p, m=m):
      out = m.apply(p, street, sat)
      y = training.regression_target(out.query @ out.reference.T, cfg.target)
      return nig.der_loss(y, out.nig.nig).mean(), out.query

    g, query = jax.jit(jax.grad(der_only, has_aux=True))(params)
    np.testing.assert_allclose(jnp.linalg.norm(query, axis=-1), 1.0, rtol=1e-5)
    grads[stop] = float(jnp.abs(g["params"]["street"]["token_in"]["kernel"]).max())
  assert grads[False] > 0 and grads[True] == 0.0


def test_infonce_arm_loss_is_sample4geo_infonce(views):
  street, sat = views
  m = model.CVGLModel(hidden=8, embed_dim=8, head_hidden=8)
  params = jax.jit(m.init)(jax.random.key(0), street, sat)
  cfg = training.TrainConfig(num_steps=1, num_logs=1, num_hard=2)

  @jax.jit
  def both(p):
    loss, logs = training.batch_loss(m, p, street, sat, training.make_arm("infonce"), cfg)
    out = m.apply(p, street, sat)
    want = losses.infonce(logits=out.logit_scale * out.query @ out.reference.T,
                          label_smoothing=0.1).mean()
    return loss, want, logs["eps"]

  loss, want, eps = both(params)
  np.testing.assert_allclose(loss, want, rtol=1e-5)
  assert float(eps) == 0.0
  with pytest.raises(ValueError, match="arm"):
    training.make_arm("nope")


def test_soft_mean_arm_spreads_the_u_adaptive_mass_evenly_over_the_batch(views):
  # soft_mean is soft_u without per-example adaptivity: on the same parameters every row's
  # eps is the batch mean of soft_u's eps_i, so the batch's softening mass is the same.
  street, sat = views
  m = model.CVGLModel(hidden=8, embed_dim=8, head_hidden=8)
  params = jax.jit(m.init)(jax.random.key(0), street, sat)
  cfg = training.TrainConfig(num_steps=1, num_logs=1, num_hard=2)

  @jax.jit
  def run(p):
    out = m.apply(p, street, sat)
    sims = out.query @ out.reference.T
    u = nig.nig_uncertainty(out.nig.nig)
    res = {}
    for kind in ("epistemic", "aleatoric"):
      eps_i = 0.3 * losses.squash_uncertainty(u[kind])
      for name, eps in (("soft_u", eps_i), ("soft_mean", jnp.full_like(eps_i, eps_i.mean()))):
        t = losses.soft_targets(sims, eps, num_hard=2, temperature=cfg.hard_temperature)
        want = losses.soft_infonce(logits=out.logit_scale * sims, targets=t).mean()
        y = training.regression_target(sims, cfg.target)
        want = want + 0.1 * nig.der_loss(y, out.nig.nig, reg_weight=cfg.der_reg).mean()
        arm = training.make_arm(name, eps_max=0.3, der_weight=0.1, uncertainty=kind)
        res[name, kind] = (training.batch_loss(m, p, street, sat, arm, cfg), want, eps_i)
    return res

  for (name, kind), ((loss, logs), want, eps_i) in run(params).items():
    np.testing.assert_allclose(loss, want, rtol=1e-5, err_msg=f"{name}, {kind}")
    np.testing.assert_allclose(logs["eps"], eps_i.mean(), rtol=1e-5)
    assert float(eps_i.std()) > 1e-4  # u varies over the batch, so the arms differ
    if name == "soft_mean":
      assert float(logs["eps_spread"]) < 1e-6
    else:
      np.testing.assert_allclose(logs["eps_spread"], eps_i.std(), rtol=1e-4)
  with pytest.raises(ValueError, match="uncertainty"):
    training.make_arm("soft_u", uncertainty="both")
