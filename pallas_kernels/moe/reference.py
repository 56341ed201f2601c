"""Pure-jnp references for the MoE kernels (the spec; also the XLA fallback).

Grouped matmul: `jax.lax.ragged_dot` (rows of `lhs` sorted by group; rows past
`sum(group_sizes)` give zeros).

Routing: softmax top-k, pruned top-k0 and OEA batch-aware routing. These are
the routers `jaxlab.moe` exports (it imports them from here: kernels sit below
the library, so the spec a kernel must match lives beside the kernel).

Every router is written with static shapes and without a sort, so it jits,
vmaps and maps onto the Pallas kernel: an expert's *rank* on a token is the
number of experts that beat it (higher probability, ties broken by the lower
index), and "the top-k" is `rank < k`.

Each router returns `(mask, weights)`: a bool [b, N] mask of the chosen
experts and float32 [b, N] weights, the router probabilities renormalized over
the chosen set (Qwen3 `norm_topk_prob=True`; OEA paper Eq. 1).

Non-finite rule (every router, and so the MoE layer). A logit row is
*non-finite* when it holds a NaN or a +Inf, or when all its logits are -Inf:
its softmax is undefined. Such a token is its own problem and nobody else's:

  * it selects no expert (an all-False mask row), so it adds nothing to the
    batch's active experts T and nothing to OEA's union of base experts, and
    every other token's mask and weights are those of the batch without it;
  * its weights are NaN (the whole row), so whatever the caller combines with
    them (the MoE layer's output for that token) is NaN, never a silent zero.

A -Inf logit in an otherwise finite row is an ordinary "probability 0" expert.
OEA padding rows (`valid=False`) get an empty mask and zero weights, whether
finite or not.

OEA (Oncescu et al., arXiv 2511.02237, Alg. 1/2): every token keeps its own
top-k0 ("base" experts); the batch's union of base experts is then the set of
loaded experts, and each token additionally "piggybacks" on the loaded experts
among its next-ranked choices, up to k_max experts in total. The number of
distinct experts T is the union of the base sets, so decode cost (which grows
with T in the memory-bound regime) falls while each token still uses up to
k_max experts.

Example:
  >>> import jax
  >>> logits = jax.random.normal(jax.random.key(0), (16, 32))
  >>> mask, w = oea_route(logits, k0=2, k_max=4)
  >>> mask.shape, bool((mask.sum(-1) <= 4).all())
  ((16, 32), True)
"""

import jax
import jax.numpy as jnp
from jax import Array
from jaxtyping import Bool, Float, Int

ROUTINGS = ("topk", "pruned", "oea")


def gmm_reference(lhs: Float[Array, "m k"], rhs: Float[Array, "g k n"],
                  group_sizes: Int[Array, "g"]) -> Float[Array, "m n"]:
  """`ragged_dot(lhs, rhs, group_sizes)` in float32 at HIGHEST precision.

  Example:
    >>> import jax.numpy as jnp
    >>> lhs, rhs = jnp.ones((3, 4)), jnp.stack([jnp.ones((4, 2)), 2 * jnp.ones((4, 2))])
    >>> gmm_reference(lhs, rhs, jnp.array([1, 2])).tolist()  # row 0: group 0; rows 1-2: group 1
    [[4.0, 4.0], [8.0, 8.0], [8.0, 8.0]]
  """
  return jax.lax.ragged_dot(lhs, rhs, group_sizes.astype(jnp.int32),
                            precision=jax.lax.Precision.HIGHEST,
                            preferred_element_type=jnp.float32)


def _check_logits(logits) -> None:
  if logits.ndim != 2:
    raise ValueError(f"logits must be [tokens, num_experts], got shape {logits.shape}")
  if not jnp.issubdtype(logits.dtype, jnp.floating):
    raise ValueError(f"logits must be floating point, got {logits.dtype}")


def _check_k(name: str, k: int, upper: int, upper_name: str) -> None:
  # bool is an int subclass: True must not pass as k=1.
  if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= upper:
    raise ValueError(f"{name} must be an int in [1, {upper_name}={upper}], got {k!r}")


def nonfinite_rows(logits: Float[Array, "b n"]) -> Bool[Array, "b"]:
  """True for the rows whose softmax is undefined: a NaN or +Inf logit, or all -Inf.

  Example:
    >>> import jax.numpy as jnp
    >>> inf = jnp.inf
    >>> nonfinite_rows(jnp.array([[0., -inf], [jnp.nan, 0.], [inf, 0.], [-inf, -inf]])).tolist()
    [False, True, True, True]
  """
  bad_entry = jnp.isnan(logits) | (logits == jnp.inf)
  return bad_entry.any(-1) | (logits == -jnp.inf).all(-1)


def router_probs(logits: Float[Array, "b n"]) -> tuple[Float[Array, "b n"], Bool[Array, "b"]]:
  """Softmax probabilities (float32) with non-finite rows zeroed, and those rows' flags.

  Zeroing keeps the NaNs out of the ranks (a NaN compares False with
  everything); the routers drop the flagged rows from every mask.

  Example:
    >>> import jax.numpy as jnp
    >>> probs, bad = router_probs(jnp.array([[0.0, 0.0], [jnp.nan, 0.0]]))
    >>> probs.tolist(), bad.tolist()
    ([[0.5, 0.5], [0.0, 0.0]], [False, True])
  """
  bad = nonfinite_rows(logits)
  probs = jax.nn.softmax(logits.astype(jnp.float32), axis=-1)
  return jnp.where(bad[:, None], 0.0, probs), bad


def expert_ranks(probs: Float[Array, "b n"]) -> Int[Array, "b n"]:
  """Rank of each expert per token: 0 = highest score; ties go to the lower index.

  O(b * N^2) pairwise comparisons instead of a sort (N is at most a few
  hundred for MoE routers).

  Example:
    >>> import jax.numpy as jnp
    >>> expert_ranks(jnp.array([[0.2, 0.5, 0.2, 0.1]])).tolist()  # the tie goes to expert 0
    [[1, 0, 2, 3]]
  """
  n = probs.shape[-1]
  idx = jnp.arange(n)
  pi, pj = probs[:, :, None], probs[:, None, :]  # [b, e, e']
  beats = (pj > pi) | ((pj == pi) & (idx[None, :] < idx[:, None])[None])
  return beats.sum(-1).astype(jnp.int32)


def renormalize(probs: Float[Array, "b n"], mask: Bool[Array, "b n"]) -> Float[Array, "b n"]:
  """`probs * mask / sum(probs * mask)`; all-zero rows stay zero (never NaN).

  Example:
    >>> import jax.numpy as jnp
    >>> renormalize(jnp.array([[0.5, 0.3, 0.2]]), jnp.array([[True, False, True]])).tolist()
    [[0.7142857313156128, 0.0, 0.2857142984867096]]
  """
  w = jnp.where(mask, probs, 0.0).astype(jnp.float32)
  total = w.sum(-1, keepdims=True)
  return jnp.where(total > 0, w / jnp.where(total > 0, total, 1.0), 0.0)


def _weights(probs, mask, bad):
  """Renormalized weights; the non-finite rows' weights are NaN (see the module rule)."""
  return jnp.where(bad[:, None], jnp.nan, renormalize(probs, mask))


def topk_route(logits: Float[Array, "b n"], k: int) -> tuple[Bool[Array, "b n"],
                                                             Float[Array, "b n"]]:
  """Softmax top-k routing with renormalized weights (vanilla MoE routing).

  A non-finite logit row gets no experts and NaN weights (module docstring).

  Args:
    logits: router logits [b, N] (one row per token).
    k: experts per token, 1 <= k <= N.

  Returns:
    (mask [b, N] bool, weights [b, N] float32 summing to 1 over the mask).

  Example:
    >>> import jax.numpy as jnp
    >>> mask, w = topk_route(jnp.array([[0.0, 2.0, 1.0]]), k=2)
    >>> mask.tolist()
    [[False, True, True]]
  """
  _check_logits(logits)
  _check_k("k", k, logits.shape[-1], "num_experts")
  probs, bad = router_probs(logits)
  mask = (expert_ranks(probs) < k) & ~bad[:, None]
  return mask, _weights(probs, mask, bad)


def pruned_topk_route(logits: Float[Array, "b n"], k0: int) -> tuple[Bool[Array, "b n"],
                                                                     Float[Array, "b n"]]:
  """Pruned top-k0: a model trained with top-k served with its top-k0 only.

  The baseline OEA is compared against (same T reduction, no piggybacking).
  Identical to `topk_route(logits, k0)`, non-finite rule included.

  Example:
    >>> import jax.numpy as jnp
    >>> mask, w = pruned_topk_route(jnp.log(jnp.array([[0.5, 0.3, 0.2]])), k0=1)
    >>> mask.tolist(), w.tolist()
    ([[True, False, False]], [[1.0, 0.0, 0.0]])
  """
  _check_logits(logits)
  _check_k("k0", k0, logits.shape[-1], "num_experts")
  return topk_route(logits, k0)


def oea_route(logits: Float[Array, "b n"], *, k0: int, k_max: int, p: float = 1.0,
              max_p: int | None = None, valid: Bool[Array, "b"] | None = None
              ) -> tuple[Bool[Array, "b n"], Float[Array, "b n"]]:
  """Opportunistic Expert Activation: batch-aware routing of one decode batch.

  General form (paper Alg. 2); the simplified form (Alg. 1, the paper's
  recommendation) is `p=1, max_p=N`, which are the defaults.

  1. Base experts: token i keeps its first `n_i = min(k0, t_i)` experts, t_i
     the smallest prefix of its ranked experts with probability mass >= p
     (p >= 1 means no top-p cut: n_i = k0).
  2. Piggyback: each token adds, in rank order among its ranks < max_p, the
     experts that are in the batch's union of base experts, while it has fewer
     than k_max experts ("add only while `|S_i| < k_max`", the spec's reading of
     the printed `if |S_i| > k: break`).
  3. Weights: router probabilities renormalized over the final set.

  A non-finite logit row (module docstring) is left out of the union and
  gets no experts and NaN weights: the other tokens route as if it were absent.

  The rows of `logits` are one batch (e.g. one decode step); call it per step
  (or vmap over steps) to route several.

  Args:
    logits: router logits [b, N], one row per token of the batch.
    k0: base experts per token, 1 <= k0 <= k_max.
    k_max: most experts per token (the model's trained k), k_max <= N.
    p: top-p threshold of phase 1, in (0, 1].
    max_p: piggyback only on ranks < max_p (default N), k_max <= max_p <= N.
    valid: optional bool [b]; rows marked False (padding slots of a decode
      batch) get no experts (an empty mask, zero weights) and so never add to
      the batch's union.

  Returns:
    (mask [b, N] bool, weights [b, N] float32).

  Example:
    >>> import jax.numpy as jnp
    >>> logits = jnp.log(jnp.array([[0.5, 0.3, 0.1, 0.1], [0.1, 0.1, 0.3, 0.5]]))
    >>> mask, _ = oea_route(logits, k0=1, k_max=2)
    >>> mask.astype(int).tolist()  # token 0 piggybacks on expert 3, token 1 on 0
    [[1, 0, 0, 1], [1, 0, 0, 1]]
  """
  _check_logits(logits)
  b, n = logits.shape
  _check_k("k_max", k_max, n, "num_experts")
  _check_k("k0", k0, k_max, "k_max")
  if not 0.0 < p <= 1.0:
    raise ValueError(f"p must be in (0, 1], got {p}")
  max_p = n if max_p is None else max_p
  if isinstance(max_p, bool) or not isinstance(max_p, int) or not k_max <= max_p <= n:
    raise ValueError(f"max_p must be an int in [k_max={k_max}, N={n}], got {max_p!r}")
  if valid is not None and valid.shape != (b,):
    raise ValueError(f"valid must be bool [{b}], got shape {valid.shape}")

  probs, bad = router_probs(logits)
  keep = ~bad if valid is None else valid & ~bad
  rank = expert_ranks(probs)
  if p >= 1.0:
    n_base = jnp.full((b, 1), k0, jnp.int32)
  else:
    # Probability mass strictly before each expert in rank order; t_i counts
    # the experts whose preceding mass is still < p.
    before = jnp.where(rank[:, None, :] < rank[:, :, None], probs[:, None, :], 0.0).sum(-1)
    t = (before < p).sum(-1, keepdims=True).astype(jnp.int32)
    n_base = jnp.minimum(k0, t)
  base = (rank < n_base) & keep[:, None]
  active = base.any(axis=0)  # [N]: the batch's loaded experts
  cand = active[None, :] & ~base & (rank < max_p)
  # Position of each candidate among the token's candidates in rank order.
  order = (cand[:, None, :] & (rank[:, None, :] <= rank[:, :, None])).sum(-1)
  extra = cand & (order <= k_max - n_base)
  mask = (base | extra) & keep[:, None]
  w = _weights(probs, mask, bad)
  if valid is not None:
    w = jnp.where(valid[:, None], w, 0.0)
  return mask, w


def route(logits: Float[Array, "b n"], *, routing: str, k: int, k0: int | None = None,
          p: float = 1.0, max_p: int | None = None) -> tuple[Bool[Array, "b n"],
                                                             Float[Array, "b n"]]:
  """Dispatches on `routing` in {"topk", "pruned", "oea"} (k is the trained top-k).

  "pruned" keeps the top-k0; "oea" routes with `oea_route(k0=k0, k_max=k, p, max_p)`.
  Non-finite logit rows follow the module's rule.

  Example:
    >>> import jax.numpy as jnp
    >>> logits = jnp.log(jnp.array([[0.5, 0.3, 0.1, 0.1], [0.1, 0.1, 0.3, 0.5]]))
    >>> [int(route(logits, routing=r, k=2, k0=1)[0].sum()) for r in ("topk", "pruned", "oea")]
    [4, 2, 4]
  """
  if routing not in ROUTINGS:
    raise ValueError(f"routing must be 'topk', 'pruned' or 'oea', got {routing!r}")
  if routing == "topk":
    return topk_route(logits, k)
  if k0 is None:
    raise ValueError(f"routing={routing!r} needs k0")
  if routing == "pruned":
    return pruned_topk_route(logits, k0)
  return oea_route(logits, k0=k0, k_max=k, p=p, max_p=max_p)


def route_reference(logits: Float[Array, "b n"], *, routing_name: str, k: int,
                    k0: int | None = None, p: float = 1.0, max_p: int | None = None
                    ) -> tuple[Bool[Array, "b n"], Float[Array, "b n"]]:
  """`route` ("topk", "pruned" or "oea" over the whole batch); the kernel's spec.

  Example:
    >>> import jax.numpy as jnp
    >>> mask, _ = route_reference(jnp.zeros((2, 4)), routing_name="topk", k=2)
    >>> mask.sum(-1).tolist()
    [2, 2]
  """
  return route(logits, routing=routing_name, k=k, k0=k0, p=p, max_p=max_p)


def num_active_experts(mask: Bool[Array, "b n"]) -> Int[Array, ""]:
  """T: distinct experts used by at least one token of the batch.

  Example:
    >>> import jax.numpy as jnp
    >>> int(num_active_experts(jnp.array([[True, False, False], [True, True, False]])))
    2
  """
  return mask.any(axis=0).sum().astype(jnp.int32)
