"""Smoke run of the `bench_oea` benchmark (timings are not asserted: smoke sizes)."""

import jax
import numpy as np

from configs import bench_oea as bench_config
from jaxlab.experiments import bench_oea


def test_bench_oea_smoke():
  cfg = bench_config.get_config("smoke")
  res = bench_oea.run_benchmark(cfg)
  t = res["num_active_experts"]
  # The benchmark's router logits, drawn as it draws them; T is checked against the closed
  # form "distinct experts among the batch's top-k (vanilla) / top-k0 (OEA) choices", which
  # a routing that activated extra experts, or timed the wrong expert set, would break.
  keys = jax.random.split(jax.random.key(cfg.seed), 5)
  logits = np.asarray(jax.random.normal(keys[4], (cfg.batch_size, cfg.num_experts))
                      * cfg.router_scale)
  order = np.argsort(-logits, axis=1)
  assert t["vanilla"] == len(np.unique(order[:, :cfg.k]))
  for k0 in cfg.k0s:
    assert t[f"oea_k0={k0}"] == len(np.unique(order[:, :k0]))
  # Every routing was timed `repeats` times: a spread, not one sample.
  for name in t:
    tm = res["timings"][name]
    assert 0.0 < tm["min_s"] <= tm["median_s"] <= tm["max_s"]
  assert set(res["timings"]) == {"vanilla", *(f"oea_k0={k0}" for k0 in cfg.k0s)}
