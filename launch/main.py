r"""Runs one experiment: `python -m launch.main --config=configs/lm.py:smoke --workdir=W`.

`--config` names a config file and preset (`file.py:preset`); any field can be
overridden with `--config.a.b=value` (unknown keys are refused with a one-line
error). The run resumes from `--workdir` if it holds a checkpoint of the same
config; a workdir of a different config is refused (the differing fields are
listed) unless `--overwrite` deletes it first (`jaxlab.train.workdir`).
`--jax_distributed` initialises JAX's multi-host runtime first.

Exit status: 0 on success; 1 on any failure (a bad config, a failed checkpoint
save, a loss that became non-finite), within seconds: a failure never waits on
background checkpoint threads for more than `_EXIT_GRACE_S`.
"""

import json
import os
import sys
import threading
import traceback

from absl import app, flags, logging
from ml_collections import config_flags

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Experiment config file and preset, e.g. configs/lm.py:quick.",
    lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for checkpoints, metrics, results.")
_OVERWRITE = flags.DEFINE_bool(
    "overwrite", False, "If --workdir holds a run of a different config, delete its contents "
    "(checkpoints, metrics, results, caches) and start over instead of refusing.")
_DISTRIBUTED = flags.DEFINE_bool(
    "jax_distributed", False, "Call jax.distributed.initialize() (multi-host runs).")

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


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Too many command-line arguments: {argv[1:]}")
  if not flags.FLAGS["verbosity"].present:
    logging.set_verbosity(logging.WARNING)  # orbax logs every save at INFO
  import jax
  if _DISTRIBUTED.value:
    jax.distributed.initialize()
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
  print(json.dumps(report.to_jsonable(summary), indent=1, sort_keys=True))


if __name__ == "__main__":
  flags.mark_flags_as_required(["config", "workdir"])
  app.run(main, flags_parser=_parse_flags)
