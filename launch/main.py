r"""Runs one experiment: `python -m launch.main --config=configs/lm.py:smoke --workdir=W`.

The same as `jaxlab run lm --preset=smoke --workdir=W`. `--config` names a config
file and preset (`file.py:preset`); `configs/<name>.py` and `<name>` name the
config installed with jaxlab, so the command works from any directory. Any field
can be overridden with `--config.a.b=value`; a bad override is refused with one
line that names the key and the closest field the config has. The run resumes
from `--workdir` if it holds a checkpoint of the same config; a workdir of a
different config is refused (the differing fields are listed) unless
`--overwrite` deletes it first (`jaxlab.train.workdir`).
`--jax_distributed` initialises JAX's multi-host runtime first (auto-detected
cluster, or `--coordinator_address`, `--num_processes`, `--process_id`, which
imply it); a process whose start cannot complete within `--distributed_timeout_s`
(the coordinator unreachable, or process 0 waiting for peers that never come)
exits 1 with a one-line error, never hangs or aborts. In a
multi-process run only process 0 writes config.json, metrics and results.
`--cpu_devices=N` splits the host CPU into N JAX devices, so a training run is
data parallel over its cores (`launch.cpu_devices`).

Before any work, every config value is checked (`jaxlab.config_checks`: numbers
finite and in their declared ranges) and so is `--workdir` (non-empty, not a
file); a damaged `fingerprint.json` is named, and `--overwrite` clears it.

Exit status: 0 on success; 1 on any failure (a bad config, a failed checkpoint
save, a loss that became non-finite), within seconds: a failure never waits on
background checkpoint threads for more than `_EXIT_GRACE_S`.
"""

import importlib.util
import json
import os
import re
import socket
import sys
import threading
import time
import traceback

from absl import app, flags, logging
from ml_collections import config_flags

from jaxlab.experiments import REGISTRY
from jaxlab.presets import PRESETS
from launch import configs, cpu_devices

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Experiment config file and preset: configs/NAME.py:PRESET (or NAME:PRESET; "
    f"from any directory). Experiments: {', '.join(REGISTRY)}. Presets: {', '.join(PRESETS)} "
    "(default quick). `jaxlab list` gives each one's claim. Override any field with "
    "--config.a.b=value.", lock_config=True)
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
# jax.distributed.initialize gets this many seconds more than --distributed_timeout_s
# leaves, so that the launcher's watchdog, not jax's abort, ends a start that cannot complete.
_JAX_TIMEOUT_SLACK_S = 30


def _fatal(message: str) -> None:
  sys.stderr.write(f"FATAL {message}\n")
  sys.exit(1)


def _config_arg(argv: list[str]) -> tuple[int, str] | None:
  """(index, value) of `--config=value` / `--config value` in `argv`, else None."""
  for i, arg in enumerate(argv[1:], 1):
    flag, eq, value = arg.partition("=")
    if flag in ("--config", "-config"):
      if eq:
        return i, value
      if i + 1 < len(argv):
        return i + 1, argv[i + 1]
  return None


def _bad_override(argv: list[str], shown: str) -> str | None:
  """'--config.x=v: <shown> has no field 'x'; did you mean ...' for the first override
  naming no field of the config, else None (also when the config cannot be loaded)."""
  found = _config_arg(argv)
  if found is None:
    return None
  path, colon, arg = found[1].partition(":")
  try:
    spec = importlib.util.spec_from_file_location("_jaxlab_checked_config", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = module.get_config(arg) if colon else module.get_config()
  except Exception:  # a config that does not load: absl's own parse reports it
    return None
  for arg_text in argv[1:]:
    match = re.match(r"^--?(?:no)?config\.([^=]+)", arg_text)
    if match is None:
      continue
    why = configs.missing_field(config, match.group(1))
    if why is not None:
      return f"{arg_text}: {shown} has {why}"
  return None


def _parse_flags(argv: list[str]) -> list[str]:
  """absl's parsing, with every bad `--config` or `--config.<key>` as one line.

  `--config`'s file is resolved first (`launch.configs.resolve_config_arg`), and the
  `configs` package is bound to jaxlab's, so a `configs/` folder in the current
  directory never stands in for it. An override that names no field gets one line
  with the closest field (ml_collections' own error is a traceback whose message
  spans lines); an error raised by `get_config` (e.g. an unknown preset) is shown
  by its last line.
  """
  argv = list(argv)
  found = _config_arg(argv)
  shown = found[1] if found else ""
  try:
    configs.bind_configs_package()
    if found is not None:
      argv[found[0]] = argv[found[0]][:len(argv[found[0]]) - len(shown)] + (
          configs.resolve_config_arg(shown))
  except (ValueError, ImportError) as e:
    _fatal(f"Flags parsing error: --config={shown}: {e}")
  try:
    return flags.FLAGS(argv)
  except (flags.Error, AttributeError, KeyError) as e:
    message = _bad_override(argv, shown)
    if message is not None:
      _fatal(f"Flags parsing error: {message}")
    if not isinstance(e, flags.Error):  # not an override's fault: keep the traceback
      raise
    text = str(e)
    if "Traceback (most recent call last)" in text:  # config_flags wraps get_config's error
      text = f"--config={shown}: " + re.sub(r"^\w+Error: ", "", text.strip().splitlines()[-1])
    _fatal(f"Flags parsing error: {text}")


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


def _distributed_timed_out(timeout_s: float, address: str | None, num: int | None,
                           pid: int | None) -> None:
  """Ends the process with one line: `jax.distributed.initialize` is still waiting."""
  who = f"process {pid} of {num}" if pid is not None and num is not None else "this process"
  where = f" at {address}" if address else ""
  os.write(2, (f"FATAL jax.distributed.initialize did not complete within {timeout_s:g} s "
               f"(--distributed_timeout_s): {who} waited for the others to join the JAX "
               f"coordinator{where}. Start every process within that time, with the same "
               "--coordinator_address and --num_processes.\n").encode())
  os._exit(1)


def _initialize_distributed() -> None:
  """`jax.distributed.initialize` from the flags (explicit values, else auto-detection).

  Exits 1 with one line when it cannot complete within `--distributed_timeout_s`.
  jax's own client aborts the interpreter (SIGABRT, a C++ stack trace) when
  registration times out, e.g. process 0 waiting for a process that never
  starts; a Python exception never comes. So a watchdog thread (jax's `connect`
  releases the GIL while it waits) ends the process at the flag's deadline, and
  jax is given `_JAX_TIMEOUT_SLACK_S` more, so that its abort never comes first.
  """
  import jax
  explicit = [f.value is not None for f in (_COORDINATOR, _NUM_PROCESSES, _PROCESS_ID)]
  if not _DISTRIBUTED.value and not any(explicit):
    return
  num, pid = _NUM_PROCESSES.value, _PROCESS_ID.value
  if num is not None and pid is not None and pid >= num:
    _fatal(f"--process_id={pid} must be < --num_processes={num}")
  # CPU devices need a collectives backend to talk across processes (GPU/TPU ignore it).
  if hasattr(jax.config, "jax_cpu_collectives_implementation"):
    jax.config.update("jax_cpu_collectives_implementation", _CPU_COLLECTIVES.value)
  address = _COORDINATOR.value
  if address is not None:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
      _fatal(f"--coordinator_address must be host:port, got {address!r}")
  timeout = _DISTRIBUTED_TIMEOUT.value
  deadline = time.monotonic() + timeout
  if _COORDINATOR.value is not None and pid is not None and pid != 0:
    _wait_for_coordinator(_COORDINATOR.value, timeout)
  remaining = max(1.0, deadline - time.monotonic())
  logging.info("jax.distributed.initialize(coordinator_address=%s, num_processes=%s, "
               "process_id=%s), %.0f s left of --distributed_timeout_s=%d",
               _COORDINATOR.value, num, pid, remaining, timeout)
  watchdog = threading.Timer(remaining, _distributed_timed_out,
                             args=(timeout, _COORDINATOR.value, num, pid))
  watchdog.daemon = True
  watchdog.start()
  try:
    jax.distributed.initialize(
        coordinator_address=_COORDINATOR.value, num_processes=num, process_id=pid,
        initialization_timeout=int(remaining) + _JAX_TIMEOUT_SLACK_S)
  except (RuntimeError, ValueError) as e:  # e.g. auto-detection found no cluster
    watchdog.cancel()
    _fatal(f"jax.distributed.initialize failed: {' '.join(str(e).split())}")
  watchdog.cancel()
  if jax.process_count() > 1 and jax.default_backend() == "cpu":
    # On jax 0.12 an XLA:CPU executable with cross-process (gloo) collectives that a
    # process loads from the persistent compilation cache deadlocks in its first
    # collective (jax 0.10 does not): each process compiles its own programs. Set before
    # the first compilation, which is when jax decides whether to use the cache.
    jax.config.update("jax_enable_compilation_cache", False)


def _check_before_start(config) -> None:
  """Refuses a bad config value or `--workdir` with one line, before any work starts."""
  from jaxlab.train import workdir as workdir_lib
  try:
    workdir_lib.check_config(config)  # every number finite and in range
    workdir_lib.check_workdir_path(_WORKDIR.value)
  except ValueError as e:
    _fatal(" ".join(str(e).split()))


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Too many command-line arguments: {argv[1:]}")
  if not flags.FLAGS["verbosity"].present:
    logging.set_verbosity(logging.WARNING)  # orbax logs every save at INFO
  config = _CONFIG.value
  _check_before_start(config)
  from jaxlab.train import malloc
  malloc.use_for_launch("default")  # JAXLAB_MALLOC=reuse opts in; before XLA starts
  cpu_devices.apply()
  _initialize_distributed()
  import jax
  if jax.process_index() != 0:  # one log (and one summary) per run, from process 0
    logging.set_verbosity(logging.ERROR)
  from jaxlab import experiments, report
  from jaxlab.train import workdir as workdir_lib
  logging.info("config:\n%s", config)
  try:  # refused before any work: no traceback
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


def run(argv: list[str]) -> None:
  """Runs the launcher on `argv` (argv[0] is the program name); exits the process.

  `jaxlab run` calls this. ml_collections reads `--config.*` overrides from
  `sys.argv`, so `argv` becomes `sys.argv` first.
  """
  sys.argv[:] = argv
  flags.mark_flags_as_required(["config", "workdir"])
  app.run(main, argv=argv, flags_parser=_parse_flags)


if __name__ == "__main__":
  run(sys.argv)
