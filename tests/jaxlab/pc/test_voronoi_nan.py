"""A non-finite point never gets a Voronoi cell: k-means refuses it eagerly and gives NaN
centroids traced (one NaN point used to leave some centroids finite under jit); the nearest
cell is -1 and the hard gates NaN (an argmin over NaN used to name cell 0)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.pc import voronoi

X = jnp.array([[0.0], [0.1], [jnp.nan], [5.0], [5.1]])


def test_kmeans_refuses_or_poisons_a_nan_point():
  with pytest.raises(ValueError, match="x must be finite"):
    voronoi.kmeans(X, 2, jax.random.key(0))
  traced = jax.jit(voronoi.kmeans, static_argnums=1)(X, 2, jax.random.key(0))
  assert np.all(np.isnan(traced))


def test_a_nan_point_has_no_cell():
  c = jnp.array([[0.0], [1.0]])
  x = jnp.array([[0.2], [0.9], [jnp.nan]])
  np.testing.assert_array_equal(voronoi.nearest_cell(x, c), [0, 1, -1])
  gates = jax.jit(voronoi.hard_log_gates)(x, c)
  np.testing.assert_array_equal(gates[:2], [[0.0, -np.inf], [-np.inf, 0.0]])
  assert np.all(np.isnan(gates[2]))
