"""Smoke runs of the `fp4` experiment and the `fp4` benchmark."""

import dataclasses
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs import bench_fp4 as bench_config
from configs import fp4 as fp4_config
from jaxlab.experiments import bench_fp4, fp4


def _check_synthetic_and_verdict(res, tmp_path):
  with open(os.path.join(tmp_path, "results.json")) as f:
    saved = json.load(f)
  assert saved["report"]["verdict"] == res["report"]["verdict"]
  primary, checks = res["primary_checks"], res["checks"]
  want = ("held" if all(checks.values()) else
          "partly held" if all(primary.values()) else "did not hold")
  assert res["report"]["verdict"] == want
  # MixFP4 >= NVFP4 block by block, so also in total SQNR on every tensor.
  for r in res["synthetic"].values():
    assert r["mixfp4"]["sqnr_db"] >= r["nvfp4"]["sqnr_db"]
    assert 0.0 < r["mixfp4"]["e1m2_share"] < 1.0
  for p in res["report"]["plots"]:
    assert os.path.exists(os.path.join(tmp_path, p))


def test_fp4_smoke_synthetic(tmp_path):
  cfg = fp4_config.get_config("smoke")
  assert cfg.experiment == "fp4" and cfg.preset == "smoke"
  cfg.lm.enabled = False
  res = fp4.run(cfg, str(tmp_path))
  assert res["ptq"] is None
  _check_synthetic_and_verdict(res, tmp_path)


def test_ptq_pieces_on_a_tiny_model():
  from jaxlab.nn import Transformer, TransformerConfig
  cfg = TransformerConfig(d_model=32, num_layers=1, num_heads=2, num_kv_heads=1, d_ff=64)
  model = Transformer(cfg)
  tokens = jax.random.randint(jax.random.key(0), (2, 16), 0, 256)
  params = model.init(jax.random.key(1), tokens)["params"]
  qparams = fp4.quantize_weights(params, "nvfp4", quantize_lm_head=False)
  np.testing.assert_array_equal(qparams["lm_head"]["kernel"], params["lm_head"]["kernel"])
  k = params["block_0"]["mlp"]["down"]["kernel"]
  assert not np.array_equal(qparams["block_0"]["mlp"]["down"]["kernel"], k)
  w4a4 = Transformer(dataclasses.replace(cfg, dense=fp4.w4a4_dense_factory("nvfp4", False)))
  out16 = model.apply({"params": qparams}, tokens)
  out4 = w4a4.apply({"params": qparams}, tokens)
  assert out4.shape == out16.shape and bool(jnp.all(jnp.isfinite(out4)))
  assert 0 < float(jnp.max(jnp.abs(out4 - out16))) < float(jnp.max(jnp.abs(out16)))
  w = fp4.weight_study(params, ("nvfp4", "mixfp4"))
  assert w["mixfp4"]["sqnr_db"] >= w["nvfp4"]["sqnr_db"] > 15


@pytest.mark.slow
def test_fp4_smoke(tmp_path):
  cfg = fp4_config.get_config("smoke")
  res = fp4.run(cfg, str(tmp_path))
  _check_synthetic_and_verdict(res, tmp_path)
  ptq = res["ptq"]
  assert set(ptq["w4a16"]) == set(ptq["w4a4"]) == set(cfg.lm.ptq_formats)
  for v in [ptq["fp32"], *ptq["w4a16"].values(), *ptq["w4a4"].values()]:
    assert 0.0 < v < 9.0  # bits/byte of a byte-level model: finite and below 8 + slack
  assert ptq["weights"]["mixfp4"]["sqnr_db"] >= ptq["weights"]["nvfp4"]["sqnr_db"]


def test_bench_fp4_smoke():
  cfg = bench_config.get_config("smoke")
  assert cfg.benchmark == "fp4"
  res = bench_fp4.run_benchmark(cfg)
  for name, r in res["formats"].items():
    # The NumPy baseline implements the same format: identical bytes and values.
    assert r["same_bytes_as_numpy"] and r["same_dequant_as_numpy"], name
    assert r["quantize_xla_over_numpy"] > 0 and r["quantize_frac_of_copy"] > 0
  assert set(res["targets"]) == {"nvfp4_quantize_xla_over_numpy_ge_3",
                                 "nvfp4_quantize_frac_of_copy_ge_0.15"}
