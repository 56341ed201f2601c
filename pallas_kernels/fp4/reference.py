"""Pure-jnp references for the FP4 kernels (the spec; also the XLA fallback).

Numerics are those of `jaxlab.formats`: NVFP4 (TE/torchao recipe) and MixFP4
(per-block E2M1 vs E1M2, flag in bit 7 of the E4M3 scale byte).
"""

import jax
import jax.numpy as jnp
from jax import Array
from jaxtyping import Float

from jaxlab import formats


def quantize_reference(x: Float[Array, "m k"], fmt: str) -> formats.QArray:
  """Quantizes a 2-D array with 16-blocks along its last axis (`formats.quantize`).

  Example:
    >>> q = quantize_reference(jnp.ones((4, 32)), "nvfp4")
    >>> float(formats.dequantize(q).max())  # 1.0 is exact in NVFP4
    1.0
  """
  return formats.quantize(x, fmt, axis=-1)


def dequant_matmul_reference(x: Float[Array, "m k"], wq: formats.QArray) -> Float[Array, "m n"]:
  """x @ dequantize(wq) in float32 (HIGHEST precision).

  Example:
    >>> wq = formats.quantize(jnp.ones((32, 8)), "nvfp4", axis=0)  # 16-blocks along K
    >>> dequant_matmul_reference(jnp.ones((2, 32)), wq).tolist()[0][:2]
    [32.0, 32.0]
  """
  w = formats.dequantize(wq)
  return jnp.dot(x.astype(jnp.float32), w, precision=jax.lax.Precision.HIGHEST,
                 preferred_element_type=jnp.float32)
