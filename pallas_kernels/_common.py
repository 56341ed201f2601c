"""Helpers shared by every Pallas kernel family in `pallas_kernels`: backend dispatch.

Dispatch (tokamax style). Every public kernel takes `implementation`,
`interpret` and `platform` and hands them to `resolve`, which picks one
`Backend`:
  * `implementation=None` picks the best available backend for the platform:
    Mosaic TPU on TPU; on GPU the kernel's Mosaic GPU variant where it has one
    (and the input suits it), else the XLA reference; XLA on CPU, so CPU
    users get XLA speed. With `interpret=True` it means "the Pallas kernel,
    interpreted" instead.
  * "xla": the pure-jnp reference (also the gradient of every kernel).
  * "pallas": the Pallas kernel for the platform: Mosaic TPU, Mosaic GPU, or
    on CPU the TPU variant interpreted. Never Triton: a kernel without a
    Mosaic GPU variant raises on GPU.
  * "scaled_matmul": `jax.nn.scaled_matmul` (XLA's block-scaled dot; cuDNN
    on GPUs that have it), for the kernels that list it.
  * "mosaic_tpu", "triton", "mosaic_gpu": that variant by name. Triton is
    deprecated by JAX (from 0.11) and is only ever run when named; it then
    warns with a `FutureWarning`, which Python shows by default (JAX's own
    `DeprecationWarning` is raised inside jax, where the default filters hide
    it).
`interpret=None` means interpret exactly when the kernel runs on this host's
CPU: the target platform is "cpu" (the default on a CPU machine) or
JAXLAB_PALLAS_INTERPRET=1. Naming another `platform` ("tpu", "cuda", "rocm",
"gpu") never turns interpret mode on: it selects the variant and compiler
params to lower for that platform, e.g. from a CPU machine.
"""

import dataclasses
import os
import sys
import warnings
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
# Not a Pallas kernel: JAX's own block-scaled matmul (`jax.nn.scaled_matmul`), which a
# kernel family may list among its variants (the FP4 dequant-matmul does).
SCALED_MATMUL = "scaled_matmul"
IMPLEMENTATIONS = (None, XLA, "pallas", *VARIANTS, SCALED_MATMUL)
_GPU_PLATFORMS = ("cuda", "rocm", "gpu")


@dataclasses.dataclass(frozen=True)
class Backend:
  """What a kernel call runs: `kind` in {"xla", *VARIANTS} and whether it is interpreted."""
  kind: str
  interpret: bool = False

  @property
  def is_xla(self) -> bool:
    return self.kind == XLA


def interpret_default(platform: str | None = None) -> bool:
  """True when kernels for `platform` should run in interpret mode.

  That is when they run on this host's CPU (`platform` "cpu", or None on a
  CPU machine) or JAXLAB_PALLAS_INTERPRET=1. Naming an accelerator platform
  never turns it on: a kernel for "tpu" or "cuda" is compiled (or lowered)
  for it. An explicit `interpret=` argument always wins over this default.

  Args:
    platform: the target platform (None = the default backend).

  Returns:
    Whether `interpret=None` means interpret mode.

  Example:
    >>> interpret_default("tpu")  # a TPU target is compiled, never interpreted by default
    False
  """
  if os.environ.get("JAXLAB_PALLAS_INTERPRET", "") == "1":
    return True
  return platform_kind(platform) == "cpu"


def resolve_interpret(interpret: bool | None, platform: str | None = None) -> bool:
  return interpret_default(platform) if interpret is None else bool(interpret)


def platform_kind(platform: str | None) -> str:
  """"tpu", "gpu" or "cpu" for a platform name (None = the default backend)."""
  platform = platform or jax.default_backend()
  if platform in _GPU_PLATFORMS:
    return "gpu"
  if platform not in ("tpu", "cpu"):
    raise ValueError(f"platform must be one of 'tpu', 'cuda', 'rocm', 'gpu', 'cpu' or None, "
                     f"got {platform!r}")
  return platform


# Packages whose frames lie between a kernel's caller and `_warn_triton`: this one, and the
# runtime shape checkers that may wrap its public functions (the test suite installs them).
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_WRAPPERS = ("jaxtyping", "beartype")


def _warn_triton(name: str) -> None:
  """Warns that kernel `name` runs the deprecated Triton variant, at its caller's line.

  A `FutureWarning`, which Python shows by default, unlike JAX's own
  `DeprecationWarning`: raised inside jax, the default filters hide it. The
  stacklevel is counted, not fixed, since a type checker's wrappers add frames
  (generated ones, named "<...>", among them).
  """
  inner = [_PACKAGE_DIR] + [os.path.dirname(sys.modules[m].__file__) for m in _WRAPPERS
                            if getattr(sys.modules.get(m), "__file__", None)]
  frame, level = sys._getframe(0), 1  # this frame calls `warnings.warn`: stacklevel 1
  while frame is not None and (frame.f_code.co_filename.startswith("<") or any(
      frame.f_code.co_filename.startswith(d + os.sep) for d in inner)):
    frame, level = frame.f_back, level + 1
  warnings.warn(f"{name}: implementation='triton' runs the Pallas Triton backend, which JAX "
                "deprecates from 0.11 and will remove; the GPU default is Mosaic GPU or XLA",
                FutureWarning, stacklevel=level)


def resolve(name: str, implementation: str | None, *, interpret: bool | None,
            platform: str | None, variants: Sequence[str]) -> Backend:
  """Picks the backend of kernel `name` (see the module docstring).

  Args:
    name: the kernel, for error messages.
    implementation: one of `IMPLEMENTATIONS`.
    interpret: None (interpret exactly when the kernel runs on this host's
      CPU), True or False.
    platform: target platform (None = default backend).
    variants: the Pallas variants this kernel has (for this input), in order
      of preference within a platform (e.g. (MOSAIC_TPU, MOSAIC_GPU, TRITON)).

  Returns:
    The `Backend` to run.

  Raises:
    ValueError: an unknown implementation or platform, a variant the kernel
      does not have, or "pallas" on GPU for a kernel without a Mosaic GPU
      variant.
  """
  if implementation not in IMPLEMENTATIONS:
    raise ValueError(f"{name}: implementation must be one of {IMPLEMENTATIONS}, got "
                     f"{implementation!r}")
  if implementation == XLA:
    return Backend(XLA)
  kind = platform_kind(platform)
  if implementation == SCALED_MATMUL:
    if SCALED_MATMUL not in variants:
      raise ValueError(f"{name}: implementation 'scaled_matmul' is not available for this "
                       "kernel")
    return Backend(SCALED_MATMUL)
  if implementation is None:
    if kind == "cpu" and not interpret:
      return Backend(XLA)  # no compiled Pallas on CPU: XLA, never a silent interpreter
    if kind == "gpu" and MOSAIC_GPU not in variants:
      return Backend(XLA)  # the GPU default never falls back to the deprecated Triton
    implementation = "pallas"
  if implementation == "pallas":
    if kind == "gpu":
      if MOSAIC_GPU not in variants:
        raise ValueError(f"{name}: no Mosaic GPU kernel for this input; implementation="
                         "'pallas' never picks the deprecated Triton variant: use None or "
                         "'xla' (the XLA reference), or 'triton' by name")
      implementation = MOSAIC_GPU
    else:  # TPU, or the TPU-layout body run by the CPU interpreter
      implementation = MOSAIC_TPU
  if implementation not in variants:
    raise ValueError(f"{name}: implementation {implementation!r} is not available; this kernel "
                     f"has {tuple(variants)} and 'xla'")
  if implementation == TRITON:
    _warn_triton(name)
  return Backend(implementation, resolve_interpret(interpret, platform))


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
    # Deprecated from jax 0.11: only ever run when asked for by name (`resolve`).
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
