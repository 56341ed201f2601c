"""`Format` (a fully specified number format), its named presets, and `QArray`.

The presets are the one quantization vocabulary of jaxlab: optimizers
(`optim.Quantizer`), fake quantization (`quant`), experiments and benchmarks
name formats by these strings and never keep a table of their own.
"""

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from jax import Array

# Element families (the codecs); a `Format` is a family plus its options.
FORMATS = ("fp8_e4m3", "int4", "int8", "nvfp4", "mxfp4", "mixfp4")

_DEFAULTS: dict[str, dict[str, Any]] = {
    "fp8_e4m3": dict(granularity="tensor", block_size=32),
    "int4": dict(block_size=16, scale_dtype="f32"),
    "int8": dict(block_size=None, scale_dtype="f32"),
    "nvfp4": dict(block_size=16),
    "mxfp4": dict(block_size=32, scale_rule="floor"),
    "mixfp4": dict(block_size=16, select_p=2.0),
}


@dataclasses.dataclass(frozen=True)
class Format:
  """A fully specified quantization format (hashable, used as a static arg).

  Build it with `make_format(name, **options)` or look up a preset with
  `get_format("nvfp4")`.

  Attributes:
    name: the element family, one of `FORMATS`.
    block_size: elements per scale block along the blocked axis; None means
      the whole axis (one scale per row).
    granularity: fp8_e4m3 only: "tensor" (one f32 scale), "row" (one per slice
      along the axis) or "block" (one per `block_size` elements).
    scale_dtype: int4/int8 only: "f32" (scale = amax/qmax in float32) or
      "e4m3" (NVFP4-style two-level scale: E4M3 block scale and an FP32 tensor
      scale with S_enc = 448*qmax/amax(T); a jaxlab interpretation for INT).
    scale_rule: mxfp4 only: "floor" (OCP MX v1.0: X = 2**(floor(log2 amax)-2),
      values above 6 clip) or "rceil" (X = smallest power of two with
      amax/X <= 6, never clips; qwix/NVIDIA).
    select_p: mixfp4 only: the block error used to choose E1M2 over E2M1 is
      ``sum |x - x_hat|**p``; p=2 (MSE) is the public implementations' selector,
      other p are ablations (the paper's selector is unknown; jaxlab
      interpretation).
    pad: zero-pad a blocked axis whose length is not a multiple of the block.
  """
  name: str
  block_size: int | None = None
  granularity: str = "block"
  scale_dtype: str = "e4m3"
  scale_rule: str = "floor"
  select_p: float = 2.0
  pad: bool = False

  @property
  def is_fp4(self) -> bool:
    return self.name in ("nvfp4", "mxfp4", "mixfp4")

  @property
  def element_bits(self) -> int:
    return 8 if self.name in ("fp8_e4m3", "int8") else 4

  @property
  def qmax(self) -> float:
    return {"fp8_e4m3": 448.0, "int4": 7.0, "int8": 127.0}.get(self.name, 6.0)

  @property
  def two_level(self) -> bool:
    """Whether blocks carry E4M3 scale bytes under an FP32 tensor scale."""
    return self.name in ("nvfp4", "mixfp4") or (
        self.name in ("int4", "int8") and self.scale_dtype == "e4m3")

  def bits_per_element(self, axis_length: int | None = None) -> float:
    """Storage bits per element, excluding the one float32 tensor scale."""
    if self.name == "fp8_e4m3" and self.granularity == "tensor":
      return 8.0
    bs = self.block_size
    if self.name == "fp8_e4m3" and self.granularity == "row" or bs is None:
      bs = axis_length
    if bs is None:
      raise ValueError("bits_per_element: pass axis_length for row-wise scales")
    f32_scale = self.name == "fp8_e4m3" or (self.name in ("int4", "int8")
                                             and self.scale_dtype == "f32")
    return self.element_bits + (32 if f32_scale else 8) / bs


def _is_int(v: Any) -> bool:
  # bool is an int subclass: `block_size=True` must not mean 1.
  return isinstance(v, int) and not isinstance(v, bool)


def make_format(name: str, **options: Any) -> Format:
  """Validates `options` for element family `name` and returns a `Format`.

  A preset name (`PRESETS`) is accepted too, as in `get_format`.

  Options per family (defaults in brackets):
    fp8_e4m3: granularity ["tensor"] in {"tensor","row","block"}, block_size [32].
    int4: block_size [16], scale_dtype ["f32"] in {"f32","e4m3"}.
    int8: block_size [None = per row], scale_dtype ["f32"].
    nvfp4: block_size [16].  mxfp4: block_size [32], scale_rule ["floor"|"rceil"].
    mixfp4: block_size [16], select_p [2.0].
    every family: pad [False].

  Raises:
    ValueError: unknown family or option, or an option value out of range
      (block_size must be a positive int, not a bool; even for 4-bit formats).

  Example:
    >>> make_format("mxfp4", scale_rule="rceil").block_size
    32
  """
  if isinstance(name, str) and name in PRESETS and name not in FORMATS:
    return get_format(name, **options)
  if name not in FORMATS:
    raise ValueError(f"fmt must be one of {FORMATS} or a preset {sorted(PRESETS)}, got {name!r}")
  allowed = dict(_DEFAULTS[name], pad=False)
  unknown = set(options) - set(allowed)
  if unknown:
    raise ValueError(f"Unknown option(s) {sorted(unknown)} for format {name!r}; "
                     f"allowed: {sorted(allowed)}")
  kw = {**allowed, **options}
  bs = kw["block_size"]
  if bs is not None and not (_is_int(bs) and bs >= 1):
    raise ValueError(f"block_size must be a positive int or None, got {bs!r}")
  if not isinstance(kw["pad"], bool):
    raise ValueError(f"pad must be a bool, got {kw['pad']!r}")
  fmt = Format(name=name, **kw)
  if fmt.element_bits == 4 and bs is not None and bs % 2:
    raise ValueError(f"block_size must be even for 4-bit format {name!r}, got {bs}")
  if fmt.granularity not in ("tensor", "row", "block"):
    raise ValueError(f"granularity must be 'tensor', 'row' or 'block', got {fmt.granularity!r}")
  if fmt.scale_dtype not in ("f32", "e4m3"):
    raise ValueError(f"scale_dtype must be 'f32' or 'e4m3', got {fmt.scale_dtype!r}")
  if fmt.scale_rule not in ("floor", "rceil"):
    raise ValueError(f"scale_rule must be 'floor' or 'rceil', got {fmt.scale_rule!r}")
  if not (isinstance(fmt.select_p, (int, float)) and not isinstance(fmt.select_p, bool)
          and fmt.select_p > 0):
    raise ValueError(f"select_p must be a positive number, got {fmt.select_p!r}")
  return fmt


# Named presets: every format a jaxlab module, experiment or benchmark uses.
# `int4_g16` has an E4M3 block scale under an FP32 tensor scale (4.5 bits per
# element, the same storage as NVFP4, so the fp4 experiment compares equal
# bits); `int4_g32` keeps float32 scales (5 bits/element): it is the ECO
# optimizer's weight storage, whose updates must be exact integer bit deltas.
_PRESET_SPECS: dict[str, tuple[str, dict[str, Any]]] = {
    "fp8_e4m3": ("fp8_e4m3", {}),
    "fp8_e4m3_row": ("fp8_e4m3", {"granularity": "row"}),
    "fp8_e4m3_g32": ("fp8_e4m3", {"granularity": "block", "block_size": 32}),
    "int8_row": ("int8", {}),
    "int8_g32": ("int8", {"block_size": 32}),
    "int4_g16": ("int4", {"block_size": 16, "scale_dtype": "e4m3"}),
    "int4_g32": ("int4", {"block_size": 32, "pad": True}),
    "nvfp4": ("nvfp4", {}),
    "mxfp4": ("mxfp4", {"scale_rule": "floor"}),
    "mxfp4_floor": ("mxfp4", {"scale_rule": "floor"}),
    "mxfp4_rceil": ("mxfp4", {"scale_rule": "rceil"}),
    "mixfp4": ("mixfp4", {}),
}
PRESETS: dict[str, Format] = {}  # filled below (make_format reads PRESETS for its hint)
PRESETS.update({k: make_format(n, **o) for k, (n, o) in _PRESET_SPECS.items()})


def get_format(fmt: "str | Format", **options: Any) -> Format:
  """The `Format` named `fmt` (a preset or a family name), with `options` applied.

  A preset with options is the preset's family with the preset's options
  updated by `options` (e.g. `get_format("nvfp4", pad=True)`).

  Raises:
    ValueError: unknown name/option, or options passed with a `Format`.

  Example:
    >>> get_format("fp8_e4m3_row").granularity
    'row'
    >>> get_format("int4_g32").block_size, get_format("int4_g32").scale_dtype
    (32, 'f32')
  """
  if isinstance(fmt, Format):
    if options:
      raise ValueError(f"Pass options either inside Format or as keywords, not both: {options}")
    return fmt
  if not isinstance(fmt, str):
    raise ValueError(f"fmt must be a format name or Format, got {type(fmt).__name__}")
  if fmt in PRESETS:
    family, base = _PRESET_SPECS[fmt]
    return make_format(family, **{**base, **options}) if options else PRESETS[fmt]
  if fmt not in FORMATS:
    raise ValueError(f"Unknown format {fmt!r}; presets: {sorted(PRESETS)}; "
                     f"element families: {FORMATS}")
  return make_format(fmt, **options)


def format_name(fmt: Format) -> str | None:
  """The preset name of `fmt`, or None when no preset equals it."""
  for name, f in PRESETS.items():
    if f == fmt:
      return name
  return None


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class QArray:
  """A quantized array (pytree: array fields are leaves, the rest is static).

  Storage is in "blocked layout": the blocked axis is moved last and padded
  to a multiple of the block size (K_pad).

  Attributes:
    codes: uint8. 4-bit formats: two codes per byte, [..., K_pad // 2]; 8-bit
      formats: [..., K_pad] (E4M3 bytes or two's-complement int8 bytes).
    scales: per-block scales [..., K_pad // block]: raw uint8 bytes (E4M3 for
      nvfp4/mixfp4/int*-e4m3, bit 7 = 1 marking an E1M2 block in mixfp4; E8M0
      for mxfp4) or float32 (int*-f32, fp8 row/block); shape () float32 for
      fp8 "tensor".
    tensor_scale: float32 scalar multiplying every block (S_dec = 1/S_enc for
      two-level formats, else 1).
    fmt: the `Format` (static).
    shape: the original array's shape (static).
    axis: the blocked axis of the original array, non-negative (static).
  """
  # Leaves are typed Any: pytree machinery (vmap, custom_vjp cotangents) rebuilds
  # QArrays with placeholder leaves.
  codes: Any
  scales: Any
  tensor_scale: Any
  fmt: Format = dataclasses.field(metadata=dict(static=True))
  shape: tuple[int, ...] = dataclasses.field(metadata=dict(static=True))
  axis: int = dataclasses.field(metadata=dict(static=True))

  @property
  def block_size(self) -> int:
    if self.fmt.name == "fp8_e4m3" and self.fmt.granularity != "block":
      return self.shape[self.axis]
    return self.fmt.block_size or self.shape[self.axis]

  def e1m2_fraction(self) -> Array:
    """Fraction of blocks stored as E1M2 (mixfp4; 0 for every other format)."""
    if self.fmt.name != "mixfp4" or self.scales.size == 0:
      return jnp.zeros((), jnp.float32)
    return jnp.mean((self.scales >> 7).astype(jnp.float32))
