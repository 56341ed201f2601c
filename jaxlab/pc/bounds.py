"""Certified, anytime bounds Z- <= Z <= Z+ on a VT root's normaliser, by box bisection.

Z = sum_k pi_k int_{V_k} p_k, and the box integral of a decomposable child p_k is exact
(`PCModel.box_mass`). Inside a bounded domain Omega each cell k keeps a set of *mixed*
boxes (neither certified inside V_k nor outside it, `voronoi.classify_boxes`), starting
from Omega itself. One refinement step bisects every mixed box along its widest side;
a child certified inside adds its mass to the lower bound, a child certified outside is
dropped, the rest stay mixed (an empty cell, `voronoi.empty_cells`, has every box
outside and no inner cube). Per cell,

  Z_k- = max(inside mass, mass of the inner cube c_k +- r_k)        (B_k- of the paper)
  Z_k+ = inside mass + mixed mass + frozen mass + (1 - p_k(Omega)),

the last term the children's mass outside Omega (each p_k is normalised). A step only
moves mass from "mixed" to "inside" or removes it, so Z- never decreases and Z+ never
increases (up to float rounding): an anytime bracket. With a fixed `capacity` of mixed
boxes per cell (fixed shapes under jit), the heaviest mixed boxes are kept for
refinement and the others are *frozen*: they stay in Z+ and are never split again.

jaxlab interpretation: the paper's outer box B_k+ (2|S| LPs per cell) is replaced by
this bisection from Omega, whose union of non-excluded boxes is itself an outer set,
so no LP solver is needed; `domain_halfwidth` (Omega = [-h, h]^D) and `capacity` are
knobs. Everything is in log space so bounds stay finite in high dimension.

Likelihood bracket (as the bounds imply, whatever the paper's labels):
log f(x) - log Z+ <= log p(x) <= log f(x) - log Z-.
"""

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.scipy.special import logsumexp
from jaxtyping import Array, Float

from jaxlab.pc import voronoi
from jaxlab.pc.gaussian import log1mexp

MassFn = Callable[[Array, Array], Array]  # (lo [M, D], hi [M, D]) -> log masses [M, K]


class RefineState(NamedTuple):
  """Per-cell bisection state (K cells, `capacity` mixed-box slots, D dims)."""
  lo: Array          # [K, C, D] mixed boxes' lower corners.
  hi: Array          # [K, C, D] upper corners.
  log_mass: Array    # [K, C] log p_k(box).
  valid: Array       # [K, C] bool: slot holds a mixed box.
  log_inside: Array  # [K] log of the mass of boxes certified inside V_k.
  log_frozen: Array  # [K] log of the mass of mixed boxes dropped for capacity.


def _logaddexp(a: Array, b: Array) -> Array:
  return logsumexp(jnp.stack([a, b]), axis=0)


def init_state(mass_fn: MassFn, num_cells: int, domain_lo: Float[Array, "d"],
               domain_hi: Float[Array, "d"], capacity: int) -> tuple[RefineState, Array]:
  """The state before refinement (one mixed box, Omega, per cell) and log(1 - p_k(Omega)).

  Args:
    mass_fn: box log masses of the K children.
    num_cells: K.
    domain_lo: Omega's lower corner [D].
    domain_hi: Omega's upper corner [D] (> domain_lo).
    capacity: mixed-box slots per cell (>= 1).

  Returns:
    (state, log_outside [K]).
  """
  if capacity < 1:
    raise ValueError(f"capacity must be >= 1, got {capacity}")
  d = domain_lo.shape[0]
  log_omega = mass_fn(domain_lo[None], domain_hi[None])[0]  # [K]
  lo = jnp.broadcast_to(domain_lo, (num_cells, capacity, d))
  hi = jnp.broadcast_to(domain_hi, (num_cells, capacity, d))
  valid = jnp.zeros((num_cells, capacity), bool).at[:, 0].set(True)
  log_mass = jnp.where(valid, log_omega[:, None], -jnp.inf)
  neg = jnp.full((num_cells,), -jnp.inf)
  log_outside = log1mexp(jnp.minimum(log_omega, 0.0))
  return RefineState(lo, hi, log_mass, valid, neg, neg), log_outside


def refine_step(state: RefineState, mass_fn: MassFn, centroids: Float[Array, "k d"]
                ) -> RefineState:
  """One bisection of every mixed box (see the module docstring)."""
  k, cap, d = state.lo.shape
  width = state.hi - state.lo
  dim = jax.nn.one_hot(jnp.argmax(width, axis=-1), d, dtype=bool)  # [K, C, D]
  mid = 0.5 * (state.lo + state.hi)
  lo = jnp.concatenate([state.lo, jnp.where(dim, mid, state.lo)], axis=1)  # [K, 2C, D]
  hi = jnp.concatenate([jnp.where(dim, mid, state.hi), state.hi], axis=1)
  valid = jnp.concatenate([state.valid, state.valid], axis=1)
  out = mass_fn(lo.reshape(k * 2 * cap, d), hi.reshape(k * 2 * cap, d))
  log_mass = jnp.diagonal(out.reshape(k, 2 * cap, k), axis1=0, axis2=2).T  # [K, 2C]: p_k only
  inside, outside = voronoi.classify_boxes(lo, hi, centroids)
  log_in = jnp.where(valid & inside, log_mass, -jnp.inf)
  mixed = valid & ~inside & ~outside
  score = jnp.where(mixed, log_mass, -jnp.inf)
  _, idx = jax.lax.top_k(score, cap)  # the heaviest mixed boxes stay refinable
  kept = jax.vmap(lambda i: jnp.zeros((2 * cap,), bool).at[i].set(True))(idx) & mixed
  log_dropped = jnp.where(mixed & ~kept, log_mass, -jnp.inf)
  take = lambda a: jnp.take_along_axis(a, idx if a.ndim == 2 else idx[..., None], axis=1)
  return RefineState(
      lo=take(lo), hi=take(hi), log_mass=jnp.where(take(kept), take(log_mass), -jnp.inf),
      valid=take(kept),
      log_inside=_logaddexp(state.log_inside, logsumexp(log_in, axis=1)),
      log_frozen=_logaddexp(state.log_frozen, logsumexp(log_dropped, axis=1)))


def cell_bounds(state: RefineState, log_outside: Float[Array, "k"],
                log_cube: Float[Array, "k"]) -> tuple[Float[Array, "k"], Float[Array, "k"]]:
  """(log Z_k-, log Z_k+) per cell from a refinement state."""
  lower = jnp.maximum(state.log_inside, log_cube)
  upper = logsumexp(jnp.stack([state.log_inside, state.log_frozen,
                               logsumexp(state.log_mass, axis=1), log_outside]), axis=0)
  return lower, upper


def inner_cube_log_mass(mass_fn: MassFn, centroids: Float[Array, "k d"],
                        domain_lo: Float[Array, "d"], domain_hi: Float[Array, "d"]
                        ) -> Float[Array, "k"]:
  """log p_k(B_k-), B_k- the cube c_k +- r_k clipped to Omega (-inf if empty).

  An empty cell (`voronoi.empty_cells`, a duplicate of an earlier centroid) has no inner
  cube: its log mass is -inf whatever `mass_fn` returns for a zero-width box.
  """
  r = voronoi.inner_cube_halfwidth(centroids)[:, None]
  r = jnp.where(jnp.isfinite(r), r, jnp.max(domain_hi - domain_lo))  # K = 1: all of Omega
  lo = jnp.clip(centroids - r, domain_lo, domain_hi)
  hi = jnp.clip(centroids + r, domain_lo, domain_hi)
  out = mass_fn(lo, hi)  # [K, K]
  return jnp.where(voronoi.empty_cells(centroids), -jnp.inf, jnp.diagonal(out))


def anytime_log_z_bounds(mass_fn: MassFn, log_pi: Float[Array, "k"],
                         centroids: Float[Array, "k d"], *, domain_halfwidth: float,
                         num_steps: int, capacity: int
                         ) -> tuple[Float[Array, "s"], Float[Array, "s"]]:
  """log Z- and log Z+ after 0, 1, ..., num_steps bisection steps (jit-compatible).

  Args:
    mass_fn: `(lo [M, D], hi [M, D]) -> [M, K]` box log masses of the VT node's children,
      e.g. `lambda lo, hi: model.apply(params, lo, hi, method="box_mass")`.
    log_pi: the VT node's log mixture weights.
    centroids: its centroids.
    domain_halfwidth: Omega = [-h, h]^D (jaxlab interpretation; data are standardised).
    num_steps: bisection steps (>= 0).
    capacity: mixed boxes refined per cell (more = tighter, slower).

  Returns:
    ([num_steps + 1] log Z-, [num_steps + 1] log Z+); step 0 is the inner cube vs Omega.

  Example::

    lz_lo, lz_hi = anytime_log_z_bounds(fn, log_pi, c, domain_halfwidth=6.0, num_steps=20,
                                        capacity=512)
  """
  if num_steps < 0:
    raise ValueError(f"num_steps must be >= 0, got {num_steps}")
  if not domain_halfwidth > 0:
    raise ValueError(f"domain_halfwidth must be > 0, got {domain_halfwidth}")
  d = centroids.shape[1]
  dom_lo = jnp.full((d,), -domain_halfwidth, centroids.dtype)
  dom_hi = jnp.full((d,), domain_halfwidth, centroids.dtype)
  state, log_outside = init_state(mass_fn, centroids.shape[0], dom_lo, dom_hi, capacity)
  log_cube = inner_cube_log_mass(mass_fn, centroids, dom_lo, dom_hi)

  def total(s):
    lo_k, hi_k = cell_bounds(s, log_outside, log_cube)
    return logsumexp(log_pi + lo_k), logsumexp(log_pi + hi_k)

  def step(s, _):
    s = refine_step(s, mass_fn, centroids)
    return s, total(s)

  _, (lows, highs) = jax.lax.scan(step, state, None, length=num_steps)
  low0, high0 = total(state)
  return (jnp.concatenate([low0[None], lows]), jnp.concatenate([high0[None], highs]))


def strip_log_z_2d(mass_fn: MassFn, log_pi: Float[Array, "k"], centroids: Float[Array, "k d"],
                   *, halfwidth: float, num_strips: int
                   ) -> tuple[Float[Array, ""], Float[Array, ""]]:
  """log Z of a 2-D VT root by strip quadrature, a check on the bounds independent of them.

  The x_1 axis over [-L, L] is cut into `num_strips` strips of width h = 2L / num_strips.
  A Voronoi cell is convex, so the vertical line through a strip's midpoint meets V_k in
  one interval [a_k, b_k] (possibly empty or unbounded), read off the cell's half-spaces;
  the strip's contribution is the exact box mass p_k([x_1 strip] x [a_k, b_k]). Along a
  straight cell edge the midpoint's interval errs by +-slope * (x_1 - midpoint), which
  cancels to first order over the strip, so the error is O(h^2) in total (plus the cells'
  corners). Nothing here uses the box classification or the bisection of the bounds.

  The strips cover abs(x_1) <= L only: the true Z lies in [Z_strips, Z_strips + tail] with
  tail = sum_k pi_k p_k(abs(x_1) > L) (each p_k is normalised), returned alongside.

  Args:
    mass_fn: `(lo [M, 2], hi [M, 2]) -> [M, K]` box log masses of the children (infinite
      corners allowed).
    log_pi: the VT node's log mixture weights.
    centroids: its centroids [K, 2].
    halfwidth: L (> 0).
    num_strips: strips over [-L, L] (>= 1).

  Returns:
    (log Z_strips, log tail).

  Example::

    log_z, log_tail = strip_log_z_2d(fn, log_pi, c, halfwidth=10.0, num_strips=4096)
    # log Z_strips <= log Z <= logaddexp(log Z_strips, log_tail)
  """
  if centroids.ndim != 2 or centroids.shape[1] != 2:
    raise ValueError(f"centroids must be [K, 2] (a 2-D VT root), got {centroids.shape}")
  if num_strips < 1:
    raise ValueError(f"num_strips must be >= 1, got {num_strips}")
  if not halfwidth > 0:
    raise ValueError(f"halfwidth must be > 0, got {halfwidth}")
  k = centroids.shape[0]
  edges = jnp.linspace(-halfwidth, halfwidth, num_strips + 1, dtype=centroids.dtype)
  mid = 0.5 * (edges[:-1] + edges[1:])  # [S]
  a, beta = voronoi.halfspaces(centroids)  # a[k, j] . x <= beta[k, j]
  # On the line x_1 = m: a_2 x_2 <= beta - a_1 m, an upper (a_2 > 0) or lower (a_2 < 0)
  # limit on x_2, or (a_2 = 0) a condition on m alone.
  rhs = beta[None] - a[None, :, :, 0] * mid[:, None, None]  # [S, K, J]
  a2 = a[None, :, :, 1]
  safe = jnp.where(a2 == 0, 1.0, a2)
  upper = jnp.min(jnp.where(a2 > 0, rhs / safe, jnp.inf), axis=-1)  # [S, K]
  lower = jnp.max(jnp.where(a2 < 0, rhs / safe, -jnp.inf), axis=-1)
  holds = jnp.all((a2 != 0) | (rhs >= 0), axis=-1)
  nonempty = holds & (lower < upper) & ~voronoi.empty_cells(centroids)[None]
  lo = jnp.stack([jnp.broadcast_to(edges[:-1, None], lower.shape), lower], -1)  # [S, K, 2]
  hi = jnp.stack([jnp.broadcast_to(edges[1:, None], upper.shape),
                  jnp.where(nonempty, upper, lower)], -1)
  s = mid.shape[0]
  out = mass_fn(lo.reshape(s * k, 2), hi.reshape(s * k, 2)).reshape(s, k, k)
  log_mass = jnp.where(nonempty, jnp.diagonal(out, axis1=1, axis2=2), -jnp.inf)  # [S, K]
  log_z = logsumexp(log_pi + logsumexp(log_mass, axis=0))
  inf = jnp.asarray(jnp.inf, centroids.dtype)
  tails_lo = jnp.array([[-inf, -inf], [halfwidth, -inf]], centroids.dtype)
  tails_hi = jnp.array([[-halfwidth, inf], [inf, inf]], centroids.dtype)
  log_tail = logsumexp(log_pi + logsumexp(mass_fn(tails_lo, tails_hi), axis=0))
  return log_z, log_tail
