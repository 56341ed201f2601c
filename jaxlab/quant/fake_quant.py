"""Group-wise fake quantization with a straight-through gradient (QAT).

`fake_quant(x, bits=, group_size=)` quantizes and dequantizes `x` in groups of
`group_size` contiguous elements along its last axis (the reduction / K axis
of a matmul input; for a weight pass it with K last), so the forward pass sees
the quantization error while training stays in float32.

Formats. `fmt` is one of two things:
  * a named format of `jaxlab.formats` (a preset such as "nvfp4", "mxfp4",
    "mixfp4", "int4_g16", "int4_g32", "fp8_e4m3_row", an element family, or a
    `formats.Format`): the preset fixes element bits, block size and scales,
    and the forward value is `formats.fake_quant(x, fmt, axis=-1)` (the one
    quantization vocabulary; `bits`/`group_size` are not used with a preset).
  * a parametric QAT grid family (`GRID_FAMILIES`), whose bits and group size
    are free knobs so a scaling-law grid can sweep them (these are families,
    not named formats; the named ones live in `jaxlab.formats`):

    - "int": INT-b, `bits` in 2..8: symmetric grid [-2^(b-1), 2^(b-1)-1]
      ([-8, 7] for INT4). AbsMax scale s = max|x_group| / M. The spec ([P],
      section 3(b)) says M = 8 for INT4, i.e. M = 2^(b-1)
      (`absmax_m="paper"`): the group's max maps to +8 and is clipped to +7,
      the min maps to -8 exactly. `absmax_m="qmax"` (M = 2^(b-1) - 1 = 7 for
      INT4, no clipping, -8 unused) is a jaxlab interpretation kept as a knob.
    - "fp4": E2M1 grid +-{0, .5, 1, 1.5, 2, 3, 4, 6} with a float32 group
      scale s = max|x_group| / 6, round to nearest even
      (`jaxlab.formats.round_float`).

Clipping ranges: AbsMax uses c = max|x_group| (scale is a stop-gradient
constant, the usual STE practice). LAC (learnable activation clipping) uses
c = sigmoid(logit_j) * max|x_group| with one learnable logit per group index j
shared across tokens (spec: "one learnable clip per group index"; the sigmoid
ratio form is a jaxlab interpretation of how the clip is parameterized).

Gradient (straight-through, `jax.custom_vjp` on the rounding step): with
`y = x / s`, `d fake_quant / dx = 1` where `|y| <= M` (inside the clip range
[-c, c]) and 0 outside; the +M -> 2^(b-1)-1 step of `absmax_m="paper"` lies
inside the range and keeps its gradient. For LAC the clip receives the
LSQ-style gradient (q - y inside the range, q at clipped elements, times
dc/dlogit), so it can both grow and shrink. Preset formats use the identity
STE of `jaxlab.formats.fake_quant`.

Non-finite and tiny inputs (the rule of `jaxlab.formats` for scales, with one
deliberate difference for element values; a jaxlab interpretation):

  * Group (and tensor) amaxes are taken over finite values only, so one NaN
    or Inf never changes what the other elements of its group get.
  * A NaN or +-Inf element passes through unchanged (NaN stays NaN, +-Inf
    stays +-Inf), for every family and preset. `jaxlab.formats` stores NaN as
    +0 and saturates Inf, because a code cannot hold them; fake quantization
    runs inside a training forward pass, where a NaN turned into a silent zero
    would hide a diverging run, so it stays visible in its own element (and
    in the loss) instead. Its gradient is the identity.
  * No scale is ever NaN, Inf or zero: an all-zero (or all non-finite) group
    gives exact zeros; scales of the parametric families are floored at the
    smallest normal float32 (2^-126), so a group whose finite amax is below
    M * 2^-126 (~1e-37 for INT4) loses relative precision and values below
    2^-127 round to 0 (XLA on CPU flushes denormals anyway).

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

from jaxlab import formats, validation
from jaxlab.formats import E2M1, round_float

# The parametric QAT grid families (bits and group size are knobs). Named
# formats are `jaxlab.formats` presets; there is no table of them here.
GRID_FAMILIES = ("int", "fp4")
ABSMAX_M = ("paper", "qmax")
# Bits at or above this mean "keep full precision" (e.g. W16A4).
FULL_PRECISION_BITS = 16
# The smallest normal float32: the floor of every parametric scale (see module doc).
_MIN_SCALE = 2.0 ** -126
# `fake_quant(group_size=...)` not given (a preset fixes its own block size).
_UNSET: Any = type("_Unset", (), {"__repr__": lambda self: "<unset>"})()


def is_grid_family(fmt: Any) -> bool:
  """Whether `fmt` names a parametric QAT grid family ("int", "fp4").

  Example:
    >>> is_grid_family("int"), is_grid_family("nvfp4")
    (True, False)
  """
  return isinstance(fmt, str) and fmt in GRID_FAMILIES


def resolve_format(fmt: Any, name: str = "fmt") -> "str | formats.Format":
  """`fmt` checked: a grid family name, or the `jaxlab.formats.Format` it names.

  Args:
    fmt: "int" / "fp4" (parametric grid families), a `jaxlab.formats` preset or
      element-family name ("nvfp4", "int4_g32", "fp8_e4m3_row", ...), or a
      `formats.Format`.
    name: the argument name used in error messages.

  Returns:
    The family name unchanged, or a `formats.Format`.

  Raises:
    ValueError: `fmt` is neither (the message lists families and presets).

  Example:
    >>> resolve_format("nvfp4").block_size, resolve_format("int")
    (16, 'int')
  """
  if is_grid_family(fmt) or isinstance(fmt, formats.Format):
    return fmt
  if isinstance(fmt, str) and (fmt in formats.PRESETS or fmt in formats.FORMATS):
    return formats.get_format(fmt)
  raise ValueError(f"{name} must be a grid family {GRID_FAMILIES}, a jaxlab.formats preset "
                   f"{sorted(formats.PRESETS)} or a formats.Format, got {fmt!r}")


def check_bits(bits: Any, name: str = "bits") -> None:
  """Raises ValueError unless `bits` is an int (not a bool) or an integer array.

  Example:
    >>> check_bits(4)
    >>> check_bits(True)
    Traceback (most recent call last):
    ValueError: bits must be an int, got the bool True
  """
  if isinstance(bits, (bool, np.bool_)):
    raise ValueError(f"{name} must be an int, got the bool {bits!r}")
  if isinstance(bits, (int, np.integer)):
    return
  if isinstance(bits, (jax.Array, np.ndarray)) and jnp.issubdtype(bits.dtype, jnp.integer):
    return
  raise ValueError(f"{name} must be an int (or an integer array when traced), got {bits!r}")


def grid_bounds(bits: int, fmt: str = "int", absmax_m: str = "paper") -> tuple[float, float, float]:
  """`(qmin, qmax, M)` of a grid: codes lie in [qmin, qmax], AbsMax maps max|x| to M.

  Example:
    >>> grid_bounds(4)
    (-8.0, 7.0, 8.0)
    >>> grid_bounds(4, absmax_m="qmax")
    (-8.0, 7.0, 7.0)
  """
  if not is_grid_family(fmt):
    raise ValueError(f"fmt must be a grid family {GRID_FAMILIES} (named formats have no "
                     f"parametric grid; see jaxlab.formats), got {fmt!r}")
  if absmax_m not in ABSMAX_M:
    raise ValueError(f"absmax_m must be one of {ABSMAX_M}, got {absmax_m!r}")
  check_bits(bits)
  if fmt == "fp4":
    if bits != 4:
      raise ValueError(f"fmt='fp4' needs bits=4, got {bits}")
    return -6.0, 6.0, 6.0
  if not 2 <= bits <= 8:
    raise ValueError(f"integer bits must be in [2, 8] (or >= {FULL_PRECISION_BITS} for none), "
                     f"got {bits}")
  half = 2.0 ** (bits - 1)
  return -half, half - 1.0, half if absmax_m == "paper" else half - 1.0


def resolve_group_size(k: int, group_size: int | None, name: str = "group_size") -> int:
  """The group size along an axis of length `k` (None = per-channel/per-token = k).

  Raises:
    ValueError: if `group_size` is not a positive divisor of `k` (bools are refused).

  Example:
    >>> resolve_group_size(64, None), resolve_group_size(64, 16)
    (64, 16)
  """
  if group_size is None:
    return k
  if (isinstance(group_size, (bool, np.bool_)) or not isinstance(group_size, (int, np.integer))
      or group_size < 1):
    raise ValueError(f"{name} must be a positive int or None (per-channel), got {group_size!r}")
  if k % group_size:
    raise ValueError(f"{name}={group_size} does not divide the reduction (K) dimension {k}; "
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


def _bits_ok(bits: Any) -> Array:
  """Where array `bits` is allowed: in [2, 8] (quantize) or >= 16 (full precision)."""
  bits = jnp.asarray(bits)
  return ((bits >= 2) & (bits <= 8)) | (bits >= FULL_PRECISION_BITS)


def _bounds(bits: Any, fmt: str, absmax_m: str):
  """`grid_bounds` for a static int, or jnp values for array `bits` (int grids only).

  Concrete array bits are checked like ints (ValueError). Traced bits outside
  [2, 8] and >= 16 cannot raise: the bounds are computed from bits clipped to
  [2, 8] (finite), and the callers return NaN where `_bits_ok` is False.
  """
  if isinstance(bits, (int, np.integer)):
    return tuple(jnp.float32(v) for v in grid_bounds(int(bits), fmt, absmax_m))
  if fmt != "int":
    raise ValueError(f"traced bits need fmt='int', got {fmt!r}")
  if absmax_m not in ABSMAX_M:
    raise ValueError(f"absmax_m must be one of {ABSMAX_M}, got {absmax_m!r}")
  value = validation.concrete(bits)
  if value is not None and not np.all(((value >= 2) & (value <= 8))
                                      | (value >= FULL_PRECISION_BITS)):
    raise ValueError(f"integer bits must be in [2, 8] (or >= {FULL_PRECISION_BITS} for none), "
                     f"got {value.tolist()}")
  half = jnp.exp2(jnp.clip(jnp.asarray(bits), 2, 8).astype(jnp.float32) - 1.0)
  return -half, half - 1.0, half if absmax_m == "paper" else half - 1.0


def _finite_abs(xf: Array) -> Array:
  """|x| with non-finite elements as 0 (so they never set a group's scale)."""
  return jnp.where(jnp.isfinite(xf), jnp.abs(xf), 0.0)


def _scale(clip: Array, m: Array) -> Array:
  # Zero clip (all-zero / all non-finite group): any positive scale gives exact
  # zeros. The floor keeps the scale a normal float32 (never 0, never divided by).
  return jnp.maximum(jnp.where(clip > 0, clip, 1.0) / m, _MIN_SCALE)


def _divide(xs: Array, scale: Array) -> Array:
  """xs / scale, also for scales above 2**126.

  XLA rewrites a division by a broadcast scale into a product with its reciprocal,
  and on CPU a reciprocal below 2**-126 (a scale above 2**126: |x| near float32's
  maximum with M <= 2) is flushed to zero, which would round the whole group to 0.
  Such groups divide both sides by 4 first (exact: a power of two).
  """
  k = jnp.where(scale > 2.0 ** 125, 0.25, 1.0)
  return (xs * k) / (scale * k)


def _keep_non_finite(x: Array, out: Array) -> Array:
  """The non-finite rule: NaN / +-Inf elements of `x` pass through unchanged."""
  return jnp.where(jnp.isfinite(x), out, x)


def _fake_quant_format(x: Array, fmt: "formats.Format", bits: Any) -> Array:
  if bits is not None:
    check_bits(bits)
    if not isinstance(bits, (int, np.integer)):
      raise ValueError(f"traced bits need a grid family fmt {GRID_FAMILIES}, got {fmt!r}")
    if bits >= FULL_PRECISION_BITS:
      return x
    if bits != fmt.element_bits:
      raise ValueError(f"bits={bits} contradicts fmt {formats.format_name(fmt) or fmt} "
                       f"({fmt.element_bits}-bit elements); pass bits=None, "
                       f"{fmt.element_bits} or >= {FULL_PRECISION_BITS} (full precision)")
  # `jaxlab.formats` turns a block holding a NaN or an Inf into NaN (the OCP MX rule for
  # stored weights); QAT keeps the non-finite element alone, so the other elements are
  # quantized as if it were 0 (it never sets a scale: amaxes are over finite values).
  out = formats.fake_quant(jnp.where(jnp.isfinite(x), x, 0.0).astype(x.dtype), fmt, axis=-1)
  return _keep_non_finite(x, out)


def fake_quant(x: Float[Array, "*b k"], *, bits: Any = None, group_size: Any = _UNSET,
               fmt: Any = "int", absmax_m: str = "paper",
               clip_logit: Float[Array, "g"] | None = None) -> Float[Array, "*b k"]:
  """Quantize-dequantize `x` group-wise along its last axis, straight-through gradient.

  Args:
    x: float array [..., K]; groups are `group_size` contiguous elements of K.
    bits: element bits. Grid families: required, an int (>= 16 returns `x`
      unchanged) or a traced int scalar (fmt "int" only; values >= 16 select
      `x` unchanged, others must lie in [2, 8]: a concrete array outside
      raises, a traced value outside gives NaN), so one compiled program
      serves several precisions. Named formats: None (the format's own bits),
      the format's element bits, or >= 16 (returns `x`).
    group_size: grid families: required, G dividing K, or None for one group
      per row (per-channel for weights, per-token for activations). Named
      formats: not allowed (the format fixes its block size; build a variant
      with `jaxlab.formats.get_format(name, block_size=...)`).
    fmt: a grid family "int" (symmetric INT-b) or "fp4" (E2M1, float32 scale),
      or a `jaxlab.formats` preset / family name / `Format` ("nvfp4",
      "int4_g32", ...).
    absmax_m: grid families only: "paper" (M = 2^(b-1)) or "qmax"
      (M = 2^(b-1)-1); see module doc.
    clip_logit: grid families only: optional LAC logits [K // G],
      clip = sigmoid(logit) * max|x|.

  Returns:
    Array of `x`'s shape and dtype. NaN / +-Inf elements are returned
    unchanged and do not affect the others (module doc).

  Raises:
    ValueError: bad bits (bools refused)/format, `group_size` not dividing K
      or a bool, options a named format does not take, bad logit shape.

  Example:
    >>> import jax.numpy as jnp
    >>> x = jnp.array([[0.1, -0.8, jnp.nan, 0.3]])
    >>> fake_quant(x, bits=4, group_size=4)[0, 2].item()  # NaN stays in its own element
    nan
    >>> fake_quant(jnp.linspace(-1.0, 1.0, 32), fmt="nvfp4").shape  # a jaxlab.formats preset
    (32,)
  """
  if x.ndim < 1:
    raise ValueError(f"x must have at least one axis (K last), got shape {x.shape}")
  fmt = resolve_format(fmt)
  if not is_grid_family(fmt):
    if group_size is not _UNSET:
      raise ValueError(f"group_size is fixed by the named format {formats.format_name(fmt) or fmt}"
                       " (block_size); pass a formats.Format with another block_size instead")
    if clip_logit is not None or absmax_m != "paper":
      raise ValueError("clip_logit and absmax_m apply to the grid families "
                       f"{GRID_FAMILIES} only, not to a named format")
    return _fake_quant_format(x, fmt, bits)
  if bits is None:
    raise ValueError(f"bits is required for the grid family fmt={fmt!r}")
  if group_size is _UNSET:
    raise ValueError(f"group_size is required for the grid family fmt={fmt!r} "
                     "(None = one group per row)")
  check_bits(bits)
  static = isinstance(bits, (int, np.integer))
  if static and bits >= FULL_PRECISION_BITS:
    return x
  qmin, qmax, m = _bounds(bits, fmt, absmax_m)
  k = x.shape[-1]
  g = resolve_group_size(k, group_size)
  xg = x.astype(jnp.float32).reshape(*x.shape[:-1], k // g, g)
  amax = jax.lax.stop_gradient(jnp.max(_finite_abs(xg), axis=-1, keepdims=True))
  if clip_logit is not None:
    if clip_logit.shape != (k // g,):
      raise ValueError(f"clip_logit must have shape ({k // g},) (one per group), "
                       f"got {clip_logit.shape}")
    clip = jax.nn.sigmoid(clip_logit.astype(jnp.float32))[:, None] * amax
  else:
    clip = amax
  scale = _scale(clip, m)
  # Non-finite elements enter the rounding as 0: no NaN reaches the clip's gradient.
  xs = jnp.where(jnp.isfinite(xg), xg, 0.0)
  q = _round_ste(_divide(xs, scale), qmin, qmax, m, fmt)
  out = (q * scale).reshape(x.shape).astype(x.dtype)
  out = _keep_non_finite(x, out)
  if not static:
    # Traced bits outside [2, 8] and >= 16 give NaN (never a silent wrong grid).
    out = jnp.where(_bits_ok(bits), out, jnp.nan)
    out = jnp.where(jnp.asarray(bits) >= FULL_PRECISION_BITS, x, out)
  return out


def fake_quant_dynamic(x: Float[Array, "*b k"], *, bits: Any, group_size: Any,
                       group_sizes: tuple[int, ...], absmax_m: str = "paper"
                       ) -> Float[Array, "*b k"]:
  """`fake_quant` (INT, AbsMax) with traced `bits` and a traced `group_size`.

  `group_size` must equal one of the static `group_sizes` (divisors of K; K
  itself, or None, = per-channel/per-token). Each candidate's per-element
  AbsMax is computed (cheap reductions) and the traced G selects one, so a
  single compiled program serves every G and precision of a grid; the
  rounding, straight-through gradient and non-finite rule are those of
  `fake_quant`. Values equal `fake_quant` with the same static arguments.

  Bits and G that are not allowed (bits outside [2, 8] and >= 16; a G not in
  `group_sizes`, unless bits >= 16) raise ValueError when their values are
  concrete; under trace they give NaN, never another bit width or G.

  Example:
    >>> x = jnp.array([[0.1, -0.8, 0.4, 0.3]])
    >>> def f(x, b, g):
    ...   return fake_quant_dynamic(x, bits=b, group_size=g, group_sizes=(2, 4))
    >>> f = jax.jit(f)
    >>> bool(jnp.array_equal(f(x, 4, 2), fake_quant(x, bits=4, group_size=2)))  # one program
    True
  """
  if x.ndim < 1:
    raise ValueError(f"x must have at least one axis (K last), got shape {x.shape}")
  check_bits(bits)
  k = x.shape[-1]
  if not group_sizes:
    raise ValueError(f"group_sizes must name at least one group size, got {group_sizes!r}")
  sizes = tuple(dict.fromkeys(resolve_group_size(k, g, "group_sizes") for g in group_sizes))
  if group_size is None:
    group_size = k
  if isinstance(group_size, (bool, np.bool_)):
    raise ValueError(f"group_size must be an int (or an integer array when traced), "
                     f"got the bool {group_size!r}")
  g_value, bits_value = validation.concrete(group_size), validation.concrete(bits)
  if g_value is not None:
    unlisted = ~np.isin(g_value, sizes)
    if bits_value is not None:
      unlisted &= bits_value < FULL_PRECISION_BITS
    if np.any(unlisted):
      raise ValueError(f"group_size must be one of group_sizes {sizes} (K={k} = per-channel), "
                       f"got {g_value.tolist()}")
  qmin, qmax, m = _bounds(bits, "int", absmax_m)
  xf = x.astype(jnp.float32)
  a = jax.lax.stop_gradient(_finite_abs(xf))
  lead = x.shape[:-1]
  amax = {g: jnp.broadcast_to(jnp.max(a.reshape(*lead, k // g, g), axis=-1, keepdims=True),
                              (*lead, k // g, g)).reshape(x.shape) for g in sizes}
  group_size = jnp.asarray(group_size)
  clip = jnp.select([group_size == g for g in sizes], [amax[g] for g in sizes], amax[sizes[-1]])
  scale = _scale(clip, m)
  xs = jnp.where(jnp.isfinite(xf), xf, 0.0)
  out = _keep_non_finite(x, (_round_ste(_divide(xs, scale), qmin, qmax, m, "int") * scale).astype(x.dtype))
  # Traced bits or G that are not allowed give NaN (never a silent other grid or G).
  listed = functools.reduce(jnp.logical_or, [group_size == g for g in sizes])
  out = jnp.where(_bits_ok(bits) & listed, out, jnp.nan)
  return jnp.where(jnp.asarray(bits) >= FULL_PRECISION_BITS, x, out)


def kurtosis(x: Float[Array, "*s"]) -> Float[Array, ""]:
  """Pearson kurtosis E[(x - mu)^4] / var^2 over all elements (3 for a Gaussian).

  Computed over the whole tensor (tokens and channels together), so channel
  outliers raise it; this pooling is a jaxlab interpretation of the spec's
  "input kurtosis".

  Example:
    >>> round(float(kurtosis(jax.random.normal(jax.random.key(0), (100_000,)))), 1)
    3.0
  """
  x = x.astype(jnp.float32).reshape(-1)
  c = x - jnp.mean(x)
  var = jnp.mean(c * c)
  return jnp.mean(c ** 4) / jnp.maximum(var * var, 1e-30)


def lac_init_logit(ratio: float = 0.98) -> Any:
  """The LAC logit whose sigmoid is `ratio` (initial clip = ratio * max|x|).

  Example:
    >>> round(float(jax.nn.sigmoid(lac_init_logit(0.98))), 4)
    0.98
  """
  if not 0.0 < ratio < 1.0:
    raise ValueError(f"ratio must be in (0, 1), got {ratio}")
  return float(np.log(ratio / (1.0 - ratio)))
