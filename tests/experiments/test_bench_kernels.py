"""Smoke run of the `bench_kernels` benchmark (timings are not asserted: smoke sizes)."""

import jax

from configs import bench_kernels as bench_config
from jaxlab.experiments import bench_kernels


def test_bench_kernels_smoke():
  cfg = bench_config.get_config("smoke")
  res = bench_kernels.run_benchmark(cfg)
  if jax.default_backend() == "cpu":
    # CPU: implementation=None is the XLA reference, bit for bit.
    assert set(res["backend_of_none"].values()) == {"xla"}
    assert all(v == 0.0 for v in res["outputs"].values())
  for name in ("dequant_matmul", "gmm", "route"):
    assert res["ratios"][f"{name}_none_over_xla"] > 0
  assert list(res["targets"]) == ["dequant_matmul_none_within_1.2x_of_xla"]
