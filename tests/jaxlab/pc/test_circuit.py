"""The layered circuit: normalisation, exact box integrals, HFV normaliser vs 2-D quadrature."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from jaxlab.pc import Circuit, CircuitConfig, PCModel, circuit, init_params, training
from tests.jaxlab.pc import pc_testing


def test_base_circuit_integrates_to_one(small_models):
  model, params = small_models["base"]
  z = pc_testing.quadrature(lambda x: model.apply(params, x))
  assert abs(z - 1.0) < 1e-3, z
  # Every root channel is normalised: its mass on R^2 is exactly 1.
  inf = jnp.full((1, 2), jnp.inf)
  box = jax.jit(lambda lo, hi: model.apply(params, lo, hi, method="box_mass"))
  np.testing.assert_allclose(np.asarray(box(-inf, inf)), 0.0, atol=1e-5)


def test_hfv_normaliser_matches_quadrature(small_models):
  model, params = small_models["hfv"]
  x = pc_testing.blobs(8)
  log_raw, log_z = jax.jit(lambda x: model.apply(params, x, method="raw"))(x)
  z_quad = pc_testing.quadrature(lambda x: model.apply(params, x, method="raw")[0])
  assert float(jnp.exp(log_z)) < 0.99  # the gating removed mass: Z is a real correction
  assert abs(z_quad - float(jnp.exp(log_z))) < 1e-3, (z_quad, float(jnp.exp(log_z)))
  assert np.all(np.isfinite(np.asarray(log_raw)))
  # The leaf-normalised HFV model (what training and evaluation use) integrates to one.
  assert abs(pc_testing.quadrature(lambda x: model.apply(params, x)) - 1.0) < 1e-3


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["base", "hfv"])
def test_box_mass_matches_quadrature_over_the_box(small_models, kind):
  model, params = small_models[kind]
  lo, hi = jnp.array([[-1.2, -0.7]]), jnp.array([[0.9, 1.6]])
  log_mass = model.apply(params, lo, hi, method="box_mass")  # [1, K]
  log_pi = model.apply(params, method="log_pi")
  mass = float(jnp.exp(jax.scipy.special.logsumexp(log_pi + log_mass[0])))

  def inside(x):
    keep = jnp.all((x >= lo) & (x <= hi), axis=-1)
    return jnp.where(keep, model.apply(params, x), -jnp.inf)

  assert abs(pc_testing.quadrature(inside) - mass) < 1e-3


def test_single_gaussian_leaf_box_matches_scipy():
  # D = 2, one replica, one leaf unit per region, one channel: a product of two Gaussians.
  cfg = CircuitConfig(num_vars=2, num_replicas=1, leaf_units=1, sum_units=1, num_channels=1)
  model = Circuit(cfg)
  params = jax.jit(model.init)(jax.random.key(3), jnp.zeros((1, 2)))
  leaf = jax.jit(lambda p: model.apply(p, method="leaf_parameters"))(params)
  mean = np.asarray(leaf["mean"][0, :, 0, :, 0])  # [P, D]: region p holds one variable
  scale = np.asarray(leaf["scale"][0, :, 0, :, 0])
  region = circuit.region_masks(cfg)[0].argmax(0)  # [D]: the leaf region of each variable
  mu, sd = mean[region, np.arange(2)], scale[region, np.arange(2)]
  lo, hi = np.array([-0.4, -2.0]), np.array([1.3, 0.1])
  want = np.sum(np.log(stats.norm.cdf(hi, mu, sd) - stats.norm.cdf(lo, mu, sd)))
  got = jax.jit(lambda p, a, b: model.apply(p, a, b, query="box"))(
      params, jnp.asarray(lo[None], jnp.float32), jnp.asarray(hi[None], jnp.float32))
  np.testing.assert_allclose(float(got[0, 0]), want, rtol=1e-5)


def test_interval_cells_partition_the_line():
  c = jnp.array([0.3, -2.0, 1.5, 0.9])
  lo, hi = circuit.interval_cells(c)
  order = np.argsort(np.asarray(c))
  np.testing.assert_allclose(np.asarray(lo)[order][1:], np.asarray(hi)[order][:-1])
  assert np.isneginf(np.asarray(lo)[order][0]) and np.isposinf(np.asarray(hi)[order][-1])
  np.testing.assert_allclose(float(hi[1]), -0.85)  # midway between -2.0 and 0.3


def test_bad_inputs_raise():
  with pytest.raises(ValueError, match="depth"):
    CircuitConfig(num_vars=3, depth=2)
  with pytest.raises(ValueError, match="leaf_gate"):
    CircuitConfig(num_vars=2, leaf_gate="hard")
  model = PCModel(CircuitConfig(num_vars=2))
  with pytest.raises(ValueError, match=r"\[B, 2\]"):
    model.init(jax.random.key(0), jnp.zeros((1, 3)))
  with pytest.raises(ValueError, match="root"):
    PCModel(CircuitConfig(num_vars=2), root="tree").init(jax.random.key(0), jnp.zeros((1, 2)))


@pytest.mark.slow  # the smoke run of the `pc` experiment trains HFV too (finite losses)
def test_hfv_training_is_finite_and_improves(small_models):
  model, params = small_models["hfv"]
  x = pc_testing.blobs(400, seed=1)
  tx = training.make_optimizer(0.05, params)
  before = float(jnp.mean(model.apply(params, x)))
  trained, losses, skipped = jax.jit(lambda p: training.fit(model, p, x, jax.random.key(0), tx=tx,
                                                   num_steps=30, batch_size=64))(params)
  assert np.all(np.isfinite(np.asarray(losses))) and int(skipped) == 0
  assert float(jnp.mean(model.apply(trained, x))) > before + 0.1
  # Frozen by default: the HFV cell offsets did not move.
  np.testing.assert_array_equal(np.asarray(trained["params"]["body"]["centroid_offset"]),
                                np.asarray(params["params"]["body"]["centroid_offset"]))


def test_init_params_uses_kmeans_centroids_for_vt():
  x = pc_testing.blobs(300)
  model = PCModel(CircuitConfig(num_vars=2, num_replicas=1, leaf_units=2, sum_units=2,
                                num_channels=3), root="vt")
  init = jax.jit(lambda key: init_params(model, key, x))
  c = np.asarray(init(jax.random.key(0))["params"]["centroids"])
  true = np.array([[-1.5, -1.0], [1.5, -0.5], [0.0, 1.5]])
  dist = np.linalg.norm(c[:, None] - true[None], axis=-1)
  assert sorted(dist.argmin(1).tolist()) == [0, 1, 2] and dist.min(1).max() < 0.2
