"""Helpers shared by every Pallas kernel family in `pallas_kernels`: backend dispatch.

Dispatch (tokamax style). Every public kernel takes `implementation`,
`interpret` and `platform` and hands them to `resolve`, which picks one
`Backend`:
  * `implementation=None` picks the best available backend for the platform:
    Mosaic TPU on TPU, the kernel's preferred Pallas GPU variant on GPU, and
    the XLA reference everywhere else (CPU), so CPU users get XLA speed. With
    `interpret=True` it means "the Pallas kernel, interpreted" instead.
  * "xla": the pure-jnp reference (also the gradient of every kernel).
  * "pallas": the Pallas kernel for the platform (TPU variant, the kernel's
    preferred GPU variant, or on CPU the TPU variant interpreted).
  * "mosaic_tpu", "triton", "mosaic_gpu": that variant by name.
`interpret=None` means interpret exactly when the default backend is CPU (or
JAXLAB_PALLAS_INTERPRET=1) and a Pallas kernel was chosen; interpret mode is
never picked by `implementation=None` unless asked for. `platform` ("tpu",
"cuda", "rocm", "gpu", "cpu"; None = the default backend) selects the variant
and compiler params, e.g. to lower for TPU or GPU from a CPU machine.
"""

import dataclasses
import os
from collections.abc import Sequence
from typing import Any

import jax
from jax.experimental.pallas import mosaic_gpu as plgpu
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas import triton as pltriton

try:  # GPU interpret mode (simulated SMEM, TMA, barriers, wgmma): public from jax 0.11
  _MosaicGPUInterpretParams = plgpu.InterpretGPUParams
except AttributeError:  # jax 0.10: the same class under a private path
  from jax._src.pallas.mosaic_gpu.interpret.params import (
      InterpretGPUParams as _MosaicGPUInterpretParams,
  )

XLA, MOSAIC_TPU, TRITON, MOSAIC_GPU = "xla", "mosaic_tpu", "triton", "mosaic_gpu"
VARIANTS = (MOSAIC_TPU, TRITON, MOSAIC_GPU)
IMPLEMENTATIONS = (None, XLA, "pallas", *VARIANTS)
_GPU_PLATFORMS = ("cuda", "rocm", "gpu")


@dataclasses.dataclass(frozen=True)
class Backend:
  """What a kernel call runs: `kind` in {"xla", *VARIANTS} and whether it is interpreted."""
  kind: str
  interpret: bool = False

  @property
  def is_xla(self) -> bool:
    return self.kind == XLA


def interpret_default() -> bool:
  """True when kernels should run in interpret mode (CPU, or JAXLAB_PALLAS_INTERPRET=1).

  An explicit `interpret=` argument always wins over this default.
  """
  return os.environ.get("JAXLAB_PALLAS_INTERPRET", "") == "1" or jax.default_backend() == "cpu"


def resolve_interpret(interpret: bool | None) -> bool:
  return interpret_default() if interpret is None else bool(interpret)


def platform_kind(platform: str | None) -> str:
  """"tpu", "gpu" or "cpu" for a platform name (None = the default backend)."""
  platform = platform or jax.default_backend()
  if platform in _GPU_PLATFORMS:
    return "gpu"
  if platform not in ("tpu", "cpu"):
    raise ValueError(f"platform must be one of 'tpu', 'cuda', 'rocm', 'gpu', 'cpu' or None, "
                     f"got {platform!r}")
  return platform


def resolve(name: str, implementation: str | None, *, interpret: bool | None,
            platform: str | None, variants: Sequence[str]) -> Backend:
  """Picks the backend of kernel `name` (see the module docstring).

  Args:
    name: the kernel, for error messages.
    implementation: one of `IMPLEMENTATIONS`.
    interpret: None (interpret exactly on CPU), True or False.
    platform: target platform (None = default backend).
    variants: the Pallas variants this kernel has, in order of preference
      within a platform (e.g. (MOSAIC_TPU, MOSAIC_GPU, TRITON)).

  Returns:
    The `Backend` to run.
  """
  if implementation not in IMPLEMENTATIONS:
    raise ValueError(f"{name}: implementation must be one of {IMPLEMENTATIONS}, got "
                     f"{implementation!r}")
  if implementation == XLA:
    return Backend(XLA)
  kind = platform_kind(platform)
  if implementation is None:
    if kind == "cpu" and not interpret:
      return Backend(XLA)  # no compiled Pallas on CPU: XLA, never a silent interpreter
    implementation = "pallas"
  if implementation == "pallas":
    gpu = [v for v in variants if v in (MOSAIC_GPU, TRITON)]
    if kind == "gpu":
      if not gpu:
        raise ValueError(f"{name}: no Pallas GPU variant")
      implementation = gpu[0]
    else:  # TPU, or the TPU-layout body run by the CPU interpreter
      implementation = MOSAIC_TPU
  if implementation not in variants:
    raise ValueError(f"{name}: implementation {implementation!r} is not available; this kernel "
                     f"has {tuple(variants)} and 'xla'")
  return Backend(implementation, resolve_interpret(interpret))


def compiler_params(backend: Backend, dimension_semantics: Sequence[str] | None = None) -> Any:
  """Compiler params of a Pallas backend (`dimension_semantics` is used by Mosaic TPU/GPU).

  Semantics are given in TPU words ("parallel", "arbitrary"); Mosaic GPU calls
  the latter "sequential".
  """
  if backend.kind == MOSAIC_TPU:
    if dimension_semantics is None:
      return pltpu.CompilerParams()
    return pltpu.CompilerParams(dimension_semantics=tuple(dimension_semantics))
  if backend.kind == TRITON:
    # Triton is deprecated from jax 0.11 (it warns when a kernel lowers): the
    # GPU default is Mosaic GPU wherever a kernel has that variant.
    return pltriton.CompilerParams()
  if backend.kind == MOSAIC_GPU:
    sem = None if dimension_semantics is None else tuple(
        "sequential" if s == "arbitrary" else s for s in dimension_semantics)
    return plgpu.CompilerParams(dimension_semantics=sem)  # lane-level lowering
  raise ValueError(f"no compiler params for backend {backend.kind!r}")


def mosaic_gpu_interpret(interpret: bool) -> Any:
  """`plgpu.kernel`'s `interpret` argument: JAX's GPU interpreter when asked, else None.

  A bare `True` would route to the generic Pallas interpreter, which has no
  rules for TMA copies or wgmma.
  """
  return _MosaicGPUInterpretParams() if interpret else None


def check_divisible(name: str, size: int, block: int, what: str) -> None:
  if block <= 0 or size % block:
    raise ValueError(f"{name}: {what} {size} must be a positive multiple of the block {block}")
