"""Granularity-aware routing: discover class groups in semantic space and route to them.

Stage 2 of GA-ZSCE (reconstruction): cluster the class semantics (seen and unseen) into
G groups with k-means on the unit sphere (cosine k-means), then route each class either
to its cluster's head (hard) or to every head with softmax weights over its cluster
similarities (soft). jaxlab interpretation: the abstract leaves the clustering (k-means or spectral) and the
routing (hard or soft) open; both are config knobs.

The method "discovers latent class structure" (the abstract), so G is chosen from the
semantics, never read from a ground truth: `estimate_num_groups` picks G in
[min_groups, max_groups] by a model-selection rule. The paper does not say which
(jaxlab interpretation, a knob): "silhouette" (the k-means partition with the largest mean
cosine silhouette, Rousseeuw 1987) or "eigengap" (the largest gap in the spectrum of the
normalised Laplacian of a self-tuning affinity, Zelnik-Manor & Perona 2004; the spectral
reading of "k-means or spectral"). To keep shapes static under `jit`/`vmap`,
`kmeans` and `route` take `num_active`: only the first `num_active` of `num_clusters`
centres are used, so one compiled program serves every count.

Example:
  >>> import jax, jax.numpy as jnp
  >>> from jaxlab.zeroshot import routing
  >>> x = jnp.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
  >>> assign, centers = routing.kmeans(x, 2, jax.random.key(0))
  >>> bool(assign[0] == assign[1]) and bool(assign[2] == assign[3])
  True
"""

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from jaxlab import validation

ROUTINGS = ("hard", "soft")
GROUP_RULES = ("silhouette", "eigengap")
# Zelnik-Manor & Perona's local scale: the distance to the 7th nearest neighbour.
_LOCAL_SCALE_NEIGHBOUR = 7


def _unit(x):
  return x / jnp.maximum(jnp.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def _active(num_clusters: int, num_active) -> jax.Array:
  """Mask of the centres in use; `num_active` may be traced (then it is not range-checked)."""
  if num_active is None:
    return jnp.ones(num_clusters, bool)
  if isinstance(num_active, int) and not 1 <= num_active <= num_clusters:
    raise ValueError(f"num_active must be in [1, {num_clusters}], got {num_active}")
  return jnp.arange(num_clusters) < num_active


def kmeans(x: Float[Array, "n d"], num_clusters: int, key: jax.Array, *,
           num_iters: int = 30, num_active: int | Int[Array, ""] | None = None,
           num_restarts: int = 1) -> tuple[Int[Array, " n"], Float[Array, "k d"]]:
  """Cosine k-means (k-means++ seeding, fixed Lloyd iterations; jittable).

  Args:
    x: points (rows are normalised first), [n, d].
    num_clusters: k, 1 <= k <= n: the number of centres (static).
    key: PRNG key for the seeding.
    num_iters: Lloyd iterations.
    num_active: use only the first `num_active` centres (an int or a traced scalar in
      [1, k]; None = all k). The others stay zero and are never assigned.
    num_restarts: seedings tried; the partition with the lowest cosine inertia is kept.

  Returns:
    (assignment [n], unit centres [k, d]). An emptied cluster keeps its last centre.

  Raises:
    ValueError: on bad shapes or counts, or a concrete `x` holding NaN or +-inf. A traced
      `x` cannot raise: one non-finite point then gives every centre NaN and every
      assignment -1 (no cluster), never a partition built around a NaN (whose distances
      fail every comparison, so an argmax would pick an arbitrary cluster).

  Example:
    >>> import jax, jax.numpy as jnp
    >>> x = jnp.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    >>> assign, _ = kmeans(x, 3, jax.random.key(0), num_active=2)
    >>> int(assign.max()) <= 1
    True
  """
  if x.ndim != 2:
    raise ValueError(f"x must be [n, d], got shape {x.shape}")
  if not 1 <= num_clusters <= x.shape[0]:
    raise ValueError(f"num_clusters must be in [1, {x.shape[0]}], got {num_clusters}")
  if num_restarts < 1:
    raise ValueError(f"num_restarts must be >= 1, got {num_restarts}")
  validation.check_finite("x", x)
  active = _active(num_clusters, num_active)
  bad = ~jnp.all(jnp.isfinite(x))
  x = _unit(x.astype(jnp.float32))
  if num_restarts == 1:
    assign, centers = _kmeans_once(x, num_clusters, active, key, num_iters)
  else:
    assigns, centers = jax.vmap(lambda k: _kmeans_once(x, num_clusters, active, k, num_iters))(
        jax.random.split(key, num_restarts))
    nearest = jax.vmap(lambda c, a: c[a])(centers, assigns)      # [restarts, n, d]
    inertia = jnp.sum(1.0 - jnp.sum(x[None] * nearest, -1), -1)
    best = jnp.argmin(inertia)
    assign, centers = assigns[best], centers[best]
  return jnp.where(bad, -1, assign), jnp.where(bad, jnp.nan, centers)


def _kmeans_once(x, num_clusters, active, key, num_iters):
  n = x.shape[0]
  first = jax.random.randint(key, (), 0, n)
  centers = jnp.zeros((num_clusters, x.shape[1])).at[0].set(x[first])

  def seed(i, carry):
    centers, k = carry
    k, sub = jax.random.split(k)
    sims = x @ centers.T
    valid = jnp.arange(num_clusters) < i
    dist = jnp.min(jnp.where(valid[None, :], 2.0 - 2.0 * sims, jnp.inf), -1)
    p = jnp.maximum(dist, 0.0) + 1e-12
    idx = jax.random.choice(sub, n, p=p / p.sum())
    return centers.at[i].set(jnp.where(active[i], x[idx], 0.0)), k

  centers, _ = jax.lax.fori_loop(1, num_clusters, seed, (centers, key))

  def assign_of(centers):
    return jnp.argmax(jnp.where(active[None, :], x @ centers.T, -jnp.inf), -1)

  def lloyd(_, centers):
    one_hot = jax.nn.one_hot(assign_of(centers), num_clusters)
    sums = one_hot.T @ x
    counts = one_hot.sum(0)[:, None]
    return jnp.where(counts > 0, _unit(sums), centers)

  centers = jax.lax.fori_loop(0, num_iters, lloyd, centers)
  return assign_of(centers), centers


def silhouette(x: Float[Array, "n d"], assign: Int[Array, " n"],
               num_clusters: int) -> Float[Array, ""]:
  """Mean silhouette of a partition under the cosine distance 1 - cos (Rousseeuw 1987).

  s_i = (b_i - a_i) / max(a_i, b_i), with a_i the mean distance from point i to the other
  members of its cluster and b_i the smallest mean distance to another non-empty cluster;
  s_i = 0 for a point alone in its cluster, and 0 for all when only one cluster is used.

  Args:
    x: points, [n, d].
    assign: cluster of each point, values in [0, num_clusters), [n].
    num_clusters: the number of cluster ids (static; empty ids are ignored).

  Returns:
    The mean silhouette in [-1, 1] (higher = tighter, better separated clusters); NaN
    when `x` holds a NaN or +-inf (its distances are undefined, and the zero given to
    points alone in their cluster must not stand in for them).

  Example:
    >>> import jax.numpy as jnp
    >>> x = jnp.array([[1.0, 0.0], [1.0, 0.1], [0.0, 1.0], [0.1, 1.0]])
    >>> bool(silhouette(x, jnp.array([0, 0, 1, 1]), 2) > 0.9)
    True
  """
  if x.ndim != 2 or assign.shape != (x.shape[0],):
    raise ValueError(f"x must be [n, d] and assign [n]; got {x.shape}, {assign.shape}")
  u = _unit(x.astype(jnp.float32))
  dist = jnp.maximum(1.0 - u @ u.T, 0.0)
  one_hot = jax.nn.one_hot(assign, num_clusters)
  counts = one_hot.sum(0)
  sums = dist @ one_hot                                       # [n, k]
  own = counts[assign]
  a = jnp.take_along_axis(sums, assign[:, None], 1)[:, 0] / jnp.maximum(own - 1.0, 1.0)
  other = (jnp.arange(num_clusters)[None, :] != assign[:, None]) & (counts[None, :] > 0)
  b = jnp.min(jnp.where(other, sums / jnp.maximum(counts, 1.0)[None, :], jnp.inf), -1)
  ok = (own > 1) & jnp.isfinite(b)
  s = jnp.where(ok, (b - a) / jnp.maximum(jnp.maximum(a, jnp.where(ok, b, 0.0)), 1e-12), 0.0)
  return jnp.where(jnp.all(jnp.isfinite(x)), jnp.mean(s), jnp.nan)


def laplacian_spectrum(x: Float[Array, "n d"]) -> Float[Array, " n"]:
  """Ascending eigenvalues of the normalised Laplacian of a self-tuning cosine affinity.

  W_ij = exp(-e_ij^2 / (sigma_i sigma_j)) (i != j), with e the Euclidean distance between
  unit rows and sigma_i the distance to the 7th nearest neighbour (Zelnik-Manor & Perona
  2004); L = I - D^-1/2 W D^-1/2. k well-separated groups give k eigenvalues near 0.

  Args:
    x: points, [n, d] with n >= 2.

  Returns:
    The n eigenvalues, ascending, in [0, 2].
  """
  if x.ndim != 2 or x.shape[0] < 2:
    raise ValueError(f"x must be [n >= 2, d], got shape {x.shape}")
  u = _unit(x.astype(jnp.float32))
  n = u.shape[0]
  e = jnp.sqrt(jnp.maximum(2.0 - 2.0 * u @ u.T, 0.0))
  sigma = jnp.sort(e, -1)[:, min(_LOCAL_SCALE_NEIGHBOUR, n - 1)]
  w = jnp.exp(-e**2 / jnp.maximum(sigma[:, None] * sigma[None, :], 1e-12))
  w = w * (1.0 - jnp.eye(n))
  inv_sqrt = 1.0 / jnp.sqrt(jnp.maximum(w.sum(-1), 1e-12))
  lap = jnp.eye(n) - inv_sqrt[:, None] * w * inv_sqrt[None, :]
  return jnp.linalg.eigvalsh(lap)


def estimate_num_groups(x: Float[Array, "n d"], key: jax.Array, *, max_groups: int,
                        min_groups: int = 2, rule: str = "silhouette", num_iters: int = 30,
                        num_restarts: int = 1) -> tuple[Int[Array, ""], Float[Array, " g"]]:
  """The number of groups in `x` chosen by a model-selection rule (jaxlab interpretation).

  Args:
    x: class semantics, [n, d].
    key: PRNG key of the k-means seedings ("silhouette"; the same key for every count).
    max_groups: largest count considered (static), <= n - 1.
    min_groups: smallest count considered, >= 2.
    rule: "silhouette": the count whose cosine k-means partition has the largest mean
      silhouette; "eigengap": the count k with the largest gap lambda_{k+1} - lambda_k of
      `laplacian_spectrum`.
    num_iters: Lloyd iterations of each k-means.
    num_restarts: k-means seedings per count (the lowest inertia is scored).

  Returns:
    (the chosen count, the rule's score of each count min_groups..max_groups).

  Example:
    >>> import jax, jax.numpy as jnp
    >>> x = jnp.repeat(jnp.eye(3, 8) * 4.0, 5, 0)
    >>> x = x + 0.1 * jax.random.normal(jax.random.key(1), x.shape)
    >>> int(estimate_num_groups(x, jax.random.key(0), max_groups=6)[0])
    3
  """
  if rule not in GROUP_RULES:
    raise ValueError(f"rule must be one of {GROUP_RULES}, got {rule!r}")
  if x.ndim != 2:
    raise ValueError(f"x must be [n, d], got shape {x.shape}")
  if not 2 <= min_groups <= max_groups < x.shape[0]:
    raise ValueError(f"need 2 <= min_groups <= max_groups < n = {x.shape[0]}; got "
                     f"min_groups={min_groups}, max_groups={max_groups}")
  counts = jnp.arange(min_groups, max_groups + 1)
  if rule == "silhouette":
    def score(k):
      assign, _ = kmeans(x, max_groups, key, num_iters=num_iters, num_active=k,
                         num_restarts=num_restarts)
      return silhouette(x, assign, max_groups)
    scores = jax.vmap(score)(counts)
  else:
    lam = laplacian_spectrum(x)
    scores = lam[counts] - lam[counts - 1]
  return counts[jnp.argmax(scores)], scores


def route(x: Float[Array, "n d"], centers: Float[Array, "k d"], *, routing: str = "hard",
          temperature: float = 0.1,
          num_active: int | Int[Array, ""] | None = None) -> Float[Array, "n k"]:
  """Routing weights of each point over the k group heads (rows sum to 1).

  Args:
    x: semantics, [n, d].
    centers: cluster centres, [k, d].
    routing: "hard" (one-hot of the nearest centre by cosine) or "soft"
      (softmax of cosine similarities / temperature). jaxlab interpretation.
    temperature: soft-routing temperature (> 0).
    num_active: route only to the first `num_active` centres (as in `kmeans`).
  """
  if routing not in ROUTINGS:
    raise ValueError(f"routing must be one of {ROUTINGS}, got {routing!r}")
  if x.ndim != 2 or centers.ndim != 2 or x.shape[1] != centers.shape[1]:
    raise ValueError(f"x [n, d] and centers [k, d] must share d; got {x.shape}, {centers.shape}")
  if temperature <= 0:
    raise ValueError(f"temperature must be > 0, got {temperature}")
  active = _active(centers.shape[0], num_active)
  sims = jnp.where(active[None, :], _unit(x) @ _unit(centers).T, -jnp.inf)
  if routing == "hard":
    return jax.nn.one_hot(jnp.argmax(sims, -1), centers.shape[0])
  return jax.nn.softmax(sims / temperature, -1)


def group_mean(values: Float[Array, " n"], weights: Float[Array, "n k"]) -> Float[Array, ""]:
  """Per-group loss normalisation: the mean inside each group, then the mean over groups.

  `weights` are (soft) group memberships; groups with no mass are left out, so a large or
  easy group cannot dominate the gradient (the abstract's stage 2: gradients of distinct
  classes dominate).
  """
  if values.ndim != 1 or weights.ndim != 2 or weights.shape[0] != values.shape[0]:
    raise ValueError(f"values [n] and weights [n, k] must agree; got {values.shape}, "
                     f"{weights.shape}")
  mass = weights.sum(0)
  per_group = (weights * values[:, None]).sum(0) / jnp.maximum(mass, 1e-12)
  used = mass > 1e-6
  return jnp.sum(jnp.where(used, per_group, 0.0)) / jnp.maximum(used.sum(), 1)
