"""Retrieval metrics: Recall@k and Recall@1% of query -> reference retrieval (Sample4Geo's).

Query i's true reference is reference i. Its rank is the number of other references
scored at least as high as the true one: a tie counts against the query (the true
reference ranks below every reference it ties with), so a collapsed model whose scores
are all equal ranks every true reference last and gets R@k = 0 for every k < n, never
credit for the tie. R@k = mean(rank < k); R@1% uses k = max(1, round(0.01 * n)) like
Sample4Geo's evaluation. A random ranker's R@k is k / n.

Example:
  >>> import numpy as np
  >>> from jaxlab.retrieval import metrics
  >>> s = np.array([[0.9, 0.1], [0.8, 0.2]])
  >>> metrics.recall_at_k(s, (1,))
  {'R@1': 0.5}
  >>> metrics.recall_at_k(np.zeros((3, 3)), (1, 3))   # all tied: no credit below k = n
  {'R@1': 0.0, 'R@3': 1.0}
"""

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt


def ranks(similarities: npt.ArrayLike) -> np.ndarray:
  """Rank of each query's true reference (0 = retrieved first), ties counted against it.

  Args:
    similarities: [n, n] query x reference scores (finite); pair i on the diagonal.

  Returns:
    [n] integers in [0, n - 1]: how many other references score >= the true one.

  Example:
    >>> ranks(np.array([[0.5, 0.5], [0.1, 0.9]])).tolist()   # row 0 ties: ranked below
    [1, 0]
  """
  s = np.asarray(similarities, np.float64)
  if s.ndim != 2 or s.shape[0] != s.shape[1] or s.shape[0] < 1:
    raise ValueError(f"similarities must be a square [n, n] matrix, got shape {s.shape}")
  if not np.all(np.isfinite(s)):
    raise ValueError("similarities must be finite")
  # The diagonal ties with itself: count >= over the row and take that one away.
  return np.sum(s >= np.diag(s)[:, None], axis=1) - 1


def one_percent_k(n: int) -> int:
  """The k of R@1% for a gallery of n references."""
  return max(1, int(round(0.01 * n)))


def recall_at_k(similarities: npt.ArrayLike, ks: Sequence[int] = (1, 5),
                one_percent: bool = False) -> dict[str, float]:
  """Recall@k for each k (and R@1% if asked).

  Args:
    similarities: [n, n] query x reference scores; pair i on the diagonal.
    ks: the k values (each >= 1).
    one_percent: also report "R@1%".

  Returns:
    {"R@k": fraction in [0, 1], ...}.
  """
  if any(int(k) < 1 for k in ks):
    raise ValueError(f"every k must be >= 1, got {list(ks)}")
  r = ranks(similarities)
  out = {f"R@{int(k)}": float(np.mean(r < int(k))) for k in ks}
  if one_percent:
    out["R@1%"] = float(np.mean(r < one_percent_k(r.shape[0])))
  return out


def spearman(a: npt.ArrayLike, b: npt.ArrayLike) -> float:
  """Spearman rank correlation of two [n] vectors (average ranks for ties).

  Args:
    a: [n] values (n >= 2); +-inf ranks as the extreme it is.
    b: [n] values.

  Returns:
    The correlation in [-1, 1]; 0 when a or b is constant (no rank information: no
    credit), NaN when a or b holds a NaN (a NaN has no rank; ranking it among the
    others would give a number).

  Example:
    >>> spearman([1.0, 2.0, 3.0], [10.0, 30.0, 20.0])
    0.5
    >>> spearman([1.0, 2.0, float("nan")], [1.0, 2.0, 3.0])
    nan
  """
  a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
  if a.shape != b.shape or a.size < 2:
    raise ValueError(f"a and b must be [n] with n >= 2 and equal shapes, got {a.shape}, {b.shape}")
  if np.isnan(a).any() or np.isnan(b).any():
    return float("nan")

  def rank(x):
    order = np.argsort(x, kind="stable")
    r = np.empty_like(x)
    r[order] = np.arange(x.size, dtype=np.float64)
    _, inv, counts = np.unique(x, return_inverse=True, return_counts=True)
    sums = np.bincount(inv, weights=r)
    return (sums / counts)[inv]

  ra, rb = rank(a), rank(b)
  if ra.std() == 0 or rb.std() == 0:
    return 0.0
  return float(np.corrcoef(ra, rb)[0, 1])
