"""Smoke runs of the `bench_lm_train` benchmark (no timing claims at smoke sizes).

Runs with or without torch: without it the PyTorch comparison is skipped with a
message; with it the first losses of both steps must agree (same model). The data
parallel step needs a process whose CPU was split into 2 devices: `launch.bench`
does that (a subprocess); in pytest's one-device process it is skipped with a message.
"""

import importlib.util
import json
import os
import platform
import subprocess
import sys

import jax
import pytest

from configs import bench_lm_train as bench_config
from jaxlab.experiments import bench_lm_train

HAS_TORCH = importlib.util.find_spec("torch") is not None
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_bench_lm_train_smoke(capsys):
  cfg = bench_config.get_config("smoke")
  res = bench_lm_train.run_benchmark(cfg)
  tiny = res["models"]["tiny"]
  spec = cfg.models.tiny
  assert tiny["tokens_per_step"] == spec.batch_size * spec.seq_len
  assert tiny["tokens_per_s"]["jaxlab"] > 0
  err = capsys.readouterr().err
  if len(jax.devices()) < cfg.cpu_devices:
    assert "jaxlab_dp2" not in tiny["tokens_per_s"]
    assert "needs 2 CPU devices" in tiny["data_parallel_skipped"]
    assert "needs 2 CPU devices" in err
  assert tiny["tokens_per_s_back_to_back"].keys() == tiny["tokens_per_s"].keys()
  if HAS_TORCH:
    assert tiny["torch_first_losses_max_abs_diff"] < 1e-3
    assert res["ratios"]["tiny_jaxlab_over_torch_tokens_per_s"] > 0
    assert res["ratios"]["tiny_jaxlab_over_torch_tokens_per_s_back_to_back"] > 0
  else:
    assert "torch" not in tiny["tokens_per_s"] and res["ratios"] == {}
    assert "skipped" in res["torch_skipped"]
    assert "torch is not importable" in err


def test_launch_bench_runs_the_data_parallel_step(tmp_path):
  """`launch.bench` splits the CPU into the config's `cpu_devices` before JAX starts: the
  data parallel step runs and its first losses equal the one-device step's."""
  out = tmp_path / "bench.json"
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  for name in ("XLA_FLAGS", "GLIBC_TUNABLES", "JAXLAB_MALLOC"):
    env.pop(name, None)
  run = subprocess.run([sys.executable, "-m", "launch.bench", "--only=lm_train",
                        "--preset=smoke", f"--out={out}"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
  assert run.returncode == 0, run.stderr[-4000:]
  res = json.loads(out.read_text())["lm_train"]
  # launch.bench set malloc's policy (jaxlab/train/malloc.py) before XLA started, on glibc.
  assert res["malloc_reuses_freed_memory"] is (platform.libc_ver()[0] == "glibc")
  tiny = res["models"]["tiny"]
  assert "data_parallel_skipped" not in tiny
  assert tiny["tokens_per_s"]["jaxlab_dp2"] > 0
  assert tiny["jaxlab_dp2_first_losses_max_abs_diff"] < 1e-4
  assert res["ratios"]["tiny_jaxlab_dp2_over_jaxlab_tokens_per_s"] > 0
  assert res["ratios"]["tiny_jaxlab_dp2_over_jaxlab_tokens_per_s_back_to_back"] > 0


def test_a_candidate_that_trains_another_model_fails_the_benchmark(monkeypatch):
  """The first-loss check is a verdict: a data parallel step whose losses differ by more
  than summation order (1e-4) stops the benchmark instead of reporting its speed."""
  fake = {"tokens_per_s": {"jaxlab": 1.0, "jaxlab_dp2": 2.0},
          "tokens_per_s_back_to_back": {"jaxlab": 1.0, "jaxlab_dp2": 1.5},
          "jaxlab_dp2_first_losses_max_abs_diff": 3e-4}
  monkeypatch.setattr(bench_lm_train, "_bench_model", lambda spec, config: dict(fake))
  cfg = bench_config.get_config("smoke")
  with pytest.raises(RuntimeError, match="jaxlab_dp2 is not the same model"):
    bench_lm_train.run_benchmark(cfg)
  fake["jaxlab_dp2_first_losses_max_abs_diff"] = 5e-5
  res = bench_lm_train.run_benchmark(cfg)
  assert res["ratios"]["tiny_jaxlab_dp2_over_jaxlab_tokens_per_s"] == 2.0
  assert res["ratios"]["tiny_jaxlab_dp2_over_jaxlab_tokens_per_s_back_to_back"] == 1.5


def test_quick_preset_has_both_models():
  cfg = bench_config.get_config("quick")
  assert set(cfg.models) == {"lm_quick", "issue18"}
  assert cfg.repeats >= 5 and cfg.cpu_devices == cfg.torch_threads == 2
  issue = cfg.models.issue18
  assert (issue.d_model, issue.num_layers, issue.num_heads, issue.num_kv_heads, issue.d_ff,
          issue.batch_size, issue.seq_len) == (128, 4, 4, 2, 384, 32, 256)
