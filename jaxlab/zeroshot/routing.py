"""Granularity-aware routing: discover class groups in semantic space and route to them.

Stage S2 of GA-ZSCE (reconstruction): cluster the class semantics (seen and unseen) into
G groups with k-means on the unit sphere (cosine k-means), then route each class either
to its cluster's head (hard) or to every head with softmax weights over its cluster
similarities (soft). jaxlab interpretation: the spec leaves the clustering ([O]: "k-means
or spectral") and the routing ([O]: hard or soft) open; both are config knobs.

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

ROUTINGS = ("hard", "soft")


def _unit(x):
  return x / jnp.maximum(jnp.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def kmeans(x: Float[Array, "n d"], num_clusters: int, key: jax.Array, *,
           num_iters: int = 30) -> tuple[Int[Array, " n"], Float[Array, "k d"]]:
  """Cosine k-means (k-means++ seeding, fixed Lloyd iterations; jittable).

  Args:
    x: points (rows are normalised first), [n, d].
    num_clusters: k, 1 <= k <= n.
    key: PRNG key for the seeding.
    num_iters: Lloyd iterations.

  Returns:
    (assignment [n], unit centres [k, d]). An emptied cluster keeps its last centre.
  """
  if x.ndim != 2:
    raise ValueError(f"x must be [n, d], got shape {x.shape}")
  if not 1 <= num_clusters <= x.shape[0]:
    raise ValueError(f"num_clusters must be in [1, {x.shape[0]}], got {num_clusters}")
  x = _unit(x.astype(jnp.float32))
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
    return centers.at[i].set(x[idx]), k

  centers, _ = jax.lax.fori_loop(1, num_clusters, seed, (centers, key))

  def lloyd(_, centers):
    assign = jnp.argmax(x @ centers.T, -1)
    one_hot = jax.nn.one_hot(assign, num_clusters)
    sums = one_hot.T @ x
    counts = one_hot.sum(0)[:, None]
    return jnp.where(counts > 0, _unit(sums), centers)

  centers = jax.lax.fori_loop(0, num_iters, lloyd, centers)
  return jnp.argmax(x @ centers.T, -1), centers


def route(x: Float[Array, "n d"], centers: Float[Array, "k d"], *, routing: str = "hard",
          temperature: float = 0.1) -> Float[Array, "n k"]:
  """Routing weights of each point over the k group heads (rows sum to 1).

  Args:
    x: semantics, [n, d].
    centers: cluster centres, [k, d].
    routing: "hard" (one-hot of the nearest centre by cosine) or "soft"
      (softmax of cosine similarities / temperature). jaxlab interpretation.
    temperature: soft-routing temperature (> 0).
  """
  if routing not in ROUTINGS:
    raise ValueError(f"routing must be one of {ROUTINGS}, got {routing!r}")
  if x.ndim != 2 or centers.ndim != 2 or x.shape[1] != centers.shape[1]:
    raise ValueError(f"x [n, d] and centers [k, d] must share d; got {x.shape}, {centers.shape}")
  if temperature <= 0:
    raise ValueError(f"temperature must be > 0, got {temperature}")
  sims = _unit(x) @ _unit(centers).T
  if routing == "hard":
    return jax.nn.one_hot(jnp.argmax(sims, -1), centers.shape[0])
  return jax.nn.softmax(sims / temperature, -1)


def group_mean(values: Float[Array, " n"], weights: Float[Array, "n k"]) -> Float[Array, ""]:
  """Per-group loss normalisation: the mean inside each group, then the mean over groups.

  `weights` are (soft) group memberships; groups with no mass are left out, so a large or
  easy group cannot dominate the gradient (spec S2).
  """
  if values.ndim != 1 or weights.ndim != 2 or weights.shape[0] != values.shape[0]:
    raise ValueError(f"values [n] and weights [n, k] must agree; got {values.shape}, "
                     f"{weights.shape}")
  mass = weights.sum(0)
  per_group = (weights * values[:, None]).sum(0) / jnp.maximum(mass, 1e-12)
  used = mass > 1e-6
  return jnp.sum(jnp.where(used, per_group, 0.0)) / jnp.maximum(used.sum(), 1)
