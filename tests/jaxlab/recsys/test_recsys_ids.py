"""Item ids are range-checked at the recsys entry points: eagerly a ValueError naming the
argument and its range; traced, the row's rank is -1 (NaN metrics) or its state NaN, never a
clamp to the last item or a wrap of a negative id."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.recsys import metrics, sasrec

SCORES = jnp.array([[-1e9, 0.9, 0.1, 0.5, 0.7], [-1e9, 0.2, 0.8, 0.3, 0.1]])


@pytest.mark.parametrize("bad", [7, -1, 0])
def test_full_ranks_refuses_targets_outside_the_real_items(bad):
  with pytest.raises(ValueError, match=r"targets must be real item ids in \[1, 4\]"):
    metrics.full_ranks(SCORES, jnp.array([1, bad]))
  ranks = jax.jit(metrics.full_ranks)(SCORES, jnp.array([1, bad]))
  np.testing.assert_array_equal(ranks, [0, -1])
  hr = metrics.ranking_metrics(ranks, k=10)["hr"]
  np.testing.assert_array_equal(hr, [1.0, np.nan])


@pytest.mark.parametrize("negatives", [[[2, 9], [1, 3]], [[2, -1], [1, 3]], [[2, 0], [1, 3]],
                                       [[2, 3], [1, 3]]])
def test_sampled_ranks_refuses_bad_negatives(negatives):
  # Out of range, wrapped, padding, or the target itself (row 0's target is 3).
  with pytest.raises(ValueError, match="negatives must"):
    metrics.sampled_ranks(SCORES, jnp.array([3, 2]), jnp.array(negatives))
  ranks = jax.jit(metrics.sampled_ranks)(SCORES, jnp.array([3, 2]), jnp.array(negatives))
  np.testing.assert_array_equal(ranks, [-1, 0])


def test_sample_negatives_checks_its_count_and_ids():
  rng = np.random.default_rng(0)
  with pytest.raises(ValueError, match="num_negatives must be >= 1, got -3"):
    metrics.sample_negatives(rng, np.array([[1, 2]]), 20, -3)
  for ids in ([1, 50], [1, -2]):
    with pytest.raises(ValueError, match=r"interacted must hold item ids in \[0, 20\]"):
      metrics.sample_negatives(rng, np.array([ids]), 20, 3)


def test_sasrec_ids_outside_the_catalogue_never_wrap():
  cfg = sasrec.SASRecConfig(num_items=10, max_len=4)
  model = sasrec.SASRec(cfg)
  params = model.init(jax.random.key(0), jnp.ones((1, 4), jnp.int32))
  for bad in (11, -3):
    items = jnp.array([[1, 2, 3, 4], [1, 2, 3, bad]])
    with pytest.raises(ValueError, match=r"items must be ids in \[0, 10\]"):
      model.apply(params, items)
    states = jax.jit(model.apply)(params, items)
    assert np.all(np.isfinite(states[0])) and np.all(np.isnan(states[1, -1]))
