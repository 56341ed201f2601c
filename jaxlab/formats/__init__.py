"""Number formats as pure jnp: element grids, rounding, FP8/INT/NVFP4/MXFP4/MixFP4.

A leaf package: it depends on jax, numpy and ml_dtypes only.

Public API:
  quantize(x, fmt, *, axis=-1, key=None, **options) -> QArray
  dequantize(q, dtype=float32) -> Array
  fake_quant(x, fmt, *, axis=-1, key=None, **options)   (straight-through gradient)
  fmt in FORMATS = ("fp8_e4m3", "int4", "int8", "nvfp4", "mxfp4", "mixfp4").

Grids and helpers: E2M1, E1M2, E2M2, E4M3 (`FloatGrid`), `round_float`,
`decode_float`, `round_int`, `decode_e8m0`, `MIX_LUT` (the 32-entry
(flag, nibble) -> E2M2 decode table), `pack_nibbles` / `unpack_nibbles`.

Example:
  >>> import jax, jax.numpy as jnp
  >>> from jaxlab import formats
  >>> w = jax.random.normal(jax.random.key(0), (64, 32))
  >>> q = formats.quantize(w, "mixfp4", axis=0)    # 16-blocks along axis 0
  >>> formats.dequantize(q).shape
  (64, 32)
"""

from jaxlab.formats._core import (
    FORMATS,
    Format,
    QArray,
    block_view,
    dequantize,
    e4m3_scale,
    fake_quant,
    make_format,
    mixfp4_blocks,
    mx_scale_exponent,
    nvfp4_blocks,
    quantize,
    sqnr_db,
    tensor_encode_scale,
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
from jaxlab.formats._packing import pack_nibbles, unpack_nibbles

__all__ = [
    "E1M2", "E2M1", "E2M2", "E4M3", "FORMATS", "GRIDS", "MIX_E2M2_CODES", "MIX_LUT", "SR_BITS",
    "FloatGrid", "Format", "QArray", "block_view", "decode_e8m0", "decode_mix_e2m2", "decode_float", "dequantize",
    "e4m3_scale", "exp2i", "fake_quant", "floor_log2", "make_format", "mixfp4_blocks",
    "mx_scale_exponent", "nvfp4_blocks", "pack_nibbles", "quantize", "round_float", "round_int",
    "sqnr_db", "tensor_encode_scale", "unpack_nibbles",
]
