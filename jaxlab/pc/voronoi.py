"""The Voronoi-tessellation (VT) sum node: gates, cells as half-spaces, and k-means centroids.

A VT sum node over children p_1..p_K with one scope routes each point to the cell of its
nearest centroid c_k (Sidheekh & Natarajan, ICML 2026):

  f(x) = sum_k pi_k g_k(x) p_k(x),   g_k(x) = 1[k = argmin_j ||x - c_j||^2],

with cells V_k = {x : (c_j - c_k)^T x <= (||c_j||^2 - ||c_k||^2) / 2 for all j != k}.
Ties go to the first nearest centroid, so a centroid equal to an earlier one (c_k = c_j,
j < k) owns nothing: its cell is empty (`empty_cells`), and every cell test and bound
here treats it as such (for such a pair the half-space above is 0 . x <= 0, all of R^D).
f is unnormalised: Z = sum_k pi_k int_{V_k} p_k <= 1 (each p_k is normalised), so
log f(x) is itself a lower bound on the normalised log-likelihood log f(x) - log Z.
The soft gate w_k(x; alpha) = softmax_k(-alpha ||x - c_k||^2) relaxes g for training;
off the cell boundaries 1 - w_nearest(x; alpha) <= (K - 1) exp(-alpha gamma(x)) with
gamma(x) = d^2(2nd nearest) - d^2(nearest) (Thm 3.16).
"""

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from jaxlab import validation


def squared_distances(x: Float[Array, "b d"], centroids: Float[Array, "k d"]) -> Float[Array, "b k"]:
  """||x_b - c_k||^2 for every point and centroid.

  Example::

    squared_distances(jnp.zeros((1, 2)), jnp.ones((3, 2)))  # [[2., 2., 2.]]
  """
  if x.ndim != 2 or centroids.ndim != 2 or x.shape[1] != centroids.shape[1]:
    raise ValueError(f"x [B, D] and centroids [K, D] must share D, got {x.shape} and "
                     f"{centroids.shape}")
  return jnp.sum((x[:, None, :] - centroids[None]) ** 2, axis=-1)


def hard_log_gates(x: Float[Array, "b d"], centroids: Float[Array, "k d"]) -> Float[Array, "b k"]:
  """log g_k(x): 0 for the nearest centroid (first one on ties), -inf elsewhere.

  Example::

    hard_log_gates(jnp.array([[0.9, 0.0]]), jnp.array([[0.0, 0.0], [1.0, 0.0]]))  # [[-inf, 0]]
  """
  d2 = squared_distances(x, centroids)
  gates = jnp.where(jax.nn.one_hot(jnp.argmin(d2, axis=-1), centroids.shape[0], dtype=bool),
                    0.0, -jnp.inf)
  # A point with a NaN distance has no cell (argmin would name one): its gates are NaN.
  return jnp.where(jnp.all(jnp.isfinite(d2), axis=-1, keepdims=True), gates, jnp.nan)


def soft_log_gates(x: Float[Array, "b d"], centroids: Float[Array, "k d"],
                   alpha: Float[Array, ""] | float) -> Float[Array, "b k"]:
  """log w_k(x; alpha) = log_softmax_k(-alpha ||x - c_k||^2).

  Example::

    soft_log_gates(jnp.zeros((1, 2)), jnp.eye(2), 1.0)  # [[log 0.5, log 0.5]]
  """
  return jax.nn.log_softmax(-alpha * squared_distances(x, centroids), axis=-1)


def vt_log_density(channel_log_p: Float[Array, "b k"], log_pi: Float[Array, "k"],
                   log_gates: Float[Array, "b k"]) -> Float[Array, "b"]:
  """log f(x) = log sum_k pi_k g_k(x) p_k(x) (unnormalised).

  Args:
    channel_log_p: log p_k(x) of the children.
    log_pi: the log mixture weights (normalised).
    log_gates: hard (`hard_log_gates`) or soft (`soft_log_gates`) log gates.

  Returns:
    The unnormalised log density per point.

  Example::

    vt_log_density(jnp.zeros((1, 2)), jnp.log(jnp.array([0.5, 0.5])),
                   jnp.array([[0.0, -jnp.inf]]))  # [log 0.5]
  """
  return jax.scipy.special.logsumexp(log_pi[None] + log_gates + channel_log_p, axis=-1)


def halfspaces(centroids: Float[Array, "k d"]) -> tuple[Float[Array, "k k d"], Float[Array, "k k"]]:
  """Cell k as half-spaces A[k, j] . x <= beta[k, j] for j != k (row j = k is 0 . x <= 0).

  Example::

    A, beta = halfspaces(jnp.array([[0.0], [2.0]]))  # cell 0: 2 x <= 2, i.e. x <= 1
  """
  a = centroids[None, :, :] - centroids[:, None, :]
  sq = jnp.sum(centroids ** 2, axis=-1)
  beta = 0.5 * (sq[None, :] - sq[:, None])
  return a, beta


def empty_cells(centroids: Float[Array, "k d"]) -> Bool[Array, "k"]:
  """Whether cell k is empty: c_k equals an earlier centroid c_j (j < k) exactly.

  The hard gate gives a tied point to the first nearest centroid (`argmin`), so a later
  duplicate is never selected and V_k is empty; every other cell is unchanged by it.

  Example::

    empty_cells(jnp.array([[0.0, 0.0], [1.0, 0.0], [0.0, 0.0]]))  # [False, False, True]
  """
  k = centroids.shape[0]
  same = jnp.all(centroids[None, :, :] == centroids[:, None, :], axis=-1)  # [K, J]
  earlier = jnp.arange(k)[None, :] < jnp.arange(k)[:, None]  # j < k
  return jnp.any(same & earlier, axis=-1)


def classify_boxes(lo: Float[Array, "k m d"], hi: Float[Array, "k m d"],
                   centroids: Float[Array, "k d"]) -> tuple[Array, Array]:
  """Whether box m is certainly inside cell k, and whether it is certainly outside it.

  Box [lo, hi] lies in the half-space a . x <= beta iff max over the box of a . x =
  sum_i max(a_i lo_i, a_i hi_i) <= beta, and misses it if the minimum exceeds beta.
  "Outside" is certified by one violated half-space, so a box that misses the cell only
  through the intersection of several half-spaces stays "mixed" (conservative: bounds
  stay valid). An empty cell (`empty_cells`: a duplicate of an earlier centroid, whose
  half-space tests would all pass) has every box outside and none inside.

  Args:
    lo: per cell k, M boxes' lower corners.
    hi: their upper corners.
    centroids: the K centroids.

  Returns:
    (inside, outside), bool [K, M] each.
  """
  a, beta = halfspaces(centroids)  # [K, J, D], [K, J]
  al = a[:, None] * lo[:, :, None]  # [K, M, J, D]
  ah = a[:, None] * hi[:, :, None]
  hi_val = jnp.sum(jnp.maximum(al, ah), axis=-1)  # [K, M, J]
  lo_val = jnp.sum(jnp.minimum(al, ah), axis=-1)
  empty = empty_cells(centroids)[:, None]  # [K, 1]
  inside = jnp.all(hi_val <= beta[:, None], axis=-1) & ~empty
  outside = jnp.any(lo_val > beta[:, None], axis=-1) | empty
  return inside, outside


def inner_cube_halfwidth(centroids: Float[Array, "k d"]) -> Float[Array, "k"]:
  """r_k = min_{j != k} ||c_j - c_k||^2 / (2 ||c_j - c_k||_1): the cube c_k +- r_k is in V_k.

  The worst corner of the cube moves (c_j - c_k) . x by r ||c_j - c_k||_1, which reaches
  the bisecting hyperplane at r = ||c_j - c_k||^2 / (2 ||c_j - c_k||_1). A centroid equal
  to c_k does not bound a non-empty V_k (the minimum skips it; inf if no other centroid
  does), and an empty cell (`empty_cells`) gets r_k = 0: a cube of zero volume.

  Example::

    inner_cube_halfwidth(jnp.array([[0.0, 0.0], [2.0, 0.0]]))  # [1., 1.]
  """
  diff = centroids[None, :, :] - centroids[:, None, :]
  l1 = jnp.sum(jnp.abs(diff), axis=-1)
  sq = jnp.sum(diff ** 2, axis=-1)
  k = centroids.shape[0]
  ratio = jnp.where(jnp.eye(k, dtype=bool) | (l1 == 0), jnp.inf, sq / (2.0 * jnp.where(
      l1 == 0, 1.0, l1)))
  return jnp.where(empty_cells(centroids), 0.0, jnp.min(ratio, axis=-1))


def gate_gap(x: Float[Array, "b d"], centroids: Float[Array, "k d"],
             alpha: Float[Array, ""] | float) -> tuple[Float[Array, "b"], Float[Array, "b"]]:
  """The soft -> hard gate gap 1 - w_nearest(x; alpha) and its bound (K-1) exp(-alpha gamma).

  Example::

    gap, bound = gate_gap(jnp.array([[0.1, 0.0]]), jnp.eye(2), 10.0)  # gap <= bound
  """
  d2 = squared_distances(x, centroids)
  log_w = jax.nn.log_softmax(-alpha * d2, axis=-1)
  nearest = jnp.argmin(d2, axis=-1)
  log_w_nearest = jnp.take_along_axis(log_w, nearest[:, None], axis=-1)[:, 0]
  two = -jax.lax.top_k(-d2, 2)[0]  # the two smallest squared distances
  gamma = two[:, 1] - two[:, 0]
  gap = -jnp.expm1(log_w_nearest)
  bound = (centroids.shape[0] - 1) * jnp.exp(-alpha * gamma)
  return gap, bound


def kmeans(x: Float[Array, "n d"], num_clusters: int, key: Array, num_iters: int = 20
           ) -> Float[Array, "k d"]:
  """Lloyd's k-means from a k-means++ seeding (the VT centroids' initialisation).

  An empty cluster keeps its previous centroid. Data with fewer distinct points than
  `num_clusters` give repeated centroids (no cluster means can all differ); the cell of
  a repeat is empty (`empty_cells`), and the gates and bounds treat it so.

  Raises:
    ValueError: bad `num_clusters`, or a concrete `x` holding NaN or +-inf. Traced, one
      non-finite point gives every centroid NaN (never a tessellation built around it).

  Example::

    c = kmeans(jnp.array([[0.0], [0.1], [5.0], [5.1]]), 2, jax.random.key(0))  # ~{0.05, 5.05}
  """
  if num_clusters < 1 or num_clusters > x.shape[0]:
    raise ValueError(f"num_clusters must be in [1, {x.shape[0]}], got {num_clusters}")
  validation.check_finite("x", x)
  keys = jax.random.split(key, num_clusters)
  first = x[jax.random.randint(keys[0], (), 0, x.shape[0])]
  init = jnp.zeros((num_clusters, x.shape[1]), x.dtype).at[0].set(first)

  def seed(i, carry):  # k-means++: next centroid drawn with probability ~ d^2 to the nearest
    c, d2 = carry
    pick = x[jax.random.categorical(keys[i], jnp.log(d2 + 1e-30))]
    return c.at[i].set(pick), jnp.minimum(d2, jnp.sum((x - pick) ** 2, axis=-1))

  init, _ = jax.lax.fori_loop(1, num_clusters, seed, (init, jnp.sum((x - first) ** 2, axis=-1)))

  def step(c, _):
    assign = jnp.argmin(squared_distances(x, c), axis=-1)
    onehot = jax.nn.one_hot(assign, num_clusters, dtype=x.dtype)  # [N, K]
    count = jnp.sum(onehot, axis=0)
    mean = (onehot.T @ x) / jnp.maximum(count, 1.0)[:, None]
    return jnp.where(count[:, None] > 0, mean, c), None

  centroids = jax.lax.scan(step, init, None, length=num_iters)[0]
  return jnp.where(jnp.all(jnp.isfinite(x)), centroids, jnp.nan)


def nearest_cell(x: Float[Array, "b d"], centroids: Float[Array, "k d"]) -> Int[Array, "b"]:
  """argmin_k ||x - c_k||^2 (the hard gate's cell index).

  A row whose distances are not all finite (a NaN or Inf in the point or a centroid) gets
  -1, no cell: an argmin over NaN would name cell 0 or the NaN's cell.

  Example:
    >>> import jax.numpy as jnp
    >>> nearest_cell(jnp.array([[0.2], [0.9], [jnp.nan]]), jnp.array([[0.0], [1.0]])).tolist()
    [0, 1, -1]
  """
  d2 = squared_distances(x, centroids)
  cell = jnp.argmin(d2, axis=-1)
  return jnp.where(jnp.all(jnp.isfinite(d2), axis=-1), cell, -1)


__all__ = ["classify_boxes", "empty_cells", "gate_gap", "halfspaces", "hard_log_gates",
           "inner_cube_halfwidth", "kmeans", "nearest_cell", "soft_log_gates", "squared_distances",
           "vt_log_density"]
