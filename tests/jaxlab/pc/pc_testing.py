"""Helpers shared by the `jaxlab.pc` tests: 2-D quadrature, a multimodal data set, tiny models."""

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.pc import CircuitConfig, PCModel, init_params

# Fine grid for 2-D quadrature: midpoint rule, h = 0.0125 on [-8, 8]^2 (1.6M points).
QUAD_HALFWIDTH, QUAD_STEP = 8.0, 0.0125


def blobs(n: int = 600, seed: int = 0) -> jax.Array:
  """Three separated 2-D blobs: a multimodal training set for the Voronoi cells."""
  rng = np.random.default_rng(seed)
  centers = np.array([[-1.5, -1.0], [1.5, -0.5], [0.0, 1.5]])
  x = centers[rng.integers(0, 3, n)] + 0.4 * rng.normal(size=(n, 2))
  return jnp.asarray(x, jnp.float32)


def quadrature(fn, step: float = QUAD_STEP) -> float:
  """int exp(fn(x)) dx over [-8, 8]^2 by the midpoint rule (float64 accumulation).

  The grid cells' edges are the multiples of `step`; a coarser `step` makes a fast check
  of a density whose discontinuities lie on such edges.
  """
  g = np.arange(-QUAD_HALFWIDTH + step / 2, QUAD_HALFWIDTH, step, dtype=np.float32)
  total = 0.0
  f = jax.jit(lambda gx: jnp.exp(fn(jnp.stack(jnp.broadcast_arrays(
      gx[:, None], jnp.asarray(g)[None, :]), -1).reshape(-1, 2))))
  for chunk in np.array_split(g, 8):
    total += float(np.sum(np.asarray(f(jnp.asarray(chunk)), np.float64)))
  return total * step ** 2


def small_models():
  """{'base', 'hfv', 'vt'}: (model, params) of tiny 2-D circuits fit-initialised on blobs."""
  x = blobs()
  models = {}
  for kind, root, gate, kh in [("base", "mixture", "none", 1), ("hfv", "mixture", "voronoi", 2),
                               ("vt", "vt", "none", 1)]:
    cfg = CircuitConfig(num_vars=2, num_replicas=1, leaf_units=3, sum_units=3, num_channels=3,
                        leaf_components=kh, leaf_gate=gate, min_scale=0.2)
    models[kind] = PCModel(cfg, root=root)
  # One jitted program for the three initialisations: eager flax init dispatches ~150 tiny
  # ops, each its own (uncached) compile; one jit is compiled once and persistently cached.
  params = jax.jit(lambda key: {k: init_params(m, key, x) for k, m in models.items()})(
      jax.random.key(1))
  return {k: (m, params[k]) for k, m in models.items()}
