"""Cross-tokenizer distillation losses: E-SCOT and the ULD / MinED baselines.

All functions act on ONE sequence (vmap them over the batch) and take the
teacher's side precomputed (the teacher is frozen): per teacher token its
next-character distribution, its sorted top-K probabilities and its Renyi
entropy. "Distribution of token i" always means the model's prediction FOR
token i (made from the prefix before it), so the first tokens of a span see
exactly the same text prefix on both sides.

E-SCOT (jaxlab interpretation, spec generative_recsys.md §2 (a'); the paper's
formula is unpublished):
  L_kd = sum_k w_k sum_{(i,j) in span k} pi_ij c_ij,
  c_ij = char_weight * KL(charT_i || charS_j) + rank_weight * sum_r |sortT_i,r - sortS_j,r|,
  w_k  = K * softmax_k(Delta_k / tau) (stop-gradient), Delta_k = |mean_{I_k} H_a(T) - mean_{J_k} H_a(S)|,
with pi the sparse span coupling of `jaxlab.distill.spans` (mass 1/K per span).

The ablations of its two components: `weighting="none"` (uniform span weights, no
Renyi reweighting) and `escot_dense_loss` (no span constraint: the same cost,
weights and marginals, coupled over all token pairs by Sinkhorn).

Example:
  >>> import jax.numpy as jnp
  >>> round(float(renyi_entropy(jnp.array([0.5, 0.5]), 2.0)), 4)  # log 2
  0.6931
"""

import math

import jax
import jax.numpy as jnp
from jax import Array
from jaxtyping import Float, Int

from jaxlab import validation
from jaxlab.distill.sinkhorn import sinkhorn

_TINY = 1e-9
WEIGHTINGS = ("softmax", "ratio", "none")


def renyi_entropy(p: Float[Array, "*b v"], alpha: float = 2.0) -> Float[Array, "*b"]:
  """Renyi entropy H_alpha(p) = log(sum_v p_v^alpha) / (1 - alpha), in nats.

  Args:
    p: probabilities along the last axis (rows sum to 1).
    alpha: order >= 0; 1 gives Shannon entropy, `math.inf` the min-entropy -log max p.

  Returns:
    [*b] entropies.

  Raises:
    ValueError: if a concrete `p` is not a distribution (a NaN, a negative entry, a row
      not summing to 1). Traced, such a row gives NaN at every order.

  Example:
    >>> import jax.numpy as jnp
    >>> round(float(renyi_entropy(jnp.ones(4) / 4, math.inf)), 4)
    1.3863
  """
  if not alpha >= 0:
    raise ValueError(f"alpha must be >= 0, got {alpha}")
  validation.check_simplex("p", p)
  return jnp.where(_not_a_distribution(p), jnp.nan, _renyi(p, alpha))


def _not_a_distribution(p):
  """Rows with a NaN or a negative entry: every order and divergence reads them as NaN
  (a `p > 0` mask alone would skip a NaN and let a negative mass lower the result)."""
  return jnp.any(jnp.isnan(p) | (p < 0), -1)


def _renyi(p, alpha):
  # No 1e-9 floor before a power or log: lifting tiny probabilities inflates
  # sum p^alpha for alpha < 1 (a floor of 1e-9 over 4096 entries adds ~0.2 nats
  # at alpha = 0.5). Only subnormals are raised to the smallest normal float,
  # which keeps gradients finite and changes no representable normal value.
  tiny = jnp.finfo(jnp.result_type(p, jnp.float32)).tiny
  if alpha == 1.0:
    safe = jnp.where(p > 0, jnp.maximum(p, tiny), 1.0)
    return -jnp.sum(jnp.where(p > 0, p * jnp.log(safe), 0.0), -1)
  if math.isinf(alpha):
    return -jnp.log(jnp.maximum(jnp.max(p, -1), _TINY))
  # log sum_v p_v^alpha = alpha log m + log sum_v (p_v / m)^alpha with m = max p:
  # the sum is >= 1 (no underflow for large alpha) and, m held constant, the
  # gradient is exact, as in logsumexp.
  m = jax.lax.stop_gradient(jnp.maximum(jnp.max(p, -1, keepdims=True), tiny))
  ratio = jnp.where(p > 0, jnp.maximum(p / m, tiny), 1.0)
  powered = jnp.sum(jnp.where(p > 0, ratio ** alpha, 0.0), -1)
  powered = jnp.where(powered > 0, powered, 1.0)  # all-zero rows: finite, not NaN
  return (alpha * jnp.log(m[..., 0]) + jnp.log(powered)) / (1.0 - alpha)


def sorted_topk(p: Float[Array, "*b v"], k: int) -> Float[Array, "*b k"]:
  """The k largest probabilities in descending order, zero-padded when v < k."""
  if k < 1:
    raise ValueError(f"k must be >= 1, got {k}")
  if p.shape[-1] < k:
    p = jnp.pad(p, [(0, 0)] * (p.ndim - 1) + [(0, k - p.shape[-1])])
  return jax.lax.top_k(p, k)[0]


def uld_distance(p: Float[Array, "*b v"], q: Float[Array, "*b w"],
                 k: int | None = None) -> Float[Array, "*b"]:
  """ULD's vocabulary-free distance: sum_r |sort(p)_r - sort(q)_r| over the top-k ranks.

  With `k=None` the shorter distribution is zero-padded to the longer one and
  every rank counts; divided by that length it is the 1-D Wasserstein-1
  distance between the empirical measures of the two probability vectors'
  values (the sorted-W1 closed form, Boizard et al. 2024).

  Args:
    p: [*b, v] probabilities.
    q: [*b, w] probabilities (another vocabulary size is fine).
    k: number of leading ranks compared (None: all).

  Returns:
    [*b] distances in [0, 2].

  Example:
    >>> import jax.numpy as jnp
    >>> float(uld_distance(jnp.array([1.0, 0.0]), jnp.array([0.0, 0.5, 0.5])))
    1.0
  """
  k = max(p.shape[-1], q.shape[-1]) if k is None else k
  return jnp.sum(jnp.abs(sorted_topk(p, k) - sorted_topk(q, k)), -1)


def kl_divergence(p: Float[Array, "*#b c"], q: Float[Array, "*#b c"]) -> Float[Array, "..."]:
  """KL(p || q) in nats over the last axis (leading axes broadcast), with 0 log 0 = 0 and q
  clamped at 1e-9 (a zero in q where p has mass gives a large finite value, not inf).

  Raises:
    ValueError: if a concrete `p` or `q` is not a distribution. Traced, a row of either
      holding a NaN or a negative entry gives NaN.

  Example:
    >>> import jax.numpy as jnp
    >>> round(float(kl_divergence(jnp.array([0.5, 0.5]), jnp.array([0.25, 0.75]))), 4)
    0.1438
  """
  validation.check_simplex("p", p)
  validation.check_simplex("q", q)
  kl = jnp.sum(jnp.where(p > 0, p * (jnp.log(jnp.maximum(p, _TINY))
                                     - jnp.log(jnp.maximum(q, _TINY))), 0.0), -1)
  return jnp.where(_not_a_distribution(p) | _not_a_distribution(q), jnp.nan, kl)


def span_weights(ent_teacher: Float[Array, " n"], ent_student: Float[Array, " m"],
                 span_teacher: Int[Array, " n"], span_student: Int[Array, " m"],
                 num_spans: int, *, tau: float = 1.0, weighting: str = "softmax",
                 clip: float = 5.0) -> Float[Array, " k"]:
  """Renyi-profile weights w_k of the spans (stop-gradient), mean 1 over the real spans.

  Args:
    ent_teacher: [n] Renyi entropy of each teacher token's distribution.
    ent_student: [m] same for the student.
    span_teacher: [n] span id per teacher token; ids >= `num_spans` mark padding.
    span_student: [m] likewise.
    num_spans: static number of span slots k.
    tau: softmax temperature (jaxlab interpretation, spec default 1).
    weighting: "softmax" (w = K softmax(Delta / tau)), "ratio" (w = Delta / mean
      Delta, clipped at `clip`) or "none" (w = 1): jaxlab interpretation.
    clip: upper clip of the "ratio" weights.

  Returns:
    [k] weights; 0 on span slots that hold no teacher or no student token.
  """
  if weighting not in WEIGHTINGS:
    raise ValueError(f"weighting must be one of {WEIGHTINGS}, got {weighting!r}")
  def mean(values, ids):
    total = jax.ops.segment_sum(values, ids, num_spans)
    count = jax.ops.segment_sum(jnp.ones_like(values), ids, num_spans)
    return total / jnp.maximum(count, 1.0), count > 0
  ht, valid_t = mean(ent_teacher, span_teacher)
  hs, valid_s = mean(ent_student, span_student)
  valid = valid_t & valid_s
  count = jnp.maximum(jnp.sum(valid), 1)
  delta = jax.lax.stop_gradient(jnp.abs(ht - hs))
  if weighting == "none":
    w = jnp.ones_like(delta)
  elif weighting == "softmax":
    w = count * jax.nn.softmax(jnp.where(valid, delta / tau, -jnp.inf))
  else:
    mean_delta = jnp.sum(jnp.where(valid, delta, 0.0)) / count
    w = jnp.minimum(delta / jnp.maximum(mean_delta, _TINY), clip)
  return jnp.where(valid, w, 0.0)


def escot_loss(char_teacher: Float[Array, "n c"], topk_teacher: Float[Array, "n r"],
               ent_teacher: Float[Array, " n"], span_teacher: Int[Array, " n"],
               logp_student: Float[Array, "m v"], first_char: Float[Array, "v c"],
               span_student: Int[Array, " m"], pair_teacher: Int[Array, " p"],
               pair_student: Int[Array, " p"], pair_span: Int[Array, " p"],
               pair_mass: Float[Array, " p"], *, num_spans: int, alpha: float = 2.0,
               tau: float = 1.0, weighting: str = "softmax", char_weight: float = 1.0,
               rank_weight: float = 1.0, entropy_on: str = "char") -> Float[Array, ""]:
  """The E-SCOT distillation term of one sequence (sparse span coupling, Renyi weights).

  Args:
    char_teacher: [n, c] teacher next-character distribution per token.
    topk_teacher: [n, r] teacher sorted top-r probabilities per token.
    ent_teacher: [n] teacher Renyi entropy per token (on the same distribution
      as `entropy_on` selects for the student).
    span_teacher: [n] span ids (>= num_spans for padding).
    logp_student: [m, v] student log-probabilities per token.
    first_char: [v, c] one-hot first (decoded) character of each student token.
    span_student: [m] span ids (>= num_spans for padding).
    pair_teacher, pair_student, pair_span, pair_mass: [p] the sparse coupling
      (`spans.overlap_coupling`), padded with mass 0.
    num_spans: static number of span slots.
    alpha: Renyi order (jaxlab interpretation; spec default 2).
    tau, weighting: see `span_weights`.
    char_weight: weight of the next-character KL cost (spec option iii).
    rank_weight: weight of the sorted top-r rank cost (spec option i).
    entropy_on: "char" (entropies of next-character distributions, comparable
      across vocabularies) or "token" (of the full token distributions): jaxlab
      interpretation.

  Returns:
    Scalar sum_k w_k sum_{(i,j)} pi_ij c_ij.
  """
  p_s, char_s, w = _student_side(ent_teacher, span_teacher, logp_student, first_char,
                                 span_student, num_spans, alpha=alpha, tau=tau,
                                 weighting=weighting, entropy_on=entropy_on)
  cost = char_weight * kl_divergence(char_teacher[pair_teacher], char_s[pair_student])
  if rank_weight:
    top_s = sorted_topk(p_s, topk_teacher.shape[-1])
    cost = cost + rank_weight * jnp.sum(
        jnp.abs(topk_teacher[pair_teacher] - top_s[pair_student]), -1)
  w_pair = jnp.take(w, pair_span, mode="fill", fill_value=0.0)
  return jnp.sum(w_pair * pair_mass * cost)


def _student_side(ent_teacher, span_teacher, logp_student, first_char, span_student,
                  num_spans, *, alpha, tau, weighting, entropy_on):
  """(student probabilities, next-char distributions, span weights) of one sequence."""
  if entropy_on not in ("char", "token"):
    raise ValueError(f"entropy_on must be 'char' or 'token', got {entropy_on!r}")
  p_s = jnp.exp(logp_student)
  char_s = p_s @ first_char
  ent_s = renyi_entropy(char_s if entropy_on == "char" else p_s, alpha)
  w = span_weights(ent_teacher, ent_s, span_teacher, span_student, num_spans, tau=tau,
                   weighting=weighting)
  return p_s, char_s, w


def escot_dense_loss(char_teacher: Float[Array, "n c"], topk_teacher: Float[Array, "n r"],
                     ent_teacher: Float[Array, " n"], span_teacher: Int[Array, " n"],
                     logp_student: Float[Array, "m v"], first_char: Float[Array, "v c"],
                     span_student: Int[Array, " m"], mass_teacher: Float[Array, " n"],
                     mass_student: Float[Array, " m"], *, num_spans: int,
                     epsilon: float = 0.1, num_iters: int = 50, alpha: float = 2.0,
                     tau: float = 1.0, weighting: str = "softmax", char_weight: float = 1.0,
                     rank_weight: float = 1.0, entropy_on: str = "char") -> Float[Array, ""]:
  """E-SCOT without its span constraint: the same cost, weights and marginals, but the
  coupling is entropic OT over all n x m token pairs (MultiLevelOT-style dense OT).

  The ablation of E-SCOT's span-anchored support: everything `escot_loss` computes
  is kept (cost c_ij, Renyi span weights, the marginals of the span coupling), and
  only the support changes, from the span blocks to every pair, the coupling then
  being the Sinkhorn plan of c (stop-gradient, as the span coupling is constant).
  A pair (i, j) is weighted (w_span(i) + w_span(j)) / 2 (jaxlab interpretation: it
  equals w_k on the pairs of span k, where both tokens lie, so with the span support
  this loss would be `escot_loss` up to the Sinkhorn plan).

  Args:
    char_teacher, topk_teacher, ent_teacher, span_teacher, logp_student, first_char,
      span_student: as for `escot_loss`.
    mass_teacher: [n] the span coupling's teacher marginal (`spans.coupling_marginals`;
      0 on padding).
    mass_student: [m] its student marginal (0 on padding).
    num_spans: static number of span slots (for the weights).
    epsilon: Sinkhorn regularisation, in nats of the cost (jaxlab interpretation).
    num_iters: Sinkhorn iterations.
    alpha, tau, weighting, char_weight, rank_weight, entropy_on: as for `escot_loss`.

  Returns:
    Scalar sum_ij w_ij P_ij c_ij with P the dense plan.

  Example:
    >>> import jax.numpy as jnp
    >>> char = jnp.array([[0.9, 0.1], [0.2, 0.8]])
    >>> top = -jnp.sort(-char)  # sorted top-2
    >>> loss = escot_dense_loss(char, top, jnp.zeros(2), jnp.arange(2), jnp.log(char),
    ...                         jnp.eye(2), jnp.arange(2), jnp.ones(2) / 2, jnp.ones(2) / 2,
    ...                         num_spans=2, epsilon=0.01, num_iters=200)
    >>> round(float(loss), 4)  # the plan finds the identical pairs: zero cost
    0.0
  """
  p_s, char_s, w = _student_side(ent_teacher, span_teacher, logp_student, first_char,
                                 span_student, num_spans, alpha=alpha, tau=tau,
                                 weighting=weighting, entropy_on=entropy_on)
  cost = char_weight * _pairwise_kl(char_teacher, char_s)
  if rank_weight:
    top_s = sorted_topk(p_s, topk_teacher.shape[-1])
    cost = cost + rank_weight * jnp.sum(
        jnp.abs(topk_teacher[:, None, :] - top_s[None, :, :]), -1)
  plan = sinkhorn(jax.lax.stop_gradient(cost), mass_teacher, mass_student, epsilon=epsilon,
                  num_iters=num_iters).coupling
  w_t = jnp.take(w, span_teacher, mode="fill", fill_value=0.0)
  w_s = jnp.take(w, span_student, mode="fill", fill_value=0.0)
  return jnp.sum(0.5 * (w_t[:, None] + w_s[None, :]) * plan * cost)


def _pairwise_kl(p, q):
  """[n, m] KL(p_i || q_j) as one [n, c] x [c, m] matmul instead of an [n, m, c] tensor (the
  same value as `kl_divergence`, with the same clamping)."""
  neg_entropy = jnp.sum(jnp.where(p > 0, p * jnp.log(jnp.maximum(p, _TINY)), 0.0), -1)
  return neg_entropy[:, None] - p @ jnp.log(jnp.maximum(q, _TINY)).T


def uld_loss(topk_teacher: Float[Array, "n r"], logp_student: Float[Array, "m v"],
             valid: Float[Array, " l"]) -> Float[Array, ""]:
  """ULD: positions paired by index (truncated to l = min(n, m)), sorted top-r L1, mean.

  Args:
    topk_teacher: [n, r] teacher sorted top-r probabilities.
    logp_student: [m, v] student log-probabilities.
    valid: [l] 1 where position t < min(len_teacher, len_student), else 0.

  Returns:
    Scalar mean over valid positions of sum_r |sortT_t,r - sortS_t,r|.
  """
  length = valid.shape[0]
  if length > min(topk_teacher.shape[0], logp_student.shape[0]):
    raise ValueError(f"valid has {length} positions, more than min(n, m)")
  top_s = sorted_topk(jnp.exp(logp_student[:length]), topk_teacher.shape[-1])
  d = jnp.sum(jnp.abs(topk_teacher[:length] - top_s), -1)
  return jnp.sum(valid * d) / jnp.maximum(jnp.sum(valid), 1.0)


def mined_loss(topk_teacher: Float[Array, "n r"], mapped_ids: Int[Array, "n r"],
               logp_student: Float[Array, "m v"], teacher_index: Int[Array, " m"],
               valid: Float[Array, " m"]) -> Float[Array, ""]:
  """MinED-style KD: teacher top-r tokens mapped to their min-edit-distance student tokens.

  Args:
    topk_teacher: [n, r] teacher top-r probabilities (renormalised here).
    mapped_ids: [n, r] student token id of each teacher top-r token.
    logp_student: [m, v] student log-probabilities.
    teacher_index: [m] teacher token aligned to each student token.
    valid: [m] 1 for real student tokens.

  Returns:
    Scalar mean over valid tokens of KL(mapped teacher || student) (the
    teacher entropy term uses the un-merged top-r masses; it has no gradient).
  """
  q = topk_teacher[teacher_index]
  q = q / jnp.maximum(q.sum(-1, keepdims=True), _TINY)
  ids = mapped_ids[teacher_index]
  logp = jnp.take_along_axis(logp_student, ids, axis=-1)
  kl = jnp.sum(jnp.where(q > 0, q * (jnp.log(jnp.maximum(q, _TINY)) - logp), 0.0), -1)
  # A NaN teacher mass, or a NaN anywhere in the student's row (a diverged student, even at
  # an id no teacher token maps to), is never skipped.
  kl = jnp.where(_not_a_distribution(q) | jnp.any(jnp.isnan(logp_student), -1), jnp.nan, kl)
  return jnp.sum(valid * kl) / jnp.maximum(jnp.sum(valid), 1.0)


def dense_ot_loss(char_teacher: Float[Array, "n c"], char_student: Float[Array, "m c"], *,
                  epsilon: float = 0.1, num_iters: int = 50) -> Float[Array, ""]:
  """Dense (all n x m pairs) entropic-OT distillation cost, MultiLevelOT-style.

  The O(n m) reference E-SCOT's sparse coupling replaces (used for the cost plot).
  """
  cost = _pairwise_kl(char_teacher, char_student)
  n, m = cost.shape
  plan = sinkhorn(jax.lax.stop_gradient(cost), jnp.full(n, 1.0 / n), jnp.full(m, 1.0 / m),
                  epsilon=epsilon, num_iters=num_iters).coupling
  return jnp.sum(plan * cost)
