"""Group-wise fake quantization with a straight-through gradient (QAT).

`fake_quant(x, bits, group_size)` quantizes and dequantizes `x` in groups of
`group_size` contiguous elements along its last axis (the reduction / K axis
of a matmul input; for a weight pass it with K last), so the forward pass sees
the quantization error while training stays in float32.

Formats ("int" with `bits` in 2..8, or "fp4" = E2M1):
  * INT-b: symmetric grid [-2^(b-1), 2^(b-1)-1] ([-8, 7] for INT4).
    AbsMax scale s = max|x_group| / M. The spec ([P], section 3(b)) says M = 8
    for INT4, i.e. M = 2^(b-1) (`absmax_m="paper"`): the group's max maps to
    +8 and is clipped to +7, the min maps to -8 exactly. `absmax_m="qmax"`
    (M = 2^(b-1) - 1 = 7 for INT4, no clipping, -8 unused) is a jaxlab
    interpretation kept as a knob.
  * FP4: E2M1 grid ±{0, .5, 1, 1.5, 2, 3, 4, 6}, s = max|x_group| / 6, round to
    nearest even (`jaxlab.formats.round_float`).

Clipping ranges: AbsMax uses c = max|x_group| (scale is a stop-gradient
constant, the usual STE practice). LAC (learnable activation clipping) uses
c = sigmoid(logit_j) * max|x_group| with one learnable logit per group index j
shared across tokens (spec: "one learnable clip per group index"; the sigmoid
ratio form is a jaxlab interpretation of how the clip is parameterized).

Gradient (straight-through, `jax.custom_vjp` on the rounding step): with
y = x / s, d fake_quant / dx = 1 where |y| <= M (inside the clip range
[-c, c]) and 0 outside; the +M -> 2^(b-1)-1 step of `absmax_m="paper"` lies
inside the range and keeps its gradient. For LAC the clip receives the
LSQ-style gradient (q - y inside the range, q at clipped elements, times
dc/dlogit), so it can both grow and shrink.

Example:
  >>> import jax.numpy as jnp
  >>> x = jnp.array([[0.1, -0.8, 0.4, 0.3]])
  >>> fake_quant(x, bits=4, group_size=4).tolist()  # s = 0.8 / 8 = 0.1
  [[0.10000000149011612, -0.800000011920929, 0.4000000059604645, 0.30000001192092896]]
"""

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array
from jaxtyping import Float

from jaxlab.formats import E2M1, round_float

FORMATS = ("int", "fp4")
ABSMAX_M = ("paper", "qmax")
# Bits at or above this mean "keep full precision" (e.g. W16A4).
FULL_PRECISION_BITS = 16


def grid_bounds(bits: int, fmt: str = "int", absmax_m: str = "paper") -> tuple[float, float, float]:
  """`(qmin, qmax, M)` of a grid: codes lie in [qmin, qmax], AbsMax maps max|x| to M.

  Example:
    >>> grid_bounds(4)
    (-8.0, 7.0, 8.0)
    >>> grid_bounds(4, absmax_m="qmax")
    (-8.0, 7.0, 7.0)
  """
  if fmt not in FORMATS:
    raise ValueError(f"fmt must be one of {FORMATS}, got {fmt!r}")
  if absmax_m not in ABSMAX_M:
    raise ValueError(f"absmax_m must be one of {ABSMAX_M}, got {absmax_m!r}")
  if fmt == "fp4":
    if bits != 4:
      raise ValueError(f"fmt='fp4' needs bits=4, got {bits}")
    return -6.0, 6.0, 6.0
  if not 2 <= bits <= 8:
    raise ValueError(f"integer bits must be in [2, 8] (or >= {FULL_PRECISION_BITS} for none), "
                     f"got {bits}")
  half = 2.0 ** (bits - 1)
  return -half, half - 1.0, half if absmax_m == "paper" else half - 1.0


def resolve_group_size(k: int, group_size: int | None) -> int:
  """The group size along an axis of length `k` (None = per-channel/per-token = k).

  Raises:
    ValueError: if `group_size` is not a positive divisor of `k`.
  """
  if group_size is None:
    return k
  if not isinstance(group_size, (int, np.integer)) or group_size < 1:
    raise ValueError(f"group_size must be a positive int or None (per-channel), got {group_size!r}")
  if k % group_size:
    raise ValueError(f"group_size={group_size} does not divide the reduction (K) dimension {k}; "
                     "use a divisor of K or None for per-channel/per-token groups")
  return int(group_size)


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def _round_ste(y: Array, qmin: Array, qmax: Array, m: Array, fmt: str) -> Array:
  """Rounds scaled values `y` onto the grid (forward); STE mask |y| <= m (backward)."""
  if fmt == "fp4":
    return round_float(y, E2M1)[1]
  return jnp.clip(jnp.round(y), qmin, qmax)


def _round_ste_fwd(y, qmin, qmax, m, fmt):
  return _round_ste(y, qmin, qmax, m, fmt), (y, qmin, qmax, m)


def _round_ste_bwd(fmt, res, g):
  del fmt
  y, qmin, qmax, m = res
  gy = jnp.where(jnp.abs(y) <= m, g, jnp.zeros_like(g))
  return gy, jnp.zeros_like(qmin), jnp.zeros_like(qmax), jnp.zeros_like(m)


_round_ste.defvjp(_round_ste_fwd, _round_ste_bwd)


def _bounds(bits: Any, fmt: str, absmax_m: str):
  """`grid_bounds` for a static int, or jnp values for traced `bits` (int grids only)."""
  if isinstance(bits, (int, np.integer)):
    return tuple(jnp.float32(v) for v in grid_bounds(int(bits), fmt, absmax_m))
  if fmt != "int":
    raise ValueError(f"traced bits need fmt='int', got {fmt!r}")
  if absmax_m not in ABSMAX_M:
    raise ValueError(f"absmax_m must be one of {ABSMAX_M}, got {absmax_m!r}")
  half = jnp.exp2(jnp.asarray(bits, jnp.float32) - 1.0)
  return -half, half - 1.0, half if absmax_m == "paper" else half - 1.0


def fake_quant(x: Float[Array, "*b k"], *, bits: Any, group_size: int | None,
               fmt: str = "int", absmax_m: str = "paper",
               clip_logit: Float[Array, "g"] | None = None) -> Float[Array, "*b k"]:
  """Quantize-dequantize `x` group-wise along its last axis, straight-through gradient.

  Args:
    x: float array [..., K]; groups are `group_size` contiguous elements of K.
    bits: element bits, an int (>= 16 returns `x` unchanged) or a traced int
      scalar (fmt "int" only; values >= 16 select `x` unchanged, others must
      lie in [2, 8]), so one compiled program serves several precisions.
    group_size: G dividing K, or None for one group per row (per-channel for
      weights, per-token for activations).
    fmt: "int" (symmetric INT-b) or "fp4" (E2M1).
    absmax_m: "paper" (M = 2^(b-1)) or "qmax" (M = 2^(b-1)-1); see module doc.
    clip_logit: optional LAC logits [K // G]: clip = sigmoid(logit) * max|x|.

  Returns:
    Array of `x`'s shape and dtype.

  Raises:
    ValueError: bad bits/format, `group_size` not dividing K, bad logit shape.
  """
  if x.ndim < 1:
    raise ValueError(f"x must have at least one axis (K last), got shape {x.shape}")
  static = isinstance(bits, (int, np.integer))
  if static and bits >= FULL_PRECISION_BITS:
    return x
  qmin, qmax, m = _bounds(bits, fmt, absmax_m)
  k = x.shape[-1]
  g = resolve_group_size(k, group_size)
  xg = x.astype(jnp.float32).reshape(*x.shape[:-1], k // g, g)
  amax = jax.lax.stop_gradient(jnp.max(jnp.abs(xg), axis=-1, keepdims=True))
  if clip_logit is not None:
    if clip_logit.shape != (k // g,):
      raise ValueError(f"clip_logit must have shape ({k // g},) (one per group), "
                       f"got {clip_logit.shape}")
    clip = jax.nn.sigmoid(clip_logit.astype(jnp.float32))[:, None] * amax
  else:
    clip = amax
  # All-zero groups: any positive scale gives exact zeros.
  scale = jnp.where(clip > 0, clip, 1.0) / m
  q = _round_ste(xg / scale, qmin, qmax, m, fmt)
  out = (q * scale).reshape(x.shape).astype(x.dtype)
  if not static:
    out = jnp.where(jnp.asarray(bits) >= FULL_PRECISION_BITS, x, out)
  return out


def fake_quant_dynamic(x: Float[Array, "*b k"], *, bits: Any, group_size: Any,
                       group_sizes: tuple[int, ...], absmax_m: str = "paper"
                       ) -> Float[Array, "*b k"]:
  """`fake_quant` (INT, AbsMax) with traced `bits` and a traced `group_size`.

  `group_size` must equal one of the static `group_sizes` (divisors of K; K
  itself = per-channel/per-token). Each candidate's per-element AbsMax is
  computed (cheap reductions) and the traced G selects one, so a single
  compiled program serves every G and precision of a grid; the rounding and
  straight-through gradient are those of `fake_quant`. Values equal `fake_quant`
  with the same static arguments.
  """
  if x.ndim < 1:
    raise ValueError(f"x must have at least one axis (K last), got shape {x.shape}")
  k = x.shape[-1]
  sizes = tuple(dict.fromkeys(resolve_group_size(k, g) for g in group_sizes))
  qmin, qmax, m = _bounds(bits, "int", absmax_m)
  a = jax.lax.stop_gradient(jnp.abs(x.astype(jnp.float32)))
  lead = x.shape[:-1]
  amax = {g: jnp.broadcast_to(jnp.max(a.reshape(*lead, k // g, g), axis=-1, keepdims=True),
                              (*lead, k // g, g)).reshape(x.shape) for g in sizes}
  group_size = jnp.asarray(group_size)
  clip = jnp.select([group_size == g for g in sizes], [amax[g] for g in sizes], amax[sizes[-1]])
  scale = jnp.where(clip > 0, clip, 1.0) / m
  xf = x.astype(jnp.float32)
  out = (_round_ste(xf / scale, qmin, qmax, m, "int") * scale).astype(x.dtype)
  return jnp.where(jnp.asarray(bits) >= FULL_PRECISION_BITS, x, out)


def kurtosis(x: Float[Array, "*s"]) -> Float[Array, ""]:
  """Pearson kurtosis E[(x - mu)^4] / var^2 over all elements (3 for a Gaussian).

  Computed over the whole tensor (tokens and channels together), so channel
  outliers raise it; this pooling is a jaxlab interpretation of the spec's
  "input kurtosis".
  """
  x = x.astype(jnp.float32).reshape(-1)
  c = x - jnp.mean(x)
  var = jnp.mean(c * c)
  return jnp.mean(c ** 4) / jnp.maximum(var * var, 1e-30)


def lac_init_logit(ratio: float = 0.98) -> Any:
  """The LAC logit whose sigmoid is `ratio` (initial clip = ratio * max|x|)."""
  if not 0.0 < ratio < 1.0:
    raise ValueError(f"ratio must be in (0, 1), got {ratio}")
  return float(np.log(ratio / (1.0 - ratio)))
