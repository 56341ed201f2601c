"""The VT sum node: cells, gates, the gate-gap bound, and the anytime normaliser bounds."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from jaxlab.pc import bounds, gaussian, voronoi
from tests.jaxlab.pc import pc_testing

CENTROIDS = jnp.array([[-1.0, 0.0], [1.0, 0.5], [0.2, 1.5], [0.0, -1.2]])


def _nearest(points, c):
  return np.argmin(((points[:, None] - np.asarray(c)[None]) ** 2).sum(-1), axis=1)


def test_classify_boxes_agrees_with_sampling():
  rng = np.random.default_rng(0)
  k, m = CENTROIDS.shape[0], 200
  lo = rng.uniform(-2.5, 2.0, size=(k, m, 2))
  hi = lo + rng.uniform(0.05, 1.5, size=(k, m, 2))
  inside, outside = voronoi.classify_boxes(jnp.asarray(lo, jnp.float32),
                                           jnp.asarray(hi, jnp.float32), CENTROIDS)
  inside, outside = np.asarray(inside), np.asarray(outside)
  assert inside.any() and outside.any() and (~inside & ~outside).any()
  u = rng.uniform(size=(64, 2))
  for cell in range(k):
    for j in range(m):
      pts = lo[cell, j] + u * (hi[cell, j] - lo[cell, j])
      corners = np.array([[lo[cell, j, 0], lo[cell, j, 1]], [lo[cell, j, 0], hi[cell, j, 1]],
                          [hi[cell, j, 0], lo[cell, j, 1]], [hi[cell, j, 0], hi[cell, j, 1]]])
      near = _nearest(np.concatenate([pts, corners]), CENTROIDS) == cell
      if inside[cell, j]:
        assert near.all()
      if outside[cell, j]:
        assert not near.any()
      if near[-4:].all():  # a convex cell holding all corners holds the box: must be "inside"
        assert inside[cell, j]


def test_inner_cube_lies_in_its_cell():
  r = np.asarray(voronoi.inner_cube_halfwidth(CENTROIDS))
  assert np.all(r > 0)
  rng = np.random.default_rng(1)
  for k in range(CENTROIDS.shape[0]):
    pts = np.asarray(CENTROIDS[k]) + r[k] * rng.uniform(-0.999, 0.999, size=(500, 2))
    assert np.all(_nearest(pts, CENTROIDS) == k)


def test_a_duplicated_centroid_has_an_empty_cell():
  dup = jnp.concatenate([CENTROIDS, CENTROIDS[1:2]])  # c_4 = c_1: ties go to cell 1
  rng = np.random.default_rng(2)
  lo = jnp.asarray(rng.uniform(-2.5, 2.0, size=(5, 50, 2)), jnp.float32)
  hi = lo + jnp.asarray(rng.uniform(0.05, 1.5, size=(5, 50, 2)), jnp.float32)
  x = jax.random.uniform(jax.random.key(0), (500, 2), minval=-3, maxval=3)
  # k-means of fewer distinct points than clusters repeats centroids.
  few = jnp.array([[0.0, 0.0], [0.0, 0.0], [3.0, 1.0], [3.0, 1.0], [3.0, 1.0]])

  @jax.jit
  def run():
    c = voronoi.kmeans(few, 3, jax.random.key(0))
    return (voronoi.empty_cells(dup), voronoi.hard_log_gates(x, dup),
            voronoi.classify_boxes(lo, hi, dup), voronoi.classify_boxes(lo[:4], hi[:4], CENTROIDS),
            voronoi.inner_cube_halfwidth(dup), voronoi.inner_cube_halfwidth(CENTROIDS),
            c, voronoi.empty_cells(c))

  empty, gates, (inside, outside), (inside_ref, outside_ref), r, r_ref, c, c_empty = (
      jax.tree.map(np.asarray, run()))
  np.testing.assert_array_equal(empty, [0, 0, 0, 0, 1])
  assert np.all(np.isneginf(gates[:, 4]))  # the gate never picks the duplicate
  assert not inside[4].any() and outside[4].all()
  # The other cells are those of the centroids without the duplicate, bit for bit.
  np.testing.assert_array_equal(inside[:4], inside_ref)
  np.testing.assert_array_equal(outside[:4], outside_ref)
  np.testing.assert_array_equal(r, np.append(r_ref, 0.0))
  distinct = len(np.unique(c, axis=0))
  assert distinct < 3 and int(c_empty.sum()) == 3 - distinct


def test_vt_bounds_bracket_quadrature_with_a_duplicated_centroid():
  # c_2 = c_0: the hard gate gives every point of their cell to child 0, so child 2 (the
  # heaviest, centred there) adds nothing to Z. Cell 0 is x_1 < 0.1, cell 1 x_1 >= 0.1.
  c = jnp.array([[-1.0, 0.0], [1.2, 0.0], [-1.0, 0.0]])
  mu = jnp.array([[-0.9, 0.2], [1.1, -0.3], [-1.0, 0.0]])
  sd = jnp.array([[0.8, 0.6], [0.7, 0.9], [0.5, 0.5]])
  log_pi = jnp.log(jnp.array([0.3, 0.3, 0.4]))
  mass = lambda lo, hi: jnp.sum(gaussian.normal_log_interval_mass(
      mu, sd, lo[:, None], hi[:, None]), axis=-1)
  log_f = lambda x: voronoi.vt_log_density(jnp.sum(gaussian.normal_logpdf(
      x[:, None], mu, sd), axis=-1), log_pi, voronoi.hard_log_gates(x, c))
  z_exact = 0.3 * stats.norm.cdf(1.0 / 0.8) + 0.3 * stats.norm.sf(-1.0 / 0.7)
  z_quad = pc_testing.quadrature(log_f, step=0.05)  # the cell edge x_1 = 0.1 is a grid edge
  assert abs(z_quad - z_exact) < 1e-4, (z_quad, z_exact)
  lz_lo, lz_hi = jax.jit(lambda: bounds.anytime_log_z_bounds(
      mass, log_pi, c, domain_halfwidth=6.0, num_steps=8, capacity=16))()
  z_lo, z_hi = np.exp(np.asarray(lz_lo, np.float64)), np.exp(np.asarray(lz_hi, np.float64))
  assert np.all(z_lo <= z_quad + 1e-4) and np.all(z_hi >= z_quad - 1e-4), (z_lo, z_hi, z_quad)


def test_gate_gap_respects_the_bound_and_vanishes():
  x = jax.random.uniform(jax.random.key(0), (2000, 2), minval=-3, maxval=3)
  gaps = []
  gate_gap = jax.jit(voronoi.gate_gap)  # one compile: alpha is traced
  for alpha in (1.0, 5.0, 50.0):
    gap, bound = gate_gap(x, CENTROIDS, alpha)
    assert np.all(np.asarray(gap) <= np.asarray(bound) * (1 + 1e-5) + 1e-7)
    gaps.append(float(jnp.mean(gap)))
  assert gaps[0] > gaps[1] > gaps[2] and gaps[2] < 0.05
  # Hard gates are the alpha -> infinity limit of soft ones.
  hard, soft = jax.jit(lambda x: (voronoi.hard_log_gates(x, CENTROIDS),
                                   voronoi.soft_log_gates(x, CENTROIDS, 1e4)))(x)
  agree = np.argmax(np.asarray(hard), -1) == np.argmax(np.asarray(soft), -1)
  assert agree.all()


@pytest.fixture(scope="module")
def vt_curve(small_models):
  model, params = small_models["vt"]
  mass = lambda lo, hi: model.apply(params, lo, hi, method="box_mass")
  lz_lo, lz_hi = jax.jit(lambda: bounds.anytime_log_z_bounds(
      mass, model.apply(params, method="log_pi"), model.apply(params, method="cell_centroids"),
      domain_halfwidth=8.0, num_steps=32, capacity=768))()
  z_quad = pc_testing.quadrature(lambda x: model.apply(params, x))
  return np.exp(np.asarray(lz_lo, np.float64)), np.exp(np.asarray(lz_hi, np.float64)), z_quad


def test_vt_bounds_bracket_quadrature_and_converge(vt_curve):
  z_lo, z_hi, z_quad = vt_curve
  assert z_quad < 0.999  # the hard gates removed mass: Z is a real correction
  # Quadrature error of the midpoint rule with the cells' oblique edges is ~1e-5 here.
  assert np.all(z_lo <= z_quad + 1e-4) and np.all(z_hi >= z_quad - 1e-4), (z_lo, z_hi, z_quad)
  assert z_hi[-1] - z_lo[-1] < 2e-3, (z_lo[-1], z_hi[-1])
  assert abs(0.5 * (z_lo[-1] + z_hi[-1]) - z_quad) < 1e-3


def test_vt_bounds_tighten_monotonically(vt_curve):
  z_lo, z_hi, _ = vt_curve
  # Monotone up to float32 rounding of the accumulated masses.
  assert np.all(np.diff(z_lo) >= -1e-6) and np.all(np.diff(z_hi) <= 1e-6)
  assert z_hi[0] - z_lo[0] > 10 * (z_hi[-1] - z_lo[-1])  # and they really tighten


def test_vt_log_density_is_a_lower_bound_on_the_normalised_density(small_models, vt_curve):
  model, params = small_models["vt"]
  z_lo, z_hi, _ = vt_curve
  assert z_hi[-1] <= 1.0 + 1e-6  # Z <= 1: log f alone lower-bounds log p
  x = pc_testing.blobs(50, seed=3)
  hard, soft = jax.jit(lambda x: (model.apply(params, x), model.apply(params, x, alpha=500.0)))(x)
  # A sharp soft gate is the hard one except within ~1/alpha of the cell boundaries.
  assert abs(float(jnp.mean(soft - hard))) < 0.05


def test_bounds_reject_bad_settings(small_models):
  model, params = small_models["vt"]
  mass = lambda lo, hi: model.apply(params, lo, hi, method="box_mass")
  args = (mass, model.apply(params, method="log_pi"),
          model.apply(params, method="cell_centroids"))
  with pytest.raises(ValueError, match="capacity"):
    bounds.anytime_log_z_bounds(*args, domain_halfwidth=4.0, num_steps=1, capacity=0)
  with pytest.raises(ValueError, match="domain_halfwidth"):
    bounds.anytime_log_z_bounds(*args, domain_halfwidth=-1.0, num_steps=1, capacity=4)


def test_strip_quadrature_matches_grid_quadrature(small_models, vt_curve):
  # The experiment checks its certified brackets against this strip quadrature: it must
  # agree with the brute-force midpoint grid, and lie inside the anytime bracket.
  model, params = small_models["vt"]
  mass = lambda lo, hi: model.apply(params, lo, hi, method="box_mass")
  log_z, log_tail = jax.jit(lambda: bounds.strip_log_z_2d(
      mass, model.apply(params, method="log_pi"), model.apply(params, method="cell_centroids"),
      halfwidth=8.0, num_strips=2048))()
  z_lo, z_hi, z_quad = vt_curve
  z_strip = float(np.exp(np.float64(log_z)))
  assert float(np.exp(np.float64(log_tail))) < 1e-6  # the blobs sit well inside [-8, 8]
  assert abs(z_strip - z_quad) < 2e-5, (z_strip, z_quad)
  assert z_lo[-1] <= z_strip <= z_hi[-1], (z_lo[-1], z_strip, z_hi[-1])


def test_strip_quadrature_is_exact_on_vertical_cells_and_counts_the_tail():
  # Two cells split at x_1 = 0.1 (the duplicated-centroid case above, with an empty third
  # cell): Z is a sum of normal CDFs; with L = 1 most of the mass lies in the tail.
  c = jnp.array([[-1.0, 0.0], [1.2, 0.0], [-1.0, 0.0]])
  mu = jnp.array([[-0.9, 0.2], [1.1, -0.3], [-1.0, 0.0]])
  sd = jnp.array([[0.8, 0.6], [0.7, 0.9], [0.5, 0.5]])
  log_pi = jnp.log(jnp.array([0.3, 0.3, 0.4]))
  mass = lambda lo, hi: jnp.sum(gaussian.normal_log_interval_mass(
      mu, sd, lo[:, None], hi[:, None]), axis=-1)
  z_exact = 0.3 * stats.norm.cdf(1.0 / 0.8) + 0.3 * stats.norm.sf(-1.0 / 0.7)
  strips = jax.jit(lambda h, n: bounds.strip_log_z_2d(mass, log_pi, c, halfwidth=h,
                                                      num_strips=n), static_argnums=(0, 1))
  log_z, log_tail = strips(12.0, 480)
  assert abs(float(np.exp(log_z)) - z_exact) < 1e-5
  log_z, log_tail = strips(1.0, 40)
  z_in, tail = float(np.exp(log_z)), float(np.exp(log_tail))
  assert z_in < z_exact - 0.1 and z_in <= z_exact <= z_in + tail
  with pytest.raises(ValueError, match="centroids"):
    bounds.strip_log_z_2d(mass, log_pi, jnp.zeros((3, 3)), halfwidth=1.0, num_strips=4)
  with pytest.raises(ValueError, match="num_strips"):
    bounds.strip_log_z_2d(mass, log_pi, c, halfwidth=1.0, num_strips=0)
