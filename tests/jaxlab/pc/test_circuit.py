"""The layered circuit: normalisation, exact box integrals, HFV normaliser vs 2-D quadrature."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from scipy import stats

from jaxlab.pc import Circuit, CircuitConfig, PCModel, circuit, gaussian, init_params, training
from jaxlab.train import optimizer
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


def test_interval_cells_give_ties_to_the_first_index():
  c = jnp.array([0.5, -1.0, 0.5, 2.0, 0.5])

  @jax.jit
  def run():
    lo, hi = circuit.interval_cells(c)
    return lo, hi, circuit.interval_cells(c[jnp.array([0, 1, 3])]), jax.scipy.special.logsumexp(
        gaussian.normal_log_interval_mass(0.3, 1.2, lo, hi))

  lo, hi, (lo_ref, hi_ref), log_total = jax.tree.map(np.asarray, run())
  # The first of the equal centroids owns their interval, the later ones an empty cell.
  np.testing.assert_array_equal(lo, [-0.25, -np.inf, 0.5, 1.25, 0.5])
  np.testing.assert_array_equal(hi, [1.25, -0.25, 0.5, np.inf, 0.5])
  np.testing.assert_array_equal(lo[[0, 1, 3]], lo_ref)
  np.testing.assert_array_equal(hi[[0, 1, 3]], hi_ref)
  # The cells agree with the leaves' gate (argmin, first on ties) and partition the line.
  x = np.random.default_rng(0).uniform(-3, 3, 1000).astype(np.float32)
  nearest = np.argmin(np.abs(x[:, None] - np.asarray(c)[None]), axis=-1)
  assert np.all((lo[nearest] <= x) & (x < hi[nearest]))
  np.testing.assert_allclose(float(log_total), 0.0, atol=1e-6)


def test_hfv_density_integrates_to_one_with_tied_leaf_means():
  # data_init copies leaf means from training points: a discrete column ties them.
  cfg = CircuitConfig(num_vars=2, num_replicas=1, leaf_units=2, sum_units=2, num_channels=2,
                      leaf_components=3, leaf_gate="voronoi", min_scale=0.2)
  model = PCModel(cfg, root="mixture")
  ties = np.array([[0.5, 0.5, -1.0], [1.0, -1.0, 1.0], [-0.5, -0.5, -0.5], [0.0, 1.0, 1.0]])
  x = jnp.asarray(ties[:, :2], jnp.float32)  # points on the tied means

  @jax.jit
  def init():
    params = model.init(jax.random.key(0), x)
    body = params["params"]["body"]
    body["leaf_mean"] = jnp.asarray(np.resize(ties, body["leaf_mean"].shape), jnp.float32)
    body["leaf_logits"] = jax.random.normal(jax.random.key(1), body["leaf_logits"].shape)
    return params, jax.grad(lambda p: jnp.sum(model.apply(p, x)))(params)

  params, grads = init()
  assert all(np.all(np.isfinite(np.asarray(g))) for g in jax.tree.leaves(grads))
  # Every cell edge (a midpoint of two leaf means) is a multiple of the quadrature step.
  z = pc_testing.quadrature(lambda x: model.apply(params, x), step=0.05)
  assert abs(z - 1.0) < 1e-3, z


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
  opt = ml_collections.ConfigDict(dict(learning_rate=0.05, schedule="constant"))
  tx = training.with_frozen(optimizer(opt, 30), params)
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


def test_seed_vmapped_gradient_of_gaussian_leaves():
  # Plain Gaussian leaves drop their one-component axis: with it, the gradient's batch sum
  # over a [seeds, B, R, P, I, D, 1] tensor crashed the process (SIGSEGV) in jaxlib 0.10.2's
  # YNN reduction, which the pc experiment's quick preset reached in training.
  cfg = CircuitConfig(num_vars=2, num_replicas=4, leaf_units=8, sum_units=8, num_channels=8)
  model = Circuit(cfg)
  x = pc_testing.blobs(16)
  params = jax.vmap(lambda k: model.init(k, x))(jax.random.split(jax.random.key(0), 3))
  grads = jax.jit(jax.vmap(jax.grad(lambda p: jnp.mean(model.apply(p, x)))))(params)
  leaves = jax.tree.leaves(grads)
  assert leaves and all(np.all(np.isfinite(np.asarray(g))) for g in leaves)
  assert np.any(np.asarray(grads["params"]["leaf_mean"]) != 0)
