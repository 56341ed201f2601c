"""Helpers shared by every Pallas kernel family in `pallas_kernels`."""

import os
from typing import Any

import jax


def interpret_default() -> bool:
  """True when kernels should run in interpret mode (CPU, or JAXLAB_PALLAS_INTERPRET=1).

  An explicit `interpret=` argument always wins over this default.
  """
  return os.environ.get("JAXLAB_PALLAS_INTERPRET", "") == "1" or jax.default_backend() == "cpu"


def resolve_interpret(interpret: bool | None) -> bool:
  return interpret_default() if interpret is None else bool(interpret)


def compiler_params(platform: str | None) -> Any:
  """Compiler params for `platform` ("tpu", "cuda", "rocm", "gpu", "cpu" or None = default backend).

  TPU: None (Mosaic TPU defaults). GPU: Triton params. On jax 0.10.x the
  default GPU backend of `pl.pallas_call` is Mosaic GPU, whose lane-level
  lowering has no rule for `floor` (used by every exact rounding here), so the
  kernels target Triton on GPU.
  """
  platform = platform or jax.default_backend()
  if platform in ("cuda", "rocm", "gpu"):
    from jax.experimental.pallas import triton as pltriton
    return pltriton.CompilerParams()
  return None


def check_divisible(name: str, size: int, block: int, what: str) -> None:
  if block <= 0 or size % block:
    raise ValueError(f"{name}: {what} {size} must be a positive multiple of the block {block}")
