"""Number formats as pure jnp: element grids, rounding, FP8/INT/NVFP4/MXFP4/MixFP4.

A leaf package: it depends on jax, numpy and ml_dtypes only. It owns jaxlab's
one quantization vocabulary: the named presets in `PRESETS`, which
`optim.Quantizer`, `quant` (fake quantization, `QDense`), the experiments and
the benchmarks take by name.

Public API::

  quantize(x, fmt, *, axis=-1, key=None, **options) -> QArray
  dequantize(q, dtype=float32) -> Array
  fake_quant(x, fmt, *, axis=-1, key=None, **options)   (straight-through gradient)
  get_format(name, **options) -> Format; make_format(family, **options)
  fmt: a preset (`PRESETS`): "fp8_e4m3", "fp8_e4m3_row", "fp8_e4m3_g32",
    "int8_row", "int8_g32", "int4_g16" (E4M3 block scale, 4.5 bits),
    "int4_g32" (float32 scales, 5 bits), "nvfp4", "mxfp4" (= "mxfp4_floor"),
    "mxfp4_rceil", "mixfp4"; an element family (`FORMATS`: "fp8_e4m3",
    "int4", "int8", "nvfp4", "mxfp4", "mixfp4") with options; or a `Format`.

Grids and helpers (plain jnp, no jit of their own: they trace inline under
`jit` and inside Pallas kernel bodies; kernels use only these public names):
E2M1, E1M2, E2M2, E4M3 (`FloatGrid`), `round_float`, `decode_float`,
`round_int`, `decode_e8m0`, `decode_mix_e2m2`, `MIX_LUT` (the 32-entry
(flag, nibble) -> E2M2 decode table), `pack_nibbles` / `unpack_nibbles`,
`nvfp4_blocks` / `mixfp4_blocks` (block math on [..., nb, bs] tiles),
`tensor_encode_scale`, `e4m3_scale`.

Non-finite, tiny and degenerate inputs (one rule for every format and for
the quantizers built on them, `optim.Quantizer` included; `quant.fake_quant`
documents its own rule for QAT):

  * A block holding a NaN or an ±Inf dequantizes to NaN in every element: it
    gets its scale's NaN encoding, the OCP MX v1.0 rule (a NaN shared scale
    makes every element of its block NaN) applied to every format: E8M0 0xFF
    (MXFP4), E4M3 0x7F (NVFP4, MixFP4 with its E1M2 flag clear, INT with E4M3
    scales), float32 NaN (FP8 and INT with float32 scales). FP8 with one
    tensor scale has no block scale: the block's elements (a block is a row
    along the blocked axis there) get E4M3's NaN code 0x7F. A non-finite
    weight thus stays visibly non-finite, never a silent zero or a finite
    value. Finite values beyond a format's range still saturate.
  * Tensor and block amaxes are taken over finite values only, so one Inf or
    NaN does not change the scale of the other blocks, nor (MixFP4) which
    element format its block chooses. A finite block's scale is never NaN,
    Inf or divided by.
  * A block whose finite amax is 0 gets scale 0 (byte 0), all-zero codes and
    dequantizes to exact zeros; a tensor whose finite amax is 0 uses tensor
    scale 1.
  * Tiny tensors keep their relative precision down to the smallest normal
    float32 (2**-126 ~ 1.18e-38; XLA on CPU flushes smaller values to zero):
    tensor encode scales are capped at 2**126 and float32 block scales are
    floored at 2**-126.
  * Empty non-blocked axes give empty results; an empty blocked axis, a
    `block_size` that is not a positive int (bools are refused), or a length
    not divisible by the block (without `pad=True`) is a ValueError naming
    the argument.

Example:
  >>> import jax, jax.numpy as jnp
  >>> from jaxlab import formats
  >>> w = jax.random.normal(jax.random.key(0), (64, 32))
  >>> q = formats.quantize(w, "mixfp4", axis=0)    # 16-blocks along axis 0
  >>> formats.dequantize(q).shape
  (64, 32)
  >>> formats.get_format("int4_g16").scale_dtype
  'e4m3'
"""

from jaxlab.formats._api import block_view, dequantize, fake_quant, quantize, sqnr_db
from jaxlab.formats._format import (
    FORMATS,
    PRESETS,
    Format,
    QArray,
    format_name,
    get_format,
    make_format,
)
from jaxlab.formats._grids import (
    E1M2,
    E2M1,
    E2M2,
    E4M3,
    GRIDS,
    MIX_E2M2_CODES,
    MIX_LUT,
    SR_BITS,
    FloatGrid,
    decode_e8m0,
    decode_float,
    decode_mix_e2m2,
    exp2i,
    floor_log2,
    round_float,
    round_int,
)
from jaxlab.formats._layout import Layout, from_blocks, layout, to_blocks
from jaxlab.formats._mixfp4 import mixfp4_blocks
from jaxlab.formats._mxfp4 import mx_scale_exponent
from jaxlab.formats._nvfp4 import nvfp4_blocks
from jaxlab.formats._packing import pack_nibbles, unpack_nibbles
from jaxlab.formats._scales import e4m3_scale, recip, tensor_encode_scale

__all__ = [
    "E1M2", "E2M1", "E2M2", "E4M3", "FORMATS", "GRIDS", "MIX_E2M2_CODES", "MIX_LUT", "PRESETS",
    "SR_BITS", "FloatGrid", "Format", "Layout", "QArray", "block_view", "decode_e8m0",
    "decode_float", "decode_mix_e2m2", "dequantize", "e4m3_scale", "exp2i", "fake_quant",
    "floor_log2", "format_name", "from_blocks", "get_format", "layout", "make_format",
    "mixfp4_blocks", "mx_scale_exponent", "nvfp4_blocks", "pack_nibbles", "quantize", "recip",
    "round_float", "round_int", "sqnr_db", "tensor_encode_scale", "to_blocks", "unpack_nibbles",
]
