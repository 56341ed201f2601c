"""Next-item ranking metrics: a tie with the target counts against it (no credit for ties)."""

import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.recsys import metrics


@pytest.mark.parametrize("n", [3, 12])
def test_constant_scores_rank_every_target_last_in_full_ranking(n):
  scores = jnp.full((4, n), 0.5)  # id 0 is padding; n - 1 real items, all tied
  ranks = metrics.full_ranks(scores, jnp.array([1, 2, n - 1, 1]))
  np.testing.assert_array_equal(ranks, np.full(4, n - 2))
  m = metrics.ranking_metrics(ranks, k=n - 2)  # every competitor ties: no hit in the top n - 2
  for name in ("hr", "ndcg", "mrr"):
    np.testing.assert_array_equal(m[name], 0.0)
  m = metrics.ranking_metrics(ranks, k=n - 1)  # a list of every real item holds the target
  np.testing.assert_array_equal(m["hr"], 1.0)
  np.testing.assert_allclose(m["mrr"], 1.0 / (n - 1), rtol=1e-6)


def test_constant_scores_rank_every_target_last_among_sampled_negatives():
  scores = jnp.zeros((2, 20))
  negatives = jnp.tile(jnp.arange(5, 15), (2, 1))
  ranks = metrics.sampled_ranks(scores, jnp.array([1, 2]), negatives)
  np.testing.assert_array_equal(ranks, [10, 10])
  m = metrics.ranking_metrics(ranks, k=10)
  for name in ("hr", "ndcg", "mrr"):
    np.testing.assert_array_equal(m[name], 0.0)


def test_a_tie_with_one_competitor_costs_one_rank():
  scores = jnp.array([[-1e9, 0.7, 0.7, 0.1]])  # the target (id 1) ties with id 2
  np.testing.assert_array_equal(metrics.full_ranks(scores, jnp.array([1])), [1])
  np.testing.assert_array_equal(metrics.ranking_metrics(jnp.array([1]), k=1)["hr"], [0.0])
