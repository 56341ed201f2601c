"""Contrastive retrieval losses: Sample4Geo's symmetric InfoNCE and u-adaptive Soft InfoNCE.

Logits are `scale * f_q f_r^T` of L2-normalised query (ground) and reference (satellite)
embeddings; pair i is row i and column i. Both losses are the symmetric cross-entropy
1/2 [CE(rows, t) + CE(columns, t~^T)] with soft targets `t` ([b, b], rows on the simplex):

* InfoNCE (Sample4Geo): t = smooth_labels(I, label_smoothing) (torch's CrossEntropyLoss
  with label_smoothing, as in the official code).
* Soft InfoNCE (jaxlab interpretation of the CVGL paper): row i keeps 1 - eps_i on its
  positive and gives eps_i to its K hardest negatives H_i (highest similarity), weighted by
  softmax_{j in H_i}(s_ij / tau_h); eps_i = eps_max * u~_i with u~ the NIG uncertainty
  squashed to [0, 1) by `squash_uncertainty`. The column direction uses the transposed
  targets renormalised per row (a jaxlab interpretation: t^T's rows do not sum to 1); a
  column of t with no mass has no column target and adds 0, as CE against t^T does.

Every function returns per-example values (callers reduce, the `optax.losses` convention).

Example:
  >>> import jax.numpy as jnp
  >>> from jaxlab.retrieval import losses
  >>> logits = 10 * jnp.eye(4)
  >>> t = losses.soft_targets(jnp.eye(4), jnp.full(4, 0.2), num_hard=2)
  >>> losses.soft_infonce(logits=logits, targets=t).shape
  (4,)
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Array, Bool, Float

from jaxlab import validation


def _check_square(name: str, x) -> int:
  if x.ndim != 2 or x.shape[0] != x.shape[1] or x.shape[0] < 2:
    raise ValueError(f"{name} must be a square [b, b] matrix with b >= 2, got shape {x.shape}")
  return x.shape[0]


def soft_infonce(*, logits: Float[Array, "b b"], targets: Float[Array, "b b"]
                 ) -> Float[Array, " b"]:
  """Symmetric cross-entropy with soft targets: 1/2 [CE(logits, t) + CE(logits^T, t~^T)].

  Args:
    logits: scale * query-reference similarities, [b, b]; pair i on the diagonal.
    targets: soft targets of the query -> reference direction, rows on the simplex.
      The reference -> query direction uses t^T with each row renormalised to sum to 1.
      A column j of t with no mass (no query puts target on reference j) has no
      reference -> query target: its column term is 0 (the symmetric CE(logits^T, t^T) of an
      all-zero target row), so pair j's loss is half its row term, and value and
      gradients stay finite. `infonce` and `soft_targets` (epsilon < 1) never produce one.

  Returns:
    [b] per-pair loss (row i's and column i's cross-entropy, averaged).

  Example:
    >>> float(soft_infonce(logits=jnp.zeros((2, 2)), targets=jnp.eye(2))[0])  # log 2
    0.6931...
  """
  b = _check_square("logits", logits)
  if targets.shape != (b, b):
    raise ValueError(f"targets must have the logits' shape {(b, b)}, got {targets.shape}")
  mass = jnp.sum(targets.T, -1, keepdims=True)
  has_mass = mass > 0
  # Double where: the guarded denominator keeps the unused branch (and its gradient) finite.
  safe = jnp.where(has_mass, mass, 1.0)
  col_t = jnp.where(has_mass, targets.T / safe, 0.0)
  rows = optax.losses.softmax_cross_entropy(logits, targets)
  cols = optax.losses.softmax_cross_entropy(logits.T, col_t)
  return 0.5 * (rows + cols)


def infonce(*, logits: Float[Array, "b b"], label_smoothing: float = 0.1) -> Float[Array, " b"]:
  """Sample4Geo's symmetric InfoNCE with label smoothing (per pair).

  Args:
    logits: scale * query-reference similarities, [b, b]; pair i on the diagonal.
    label_smoothing: in [0, 1); Sample4Geo uses 0.1.

  Returns:
    [b] per-pair loss.

  Example:
    >>> infonce(logits=10 * jnp.eye(3)).shape
    (3,)
  """
  b = _check_square("logits", logits)
  if not 0.0 <= label_smoothing < 1.0:
    raise ValueError(f"label_smoothing must lie in [0, 1), got {label_smoothing}")
  targets = optax.smooth_labels(jnp.eye(b, dtype=logits.dtype), label_smoothing)
  return soft_infonce(logits=logits, targets=targets)


def squash_uncertainty(u: Float[Array, " b"]) -> Float[Array, " b"]:
  """u~ = u / (u + median_batch(u)) in [0, 1): the batch median maps to 1/2.

  jaxlab interpretation of how the paper normalises its uncertainty before it sets
  label softening. `u` must be finite and >= 0 (NIG variances are); a concrete `u`
  that is not raises ValueError. A zero median is floored at 1e-12 so an all-zero batch
  gives u~ = 0, never NaN. Traced `u` is not checked: a NaN entry makes the batch median
  NaN, hence the whole batch's u~ NaN (visible, never a silent value).

  Example:
    >>> squash_uncertainty(jnp.array([1.0, 2.0, 3.0])).tolist()
    [0.3333333432674408, 0.5, 0.6000000238418579]
  """
  if u.ndim != 1:
    raise ValueError(f"u must be [b], got shape {u.shape}")
  validation.check_positive("u", u, strict=False)
  med = jnp.maximum(jnp.median(u), 1e-12)
  return u / (u + med)


def soft_targets(similarities: Float[Array, "b b"], epsilon: Float[Array, " b"], *,
                 num_hard: int = 4, temperature: float = 0.1,
                 candidates: Bool[Array, "b b"] | None = None) -> Float[Array, "b b"]:
  """Soft targets that give eps_i of row i's mass to its hardest negatives.

  t_ii = 1 - eps_i; t_ij = eps_i softmax_{j in H_i}(s_ij / temperature) for the `num_hard`
  most similar negatives H_i (restricted to `candidates` if given, e.g. GPS neighbours);
  0 elsewhere. A row without any candidate negative keeps all its mass on the positive.
  No gradient flows through the targets.

  Args:
    similarities: query-reference cosine similarities, [b, b]. A NaN among row i's
      candidate negatives makes row i's targets NaN (never all on the positive).
    epsilon: per-row softening in [0, 1), [b]; a concrete value outside raises ValueError.
      Traced values are not checked: a NaN eps_i makes row i NaN (only row i; a row
      without any candidate negative keeps its mass on the positive whatever eps_i).
    num_hard: K, the number of hard negatives per row (1 <= K < b).
    temperature: tau_h of the softmax over the hard negatives' similarities (> 0).
    candidates: optional [b, b] mask of the negatives allowed in H_i (diagonal ignored).

  Returns:
    [b, b] targets; every row sums to 1.

  Example:
    >>> t = soft_targets(jnp.eye(3), jnp.zeros(3), num_hard=1)
    >>> t.tolist() == jnp.eye(3).tolist()
    True
  """
  b = _check_square("similarities", similarities)
  if epsilon.shape != (b,):
    raise ValueError(f"epsilon must be [{b}], got shape {epsilon.shape}")
  eps_np = validation.concrete(epsilon)
  if eps_np is not None:
    validation.check_finite("epsilon", eps_np)
    if np.any((eps_np < 0) | (eps_np >= 1)):
      raise ValueError(f"epsilon must lie in [0, 1) everywhere; got values in "
                       f"[{float(eps_np.min()):.6g}, {float(eps_np.max()):.6g}]")
  if not 1 <= num_hard < b:
    raise ValueError(f"num_hard must lie in [1, {b - 1}] for a batch of {b}, got {num_hard}")
  if temperature <= 0:
    raise ValueError(f"temperature must be > 0, got {temperature}")
  if candidates is not None and candidates.shape != (b, b):
    raise ValueError(f"candidates must be [{b}, {b}], got shape {candidates.shape}")
  s = jax.lax.stop_gradient(similarities).astype(jnp.float32)
  eps = jax.lax.stop_gradient(epsilon).astype(jnp.float32)
  allowed = ~jnp.eye(b, dtype=bool)
  if candidates is not None:
    allowed = allowed & candidates
  values, idx = jax.lax.top_k(jnp.where(allowed, s, -jnp.inf), num_hard)
  valid = jnp.isfinite(values)  # -inf: a slot with no candidate
  logits = jnp.where(valid, values / temperature, -jnp.inf)
  has_any = valid.any(-1)
  # Rows with no candidate: a dummy softmax (never used, its mass is zeroed below).
  weights = jax.nn.softmax(jnp.where(has_any[:, None], logits, 0.0), axis=-1)
  weights = jnp.where(valid, weights, 0.0)
  eps = jnp.where(has_any, eps, 0.0)
  negatives = jnp.einsum("bk,bkj->bj", weights, jax.nn.one_hot(idx, b, dtype=jnp.float32))
  t = (1.0 - eps)[:, None] * jnp.eye(b, dtype=jnp.float32) + eps[:, None] * negatives
  # A NaN similarity (top_k ranks it first) fails `isfinite` like an empty slot would: its
  # row must come out NaN, not with all its mass on the positive.
  return jnp.where(jnp.any(jnp.isnan(values), -1, keepdims=True), jnp.nan, t)
