r"""Runs every registered experiment's preset and writes REPORT.md.

  python -m launch.reproduce --workdir=runs/demo --preset=quick [--only=lm] [--cpu_devices=2]

Each experiment runs in `workdir/<name>` (resuming if it ran before); the
report (paper claim, baseline, ours, verdict, plots) goes to
`workdir/REPORT.md`, whose path is printed last. Exits non-zero if any
experiment failed (its row then says so).
"""

import os
import sys

from absl import app, flags, logging

from jaxlab.train import malloc
from launch import cpu_devices
from launch.runner import check_reproduce, reproduce

_WORKDIR = flags.DEFINE_string("workdir", "runs/demo", "Root directory of the runs and report.")
_PRESET = flags.DEFINE_enum("preset", "quick", ["smoke", "quick", "full"], "Preset of every run.")
_ONLY = flags.DEFINE_list("only", [], "Run only these experiments (default: all registered).")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Too many command-line arguments: {argv[1:]}")
  if not flags.FLAGS["verbosity"].present:
    logging.set_verbosity(logging.WARNING)  # orbax logs every save at INFO
  try:  # every config and the workdir, before any compute: one line, exit 1
    check_reproduce(_WORKDIR.value, _PRESET.value, _ONLY.value)
  except ValueError as e:
    sys.stderr.write(f"FATAL {e}\n")
    sys.exit(1)
  malloc.use_for_launch("default")  # JAXLAB_MALLOC=reuse opts in; before XLA starts
  cpu_devices.apply()
  path, failures = reproduce(_WORKDIR.value, _PRESET.value, _ONLY.value)
  print(f"REPORT: {os.path.abspath(path)}")
  if failures:
    raise SystemExit(f"experiments failed: {', '.join(failures)}")


if __name__ == "__main__":
  app.run(main)
