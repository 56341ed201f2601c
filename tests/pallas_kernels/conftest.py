"""Shared fixtures of the kernel tests."""

import contextlib

import jax
import pytest


@pytest.fixture
def lowering_target():
  """`lowering_target(platform)`: a context in which a kernel lowers for `platform` from CPU.

  Since jax 0.12 a Triton kernel reads the target GPU's compute capability while
  lowering, and on a machine without a GPU it needs an abstract one: an
  abstract mesh whose device is an H100 (sm_90). TPU needs nothing.
  """
  def target(platform: str):
    if platform != "cuda":
      return contextlib.nullcontext()
    device = jax.sharding.AbstractDevice(device_kind="NVIDIA H100", num_cores=None, platform="gpu")
    mesh = jax.sharding.AbstractMesh((1,), ("x",), abstract_device=device)
    return jax.sharding.use_abstract_mesh(mesh)
  return target
