"""Smoke run of the `bench_lm_train` benchmark (no timing claims at smoke sizes).

Runs with or without torch: without it the PyTorch comparison is skipped with a
message; with it the first losses of both steps must agree (same model).
"""

import importlib.util

from configs import bench_lm_train as bench_config
from jaxlab.experiments import bench_lm_train

HAS_TORCH = importlib.util.find_spec("torch") is not None


def test_bench_lm_train_smoke(capsys):
  cfg = bench_config.get_config("smoke")
  res = bench_lm_train.run_benchmark(cfg)
  tiny = res["models"]["tiny"]
  spec = cfg.models.tiny
  assert tiny["tokens_per_step"] == spec.batch_size * spec.seq_len
  assert tiny["tokens_per_s"]["jaxlab"] > 0
  if HAS_TORCH:
    assert tiny["torch_first_losses_max_abs_diff"] < 1e-3
    assert res["ratios"]["tiny_jaxlab_over_torch_tokens_per_s"] > 0
  else:
    assert "torch" not in tiny["tokens_per_s"] and res["ratios"] == {}
    assert "skipped" in res["torch_skipped"]
    assert "skipped" in capsys.readouterr().err


def test_quick_preset_has_both_models():
  cfg = bench_config.get_config("quick")
  assert set(cfg.models) == {"lm_quick", "issue18"}
  assert cfg.repeats >= 5
  issue = cfg.models.issue18
  assert (issue.d_model, issue.num_layers, issue.num_heads, issue.num_kv_heads, issue.d_ff,
          issue.batch_size, issue.seq_len) == (128, 4, 4, 2, 384, 32, 256)
