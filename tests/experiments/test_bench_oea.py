"""Smoke run of the `bench_oea` benchmark (timings are not asserted: smoke sizes)."""

from configs import bench_oea as bench_config
from jaxlab.experiments import bench_oea


def test_bench_oea_smoke():
  cfg = bench_config.get_config("smoke")
  res = bench_oea.run_benchmark(cfg)
  t = res["num_active_experts"]
  assert t["oea_k0=1"] <= t["vanilla"] <= cfg.num_experts
  assert res["ratios"]["oea_k0=1_over_vanilla_T"] == t["oea_k0=1"] / t["vanilla"]
  assert res["ratios"]["oea_k0=1_over_vanilla_time"] > 0
