"""A rank outside [0, max_rank] is never clamped (`jaxlab.privacy.projection.rank_mask`).

Before: a traced rank 9 with `max_rank=4` gave the full-rank mask (and -1 the
empty one), and a concrete jax or numpy rank was not checked at all.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.privacy import projection


@pytest.mark.parametrize("rank", [9, -1, jnp.array(9), jnp.array(-1)])
def test_a_concrete_rank_out_of_range_raises(rank):
  with pytest.raises(ValueError, match=rf"rank must lie in \[0, max_rank=4\], got {int(rank)}$"):
    projection.rank_mask(4, rank)


def test_a_traced_rank_out_of_range_gives_a_nan_projection():
  masks = jax.jit(jax.vmap(lambda r: projection.rank_mask(4, r)))(jnp.array([9, -1, 0, 4, 2]))
  masks = np.asarray(masks)
  assert np.isnan(masks[:2]).all()
  np.testing.assert_array_equal(masks[2:], [[0, 0, 0, 0], [1, 1, 1, 1], [1, 1, 0, 0]])
  # ... and so the layer's output and Q, not the full-rank projection.
  layer = projection.OrthogonalProjection(max_rank=4)
  f = jnp.ones((2, 8))
  params = layer.init(jax.random.key(0), f)
  out, q = jax.jit(lambda r: layer.apply(params, f, rank=r))(jnp.array(9))
  assert np.isnan(np.asarray(out)).all() and np.isnan(np.asarray(q)).all()
  out, _ = jax.jit(lambda r: layer.apply(params, f, rank=r))(jnp.array(4))
  assert np.isfinite(np.asarray(out)).all()
