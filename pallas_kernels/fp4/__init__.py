"""FP4 Pallas kernels: fused NVFP4/MixFP4 quantize and dequant-matmul.

Numerics are defined by `jaxlab.formats` (see `reference.py`).
"""

from pallas_kernels.fp4.ops import (
    MatmulBlockSizes,
    QuantizeBlockSizes,
    dequant_matmul,
    quantize,
)
from pallas_kernels.fp4.reference import dequant_matmul_reference, quantize_reference

__all__ = ["MatmulBlockSizes", "QuantizeBlockSizes", "dequant_matmul", "dequant_matmul_reference",
           "quantize", "quantize_reference"]
