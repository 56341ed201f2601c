"""A layered RAT-SPN / EinsumNet circuit in log space, with Gaussian (or HFV-gated) leaves.

Structure (Peharz et al. 2020, "Einsum Networks"; RAT-SPN): `num_replicas` random
balanced region trees over the `num_vars` variables. Each replica permutes the
variables (a fixed, seeded structure) and splits them into `2**depth` contiguous leaf
regions; each leaf region holds `leaf_units` fully factorised leaf distributions.
Each of the `depth` levels pairs sibling regions and applies one *einsum layer*:
the outer product of the two regions' units (product nodes, a sum of log-densities)
followed by `sum_units` sum nodes over the `I x I` products,

  out[b, r, q, s] = log sum_ij W[r, q, s, i, j] exp(left[b, r, q, i] + right[b, r, q, j]),

computed with one `einsum` after subtracting the per-region maxima (the EinsumNet
trick), so there is no per-node Python loop. The last level emits `num_channels`
root channels per replica, and each channel mixes its replicas. Every channel p_k is a
smooth, decomposable, normalised density; a root (`jaxlab.pc.models`) combines them.

Queries share one propagation: the leaves are replaced by a per-variable log factor
and the layers run unchanged.

* "density": log p_k(x) (normalised leaves).
* "box": log of the channel's mass on the box [lo, hi], the leaves replaced by their
  interval masses (exact, since every channel is smooth and decomposable).
* "raw_density" / "raw_normalizer": with HFV leaves, the unnormalised gated leaves and
  the circuit's normaliser Z = circuit(leaf normalisers) (exact by the same argument).

Leaves. With `leaf_gate="none"` a leaf factor is a mixture of `leaf_components`
Gaussians (1 = plain Gaussian leaves, the paper's EinsumNet). With `leaf_gate="voronoi"`
it is an HFV leaf (jaxlab interpretation of the paper's HFV-PC with 1-D factors): a
Voronoi-tessellation sum node over `leaf_components` 1-D Gaussians whose cells are the
intervals between midpoints of the sorted 1-D centroids,

  f(x) = sum_k pi_k 1[x in V_k] N(x; mu_k, s_k),  Z = sum_k pi_k (F_k(hi_k) - F_k(lo_k)),

normalised exactly by Z. Because every cell of a 1-D factor is an interval, the gates of
a product of such leaves form a Cartesian (box) partition aligned with the product
split, which is the HFV condition (Thm 3.5): the circuit stays exactly normalisable in
O(``|C|`` K). The centroid of component k is `mean + centroid_offset` (offset initialised at
0, so each component starts owning the cell around its own mean).
"""

import dataclasses
import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import logsumexp
from jaxtyping import Array, Float

from jaxlab.pc import gaussian

QUERIES = ("density", "box", "raw_density", "raw_normalizer")
LEAF_GATES = ("none", "voronoi")


@dataclasses.dataclass(frozen=True)
class CircuitConfig:
  """Shape and structure of a `Circuit`.

  Attributes:
    num_vars: D, the number of variables.
    depth: product levels per replica; a replica has 2**depth leaf regions (<= D).
    num_replicas: R, the random region trees mixed at the root channels.
    leaf_units: I, leaf distributions per leaf region.
    sum_units: S, sum nodes per inner region.
    num_channels: C, root channels (the children of the root sum / VT node).
    leaf_components: Kh, 1-D Gaussians per leaf factor (1 = plain Gaussian leaf).
    leaf_gate: "none" (mixture leaves) or "voronoi" (HFV leaves; jaxlab interpretation).
    min_scale: the smallest leaf standard deviation (scale = min_scale + softplus(raw)).
    structure_seed: seeds the replicas' variable permutations (the structure, not params).
  """
  num_vars: int
  depth: int = 1
  num_replicas: int = 4
  leaf_units: int = 8
  sum_units: int = 8
  num_channels: int = 8
  leaf_components: int = 1
  leaf_gate: str = "none"
  min_scale: float = 0.05
  structure_seed: int = 0

  def __post_init__(self):
    for name in ("num_vars", "depth", "num_replicas", "leaf_units", "sum_units",
                 "num_channels", "leaf_components"):
      if int(getattr(self, name)) < 1:
        raise ValueError(f"CircuitConfig.{name} must be >= 1, got {getattr(self, name)}")
    if 2 ** self.depth > self.num_vars:
      raise ValueError(f"CircuitConfig.depth={self.depth} needs 2**depth <= num_vars="
                       f"{self.num_vars} leaf regions")
    if self.leaf_gate not in LEAF_GATES:
      raise ValueError(f"CircuitConfig.leaf_gate must be one of {LEAF_GATES}, "
                       f"got {self.leaf_gate!r}")
    if not self.min_scale > 0:
      raise ValueError(f"CircuitConfig.min_scale must be > 0, got {self.min_scale}")


def region_masks(config: CircuitConfig) -> np.ndarray:
  """The leaf regions as a 0/1 mask [R, 2**depth, D]: replica r's region p holds variable d.

  Regions 2q and 2q+1 are siblings at every level, so each replica is a balanced binary
  region tree over a seeded permutation of the variables.

  Example::

    region_masks(CircuitConfig(num_vars=4, depth=1, num_replicas=1)).sum(-1)  # [[2., 2.]]
  """
  rng = np.random.default_rng(config.structure_seed)
  num_regions = 2 ** config.depth
  mask = np.zeros((config.num_replicas, num_regions, config.num_vars), np.float32)
  for r in range(config.num_replicas):  # structure construction, once, outside any jit
    for p, chunk in enumerate(np.array_split(rng.permutation(config.num_vars), num_regions)):
      mask[r, p, chunk] = 1.0
  return mask


def interval_cells(centroids: Float[Array, "... k"]) -> tuple[Float[Array, "... k"],
                                                               Float[Array, "... k"]]:
  """The 1-D Voronoi cells [lo_k, hi_k) of centroids along the last axis.

  lo_k is the midpoint to the nearest smaller centroid (-inf if none), hi_k the midpoint
  to the nearest larger one (+inf if none): the cells partition the real line. Ties go
  to the first index, as in the leaves' nearest-centroid gate (`argmin`): of equal
  centroids the first owns the interval and each later one gets the empty cell
  lo_k = hi_k = c_k (zero mass).

  Example::

    interval_cells(jnp.array([0.0, 2.0, -1.0]))  # lo = [-0.5, 1, -inf], hi = [1, inf, -0.5]
    interval_cells(jnp.array([0.0, 0.0]))        # lo = [-inf, 0], hi = [inf, 0]
  """
  c = centroids
  k = c.shape[-1]
  mid = 0.5 * (c[..., :, None] + c[..., None, :])  # [..., k, j]
  below = c[..., None, :] < c[..., :, None]
  above = c[..., None, :] > c[..., :, None]
  lo = jnp.max(jnp.where(below, mid, -jnp.inf), axis=-1)
  hi = jnp.min(jnp.where(above, mid, jnp.inf), axis=-1)
  earlier = jnp.arange(k)[None, :] < jnp.arange(k)[:, None]  # j < k
  empty = jnp.any((c[..., None, :] == c[..., :, None]) & earlier, axis=-1)  # a tie lost to j
  return jnp.where(empty, c, lo), jnp.where(empty, c, hi)


def _softplus_inverse(y: float) -> float:
  return math.log(math.expm1(y))


class Circuit(nn.Module):
  """The layered circuit; `__call__(a, b, query)` returns per-channel log values [B, C].

  Attributes:
    config: the `CircuitConfig`.
    dtype: the computation dtype.
    param_dtype: the parameters' dtype.

  Example::

    cfg = CircuitConfig(num_vars=2, num_channels=3)
    model = Circuit(cfg)
    x = jnp.zeros((5, 2))
    params = model.init(jax.random.key(0), x)
    model.apply(params, x).shape  # (5, 3): log p_k(x) per root channel
  """
  config: CircuitConfig
  dtype: Any = jnp.float32
  param_dtype: Any = jnp.float32

  def setup(self):
    c = self.config
    r, p, i, d, k = (c.num_replicas, 2 ** c.depth, c.leaf_units, c.num_vars,
                     c.leaf_components)
    leaf = (r, p, i, d, k)
    self.leaf_mean = self.param("leaf_mean", nn.initializers.normal(1.0), leaf, self.param_dtype)
    self.leaf_raw_scale = self.param(
        "leaf_raw_scale", nn.initializers.constant(_softplus_inverse(1.0 - c.min_scale)), leaf,
        self.param_dtype)
    self.leaf_logits = self.param("leaf_logits", nn.initializers.zeros, leaf, self.param_dtype)
    if c.leaf_gate == "voronoi":
      self.centroid_offset = self.param("centroid_offset", nn.initializers.zeros, leaf,
                                        self.param_dtype)
    layers = []
    width = i
    for level in range(c.depth):
      out = c.num_channels if level == c.depth - 1 else c.sum_units
      regions = p // 2 ** (level + 1)
      layers.append(self.param(f"einsum_{level}", nn.initializers.normal(0.5),
                               (r, regions, out, width, width), self.param_dtype))
      width = out
    self.einsum_logits = layers
    self.replica_logits = self.param("replica_logits", nn.initializers.zeros,
                                     (c.num_channels, r), self.param_dtype)
    self.mask = jnp.asarray(region_masks(c), bool)

  def leaf_parameters(self) -> dict[str, Array]:
    """Means, scales, log mixture weights and (HFV) cells of the leaf components."""
    c = self.config
    dt = self.dtype
    mean = jnp.asarray(self.leaf_mean, dt)
    scale = c.min_scale + jax.nn.softplus(jnp.asarray(self.leaf_raw_scale, dt))
    log_w = jax.nn.log_softmax(jnp.asarray(self.leaf_logits, dt), axis=-1)
    if c.leaf_gate == "voronoi":
      lo, hi = interval_cells(mean + jnp.asarray(self.centroid_offset, dt))
    else:
      lo = jnp.full(mean.shape, -jnp.inf, dt)
      hi = jnp.full(mean.shape, jnp.inf, dt)
    return dict(mean=mean, scale=scale, log_w=log_w, lo=lo, hi=hi)

  def _leaf_log_normalizer(self, lp: dict[str, Array]) -> Array:
    """log Z of each leaf factor [R, P, I, D] (0 for ungated leaves, up to rounding)."""
    return logsumexp(lp["log_w"] + gaussian.normal_log_interval_mass(
        lp["mean"], lp["scale"], lp["lo"], lp["hi"]), axis=-1)

  def _leaf_factors(self, a: Array, b: Array | None, query: str) -> Array:
    """Per-variable leaf log factors [B, R, P, I, D] for the query."""
    lp = self.leaf_parameters()
    if query == "raw_normalizer":
      return self._leaf_log_normalizer(lp)[None]
    # Plain Gaussian leaves: the mixture is its one component, so the component axis is
    # dropped (the same values as a logsumexp over it). Besides, jaxlib 0.10.2's YNN
    # reduction crashes the process (SIGSEGV) on the gradient's batch sum of the rank-7
    # [seeds, B, R, P, I, D, 1] tensor that vmapped training over seeds forms with it.
    single = self.config.leaf_gate == "none" and lp["mean"].shape[-1] == 1
    if single:
      lp = {k: v[..., 0] for k, v in lp.items()}
    shape = (a.shape[0], 1, 1, 1, a.shape[1]) + (() if single else (1,))
    if query == "box":
      lo = jnp.maximum(jnp.reshape(a, shape), lp["lo"])
      hi = jnp.minimum(jnp.reshape(b, shape), lp["hi"])
      comp = gaussian.normal_log_interval_mass(lp["mean"], lp["scale"], lo, hi)
    else:
      x = jnp.reshape(a, shape)
      if self.config.leaf_gate == "voronoi":
        # The gate is the nearest 1-D centroid, the first on ties (exactly one component
        # per point); the normaliser uses the same cells as intervals (`interval_cells`).
        centroid = lp["mean"] + jnp.asarray(self.centroid_offset, self.dtype)
        nearest = jnp.argmin(jnp.abs(x - centroid), axis=-1)
        inside = jax.nn.one_hot(nearest, centroid.shape[-1], dtype=bool)
      else:
        inside = jnp.ones(lp["mean"].shape, bool)
      comp = jnp.where(inside, gaussian.normal_logpdf(x, lp["mean"], lp["scale"]), -jnp.inf)
    if single:
      return lp["log_w"] + comp
    out = logsumexp(lp["log_w"] + comp, axis=-1)
    if query in ("density", "box") and self.config.leaf_gate == "voronoi":
      out = out - self._leaf_log_normalizer(lp)
    return out

  def _propagate(self, factors: Array) -> Array:
    """Leaf log factors [B, R, P, I, D] -> root channel log values [B, C]."""
    # Leaf units: product over the variables of each region (a masked sum in log space).
    h = jnp.sum(jnp.where(self.mask[None, :, :, None, :], factors, 0.0), axis=-1)
    for logits in self.einsum_logits:
      logits = jnp.asarray(logits, self.dtype)
      r, q, s, i, j = logits.shape
      w = jax.nn.softmax(jnp.reshape(logits, (r, q, s, i * j)), axis=-1).reshape(logits.shape)
      left, right = h[:, :, 0::2], h[:, :, 1::2]  # sibling regions [B, R, Q, I]
      ml = jax.lax.stop_gradient(jnp.max(left, axis=-1, keepdims=True))
      mr = jax.lax.stop_gradient(jnp.max(right, axis=-1, keepdims=True))
      # An all -inf region (an empty box) gives -inf out, not NaN.
      ml = jnp.where(jnp.isfinite(ml), ml, 0.0)
      mr = jnp.where(jnp.isfinite(mr), mr, 0.0)
      prod = jnp.einsum("brqi,brqj,rqsij->brqs", jnp.exp(left - ml), jnp.exp(right - mr), w)
      h = jnp.log(prod) + ml + mr
    top = h[:, :, 0, :]  # [B, R, C]
    log_v = jax.nn.log_softmax(jnp.asarray(self.replica_logits, self.dtype), axis=-1)  # [C, R]
    return logsumexp(log_v.T[None] + top, axis=1)

  def __call__(self, a: Float[Array, "b d"], b: Float[Array, "b d"] | None = None,
               query: str = "density") -> Float[Array, "b c"]:
    """Per-channel log values of a query.

    Args:
      a: the points x (density queries) or the boxes' lower corners ("box") [B, D].
      b: the boxes' upper corners [B, D] ("box" only).
      query: one of `QUERIES` ("raw_normalizer" ignores the values of `a` and returns
        the same log Z row for each of its B rows).

    Returns:
      [B, C] log densities / log box masses / log normalisers of the root channels.
    """
    if query not in QUERIES:
      raise ValueError(f"query must be one of {QUERIES}, got {query!r}")
    if a.ndim != 2 or a.shape[1] != self.config.num_vars:
      raise ValueError(f"expected inputs of shape [B, {self.config.num_vars}], got {a.shape}")
    if query == "box" and (b is None or b.shape != a.shape):
      raise ValueError("a box query needs upper corners `b` of the same shape as `a`")
    a = jnp.asarray(a, self.dtype)
    b = None if b is None else jnp.asarray(b, self.dtype)
    out = self._propagate(self._leaf_factors(a, b, query))
    if query == "raw_normalizer":
      out = jnp.broadcast_to(out, (a.shape[0], out.shape[1]))
    return out
