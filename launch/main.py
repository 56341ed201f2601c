r"""Runs one experiment: `python -m launch.main --config=configs/lm.py:smoke --workdir=W`.

`--config` names a config file and preset (`file.py:preset`); any field can be
overridden with `--config.a.b=value` (unknown keys are refused with a one-line
error). The run resumes from `--workdir` if it holds a checkpoint of the same
config; a workdir of a different config is refused (the differing fields are
listed) unless `--overwrite` deletes it first (`jaxlab.train.workdir`).
`--jax_distributed` initialises JAX's multi-host runtime first (auto-detected
cluster, or `--coordinator_address`, `--num_processes`, `--process_id`, which
imply it); a process that cannot reach the coordinator within
`--distributed_timeout_s` exits 1 with a one-line error, never hangs. In a
multi-process run only process 0 writes config.json, metrics and results.
`--cpu_devices=N` splits the host CPU into N JAX devices, so a training run is
data parallel over its cores (`launch.cpu_devices`).

Exit status: 0 on success; 1 on any failure (a bad config, a failed checkpoint
save, a loss that became non-finite), within seconds: a failure never waits on
background checkpoint threads for more than `_EXIT_GRACE_S`.
"""

import json
import os
import socket
import sys
import threading
import time
import traceback

from absl import app, flags, logging
from ml_collections import config_flags

from launch import cpu_devices

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Experiment config file and preset, e.g. configs/lm.py:quick.",
    lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for checkpoints, metrics, results.")
_OVERWRITE = flags.DEFINE_bool(
    "overwrite", False, "If --workdir holds a run of a different config, delete its contents "
    "(checkpoints, metrics, results, caches) and start over instead of refusing.")
_DISTRIBUTED = flags.DEFINE_bool(
    "jax_distributed", False, "Call jax.distributed.initialize() (multi-host runs); without "
    "the three flags below, JAX auto-detects the cluster (Cloud TPU, SLURM, MPI, ...).")
_COORDINATOR = flags.DEFINE_string(
    "coordinator_address", None, "host:port of process 0's coordinator service (implies "
    "--jax_distributed), e.g. 10.0.0.1:1234. Default: auto-detected.")
_NUM_PROCESSES = flags.DEFINE_integer(
    "num_processes", None, "Number of processes of the run (implies --jax_distributed). "
    "Default: auto-detected.", lower_bound=1)
_PROCESS_ID = flags.DEFINE_integer(
    "process_id", None, "This process's index in [0, num_processes) (implies "
    "--jax_distributed). Default: auto-detected.", lower_bound=0)
_DISTRIBUTED_TIMEOUT = flags.DEFINE_integer(
    "distributed_timeout_s", 300, "Seconds to wait for the coordinator and the other "
    "processes at start-up; past it the process exits 1.", lower_bound=1)
_CPU_COLLECTIVES = flags.DEFINE_string(
    "cpu_collectives", "gloo", "jax_cpu_collectives_implementation for multi-process CPU runs "
    "('gloo', 'mpi' or 'none'); ignored on one process.")

# After a failure, interpreter shutdown may wait on non-daemon threads of a
# failed orbax save; past this many seconds the process exits(1) anyway.
_EXIT_GRACE_S = 10.0


def _parse_flags(argv: list[str]) -> list[str]:
  """absl's parsing, with an unknown `--config.<key>` as a one-line usage error."""
  try:
    return flags.FLAGS(argv)
  except flags.Error as e:
    sys.stderr.write(f"FATAL Flags parsing error: {e}\n")
    sys.exit(1)
  except (AttributeError, KeyError) as e:  # config_flags' error for a key the config lacks
    key = str(e).strip("\"'")
    bad = [a for a in argv if a.startswith("--config.") and key in a.split("=")[0].split(".")]
    if not bad:  # not an override's fault (e.g. raised inside get_config): keep the traceback
      raise
    sys.stderr.write(f"FATAL Flags parsing error: {' '.join(bad)} "
                     f"names no field of the config ('{key}' does not exist; overrides can only "
                     "set fields the config file defines).\n")
    sys.exit(1)


def _missing_config_field(e: AttributeError) -> str | None:
  """'config field x, read at file:line' when `e` is a ConfigDict lookup of a missing key."""
  frames = traceback.extract_tb(e.__traceback__)
  if not frames or "ml_collections" not in frames[-1].filename:
    return None
  user = [f for f in frames if "ml_collections" not in f.filename]
  where = f", read at {user[-1].filename}:{user[-1].lineno} ({user[-1].line})" if user else ""
  return f"config field {str(e).strip(chr(34) + chr(39))!r} does not exist{where}"


def _exit_soon_on_failure() -> None:
  # Daemon timer: it runs while shutdown waits for non-daemon threads, and
  # never delays a shutdown that completes on its own.
  timer = threading.Timer(_EXIT_GRACE_S, os._exit, args=(1,))
  timer.daemon = True
  timer.start()


def _wait_for_coordinator(address: str, timeout_s: float) -> None:
  """Returns once `address` accepts TCP connections; exits 1 at `timeout_s`.

  jax's own client aborts the interpreter (SIGABRT, a C++ stack trace) when
  registration times out; probing first turns the common failure (wrong
  address, coordinator not started) into a one-line error.
  """
  host, _, port = address.rpartition(":")
  if not host or not port.isdigit():
    sys.stderr.write(f"FATAL --coordinator_address must be host:port, got {address!r}\n")
    sys.exit(1)
  deadline = time.monotonic() + timeout_s
  while True:
    try:
      with socket.create_connection((host.strip("[]"), int(port)), timeout=1.0):
        return
    except OSError as e:
      if time.monotonic() >= deadline:
        sys.stderr.write(f"FATAL cannot reach the JAX coordinator at {address} within "
                         f"{timeout_s:g} s (--distributed_timeout_s): {e}. Start process 0 "
                         "first and check --coordinator_address.\n")
        sys.exit(1)
      time.sleep(0.25)


def _initialize_distributed() -> None:
  """`jax.distributed.initialize` from the flags (explicit values, else auto-detection)."""
  import jax
  explicit = [f.value is not None for f in (_COORDINATOR, _NUM_PROCESSES, _PROCESS_ID)]
  if not _DISTRIBUTED.value and not any(explicit):
    return
  num, pid = _NUM_PROCESSES.value, _PROCESS_ID.value
  if num is not None and pid is not None and pid >= num:
    sys.stderr.write(f"FATAL --process_id={pid} must be < --num_processes={num}\n")
    sys.exit(1)
  # CPU devices need a collectives backend to talk across processes (GPU/TPU ignore it).
  if hasattr(jax.config, "jax_cpu_collectives_implementation"):
    jax.config.update("jax_cpu_collectives_implementation", _CPU_COLLECTIVES.value)
  timeout = _DISTRIBUTED_TIMEOUT.value
  start = time.monotonic()
  if _COORDINATOR.value is not None and pid is not None and pid != 0:
    _wait_for_coordinator(_COORDINATOR.value, timeout)
  logging.info("jax.distributed.initialize(coordinator_address=%s, num_processes=%s, "
                  "process_id=%s, initialization_timeout=%d s)", _COORDINATOR.value, num, pid,
                  timeout)
  try:
    jax.distributed.initialize(
        coordinator_address=_COORDINATOR.value, num_processes=num, process_id=pid,
        initialization_timeout=max(1, int(timeout - (time.monotonic() - start))))
  except (RuntimeError, ValueError) as e:  # e.g. auto-detection found no cluster
    sys.stderr.write(f"FATAL jax.distributed.initialize failed: {e}\n")
    sys.exit(1)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Too many command-line arguments: {argv[1:]}")
  if not flags.FLAGS["verbosity"].present:
    logging.set_verbosity(logging.WARNING)  # orbax logs every save at INFO
  from jaxlab.train import malloc
  malloc.use_for_launch("default")  # JAXLAB_MALLOC=reuse opts in; before XLA starts
  cpu_devices.apply()
  _initialize_distributed()
  import jax
  if jax.process_index() != 0:  # one log (and one summary) per run, from process 0
    logging.set_verbosity(logging.ERROR)
  from jaxlab import experiments, report
  from jaxlab.train import workdir as workdir_lib
  config = _CONFIG.value
  logging.info("config:\n%s", config)
  try:  # refused before any work: one line, no traceback
    workdir_lib.check_config(config)
    module = experiments.get(config.experiment)
    workdir_lib.check_or_write_fingerprint(_WORKDIR.value, config, overwrite=_OVERWRITE.value)
  except (ValueError, AttributeError) as e:
    message = str(e) if isinstance(e, ValueError) else _missing_config_field(e)
    if message is None:
      raise
    sys.stderr.write(f"FATAL {message}\n")
    sys.exit(1)
  try:
    results = module.run(config, _WORKDIR.value)
  except AttributeError as e:
    _exit_soon_on_failure()
    message = _missing_config_field(e)
    if message is None:
      raise
    sys.stderr.write(f"FATAL {message}. Add it to the config file or fix the name.\n")
    sys.exit(1)
  except BaseException:
    _exit_soon_on_failure()
    raise
  summary = {k: v for k, v in results.items() if k != "report"}
  if jax.process_index() != 0:
    return
  print(json.dumps(report.to_jsonable(summary), indent=1, sort_keys=True))


if __name__ == "__main__":
  flags.mark_flags_as_required(["config", "workdir"])
  app.run(main, flags_parser=_parse_flags)
