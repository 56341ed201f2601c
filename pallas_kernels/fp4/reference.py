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
  """Quantizes a 2-D array with 16-blocks along its last axis (`formats.quantize`)."""
  return formats.quantize(x, fmt, axis=-1)


def dequant_matmul_reference(x: Float[Array, "m k"], wq: formats.QArray) -> Float[Array, "m n"]:
  """x @ dequantize(wq) in float32 (HIGHEST precision)."""
  w = formats.dequantize(wq)
  return jnp.dot(x.astype(jnp.float32), w, precision=jax.lax.Precision.HIGHEST,
                 preferred_element_type=jnp.float32)
