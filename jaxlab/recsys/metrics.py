"""Next-item ranking metrics: HR@k, NDCG@k, MRR@k over sampled negatives or all items.

The rank of the target is the number of competitors scoring at least as high as it
(ties count against the target, so a constant scorer gets no credit); rank 0 is a hit
at the top. HR@k = 1[rank < k], NDCG@k = 1[rank < k] / log2(rank + 2) (one relevant
item), MRR@k = 1[rank < k] / (rank + 1). A NaN anywhere in a row's scores (a diverged
model) leaves its rank undefined: rank -1, and NaN metrics for that row.

Item ids are checked, never clamped or wrapped: a target or negative outside the real
items 1..n-1 (the padding id 0, -1, an id past the catalogue) raises a ValueError when
the ids are concrete; traced, its row gets rank -1, which `ranking_metrics` turns into
NaN for that row.

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

from jaxlab import validation


def _check_ids(name, ids, n):
  """Eagerly raises on ids outside the real items 1..n-1; returns the traced-path mask of
  rows holding such an id."""
  v = validation.concrete(ids)
  if v is not None and v.size and (v.min() < 1 or v.max() > n - 1):
    bad = v[(v < 1) | (v > n - 1)]
    raise ValueError(f"{name} must be real item ids in [1, {n - 1}] (0 is padding); "
                     f"got {bad[:5].tolist()}")
  out = (ids < 1) | (ids > n - 1)
  return out if out.ndim == 1 else jnp.any(out, axis=-1)


def _target_scores(scores, targets):
  if scores.ndim != 2 or targets.shape != scores.shape[:1]:
    raise ValueError(f"scores must be [b, n] and targets [b], got {scores.shape}, "
                     f"{targets.shape}")
  bad = _check_ids("targets", targets, scores.shape[-1])
  return jnp.take_along_axis(scores, targets[:, None], axis=-1, mode="clip"), bad


def sampled_ranks(scores: Float[Array, "b n"], targets: Int[Array, "b"],
                  negatives: Int[Array, "b m"]) -> Int[Array, "b"]:
  """Rank of each target among its own `m` sampled negatives (the paper's 1 + 100 protocol).

  Args:
    scores: scores over item ids 0..num_items.
    targets: the positive item of each row.
    negatives: m item ids per row that the user never interacted with.

  Returns:
    int32 ranks in [0, m]: how many negatives score >= the target; -1 for a row with a NaN
    score or, traced, an id outside 1..n-1 or a negative equal to its target.

  Raises:
    ValueError: concrete ids outside 1..n-1, or a negative equal to its row's target.

  Example:
    >>> import jax.numpy as jnp
    >>> scores = jnp.array([[-1e9, 0.9, 0.1, 0.5, 0.7]])
    >>> sampled_ranks(scores, jnp.array([3]), jnp.array([[2, 4]])).tolist()  # 0.7 beats 0.5
    [1]
  """
  pos, bad = _target_scores(scores, targets)
  if negatives.ndim != 2 or negatives.shape[0] != scores.shape[0]:
    raise ValueError(f"negatives must be [b, m] with b = {scores.shape[0]}, got {negatives.shape}")
  bad = bad | _check_ids("negatives", negatives, scores.shape[-1])
  hits_target = negatives == targets[:, None]
  if validation.concrete(hits_target) is not None and np.any(hits_target):
    raise ValueError("negatives must differ from their row's target")
  bad = bad | jnp.any(hits_target, axis=-1)
  neg = jnp.take_along_axis(scores, negatives, axis=-1, mode="clip")
  rank = jnp.sum(neg >= pos, axis=-1).astype(jnp.int32)
  bad = bad | jnp.any(jnp.isnan(scores), axis=-1)
  return jnp.where(bad, -1, rank).astype(jnp.int32)


def full_ranks(scores: Float[Array, "b n"], targets: Int[Array, "b"]) -> Int[Array, "b"]:
  """Rank of each target among every other real item (ids 1..n-1; padding 0 excluded).

  Returns:
    int32 ranks in [0, n - 2]; -1 for a row with a NaN score or, traced, a target outside
    1..n-1.

  Raises:
    ValueError: concrete targets outside 1..n-1 (the padding id included).

  Example:
    >>> import jax.numpy as jnp
    >>> full_ranks(jnp.array([[-1e9, 0.9, 0.1, 0.5, 0.7]]), jnp.array([1])).tolist()
    [0]
  """
  pos, bad = _target_scores(scores, targets)
  ids = jnp.arange(scores.shape[-1])
  competitor = (ids[None] != targets[:, None]) & (ids[None] > 0)
  rank = jnp.sum((scores >= pos) & competitor, axis=-1).astype(jnp.int32)
  bad = bad | jnp.any(jnp.isnan(scores), axis=-1)
  return jnp.where(bad, -1, rank).astype(jnp.int32)


def ranking_metrics(ranks: Int[Array, "b"], k: int = 10) -> dict[str, Float[Array, "b"]]:
  """Per-row HR@k, NDCG@k and MRR@k from 0-based ranks (average them over rows).

  A rank of -1 (a row whose ids were invalid, see the module docstring) gives NaN in that
  row of every metric, never a hit.

  Example:
    >>> import jax.numpy as jnp
    >>> ranking_metrics(jnp.array([0, 12, -1]), k=10)["hr"].tolist()
    [1.0, 0.0, nan]
  """
  if k < 1:
    raise ValueError(f"k must be >= 1, got {k}")
  r = ranks.astype(jnp.float32)
  hit = jnp.where(ranks < 0, jnp.nan, (ranks < k).astype(jnp.float32))
  return dict(hr=hit, ndcg=hit / jnp.log2(jnp.maximum(r, 0.0) + 2.0),
              mrr=hit / (jnp.maximum(r, 0.0) + 1.0))


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

  Only the real items 1..n-1 are ranked (ties by id); a row with a NaN score has no
  top-k and gives NaN. A `k` above the n - 1 real items is clipped to n - 1: the
  share is then over every real item.

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
  top = jnp.argsort(-s, axis=-1, stable=True)[:, :min(k, n - 1)] + 1
  has = item_genres[top, genre[:, None]]  # [b, min(k, n - 1)]
  share = jnp.mean(has.astype(jnp.float32), axis=-1)
  return jnp.where(jnp.any(jnp.isnan(scores), axis=-1), jnp.nan, share)


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

  Raises:
    ValueError: `num_negatives` < 1, an id in `interacted` outside 0..num_items, or a user
      with fewer than `num_negatives` never-interacted items.

  Example:
    >>> import numpy as np
    >>> neg = sample_negatives(np.random.default_rng(0), np.array([[1, 2, 0]]), 5, 3)
    >>> sorted(neg[0].tolist())  # items 3, 4, 5 are the only ones never touched
    [3, 4, 5]
  """
  interacted = np.asarray(interacted)
  if num_negatives < 1:
    raise ValueError(f"num_negatives must be >= 1, got {num_negatives}")
  if interacted.ndim != 2:
    raise ValueError(f"interacted must be [b, t], got shape {interacted.shape}")
  if interacted.size and (interacted.min() < 0 or interacted.max() > num_items):
    raise ValueError(f"interacted must hold item ids in [0, {num_items}] (0 is padding); got "
                     f"ids from {interacted.min()} to {interacted.max()}")
  b = interacted.shape[0]
  seen = np.zeros((b, num_items + 1), bool)
  seen[np.arange(b)[:, None], interacted] = True
  seen[:, 0] = True
  if (num_items + 1 - seen.sum(1)).min() < num_negatives:
    raise ValueError(f"a user has fewer than {num_negatives} never-interacted items")
  keys = np.where(seen, np.inf, rng.random((b, num_items + 1)))
  return np.argsort(keys, axis=1)[:, :num_negatives].astype(np.int32)
