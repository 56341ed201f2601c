"""Low-precision parameter storage for optimizers without master weights.

A parameter is stored as a `QParam`: its raw bits in unsigned/signed integer
arrays (element codes and, for scaled formats, the float32 scales' bit
patterns). `optax.apply_updates` adds updates leafwise, `(p + u).astype(p.dtype)`;
for integer leaves that addition is exact modular arithmetic, so an update
`u = new_bits - old_bits` (computed modulo 2**n in the leaf's dtype) lands
*bit-exactly* on the requantized parameter, whatever the format, scale
granularity or magnitude. This storage choice is a jaxlab interpretation (the
paper keeps FP8 tensors; it does not say how an optimizer library applies
updates to them).

Formats (`Quantizer.name`)::

  "f32"       identity: float32 bits in uint32 (4 B/elem); used for 1-D leaves.
  "bf16"      bfloat16 bits in uint16 (2 B/elem); RNE or exact SR.
  "fp8_e4m3"  E4M3 bytes (1 B/elem) + float32 scale amax/448 per tensor or per
              column slice along axis 0 (`granularity="row"`: one scale per
              output channel of a [in, out] kernel), via `jaxlab.formats`.
  "int4"      packed two's-complement nibbles (0.5 B/elem) + a float32 absmax/7
              scale per group of `block_size` along axis 0, via `jaxlab.formats`.
  "grid"      a uniform grid k * step with int32 codes k (the convex toy).

Stochastic rounding takes an explicit key (exact SR: `jaxlab.formats` SR for
fp8/int4, the AQT random-low-bits trick for bf16, Bernoulli(frac) for grid).
Scales are always round-to-nearest functions of the new tensor's amax.

Non-finite weights stay non-finite, never a silent zero or a finite value:
"f32" and "bf16" keep NaN and ±Inf as such; "fp8_e4m3" and "int4" follow
`jaxlab.formats` (a block holding a NaN or an Inf gets a NaN scale, so all of it
dequantizes to NaN; finite overflow saturates); "grid" stores NaN and ±Inf as
the reserved code -2**31 (`GRID_NAN_CODE`, never a rounded value: those saturate
at ±(2**31 - 128)), which dequantizes to NaN.
"""

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array
from jaxtyping import Float

from jaxlab import formats

QUANTIZERS = ("f32", "bf16", "fp8_e4m3", "int4", "grid")
# `jaxlab.formats` presets a Quantizer can store (float32 scales, so updates are
# exact integer bit deltas), by name -> (name, granularity, block_size).
_PRESET_QUANTIZERS = {"fp8_e4m3": ("fp8_e4m3", "tensor", 32),
                      "fp8_e4m3_row": ("fp8_e4m3", "row", 32),
                      "int4_g32": ("int4", "tensor", 32)}
# Defaults of `Quantizer.granularity` / `block_size`. The fields default to `_UNSET`
# so that an option passed along with a preset name can be told from the default.
_DEFAULT_GRANULARITY, _DEFAULT_BLOCK_SIZE = "tensor", 32
_UNSET: Any = type("_Unset", (), {"__repr__": lambda self: "<unset>"})()
# Grid steps: normal float32 numbers with a normal reciprocal (XLA on CPU flushes
# subnormals, so x / step must not lose the step), and at most 2**97 so that the
# largest code times the step, (2**31 - 128) * 2**97, is float32's maximum, not Inf.
_MIN_STEP, _MAX_STEP = 2.0 ** -126, 2.0 ** 97


@dataclasses.dataclass(frozen=True)
class Quantizer:
  """A parameter storage format (hashable; static under jit).

  Build it by family and options (`Quantizer("int4", block_size=32)`) or by a
  `jaxlab.formats` preset name with float32 scales (`Quantizer("fp8_e4m3_row")`,
  `Quantizer("int4_g32")`); both spellings give equal quantizers. A preset
  fixes granularity and block size: passing another value with it is a
  ValueError (`Quantizer("int4_g32", block_size=128)`; use the family name).

  Attributes:
    name: one of `QUANTIZERS`, or a preset of `_PRESET_QUANTIZERS` (normalized
      to its family and options).
    granularity: fp8_e4m3 only: "tensor" (one scale; the default) or "row"
      (one scale per slice along axis 0, i.e. per output channel of an
      [in, out] kernel).
    block_size: int4 only: group size along axis 0 (default 32; zero-padded
      when the axis is not a multiple; padding is cropped on dequantize).
    step: grid only: the grid spacing, a number in [2^-126, 2^97] (its
      float32 value and reciprocal are normal float32 numbers, and every
      code times it is finite).
  """
  name: str
  granularity: str = _UNSET
  block_size: int = _UNSET
  step: float = 1.0

  def __post_init__(self):
    if self.name in _PRESET_QUANTIZERS and self.name not in QUANTIZERS:
      name, granularity, block_size = _PRESET_QUANTIZERS[self.name]
      for field, preset in (("granularity", granularity), ("block_size", block_size)):
        got = getattr(self, field)
        if got is not _UNSET and got != preset:
          raise ValueError(f"{field}={got!r} contradicts the preset {self.name!r} ({field}="
                           f"{preset!r}); pass the family name {name!r} with {field}={got!r}")
      object.__setattr__(self, "name", name)
      object.__setattr__(self, "granularity", granularity)
      object.__setattr__(self, "block_size", block_size)
    if self.granularity is _UNSET:
      object.__setattr__(self, "granularity", _DEFAULT_GRANULARITY)
    if self.block_size is _UNSET:
      object.__setattr__(self, "block_size", _DEFAULT_BLOCK_SIZE)
    if self.name not in QUANTIZERS:
      hint = (" (that jaxlab.formats preset has no float32-scale storage: use one of "
              f"{sorted(_PRESET_QUANTIZERS)})" if self.name in formats.PRESETS else "")
      raise ValueError(f"quantizer name must be one of {QUANTIZERS} or a preset in "
                       f"{sorted(_PRESET_QUANTIZERS)}, got {self.name!r}{hint}")
    if self.granularity not in ("tensor", "row"):
      raise ValueError(f"granularity must be 'tensor' or 'row', got {self.granularity!r}")
    if not (isinstance(self.block_size, int) and not isinstance(self.block_size, bool)
            and self.block_size >= 2 and self.block_size % 2 == 0):
      raise ValueError(f"block_size must be an even int >= 2, got {self.block_size!r}")
    if (isinstance(self.step, bool) or not isinstance(self.step, (int, float))
        or not _MIN_STEP <= self.step <= _MAX_STEP):
      raise ValueError(f"step must be a number in [2**-126, 2**97] (a normal float32 with a "
                       f"normal reciprocal; codes times it stay finite), got {self.step!r}")

  @property
  def code_dtype(self) -> Any:
    return {"f32": jnp.uint32, "bf16": jnp.uint16, "fp8_e4m3": jnp.uint8, "int4": jnp.uint8,
            "grid": jnp.int32}[self.name]

  @property
  def has_scales(self) -> bool:
    return self.name in ("fp8_e4m3", "int4")

  def _format(self) -> formats.Format:
    if self.name == "fp8_e4m3":
      return formats.get_format("fp8_e4m3_row" if self.granularity == "row" else "fp8_e4m3")
    return formats.get_format("int4_g32", block_size=self.block_size)

  def quantize(self, x: Float[Array, "*shape"], key: Array | None = None) -> "QParam":
    """Rounds float `x` into this format (stochastically when `key` is given)."""
    x = jnp.asarray(x, jnp.float32)
    shape = tuple(x.shape)
    if self.name == "f32":
      return QParam(jax.lax.bitcast_convert_type(x, jnp.uint32), None, self, shape)
    if self.name == "bf16":
      return QParam(_bf16_bits(x, key), None, self, shape)
    if self.name == "grid":
      return QParam(_grid_codes(x, self.step, key), None, self, shape)
    if x.ndim < 1:
      raise ValueError(f"{self.name} quantizer needs an array of rank >= 1, got shape {shape}")
    q = formats.quantize(x, self._format(), axis=0, key=key)
    return QParam(q.codes, jax.lax.bitcast_convert_type(q.scales, jnp.uint32), self, shape)

  def dequantize(self, p: "QParam") -> Float[Array, "*shape"]:
    """The float32 values of `p`."""
    if self.name == "f32":
      return jax.lax.bitcast_convert_type(p.codes, jnp.float32)
    if self.name == "bf16":
      return jax.lax.bitcast_convert_type(p.codes, jnp.bfloat16).astype(jnp.float32)
    if self.name == "grid":
      return jnp.where(p.codes == GRID_NAN_CODE, jnp.nan,
                       p.codes.astype(jnp.float32) * jnp.float32(self.step))
    scales = jax.lax.bitcast_convert_type(p.scales, jnp.float32)
    qa = formats.QArray(p.codes, scales, jnp.ones((), jnp.float32), self._format(), p.shape, 0)
    return formats.dequantize(qa)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class QParam:
  """One stored parameter: integer bit arrays (leaves) + its format (static).

  Attributes:
    codes: element bits (`quantizer.code_dtype`); fp8/int4 codes are in
      `jaxlab.formats` blocked layout (axis 0 moved last).
    scales: uint32 bit patterns of the float32 scales (fp8/int4), else None.
    quantizer: the `Quantizer` (static).
    shape: the logical float shape (static).
  """
  codes: Any
  scales: Any
  quantizer: Quantizer = dataclasses.field(metadata=dict(static=True))
  shape: tuple[int, ...] = dataclasses.field(metadata=dict(static=True))

  def dequantize(self) -> Array:
    return self.quantizer.dequantize(self)


F32 = Quantizer("f32")


def _bf16_bits(x: Array, key: Array | None) -> Array:
  if key is None:
    return jax.lax.bitcast_convert_type(x.astype(jnp.bfloat16), jnp.uint16)
  # AQT-style exact SR: add 16 random low bits to the float32 pattern, truncate.
  bits = jax.lax.bitcast_convert_type(x, jnp.uint32)
  noise = jax.random.bits(key, x.shape, jnp.uint32) >> 16
  finite = jnp.isfinite(x)
  rounded = jnp.where(finite, (bits + noise) >> 16, bits >> 16)
  # A NaN whose payload sits in the low 16 bits would truncate to ±Inf: quiet NaN instead.
  rounded = jnp.where(jnp.isnan(x), jnp.uint32(0x7FC0), rounded)
  return rounded.astype(jnp.uint16)


# Largest float32 below 2**31: finite grid codes saturate here (int32 has no Inf).
_GRID_CODE_MAX = 2147483520.0
# The grid's NaN: int32's minimum, below every saturated code.
GRID_NAN_CODE = -(2 ** 31)


def _grid_codes(x: Array, step: float, key: Array | None) -> Array:
  """Grid codes k = round(x / step); NaN and ±Inf -> `GRID_NAN_CODE`, finite overflow
  saturates."""
  finite = jnp.isfinite(x)
  y = jnp.where(finite, x, 0.0) / jnp.float32(step)
  if key is None:
    k = jnp.round(y)
  else:
    f = jnp.floor(y)
    k = f + (jax.random.uniform(key, y.shape) < (y - f)).astype(jnp.float32)
  k = jnp.clip(k, -_GRID_CODE_MAX, _GRID_CODE_MAX).astype(jnp.int32)
  return jnp.where(finite, k, jnp.int32(GRID_NAN_CODE))


def is_qparam(x: Any) -> bool:
  """True for a `QParam` leaf (the `is_leaf` of tree maps over quantized params)."""
  return isinstance(x, QParam)


def quantize_params(params: Any, quantizer: Quantizer, *, key: Array | None = None,
                    min_ndim: int = 2) -> Any:
  """Stores every leaf of `params` as a `QParam`.

  Leaves with `ndim >= min_ndim` (weight matrices, embeddings) use `quantizer`;
  smaller ones (norm scales, biases) are kept in float32 (`F32`, the identity
  format): a jaxlab interpretation, a knob through `min_ndim`.

  Example:
    >>> import jax.numpy as jnp
    >>> p = quantize_params({"w": jnp.ones((32, 4)), "b": jnp.zeros(4)}, Quantizer("fp8_e4m3"))
    >>> p["w"].codes.dtype, p["b"].quantizer.name
    (dtype('uint8'), 'f32')
  """
  leaves, treedef = jax.tree.flatten(params)
  keys = [None] * len(leaves) if key is None else list(jax.random.split(key, len(leaves)))
  out = []
  for leaf, k in zip(leaves, keys, strict=True):
    leaf = jnp.asarray(leaf)
    if not jnp.issubdtype(leaf.dtype, jnp.floating):
      raise ValueError(f"quantize_params: leaves must be floating arrays, got dtype {leaf.dtype}")
    q = quantizer if leaf.ndim >= min_ndim else F32
    out.append(q.quantize(leaf, k))
  return jax.tree.unflatten(treedef, out)


def dequantize_params(qparams: Any) -> Any:
  """The float32 parameter tree of a `QParam` tree (same structure as the original)."""
  return jax.tree.map(lambda p: p.dequantize(), qparams, is_leaf=is_qparam)


def fake_quant_params(params: Any, quantizer: Quantizer, *, min_ndim: int = 2,
                      key: Array | None = None) -> Any:
  """Quantize-dequantize of float `params` with a straight-through gradient.

  The forward weights of the master-weight baseline: FP32 masters, quantized
  forward (same leaf policy as `quantize_params`).
  """
  leaves, treedef = jax.tree.flatten(params)
  keys = [None] * len(leaves) if key is None else list(jax.random.split(key, len(leaves)))
  out = []
  for leaf, k in zip(leaves, keys, strict=True):
    if leaf.ndim < min_ndim:
      out.append(leaf)
      continue
    xq = jax.lax.stop_gradient(quantizer.dequantize(quantizer.quantize(leaf, k)) - leaf)
    out.append(leaf + xq)
  return jax.tree.unflatten(treedef, out)


def static_bytes(*trees: Any) -> int:
  """Bytes held by the array leaves of `trees` (params + optimizer state).

  Counts real storage: a `QParam`'s uint8 codes (FP8: 1 B/elem; INT4: packed,
  0.5 B/elem) plus its scale words; PRNG keys count as their key data.
  """
  total = 0
  for tree in trees:
    for leaf in jax.tree.leaves(tree):
      if hasattr(leaf, "dtype") and jnp.issubdtype(leaf.dtype, jax.dtypes.prng_key):
        leaf = jax.random.key_data(leaf)
      total += int(np.asarray(leaf).nbytes) if not hasattr(leaf, "nbytes") else int(leaf.nbytes)
  return total


def check_qparams(params: Any, quantizer: Quantizer, *, where: str) -> None:
  """Raises a ValueError unless every leaf is a QParam in `quantizer` or F32."""
  flat, _ = jax.tree_util.tree_flatten_with_path(params, is_leaf=is_qparam)
  for path, leaf in flat:
    name = jax.tree_util.keystr(path)
    if not isinstance(leaf, QParam):
      dtype = getattr(leaf, "dtype", type(leaf).__name__)
      raise ValueError(
          f"{where}: params{name} is a plain array of dtype {dtype}; quantizer "
          f"{quantizer.name!r} expects QParam leaves storing "
          f"{np.dtype(quantizer.code_dtype)} codes "
          "(create them with jaxlab.optim.quantize_params(params, quantizer))")
    if leaf.quantizer not in (quantizer, F32):
      raise ValueError(
          f"{where}: params{name} is stored as {leaf.quantizer}, but the optimizer's quantizer "
          f"is {quantizer} (only it and the float32 identity format are accepted)")
    if leaf.codes.dtype != leaf.quantizer.code_dtype:
      raise ValueError(
          f"{where}: params{name} has code dtype {leaf.codes.dtype}, expected "
          f"{np.dtype(leaf.quantizer.code_dtype)} for format {leaf.quantizer.name!r}")


def bits_delta(new: QParam, old: QParam) -> QParam:
  """The update `u` with `old + u == new` bitwise (modular integer difference)."""
  scales = None if new.scales is None else new.scales - old.scales
  return QParam(new.codes - old.codes, scales, new.quantizer, new.shape)


__all__ = ["F32", "GRID_NAN_CODE", "QParam", "QUANTIZERS", "Quantizer", "bits_delta",
           "check_qparams", "dequantize_params", "fake_quant_params", "is_qparam",
           "quantize_params", "static_bytes"]
