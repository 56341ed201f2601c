"""Smoke runs of the `eco` experiment and the `eco` benchmark."""

import json
import os

import pytest

from configs import bench_eco as bench_config
from configs import eco as eco_config
from jaxlab.experiments import bench_eco, eco


def test_eco_smoke(tmp_path):
  config = eco_config.get_config("smoke")
  res = eco.run(config, str(tmp_path))
  with open(os.path.join(tmp_path, "results.json")) as f:
    saved = json.load(f)
  assert saved["report"]["verdict"] == res["report"]["verdict"]
  v = res["verdicts"]
  checks = [v[k] for k in ("toy_eco_within", "toy_naive_rtn_stalls", "lm_fp8_eco_within",
                           "lm_fp8_naive_rtn_worse", "lm_memory_ok") if k in v]
  want = "held" if all(checks) else "partly held" if any(checks) else "did not hold"
  assert res["report"]["verdict"] == want
  fp8 = res["lm"]["fp8_e4m3"]
  # Static memory from the pytrees: FP8 codes + row scales + two FP32 moments < 12 B/param.
  assert fp8["master"]["bytes_per_param"] > 11.9
  assert fp8["eco_sr"]["bytes_per_param"] < 9.5
  assert v["lm_memory_ok"]
  for p in res["report"]["plots"]:
    assert os.path.exists(os.path.join(tmp_path, p))
  # Toy: ECO-RTN carries sub-step updates that naive RTN loses at lr 1e-3.
  t = res["toy"]["table"]
  assert t["eco_rtn"]["0.001"]["dist"] < t["naive_rtn"]["0.001"]["dist"]
  # ...and its consecutive RTN residuals are nearly parallel (ECO's E_t ~ E_{t+1} premise).
  assert t["eco_rtn"]["0.001"]["residual_cos"] > 0.9
  assert t["master"]["0.001"]["residual_cos"] is None


def test_toy_master_forward():
  cfg = eco_config.get_config("smoke").toy
  cfg.update(num_steps=400, seeds=(0,), arms=("master",))
  cfg_fp32 = cfg.copy_and_resolve_references()
  cfg_fp32.master_forward = "fp32"
  got_fp32 = eco.convex_toy(cfg_fp32, 0)
  got_q = eco.convex_toy(cfg, 0)
  m32, mq = got_fp32["table"]["master"]["0.1"], got_q["table"]["master"]["0.1"]
  # Exact gradients at the master weights: it converges, and Q_RTN(w*) is the deployed point.
  assert m32["dist"] == pytest.approx(got_fp32["grid_floor"], rel=1e-4)
  assert m32["last_move"] < cfg.num_steps // 2
  # Gradients through the quantized forward keep moving the master off the nearest point.
  assert mq["dist"] > 1.2 * got_q["grid_floor"]
  assert mq["last_move"] > cfg.num_steps // 2
  cfg.master_forward = "bf16"
  with pytest.raises(ValueError, match="master_forward"):
    eco.convex_toy(cfg, 0)


@pytest.mark.slow
def test_bench_eco_smoke():
  out = bench_eco.run_benchmark(bench_config.get_config("smoke"))
  assert out["ratios"]["eco_over_master_step_time"] > 0
  assert out["ratios"]["eco_over_master_static_bytes"] < 0.85
