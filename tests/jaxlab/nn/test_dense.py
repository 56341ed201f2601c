"""`jaxlab.nn.Dense` == `nn.Dense(use_bias=False)`: params, outputs and gradients."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.nn import Dense, matmul


@pytest.mark.parametrize("shape", [(5, 6), (2, 3, 6)])
def test_matches_flax_dense(shape):
  x = jax.random.normal(jax.random.key(1), shape)
  ours, ref = Dense(4), nn.Dense(4, use_bias=False)
  params = ours.init(jax.random.key(0), x)
  # Same name, shape and init values: checkpoints are interchangeable.
  jax.tree.map(np.testing.assert_array_equal, params, ref.init(jax.random.key(0), x))
  ct = jax.random.normal(jax.random.key(2), shape[:-1] + (4,))

  def vjp(module):
    y, back = jax.vjp(lambda p, x: module.apply(p, x), params, x)
    return y, back(ct)

  (y0, g0), (y1, g1) = vjp(ref), vjp(ours)
  np.testing.assert_allclose(y1, y0, rtol=1e-6, atol=1e-6)
  for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(g0), strict=True):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_bfloat16_compute_keeps_float32_params():
  x = jnp.ones((3, 8), jnp.float32)
  layer = Dense(2, dtype=jnp.bfloat16)
  params = layer.init(jax.random.key(0), x)
  assert params["params"]["kernel"].dtype == jnp.float32
  y, grads = jax.value_and_grad(lambda p: layer.apply(p, x).astype(jnp.float32).sum())(params)
  assert grads["params"]["kernel"].dtype == jnp.float32
  np.testing.assert_allclose(grads["params"]["kernel"], np.full((8, 2), 3.0))


def test_matmul_grad_matches_jnp_dot():
  x = jax.random.normal(jax.random.key(0), (4, 7, 3))
  w = jax.random.normal(jax.random.key(1), (3, 5))
  f = lambda fn: jax.grad(lambda x, w: jnp.sum(jnp.sin(fn(x, w))), argnums=(0, 1))(x, w)
  for a, b in zip(f(matmul), f(jnp.dot), strict=True):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
