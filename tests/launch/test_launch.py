"""The absl launcher, config overrides/errors, reproduce and bench entry points."""

import json
import logging
import os
import subprocess
import sys

import pytest
from absl import flags
from absl.testing import flagsaver

from jaxlab import train
from jaxlab.train import malloc

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _launch(*args, timeout=300):
  return subprocess.run([sys.executable, "-m", "launch.main", *args], cwd=ROOT,
                        capture_output=True, text=True, timeout=timeout)


def test_overrides_reach_the_config(tmp_path, monkeypatch):
  from launch import main
  argv = ["main", "--config=configs/lm.py:smoke", "--config.train.num_steps=7",
          "--config.optimizer.learning_rate=0.5", f"--workdir={tmp_path}"]
  monkeypatch.setattr(sys, "argv", argv)  # config_flags reads overrides from sys.argv
  with flagsaver.flagsaver():
    flags.FLAGS(argv)
    config = main._CONFIG.value
    assert config.preset == "smoke"
    assert config.train.num_steps == 7 and config.optimizer.learning_rate == 0.5


def test_unknown_key_fails_clearly(tmp_path):
  out = _launch("--config=configs/lm.py:smoke", "--config.train.no_such_key=1",
                f"--workdir={tmp_path}")
  assert out.returncode != 0
  assert "no_such_key" in out.stderr


def test_bad_preset_fails_clearly(tmp_path):
  out = _launch("--config=configs/lm.py:tiny", f"--workdir={tmp_path}")
  assert out.returncode != 0
  assert "Unknown config preset 'tiny'" in out.stderr


def test_smoke_run_twice_resumes(tmp_path):
  workdir = str(tmp_path / "lm")
  first = _launch("--config=configs/lm.py:smoke", f"--workdir={workdir}")
  assert first.returncode == 0, first.stderr[-3000:]
  metrics_path = os.path.join(workdir, "metrics.jsonl")
  with open(metrics_path) as f:
    metrics_before = f.read()
  with open(os.path.join(workdir, "results.json")) as f:
    results_before = json.load(f)
  assert results_before["steps"] == 40
  with open(os.path.join(workdir, "config.json")) as f:
    assert json.load(f)["train"]["num_steps"] == 40

  second = _launch("--config=configs/lm.py:smoke", f"--workdir={workdir}")
  assert second.returncode == 0, second.stderr[-3000:]
  with open(metrics_path) as f:
    assert f.read() == metrics_before  # no step trained (or logged) again
  with open(os.path.join(workdir, "results.json")) as f:
    assert json.load(f) == results_before
  assert train.Checkpointer(workdir, every=20).latest_step() == 40


def test_reproduce_writes_report(tmp_path, caplog, monkeypatch):
  from launch.runner import reproduce
  caplog.set_level(logging.INFO, logger="jaxlab.progress")
  monkeypatch.setenv("JAXLAB_PROGRESS", "log")
  path, failures = reproduce(str(tmp_path), "smoke", ["lm"])
  # Its progress off a terminal: experiment i/N with the last one's time (and the lm training's).
  lines = [r.getMessage() for r in caplog.records if r.name == "jaxlab.progress"]
  assert lines[0] == "reproduce: 0/1 experiments (0%), 0 s elapsed"
  assert lines[-1].startswith("reproduce: 1/1 experiments (100%), last lm (")
  assert any(line.startswith("lm: 40/40 steps (100%), loss ") for line in lines)
  assert failures == []
  text = open(path).read()
  assert "| lm |" in text and "unigram" in text
  assert os.path.exists(tmp_path / "lm" / "lm_loss.png")
  assert "](lm/lm_loss.png)" in text
  with pytest.raises(ValueError, match="Unknown experiments"):
    reproduce(str(tmp_path), "smoke", ["nope"])


def test_cpu_devices_flag_splits_the_cpu():
  code = ("import sys; from absl import flags; from launch import cpu_devices; "
          "flags.FLAGS(sys.argv); cpu_devices.apply(); import jax; print(len(jax.devices()))")
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  env.pop("XLA_FLAGS", None)
  out = subprocess.run([sys.executable, "-c", code, "--cpu_devices=3"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=120)
  assert out.returncode == 0, out.stderr[-2000:]
  assert out.stdout.strip() == "3"


def test_bench_writes_ratios(tmp_path):
  from launch.runner import bench
  out = str(tmp_path / "bench.json")
  bench(out, "smoke", ["decode"])
  with open(out) as f:
    results = json.load(f)["decode"]
  assert results["same_tokens"] is True
  assert results["ratios"]["recompute_over_kv_cache"] > 0
  assert set(results["timings"]) == {"kv_cache", "recompute"}
  # The process's malloc policy goes with the timings (None: this process never set it).
  assert results["malloc_reuses_freed_memory"] is malloc.applied


def test_reproduce_shares_the_base_lm_only_when_it_is_the_same_model():
  from launch.configs import load_config
  from launch.runner import share_base_lm
  config = load_config("fp4", "smoke")
  share_base_lm(config, "/w", "quick")  # fp4:smoke's base model is lm:smoke, not lm:quick
  assert config.base_lm_dir == ""
  config.optimizer.learning_rate *= 2   # a different base model: never the lm run's
  share_base_lm(config, "/w", "smoke")
  assert config.base_lm_dir == ""
  config = load_config("fp4", "smoke")
  share_base_lm(config, "/w", "smoke")
  assert config.base_lm_dir == os.path.join("/w", "lm")
  config.base_lm_dir = "/mine"
  share_base_lm(config, "/w", "smoke")
  assert config.base_lm_dir == "/mine"
  lm_config = load_config("lm", "smoke")
  share_base_lm(lm_config, "/w", "smoke")
  assert "base_lm_dir" not in lm_config
