"""Entropies and divergences read distributions only: a concrete non-distribution raises,
a traced one gives NaN at every Renyi order (order 1 used to skip a NaN and return log 2;
a negative entry gave a negative entropy)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.distill import losses
from jaxlab.distill.sinkhorn import sinkhorn

ORDERS = (0.5, 1.0, 2.0, math.inf)


@pytest.mark.parametrize("alpha", ORDERS)
@pytest.mark.parametrize("p, match", [([0.5, np.nan, 0.5], "finite"),
                                      ([1.5, -0.5], "non-negative"), ([0.5, 0.6], "sums to 1")])
def test_renyi_entropy_refuses_a_non_distribution(alpha, p, match):
  with pytest.raises(ValueError, match=match):
    losses.renyi_entropy(jnp.array(p), alpha)
  traced = jax.jit(losses.renyi_entropy, static_argnums=1)
  got = traced(jnp.array([p[:2], [0.5, 0.5]]) if len(p) == 2 else jnp.array([p, [0.5, 0.25, 0.25]]),
               alpha)
  if match == "sums to 1":  # traced, only NaN and negative entries are detectable per row
    assert np.all(np.isfinite(got))
  else:
    assert np.isnan(got[0]) and np.isfinite(got[1])


@pytest.mark.parametrize("p, q", [([0.5, np.nan, 0.5], [0.2, 0.3, 0.5]),
                                  ([0.5, 0.0, 0.5], [0.2, np.nan, 0.5]),
                                  ([1.5, -0.5, 0.0], [0.2, 0.3, 0.5])])
def test_kl_divergence_never_skips_a_nan_or_a_negative_mass(p, q):
  with pytest.raises(ValueError):
    losses.kl_divergence(jnp.array(p), jnp.array(q))
  assert np.isnan(jax.jit(losses.kl_divergence)(jnp.array(p), jnp.array(q)))


def test_sinkhorn_does_not_read_a_nan_mass_as_padding():
  cost = jnp.array([[0.0, 1.0], [1.0, 0.0]])
  out = sinkhorn(cost, jnp.array([0.5, jnp.nan]), jnp.array([0.5, 0.5]), num_iters=5)
  assert np.all(np.isnan(out.coupling)) and np.isnan(out.error)
