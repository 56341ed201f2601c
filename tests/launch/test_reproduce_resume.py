"""A killed-and-restarted sweep reruns nothing that finished (SIGKILL, then a fresh process)."""

import glob
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_SWEEP = textwrap.dedent("""
    import json, sys, time
    from jaxlab.train import ArmCache, config_hash
    cache = ArmCache(sys.argv[1])
    key = config_hash({"arms": 5})
    for i in range(5):
      cache.get_or_run(f"arm{i}", key, lambda i=i: (time.sleep(0.4), {"i": i})[1])
    print(json.dumps(cache.computed))
""")


def _wait_for(pattern: str, count: int, proc, timeout: float = 120.0) -> list[str]:
  deadline = time.time() + timeout
  while time.time() < deadline:
    files = sorted(glob.glob(pattern))
    if len(files) >= count:
      return files
    assert proc.poll() is None, "the run ended before it could be killed"
    time.sleep(0.05)
  raise AssertionError(f"timed out waiting for {count} files {pattern}")


def test_killed_sweep_reruns_no_finished_arm(tmp_path):
  cmd = [sys.executable, "-c", _SWEEP, str(tmp_path)]
  proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)
  done = _wait_for(str(tmp_path / "arms" / "*.json"), 2, proc)
  proc.send_signal(signal.SIGKILL)
  proc.wait()
  mtimes = {f: os.stat(f).st_mtime_ns for f in glob.glob(str(tmp_path / "arms" / "*.json"))}
  assert len(mtimes) < 5 and set(done) <= set(mtimes)
  out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120, check=True)
  rerun = json.loads(out.stdout.strip().splitlines()[-1])  # the arms the restart computed
  finished = {os.path.basename(f).split(".")[0] for f in mtimes}
  assert not finished & set(rerun) and len(finished) + len(rerun) == 5
  for f, t in mtimes.items():
    assert os.stat(f).st_mtime_ns == t  # never rewritten
  assert not glob.glob(str(tmp_path / "arms" / "*.tmp"))


def test_killed_reproduce_smoke_reruns_nothing_that_finished(tmp_path):
  """`launch.reproduce --preset=smoke` over two sweeps (kernelband, then ucpo), SIGKILLed once
  an arm of the second has finished: the restart recomputes no finished arm of either."""
  cmd = [sys.executable, "-m", "launch.reproduce", "--preset=smoke", "--only=kernelband,ucpo",
         f"--workdir={tmp_path}"]
  proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  _wait_for(str(tmp_path / "ucpo" / "arms" / "*.json"), 1, proc, timeout=600)
  proc.send_signal(signal.SIGKILL)
  proc.wait()
  arms = glob.glob(str(tmp_path / "*" / "arms" / "*.json"))
  mtimes = {f: os.stat(f).st_mtime_ns for f in arms}
  assert any("/kernelband/" in f for f in arms) and any("/ucpo/" in f for f in arms)
  subprocess.run(cmd, cwd=ROOT, capture_output=True, timeout=900, check=True)
  for f, t in mtimes.items():
    assert os.stat(f).st_mtime_ns == t, f"{f} was recomputed"
  assert os.path.exists(tmp_path / "REPORT.md")
  assert len(glob.glob(str(tmp_path / "ucpo" / "arms" / "*.json"))) > len(
      [f for f in arms if "/ucpo/" in f])  # the restart finished the rest
