"""Two `jax.distributed` processes on this machine train exactly like one (issue 31).

Each process of `launch.main` gets 2 CPU devices (the launcher's
`--cpu_devices=2`, `jaxlab.train.use_cpu_devices`) and joins the other
through JAX's coordinator on 127.0.0.1 (`--coordinator_address`,
`--num_processes`, `--process_id`); cross-process CPU collectives go through
gloo (`jax_cpu_collectives_implementation`, the launcher's `--cpu_collectives`).
The reference is one process with 4 devices on the same global batch: final
loss, val bits/byte and every parameter must agree to float tolerance, for
data parallel and for FSDP (params and optimizer state split over all 4
devices, i.e. across the two processes).

Every run gets a fresh persistent compilation cache of its own, so what a run
reads from the cache does not depend on earlier runs on this machine. On jax
0.12 an executable with cross-process collectives that a process loaded from
that cache deadlocked in its first collective: the FSDP run's final evaluation
(a new jit of the same program, hence a cache hit) left both processes at 0%
CPU until the test's timeout. Multi-process CPU runs therefore compile their
own programs and leave the cache alone (launch/main.py).
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STEPS = 20
# Short smoke run: 20 steps, a checkpoint every 5 (the resume test kills after one).
RUN = ["--config=configs/lm.py:smoke", f"--config.train.num_steps={STEPS}",
       "--config.train.checkpoint_every=5", "--config.train.log_every=5"]
MESHES = {
    "data_parallel": [],
    "fsdp": ["--config.mesh.data=1", "--config.mesh.fsdp=-1", "--config.mesh.fsdp_params=True"],
}
TIMEOUT_S = 600

if not hasattr(jax.config, "jax_cpu_collectives_implementation"):
  pytest.skip(f"jax {jax.__version__} has no jax_cpu_collectives_implementation option (no CPU "
              "collectives across processes)", allow_module_level=True)


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _start(workdir: str, num_processes: int, devices: int, args: list[str]) -> list:
  """`num_processes` processes of `launch.main` with `devices` CPU devices each, and a
  fresh persistent compilation cache in `workdir`.cache (every program cached)."""
  cache = workdir + ".cache"
  os.makedirs(cache, exist_ok=True)
  env = dict(os.environ, JAX_PLATFORMS="cpu", JAX_COMPILATION_CACHE_DIR=cache,
             JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0")
  env.pop("XLA_FLAGS", None)
  cmd = [sys.executable, "-m", "launch.main", *RUN, *args, f"--workdir={workdir}",
         f"--cpu_devices={devices}"]
  if num_processes == 1:
    return [subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)]
  address = f"127.0.0.1:{_free_port()}"
  return [subprocess.Popen(
      [*cmd, f"--coordinator_address={address}", f"--num_processes={num_processes}",
       f"--process_id={i}", "--distributed_timeout_s=120", "--cpu_collectives=gloo"],
      cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
      for i in range(num_processes)]


def _finish(procs: list) -> list[str]:
  """Waits for every process; kills them all if one fails or the time runs out. Stdouts."""
  outs = []
  try:
    for p in procs:
      out, err = p.communicate(timeout=TIMEOUT_S)
      assert p.returncode == 0, f"process exited {p.returncode}:\n{err[-4000:]}"
      outs.append(out)
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
        p.wait()
  return outs


def _final_state(workdir: str) -> dict:
  """The last checkpoint's state as numpy arrays (restored onto this process's one device)."""
  path = os.path.join(workdir, "checkpoints", str(STEPS), "default")
  ckptr = ocp.StandardCheckpointer()
  meta = ckptr.metadata(path)
  meta = getattr(getattr(meta, "item_metadata", meta), "tree", meta)
  # Saved on 4 devices in 1 or 2 processes: restore onto one device of this process.
  one = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  target = jax.tree.map(lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=one), meta)
  return jax.tree.map(np.asarray, ckptr.restore(path, target))


def _result(workdir: str, stdouts: list[str]) -> dict:
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    rows = [row for row in map(json.loads, f) if "loss" in row]  # train rows, not eval rows
  with open(os.path.join(workdir, "results.json")) as f:
    results = json.load(f)
  return {"rows": rows, "results": results, "state": _final_state(workdir), "stdouts": stdouts}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
  """`get(mesh, num_processes)`: one finished run per key, shared by the tests."""
  cache = {}

  def get(mesh: str, num_processes: int) -> dict:
    if (mesh, num_processes) not in cache:
      workdir = str(tmp_path_factory.mktemp(f"{mesh}_{num_processes}p"))
      procs = _start(workdir, num_processes, 4 // num_processes, MESHES[mesh])
      cache[mesh, num_processes] = _result(workdir, _finish(procs))
    return cache[mesh, num_processes]

  get.cache = cache
  return get


def _assert_same_training(a: dict, b: dict, *, exact: bool = False):
  assert [r["step"] for r in a["rows"]] == [r["step"] for r in b["rows"]]
  state_a, state_b = jax.tree.leaves(a["state"]), jax.tree.leaves(b["state"])
  assert len(state_a) == len(state_b) and len(state_a) > 10
  if exact:
    assert a["rows"] == b["rows"]
    for x, y in zip(state_a, state_b, strict=True):
      np.testing.assert_array_equal(x, y)
    return
  # Different device layouts reduce in different orders: float tolerance, not bits.
  np.testing.assert_allclose([r["loss"] for r in a["rows"]], [r["loss"] for r in b["rows"]],
                             rtol=1e-5)
  np.testing.assert_allclose(a["results"]["val_bits_per_byte"],
                             b["results"]["val_bits_per_byte"], rtol=1e-5)
  for x, y in zip(state_a, state_b, strict=True):
    np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mesh", list(MESHES))
def test_two_processes_match_one(mesh, uninterrupted, tmp_path):
  # Both launched together: the reference overlaps the two-process run's start-up.
  ref_dir, multi_dir = str(tmp_path / "one"), str(tmp_path / "two")
  ref_procs = _start(ref_dir, 1, 4, MESHES[mesh])
  multi_procs = _start(multi_dir, 2, 2, MESHES[mesh])
  multi = _result(multi_dir, _finish(multi_procs))
  ref = _result(ref_dir, _finish(ref_procs))
  uninterrupted.cache[mesh, 2], uninterrupted.cache[mesh, 1] = multi, ref
  _assert_same_training(multi, ref)
  assert int(multi["state"]["step"]) == STEPS
  # Process 0 alone writes metrics (one row per logged step) and prints the summary.
  assert [r["step"] for r in multi["rows"]] == [5, 10, 15, 20]
  # gloo prints its connection lines to stdout; the summary JSON follows them.
  summary = "\n" + multi["stdouts"][0]
  assert json.loads(summary[summary.index("\n{") + 1:])["steps"] == STEPS
  assert "\n{" not in "\n" + multi["stdouts"][1]
  with open(os.path.join(multi_dir, "config.json")) as f:
    assert json.load(f)["mesh"]["fsdp_params"] == (mesh == "fsdp")
  # The two-process run neither wrote nor (so) read the persistent cache; one process did.
  assert not os.listdir(multi_dir + ".cache")
  assert os.listdir(ref_dir + ".cache")


@pytest.mark.slow  # two more two-process runs (~1 min on 2 idle cores)
def test_killed_two_process_run_resumes_to_same_result(uninterrupted, tmp_path):
  workdir = str(tmp_path / "killed")
  procs = _start(workdir, 2, 2, MESHES["data_parallel"])
  first = os.path.join(workdir, "checkpoints", "5")  # orbax renames it here once complete
  try:
    deadline = time.monotonic() + TIMEOUT_S
    while not os.path.isdir(first):
      assert all(p.poll() is None for p in procs), "a process ended before its first checkpoint"
      assert time.monotonic() < deadline, "no checkpoint written in time"
      time.sleep(0.02)
    for p in procs:
      p.send_signal(signal.SIGKILL)
  finally:
    for p in procs:
      p.kill()
      p.communicate()
  assert not os.path.isdir(os.path.join(workdir, "checkpoints", str(STEPS))), "killed too late"
  assert not os.path.exists(os.path.join(workdir, "results.json"))
  resumed = _result(workdir, _finish(_start(workdir, 2, 2, MESHES["data_parallel"])))
  # Same processes, same layout, same batches: the resumed run is the same computation.
  _assert_same_training(resumed, uninterrupted("data_parallel", 2), exact=True)


def test_unreachable_coordinator_fails_clearly_within_timeout(tmp_path):
  cmd = [sys.executable, "-m", "launch.main", *RUN, f"--workdir={tmp_path}",
         f"--coordinator_address=127.0.0.1:{_free_port()}", "--num_processes=2",
         "--process_id=1", "--distributed_timeout_s=3"]
  start = time.monotonic()
  out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, JAX_PLATFORMS="cpu"))
  elapsed = time.monotonic() - start
  assert out.returncode == 1, out.stderr[-3000:]
  assert "cannot reach the JAX coordinator at 127.0.0.1:" in out.stderr
  assert "within 3 s" in out.stderr
  # 3 s of waiting plus interpreter start-up (slow on a loaded 2-core machine), not a hang.
  assert elapsed < 60, elapsed


def test_process_zero_alone_exits_1_with_one_line_within_timeout(tmp_path):
  # Process 0 starts the coordinator and waits for process 1, which never comes. jax's
  # client used to abort (SIGABRT, a C++ stack trace) once its registration deadline passed.
  cmd = [sys.executable, "-m", "launch.main", *RUN, f"--workdir={tmp_path}",
         f"--coordinator_address=127.0.0.1:{_free_port()}", "--num_processes=2",
         "--process_id=0", "--distributed_timeout_s=3"]
  start = time.monotonic()
  out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, JAX_PLATFORMS="cpu"))
  elapsed = time.monotonic() - start
  assert out.returncode == 1, (out.returncode, out.stderr[-3000:])
  assert out.stderr.count("\n") == 1 and out.stderr.startswith("FATAL "), out.stderr[-3000:]
  assert "did not complete within 3 s (--distributed_timeout_s): process 0 of 2" in out.stderr
  # 3 s of waiting plus interpreter start-up (slow on a loaded 2-core machine), not jax's
  # own deadline (--distributed_timeout_s + 30 s) or a hang.
  assert elapsed < 30, elapsed
