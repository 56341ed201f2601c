"""FP4 Pallas kernels: fused NVFP4/MixFP4 quantize and dequant-matmul.

Numerics are defined by `jaxlab.formats` (see `reference.py`).

Backends (`implementation=`, dispatch in `pallas_kernels._common`):

  * quantize: Mosaic TPU, Triton (deprecated; by name only), or the XLA
    reference.
  * dequant_matmul: Mosaic TPU (`kernel.py`, K grid axis + f32 VMEM
    accumulator), Mosaic GPU (`mgpu.py`, Hopper wgmma: packed weights and
    scales streamed per K tile by TMA, decoded in registers to the activation
    dtype, f32 wgmma accumulator; bfloat16/float16 activations), Triton
    (`kernel.py`; by name only), `jax.nn.scaled_matmul` ("scaled_matmul":
    NVFP4 and MXFP4 weights as `float4_e2m1fn` + `float8_*` scales, where the
    installed jax lowers it: `scaled_matmul_available`), or the XLA reference.

`implementation=None` is XLA on CPU, Mosaic TPU on TPU, and on GPU Mosaic GPU
where it fits (16-bit activations, its tile rules) else XLA: never Triton.
Interpret mode only when asked (`interpret=True`, or an explicit kernel on
CPU), never because `platform=` names an accelerator; the Mosaic GPU kernel
then runs in JAX's GPU interpreter.

Example:
  >>> import jax, jax.numpy as jnp
  >>> from jaxlab import formats
  >>> wq = formats.quantize(jax.random.normal(jax.random.key(0), (256, 64)), "mixfp4", axis=0)
  >>> x = jnp.ones((8, 256), jnp.bfloat16)
  >>> dequant_matmul(x, wq, implementation="mosaic_gpu", interpret=True).shape
  (8, 64)
"""

from pallas_kernels.fp4.ops import (
    MatmulBlockSizes,
    QuantizeBlockSizes,
    dequant_matmul,
    quantize,
    scaled_matmul_available,
)
from pallas_kernels.fp4.reference import dequant_matmul_reference, quantize_reference

__all__ = ["MatmulBlockSizes", "QuantizeBlockSizes", "dequant_matmul", "dequant_matmul_reference",
           "quantize", "quantize_reference", "scaled_matmul_available"]
