"""The jnp log-domain Sinkhorn against POT (test-only dependency) and its padding rule."""

import jax
import jax.numpy as jnp
import jaxtyping
import numpy as np
import pytest

from jaxlab.distill import sinkhorn

ot = pytest.importorskip("ot")


@pytest.mark.parametrize("n,m,eps,seed", [(5, 7, 0.1, 0), (12, 4, 0.05, 1), (9, 9, 0.5, 2)])
def test_matches_pot_on_random_problems(n, m, eps, seed):
  rng = np.random.default_rng(seed)
  a = rng.uniform(0.1, 1, n)
  b = rng.uniform(0.1, 1, m)
  a, b = a / a.sum(), b / b.sum()
  cost = rng.uniform(0, 1, (n, m))
  ref = ot.sinkhorn(a, b, cost, eps, method="sinkhorn_log", numItermax=5000, stopThr=1e-12)
  out = jax.jit(lambda c, a, b: sinkhorn(c, a, b, epsilon=eps, num_iters=1000))(
      jnp.asarray(cost, jnp.float32), jnp.asarray(a, jnp.float32), jnp.asarray(b, jnp.float32))
  np.testing.assert_allclose(out.coupling, ref, atol=2e-5)
  assert float(out.error) < 1e-4
  np.testing.assert_allclose(out.coupling.sum(0), b, atol=1e-5)


def test_padding_is_exactly_zero_and_vmaps():
  rng = np.random.default_rng(3)
  cost = jnp.asarray(rng.uniform(0, 1, (2, 4, 5)), jnp.float32)
  a = jnp.array([[0.5, 0.5, 0.0, 0.0], [0.25, 0.25, 0.25, 0.25]])
  b = jnp.array([[0.2, 0.3, 0.5, 0.0, 0.0], [0.2] * 5])
  solve = jax.jit(lambda c, a, b: sinkhorn(c, a, b, epsilon=0.1, num_iters=500))
  out = jax.jit(jax.vmap(solve))(cost, a, b)
  assert np.all(np.isfinite(out.coupling))
  assert np.all(out.coupling[0, 2:] == 0) and np.all(out.coupling[0, :, 3:] == 0)
  # The padded problem's coupling equals the unpadded problem's.
  alone = solve(cost[0, :2, :3], a[0, :2], b[0, :3])
  np.testing.assert_allclose(out.coupling[0, :2, :3], alone.coupling, atol=2e-5)


def test_bad_input_raises():
  with pytest.raises((ValueError, jaxtyping.TypeCheckError)):
    sinkhorn(jnp.zeros((2, 3)), jnp.ones(3) / 3, jnp.ones(3) / 3)
  with pytest.raises(ValueError, match="epsilon"):
    sinkhorn(jnp.zeros((2, 2)), jnp.ones(2) / 2, jnp.ones(2) / 2, epsilon=0.0)
