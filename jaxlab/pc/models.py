"""Root nodes over a `Circuit`'s channels: the base mixture (EinsumNet / HFV) and the VT root.

* `root="mixture"`: f(x) = sum_k pi_k p_k(x), a smooth sum node: exactly normalised
  (with plain leaves this is the base EinsumNet; with `leaf_gate="voronoi"` leaves it
  is the HFV-PC, also exact).
* `root="vt"`: the VT sum node of `jaxlab.pc.voronoi` over the channels, centroids
  c_k in R^D (k-means initialised by `init_params`, trained jointly through the soft
  gate). Hard gates by default; `alpha` selects the soft gate of temperature alpha.
  The output is unnormalised; `jaxlab.pc.bounds` brackets its normaliser.
"""

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from jaxlab.pc import voronoi
from jaxlab.pc.circuit import Circuit, CircuitConfig

ROOTS = ("mixture", "vt")


class PCModel(nn.Module):
  """A circuit with a mixture or VT root; `__call__(x, alpha)` returns log f(x) [B].

  Attributes:
    circuit: the `CircuitConfig` of the channels (num_channels = K children of the root).
    root: "mixture" or "vt".
    dtype: the computation dtype.
    param_dtype: the parameters' dtype.

  Example::

    model = PCModel(CircuitConfig(num_vars=2, num_channels=4), root="vt")
    x = jax.random.normal(jax.random.key(0), (100, 2))
    params = init_params(model, jax.random.key(1), x)
    model.apply(params, x).shape              # (100,): hard-gated log f(x)
    model.apply(params, x, alpha=5.0).shape   # soft gate at alpha = 5
  """
  circuit: CircuitConfig
  root: str = "mixture"
  dtype: Any = jnp.float32
  param_dtype: Any = jnp.float32

  def setup(self):
    if self.root not in ROOTS:
      raise ValueError(f"PCModel.root must be one of {ROOTS}, got {self.root!r}")
    self.body = Circuit(self.circuit, dtype=self.dtype, param_dtype=self.param_dtype)
    self.root_logits = self.param("root_logits", nn.initializers.zeros,
                                  (self.circuit.num_channels,), self.param_dtype)
    if self.root == "vt":
      self.centroids = self.param(
          "centroids", nn.initializers.normal(1.0),
          (self.circuit.num_channels, self.circuit.num_vars), self.param_dtype)

  def log_pi(self) -> Float[Array, "k"]:
    """The root's log mixture weights."""
    return jax.nn.log_softmax(jnp.asarray(self.root_logits, self.dtype))

  def cell_centroids(self) -> Float[Array, "k d"]:
    """The VT centroids (a ValueError for a mixture root)."""
    if self.root != "vt":
      raise ValueError("cell_centroids needs root='vt'")
    return jnp.asarray(self.centroids, self.dtype)

  def channels(self, x: Float[Array, "b d"]) -> Float[Array, "b k"]:
    """log p_k(x) of the root's children."""
    return self.body(x)

  def box_mass(self, lo: Float[Array, "m d"], hi: Float[Array, "m d"]) -> Float[Array, "m k"]:
    """log int_[lo, hi] p_k of every child k (exact: the children are decomposable)."""
    return self.body(lo, hi, query="box")

  def raw(self, x: Float[Array, "b d"]) -> tuple[Float[Array, "b"], Float[Array, ""]]:
    """(log f_raw(x), log Z) with unnormalised HFV leaves (mixture root only).

    f_raw / Z is an exactly normalised density of the same family as `__call__`, which
    normalises each leaf instead (the two parametrisations differ only in how the sum
    weights absorb the leaves' normalisers); for plain leaves both agree and log Z = 0.
    """
    if self.root != "mixture":
      raise ValueError("raw needs root='mixture'")
    log_pi = self.log_pi()
    log_f = jax.scipy.special.logsumexp(log_pi + self.body(x, query="raw_density"), axis=-1)
    log_z = jax.scipy.special.logsumexp(log_pi + self.body(x[:1], query="raw_normalizer")[0])
    return log_f, log_z

  def __call__(self, x: Float[Array, "b d"], alpha: Float[Array, ""] | float | None = None
               ) -> Float[Array, "b"]:
    """log f(x): normalised for a mixture root, unnormalised (hard or soft gates) for VT.

    Args:
      x: points [B, D].
      alpha: VT only: None for hard gates, else the soft gate's inverse temperature.

    Returns:
      [B] log f(x).
    """
    log_p = self.body(x)
    log_pi = self.log_pi()
    if self.root == "mixture":
      return jax.scipy.special.logsumexp(log_pi + log_p, axis=-1)
    c = self.cell_centroids()
    gates = (voronoi.hard_log_gates(x, c) if alpha is None
             else voronoi.soft_log_gates(x, c, alpha))
    return voronoi.vt_log_density(log_p, log_pi, gates)


def init_params(model: PCModel, key: Array, x: Float[Array, "n d"], *,
                kmeans_iters: int = 20, data_init: bool = True) -> dict:
  """Initialises `model`'s parameters from training data.

  Leaf means start at the coordinates of random training points (`data_init`; a common
  EinsumNet practice, here a jaxlab choice), and a VT root's centroids at k-means
  centroids of `x` (the paper's initialisation).

  Args:
    model: the `PCModel`.
    key: PRNG key.
    x: training points [N, D] (N >= num_channels for a VT root).
    kmeans_iters: Lloyd iterations for the VT centroids.
    data_init: whether leaf means start at data coordinates (else N(0, 1)).

  Returns:
    The parameter tree (``{"params": ...}``).
  """
  if x.ndim != 2 or x.shape[1] != model.circuit.num_vars:
    raise ValueError(f"x must be [N, {model.circuit.num_vars}], got {x.shape}")
  k_init, k_means, k_data = jax.random.split(key, 3)
  params = model.init(k_init, x[:1])
  p = params["params"]
  if data_init:
    shape = p["body"]["leaf_mean"].shape  # [R, P, I, D, Kh]
    idx = jax.random.randint(k_data, shape[:3] + shape[4:], 0, x.shape[0])  # [R, P, I, Kh]
    means = jnp.moveaxis(x[idx], -1, -2)  # [R, P, I, Kh, D] -> [R, P, I, D, Kh]
    p = {**p, "body": {**p["body"], "leaf_mean": means.astype(p["body"]["leaf_mean"].dtype)}}
  if model.root == "vt":
    c = voronoi.kmeans(x, model.circuit.num_channels, k_means, kmeans_iters)
    p = {**p, "centroids": c.astype(p["centroids"].dtype)}
  return {"params": p}
