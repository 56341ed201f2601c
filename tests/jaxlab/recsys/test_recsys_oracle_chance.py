"""Oracle request embeddings and the chance level of a sampled ranking."""

import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.recsys import metrics, world


def test_oracle_requests_one_hot_the_true_intent_and_genre():
  cfg = world.WorldConfig(num_items=60, num_genres=4, num_train_users=40, num_test_users=8,
                          max_len=6, min_len=3, num_negatives=10)
  w = world.make_world(cfg, seed=0)
  e = w.train
  q = world.oracle_requests(e.intent, e.genre, cfg.num_genres, width=384)
  assert q.shape == (40, 384) and q.dtype == np.float32
  np.testing.assert_array_equal(np.linalg.norm(q, axis=1), 1.0)
  col = q.argmax(1)
  # Two requests share a row iff they share the intent and (for want / avoid) the genre.
  same = (e.intent[:, None] == e.intent[None]) & ((e.intent[:, None] == 0)
                                                  | (e.genre[:, None] == e.genre[None]))
  np.testing.assert_array_equal(col[:, None] == col[None], same)
  assert not q[:, 1 + 2 * cfg.num_genres:].any()  # zero padding
  with pytest.raises(ValueError, match="width"):
    world.oracle_requests(e.intent, e.genre, cfg.num_genres, width=5)
  with pytest.raises(ValueError, match="intent"):
    world.oracle_requests(np.array([1]), np.array([-1]), 4)


def test_chance_metrics_match_a_random_ranking():
  c = metrics.chance_metrics(101, 10)
  assert c["hr"] == pytest.approx(10 / 101)
  # Monte Carlo: random scores over 1 + 100 candidates.
  rng = np.random.default_rng(0)
  scores = jnp.asarray(rng.random((20000, 102)))
  ranks = metrics.sampled_ranks(scores, jnp.ones(20000, jnp.int32),
                                jnp.broadcast_to(jnp.arange(2, 102), (20000, 100)))
  mc = {k: float(v.mean()) for k, v in metrics.ranking_metrics(ranks, 10).items()}
  for k in ("hr", "ndcg", "mrr"):
    assert mc[k] == pytest.approx(c[k], abs=0.006)
  assert metrics.chance_metrics(5, 10)["hr"] == 1.0
  with pytest.raises(ValueError, match="num_candidates"):
    metrics.chance_metrics(0, 10)
