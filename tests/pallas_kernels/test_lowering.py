"""Every kernel's default lowers for GPU without Triton and for TPU, from a CPU host.

No accelerator is needed: `jit(...).trace(...).lower(lowering_platforms=...)`
lowers for the target (a Mosaic GPU kernel all the way to its PTX). None of
these calls passes `interpret`: naming a `platform` must never turn interpret
mode on (an interpreted kernel lowers to plain HLO loops, with no kernel call
in the text). They are lowered, never run: the GPU and TPU code is only as
checked as lowering checks it.
"""

import jax
import jax.numpy as jnp
import pytest

from jaxlab import formats
from pallas_kernels import fp4
from pallas_kernels import moe as pm

X16 = jax.ShapeDtypeStruct((32, 512), jnp.bfloat16)
X32 = jax.ShapeDtypeStruct((32, 512), jnp.float32)
LHS16 = jax.ShapeDtypeStruct((256, 256), jnp.bfloat16)
RHS16 = jax.ShapeDtypeStruct((4, 256, 256), jnp.bfloat16)
LHS32 = jax.ShapeDtypeStruct((256, 256), jnp.float32)
RHS32 = jax.ShapeDtypeStruct((4, 256, 256), jnp.float32)
GS = jax.ShapeDtypeStruct((4,), jnp.int32)
LOGITS = jax.ShapeDtypeStruct((16, 32), jnp.float32)


def _weight(fmt):
  return jax.eval_shape(lambda: formats.quantize(jnp.ones((512, 128)), fmt, axis=0))


# (name, function of the platform, its abstract arguments). One entry per kernel path the
# GPU default picks differently: 16-bit operands (Mosaic GPU) and float32 ones (XLA).
CASES = {
    "quantize_nvfp4": (lambda p: lambda x: fp4.quantize(x, "nvfp4", platform=p).codes, (X32,)),
    "quantize_mixfp4": (lambda p: lambda x: fp4.quantize(x, "mixfp4", platform=p).codes, (X32,)),
    "dequant_matmul_bf16_nvfp4": (
        lambda p: lambda x, w: fp4.dequant_matmul(x, w, platform=p), (X16, _weight("nvfp4"))),
    "dequant_matmul_bf16_mixfp4": (
        lambda p: lambda x, w: fp4.dequant_matmul(x, w, platform=p), (X16, _weight("mixfp4"))),
    "dequant_matmul_f32": (
        lambda p: lambda x, w: fp4.dequant_matmul(x, w, platform=p), (X32, _weight("mixfp4"))),
    "gmm_bf16": (lambda p: lambda a, b, g: pm.gmm(a, b, g, platform=p), (LHS16, RHS16, GS)),
    "gmm_f32": (lambda p: lambda a, b, g: pm.gmm(a, b, g, platform=p), (LHS32, RHS32, GS)),
    "route_oea": (lambda p: lambda x: pm.route(x, routing="oea", k=4, k0=2, platform=p)[1],
                  (LOGITS,)),
    "route_topk": (lambda p: lambda x: pm.route(x, routing="topk", k=4, platform=p)[1],
                   (LOGITS,)),
}
# What the GPU default runs: the Mosaic GPU kernel where one takes the input, else XLA.
GPU_MOSAIC = {"dequant_matmul_bf16_nvfp4", "dequant_matmul_bf16_mixfp4", "gmm_bf16"}


def _lower(case, platform):
  fn, args = CASES[case]
  return jax.jit(fn(platform)).trace(*args).lower(lowering_platforms=(platform,)).as_text()


@pytest.mark.parametrize("case", sorted(CASES))
def test_gpu_default_lowers_without_triton(case):
  text = _lower(case, "cuda")
  assert "triton" not in text.lower()
  if case in GPU_MOSAIC:
    assert "mosaic_gpu" in text
  else:  # the XLA reference: no kernel call at all, nor an interpreted kernel's loop
    assert "custom_call" not in text and "mosaic" not in text and "while" not in text


@pytest.mark.parametrize("case", sorted(CASES))
def test_tpu_default_lowers_to_mosaic_tpu(case):
  text = _lower(case, "tpu")
  assert "tpu_custom_call" in text  # compiled for TPU, not interpreted


@pytest.mark.parametrize("fmt,scales", [("nvfp4", "1x128x32xf8E4M3FN"),
                                        ("mxfp4", "1x128x16xf8E8M0FNU")])
def test_dequant_matmul_scaled_matmul_lowers_for_gpu(fmt, scales):
  # jax.nn.scaled_matmul lowers to XLA's block-scaled dot, which XLA hands to cuDNN where the
  # GPU has FP4 MMAs and otherwise expands into a dequantize and a dot.
  w = jax.eval_shape(lambda: formats.quantize(jnp.ones((512, 128)), fmt, axis=0))
  text = jax.jit(lambda x, q: fp4.dequant_matmul(x, q, implementation="scaled_matmul",
                                                 platform="cuda")
                 ).trace(X16, w).lower(lowering_platforms=("cuda",)).as_text()
  assert "__op$block_scaled_dot" in text
  # The weight [N, K] as E2M1 elements and its scale bytes as E4M3 (16-blocks) / E8M0 (32).
  assert "tensor<1x128x512xf4E2M1FN>" in text and f"tensor<{scales}>" in text
  assert "triton" not in text.lower()
