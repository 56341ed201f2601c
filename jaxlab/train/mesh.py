"""Meshes and shardings from config: batch over 'data', optional FSDP params.

The mesh always has the three named axes ('data', 'fsdp', 'expert') so
every module can name the axis it shards over; unused axes have size 1.
Multi-host runs call `jax.distributed.initialize()` first (the launcher's
`--jax_distributed` flag); the mesh then spans every host's devices. On one
CPU host, `use_cpu_devices(n)` (the launchers' `--cpu_devices`) makes the
mesh data parallel over the host's cores.
"""

from collections.abc import Mapping
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

AXES = ("data", "fsdp", "expert")


def use_cpu_devices(n: int) -> None:
  """Exposes the host CPU as `n` JAX devices (`jax_num_cpu_devices`), so that a mesh over
  them (`make_mesh()`: all on 'data') trains data parallel across the cores.

  XLA:CPU splits a large fused loop or matmul over its threads, but runs a batched
  matmul (attention's: one small matmul per sequence and head) on about one thread
  (2 cores run it ~1.1x faster than one). Data parallel over 2 devices of a 2-core
  CPU, `bench_lm_train`'s step on 256-byte sequences runs ~1.05-1.15x faster than on
  one device; on 96-byte ones (the lm quick preset), where attention is a small part
  of the step, it gains nothing.
  Each device computes its shard of the batch and the gradients are summed across
  them, so only float summation order differs from one device.

  Must run before the process's first JAX computation (JAX fixes its devices then).

  Raises:
    ValueError: `n` is not a positive int.
    RuntimeError: JAX's backends are already initialised.

  Example (a fresh process):
    >>> use_cpu_devices(2)  # doctest: +SKIP
    >>> len(jax.devices("cpu"))  # doctest: +SKIP
    2
  """
  if isinstance(n, bool) or not isinstance(n, int) or n < 1:
    raise ValueError(f"use_cpu_devices: n must be a positive int, got {n!r}")
  try:
    jax.config.update("jax_num_cpu_devices", n)
  except RuntimeError as e:
    raise RuntimeError(f"use_cpu_devices({n}) must run before the first JAX computation of "
                       f"the process (it has {len(jax.devices('cpu'))} CPU devices now): {e}"
                       ) from None


def make_mesh(axes: Mapping[str, int] | None = None, devices: list | None = None) -> Mesh:
  """A mesh with axes ('data', 'fsdp', 'expert').

  Args:
    axes: sizes per axis name; one axis may be -1 (takes the remaining
      devices); missing axes have size 1. Default: all devices on 'data'.
    devices: devices to use (default `jax.devices()`).
  """
  devices = list(jax.devices() if devices is None else devices)
  sizes = {"data": -1, "fsdp": 1, "expert": 1}
  if axes is not None:
    unknown = set(axes) - set(AXES)
    if unknown:
      raise ValueError(f"Unknown mesh axes {sorted(unknown)}; expected a subset of {AXES}")
    sizes = {name: 1 for name in AXES} | {k: int(v) for k, v in axes.items()}
  if sum(v == -1 for v in sizes.values()) > 1:
    raise ValueError(f"At most one mesh axis may be -1, got {sizes}")
  known = int(np.prod([v for v in sizes.values() if v != -1]))
  if any(v == 0 or v < -1 for v in sizes.values()) or len(devices) % known:
    raise ValueError(f"Mesh axes {sizes} do not fit {len(devices)} devices")
  sizes = {k: (len(devices) // known if v == -1 else v) for k, v in sizes.items()}
  shape = tuple(sizes[name] for name in AXES)
  if int(np.prod(shape)) != len(devices):
    raise ValueError(f"Mesh axes {sizes} use {int(np.prod(shape))} of {len(devices)} devices")
  return Mesh(np.asarray(devices).reshape(shape), AXES)


def batch_sharding(mesh: Mesh) -> NamedSharding:
  """Leading (batch) dim split over 'data' and 'fsdp' (FSDP is data parallel too)."""
  return NamedSharding(mesh, P(("data", "fsdp")))


def replicated(mesh: Mesh) -> NamedSharding:
  """The sharding that keeps a whole copy of an array on every device of `mesh`."""
  return NamedSharding(mesh, P())


def fsdp_sharding(tree: Any, mesh: Mesh, *, min_size: int = 1024) -> Any:
  """Per-leaf shardings: each leaf's largest dim divisible by the 'fsdp' size is split.

  Leaves smaller than `min_size` elements, or with no divisible dim, stay
  replicated. Optimizer moments mirror the params, so applying this to a whole
  `TrainState` shards them alike.
  """
  n = mesh.shape["fsdp"]

  def leaf(x):
    shape = getattr(x, "shape", ())
    if n == 1 or int(np.prod(shape)) < min_size:
      return replicated(mesh)
    dims = [d for d in np.argsort(shape)[::-1] if shape[d] % n == 0]
    if not dims:
      return replicated(mesh)
    spec = [None] * len(shape)
    spec[int(dims[0])] = "fsdp"
    return NamedSharding(mesh, P(*spec))

  return jax.tree.map(leaf, tree)


def state_sharding(state: Any, mesh: Mesh, *, fsdp: bool) -> Any:
  """Shardings for a whole train state: FSDP-split leaves or fully replicated."""
  if fsdp:
    return fsdp_sharding(state, mesh)
  return jax.tree.map(lambda _: replicated(mesh), state)
