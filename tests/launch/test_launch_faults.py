"""Processes that fail exit non-zero promptly, and a killed or damaged run resumes exactly.

The fast tests drive `tests/jaxlab/train/fault_worker.py` (a 12-step MLP
through `jaxlab.train.train_loop`) or fail `launch.main` before any training;
the `slow` ones run `launch.main` with the lm smoke preset end to end.
"""

import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from jaxlab.train import workdir as workdir_lib
from launch.configs import load_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORKER = os.path.join(ROOT, "tests", "jaxlab", "train", "fault_worker.py")
_spec = importlib.util.spec_from_file_location("fault_worker", WORKER)
worker = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(worker)
# A save failure used to hang for orbax's 300 s barrier timeout; a prompt exit is well inside this.
PROMPT_S = 60


def _start_worker(workdir, out, *flags):
  return subprocess.Popen([sys.executable, WORKER, str(workdir), str(out), *flags], cwd=ROOT,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _launch(*args, timeout=120):
  return subprocess.run([sys.executable, "-m", "launch.main", *args], cwd=ROOT,
                        capture_output=True, text=True, timeout=timeout)


def _wait_for_line(proc, text, timeout):
  """Reads proc.stdout until a line contains `text` (True) or timeout/EOF (False)."""
  found = threading.Event()

  def reader():
    for line in proc.stdout:
      if text in line:
        found.set()
        return
  threading.Thread(target=reader, daemon=True).start()
  return found.wait(timeout)


def _empty_metadata(workdir, step):
  with open(os.path.join(workdir, "checkpoints", str(step), "default", "_METADATA"), "w"):
    pass


def test_sigkill_mid_save_then_corrupt_newest_resumes_from_older(tmp_path):
  straight_dir, killed_dir = tmp_path / "straight", tmp_path / "killed"
  straight = _start_worker(straight_dir, tmp_path / "straight.npz")
  killed = _start_worker(killed_dir, tmp_path / "killed.npz", "--hang-at-save=9")
  try:
    assert _wait_for_line(killed, "SAVING 9", timeout=120), killed.stderr.read()[-3000:]
    killed.send_signal(signal.SIGKILL)  # mid-way through writing checkpoint 9
    assert killed.wait(30) == -signal.SIGKILL
  finally:
    killed.kill()
  steps = sorted(os.listdir(killed_dir / "checkpoints"))
  assert steps == ["3", "6", "9.orbax-checkpoint-tmp"], steps
  _empty_metadata(killed_dir, 6)  # and the newest intact one is corrupt too

  resumed = subprocess.run([sys.executable, WORKER, str(killed_dir), str(tmp_path / "killed.npz")],
                           cwd=ROOT, capture_output=True, text=True, timeout=120)
  assert resumed.returncode == 0, resumed.stderr[-3000:]
  assert "checkpoints/6 cannot be restored" in resumed.stderr
  assert straight.wait(120) == 0, straight.stderr.read()[-3000:]

  a, b = np.load(tmp_path / "straight.npz"), np.load(tmp_path / "killed.npz")
  assert sorted(a) == sorted(b) == ["w1", "w2"]
  for k in a:
    np.testing.assert_array_equal(a[k], b[k])
  with open(straight_dir / "metrics.jsonl") as f1, open(killed_dir / "metrics.jsonl") as f2:
    assert f1.read() == f2.read()


def test_bit_flips_in_newest_checkpoint_resume_from_older_bit_identical(tmp_path):
  # Before: the damaged arrays were restored as if intact; the resumed run diverged
  # (NonFiniteLossError on every rerun) or finished with other weights.
  straight_dir, flipped_dir = tmp_path / "straight", tmp_path / "flipped"
  straight = _start_worker(straight_dir, tmp_path / "straight.npz")
  first = _start_worker(flipped_dir, tmp_path / "first.npz", "--num-steps=9")
  assert first.wait(120) == 0, first.stderr.read()[-3000:]
  assert sorted(os.listdir(flipped_dir / "checkpoints")) == ["6", "9"]
  worker.flip_array_data(str(flipped_dir), 9)
  resumed = subprocess.run([sys.executable, WORKER, str(flipped_dir), str(tmp_path / "out.npz")],
                           cwd=ROOT, capture_output=True, text=True, timeout=120)
  assert resumed.returncode == 0, resumed.stderr[-3000:]
  assert "checkpoints/9 cannot be restored (checksum mismatch in .params['w1'])" in resumed.stderr
  assert (flipped_dir / "checkpoints.corrupt" / "9").is_dir()
  assert straight.wait(120) == 0, straight.stderr.read()[-3000:]
  a, b = np.load(tmp_path / "straight.npz"), np.load(tmp_path / "out.npz")
  assert sorted(a) == sorted(b) == ["w1", "w2"]
  for k in a:
    np.testing.assert_array_equal(a[k], b[k])
  with open(straight_dir / "metrics.jsonl") as f1, open(flipped_dir / "metrics.jsonl") as f2:
    assert f1.read() == f2.read()


def test_failed_checkpoint_save_exits_nonzero_promptly(tmp_path):
  # Before: the error was printed and then the process hung at exit, waiting
  # on orbax's background threads (mkdir case: > 60 s here, 300 s in orbax).
  (tmp_path / "file").mkdir()
  (tmp_path / "file" / "checkpoints").write_text("a file where the directory should be")
  cases = {"mkdir": ["--fail-save=mkdir"], "write": ["--fail-save=write"], "file": []}
  start = time.monotonic()
  procs = {name: _start_worker(tmp_path / name, tmp_path / f"{name}.npz", *flags)
           for name, flags in cases.items()}
  try:
    for name, proc in procs.items():
      try:
        _, err = proc.communicate(timeout=max(1, PROMPT_S - (time.monotonic() - start)))
      except subprocess.TimeoutExpired:
        pytest.fail(f"{name}: a failed save did not exit within {PROMPT_S} s")
      assert proc.returncode != 0, name
      assert "CheckpointSaveError" in err, (name, err[-2000:])
      assert "No space left on device" in err or "not a directory" in err, (name, err[-2000:])
  finally:
    for proc in procs.values():
      proc.kill()


_HANGING_EXPERIMENT = """
import sys, threading, time
from absl import app, flags
import jaxlab.experiments
from launch import main as m

class Hanging:
  @staticmethod
  def run(config, workdir):
    # A non-daemon thread that never ends, as a failed orbax save leaves behind.
    threading.Thread(target=time.sleep, args=(3600,)).start()
    raise RuntimeError("experiment failed")

jaxlab.experiments.get = lambda name: Hanging
m._EXIT_GRACE_S = 2.0
flags.mark_flags_as_required(["config", "workdir"])
app.run(m.main, flags_parser=m._parse_flags)
"""


def test_launch_failure_does_not_wait_on_leftover_threads(tmp_path):
  out = subprocess.run([sys.executable, "-c", _HANGING_EXPERIMENT, "--config=configs/lm.py:smoke",
                        f"--workdir={tmp_path}"], cwd=ROOT, capture_output=True, text=True,
                       timeout=PROMPT_S)
  assert out.returncode == 1
  assert "experiment failed" in out.stderr


def _one_line_error(out):
  assert out.returncode == 1
  assert "Traceback" not in out.stderr, out.stderr[-3000:]
  return out.stderr.strip().splitlines()


def test_unknown_top_level_key_is_one_line(tmp_path):
  # Before: a 55-line AttributeError traceback from inside config_flags.
  lines = _one_line_error(_launch("--config=configs/lm.py:smoke", "--config.nonexistent=1",
                                  f"--workdir={tmp_path}"))
  assert len(lines) == 1
  assert lines[0] == ("FATAL Flags parsing error: --config.nonexistent=1: configs/lm.py:smoke "
                      "has no field 'nonexistent'")


def test_nonpositive_num_steps_names_the_field(tmp_path):
  lines = _one_line_error(_launch("--config=configs/lm.py:smoke", "--config.train.num_steps=0",
                                  f"--workdir={tmp_path}"))
  assert lines == ["FATAL config.train.num_steps must be an integer >= 1, got 0"]


def test_experiment_reading_a_missing_key_is_one_line(tmp_path):
  path = tmp_path / "lm_without_data.py"
  path.write_text("from configs import lm\n\n\ndef get_config(arg=None):\n"
                  "  c = lm.get_config(arg)\n  del c['data']\n  return c\n")
  lines = _one_line_error(_launch(f"--config={path}:smoke", f"--workdir={tmp_path / 'w'}"))
  assert len(lines) == 1
  assert "config field 'data' does not exist, read at" in lines[0]


def test_workdir_of_another_config_is_refused(tmp_path):
  config = load_config("lm", "smoke")
  workdir_lib.check_or_write_fingerprint(str(tmp_path), config)  # as a finished run leaves it
  (tmp_path / "results.json").write_text('{"steps": 40}')
  before = (tmp_path / "config.json").read_text()
  lines = _one_line_error(_launch("--config=configs/lm.py:smoke", "--config.train.num_steps=7",
                                  f"--workdir={tmp_path}"))
  assert "holds a run of a different config" in lines[0]
  assert "train.num_steps: 40 -> 7" in "\n".join(lines)
  assert (tmp_path / "config.json").read_text() == before
  assert json.loads((tmp_path / "results.json").read_text()) == {"steps": 40}


@pytest.mark.slow
def test_finished_run_rerun_with_another_config_needs_overwrite(tmp_path):
  workdir = str(tmp_path / "lm")
  first = _launch("--config=configs/lm.py:smoke", f"--workdir={workdir}", timeout=300)
  assert first.returncode == 0, first.stderr[-3000:]
  refused = _launch("--config=configs/lm.py:smoke", "--config.train.num_steps=7",
                    f"--workdir={workdir}")
  assert refused.returncode == 1 and "train.num_steps: 40 -> 7" in refused.stderr
  again = _launch("--config=configs/lm.py:smoke", "--config.train.num_steps=7", "--overwrite",
                  f"--workdir={workdir}", timeout=300)
  assert again.returncode == 0, again.stderr[-3000:]
  with open(os.path.join(workdir, "results.json")) as f:
    assert json.load(f)["steps"] == 7


_LAUNCH_HANGING_AT_SAVE = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("fault_worker", {worker!r})
worker = importlib.util.module_from_spec(spec)
spec.loader.exec_module(worker)
worker._inject({step}, None)
from absl import app, flags
from launch import main as m
flags.mark_flags_as_required(["config", "workdir"])
app.run(m.main, flags_parser=m._parse_flags)
"""


@pytest.mark.slow
def test_launch_sigkill_mid_save_then_corrupt_newest_matches_uninterrupted(tmp_path):
  args = ["--config=configs/lm.py:smoke", "--config.train.checkpoint_every=10"]
  straight = _launch(*args, f"--workdir={tmp_path / 'straight'}", timeout=300)
  assert straight.returncode == 0, straight.stderr[-3000:]
  killed_dir = tmp_path / "killed"
  proc = subprocess.Popen(
      [sys.executable, "-c", _LAUNCH_HANGING_AT_SAVE.format(worker=WORKER, step=30), *args,
       f"--workdir={killed_dir}"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
      text=True)
  try:
    assert _wait_for_line(proc, "SAVING 30", timeout=300)
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
  finally:
    proc.kill()
  _empty_metadata(killed_dir, 20)
  resumed = _launch(*args, f"--workdir={killed_dir}", timeout=300)
  assert resumed.returncode == 0, resumed.stderr[-3000:]
  assert "checkpoints/20 cannot be restored" in resumed.stderr
  results = [json.loads((d / "results.json").read_text()) for d in (tmp_path / "straight",
                                                                     killed_dir)]
  assert results[0]["val_bits_per_byte"] == results[1]["val_bits_per_byte"]
  assert results[0]["steps"] == results[1]["steps"] == 40
  metrics = [(d / "metrics.jsonl").read_text() for d in (tmp_path / "straight", killed_dir)]
  assert metrics[0] == metrics[1]
