"""Next-item ranking metrics: HR@k, NDCG@k, MRR@k over sampled negatives or all items.

The rank of the target is the number of competitors scoring at least as high as it
(ties count against the target, so a constant scorer gets no credit); rank 0 is a hit
at the top. HR@k = 1[rank < k], NDCG@k = 1[rank < k] / log2(rank + 2) (one relevant
item), MRR@k = 1[rank < k] / (rank + 1). A NaN target score ranks last (never a silent
hit); NaN competitors are not counted.

Example:
  >>> import jax.numpy as jnp
  >>> from jaxlab.recsys import metrics
  >>> scores = jnp.array([[-1e9, 0.9, 0.1, 0.5, 0.7]])   # id 0 is padding
  >>> ranks = metrics.full_ranks(scores, jnp.array([3]))   # 0.9 and 0.7 beat 0.5
  >>> ranks
  Array([2], dtype=int32)
  >>> {k: round(float(v[0]), 4) for k, v in metrics.ranking_metrics(ranks, 10).items()}
  {'hr': 1.0, 'ndcg': 0.5, 'mrr': 0.3333}
"""

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int


def _target_scores(scores, targets):
  if scores.ndim != 2 or targets.shape != scores.shape[:1]:
    raise ValueError(f"scores must be [b, n] and targets [b], got {scores.shape}, "
                     f"{targets.shape}")
  return jnp.take_along_axis(scores, targets[:, None], axis=-1)


def sampled_ranks(scores: Float[Array, "b n"], targets: Int[Array, "b"],
                  negatives: Int[Array, "b m"]) -> Int[Array, "b"]:
  """Rank of each target among its own `m` sampled negatives (the paper's 1 + 100 protocol).

  Args:
    scores: scores over item ids 0..num_items.
    targets: the positive item of each row.
    negatives: m item ids per row that the user never interacted with.

  Returns:
    int32 ranks in [0, m]: how many negatives score >= the target (m if it is NaN).

  Example:
    >>> scores = jnp.array([[0.0, 0.9, 0.2, 0.5, 0.7], [0.0, 0.1, 0.2, 0.5, 0.7]])
    >>> sampled_ranks(scores, jnp.array([1, 1]), jnp.array([[2, 3], [3, 4]])).tolist()
    [0, 2]
  """
  pos = _target_scores(scores, targets)
  neg = jnp.take_along_axis(scores, negatives, axis=-1)
  rank = jnp.sum(neg >= pos, axis=-1).astype(jnp.int32)
  return jnp.where(jnp.isnan(pos[:, 0]), negatives.shape[-1], rank).astype(jnp.int32)


def full_ranks(scores: Float[Array, "b n"], targets: Int[Array, "b"]) -> Int[Array, "b"]:
  """Rank of each target among every other real item (ids 1..n-1; padding 0 excluded).

  Returns:
    int32 ranks in [0, n - 2] (n - 2 if the target's score is NaN).

  Example:
    >>> scores = jnp.array([[9.0, 0.9, 0.2, 0.5, 0.7]])   # id 0 (padding) never competes
    >>> full_ranks(scores, jnp.array([1])).tolist(), full_ranks(scores, jnp.array([3])).tolist()
    ([0], [2])
  """
  pos = _target_scores(scores, targets)
  ids = jnp.arange(scores.shape[-1])
  competitor = (ids[None] != targets[:, None]) & (ids[None] > 0)
  rank = jnp.sum((scores >= pos) & competitor, axis=-1).astype(jnp.int32)
  return jnp.where(jnp.isnan(pos[:, 0]), scores.shape[-1] - 2, rank).astype(jnp.int32)


def ranking_metrics(ranks: Int[Array, "b"], k: int = 10) -> dict[str, Float[Array, "b"]]:
  """Per-row HR@k, NDCG@k and MRR@k from 0-based ranks (average them over rows).

  Example:
    >>> m = ranking_metrics(jnp.array([0, 1, 12]), k=10)
    >>> m["hr"].tolist(), [round(x, 4) for x in m["ndcg"].tolist()], m["mrr"].tolist()
    ([1.0, 1.0, 0.0], [1.0, 0.6309, 0.0], [1.0, 0.5, 0.0])
  """
  if k < 1:
    raise ValueError(f"k must be >= 1, got {k}")
  r = ranks.astype(jnp.float32)
  hit = (ranks < k).astype(jnp.float32)
  return dict(hr=hit, ndcg=hit / jnp.log2(r + 2.0), mrr=hit / (r + 1.0))


def chance_metrics(num_candidates: int, k: int = 10) -> dict[str, float]:
  """HR@k, NDCG@k and MRR@k of a random ranking: the target uniform over `num_candidates` ranks.

  The floor of a sampled evaluation (1 + m candidates): a recommender that ranks no better
  than this has learnt nothing a comparison could build on.

  Args:
    num_candidates: the target and its competitors (1 + num_negatives).
    k: list length (>= 1).

  Returns:
    dict(hr=..., ndcg=..., mrr=...), expectations over the target's rank.

  Example:
    >>> chance_metrics(101, 10)["hr"] == 10 / 101
    True
  """
  if num_candidates < 1 or k < 1:
    raise ValueError(f"num_candidates and k must be >= 1, got {num_candidates}, {k}")
  r = np.arange(min(k, num_candidates), dtype=np.float64)
  return dict(hr=len(r) / num_candidates, ndcg=float(np.sum(1 / np.log2(r + 2))) / num_candidates,
              mrr=float(np.sum(1 / (r + 1))) / num_candidates)


def top_k_genre_share(scores: Float[Array, "b n"], item_genres: Float[Array, "n g"],
                      genre: Int[Array, "b"], k: int = 10) -> Float[Array, "b"]:
  """Share of the top-k items (full ranking, padding excluded) that carry `genre`.

  Only the real items 1..n-1 are ranked (ties by id); a NaN score ranks last. A `k`
  above the n - 1 real items is clipped to n - 1: the share is then over every real item.

  Args:
    scores: scores over item ids 0..n-1.
    item_genres: {0, 1} genre membership of every id (row 0, padding, is all zero).
    genre: the genre asked about in each row.
    k: list length (>= 1).

  Returns:
    Fraction in [0, 1] per row.

  Example:
    >>> scores = jnp.array([[-1e9, 0.9, 0.1, 0.5, 0.7]])   # id 0 is padding
    >>> genres = jnp.array([[0, 0], [1, 0], [0, 1], [1, 0], [0, 1]], jnp.float32)
    >>> top_k_genre_share(scores, genres, jnp.array([0]), k=10).tolist()  # 2 of 4 items
    [0.5]
  """
  n = scores.shape[-1]
  if scores.ndim != 2 or n < 2:
    raise ValueError(f"scores must be [b, n] with n >= 2 (id 0 is padding), got {scores.shape}")
  if item_genres.shape[0] != n:
    raise ValueError(f"item_genres must have {n} rows, got {item_genres.shape}")
  if k < 1:
    raise ValueError(f"k must be >= 1, got {k}")
  s = scores[:, 1:]  # the real items; padding id 0 is never ranked
  s = jnp.where(jnp.isnan(s), -jnp.inf, s)
  top = jnp.argsort(-s, axis=-1, stable=True)[:, :min(k, n - 1)] + 1
  has = item_genres[top, genre[:, None]]  # [b, min(k, n - 1)]
  return jnp.mean(has.astype(jnp.float32), axis=-1)


def sample_negatives(rng: np.random.Generator, interacted: np.ndarray, num_items: int,
                     num_negatives: int) -> np.ndarray:
  """`num_negatives` distinct never-interacted item ids per row (numpy, at data build time).

  Args:
    rng: numpy generator.
    interacted: int [b, t] item ids each user touched (history and target; 0 = padding).
    num_items: real items are 1..num_items.
    num_negatives: how many negatives per row.

  Returns:
    int32 [b, num_negatives].

  Example:
    >>> interacted = np.array([[1, 2, 0], [3, 4, 0]])     # items 1..5
    >>> neg = sample_negatives(np.random.default_rng(0), interacted, 5, 3)
    >>> neg.shape, [sorted(row) for row in neg.tolist()]   # never 0, never an interacted id
    ((2, 3), [[3, 4, 5], [1, 2, 5]])
  """
  b = interacted.shape[0]
  seen = np.zeros((b, num_items + 1), bool)
  seen[np.arange(b)[:, None], interacted] = True
  seen[:, 0] = True
  if (num_items + 1 - seen.sum(1)).min() < num_negatives:
    raise ValueError(f"a user has fewer than {num_negatives} never-interacted items")
  keys = np.where(seen, np.inf, rng.random((b, num_items + 1)))
  return np.argsort(keys, axis=1)[:, :num_negatives].astype(np.int32)
