r"""The `jaxlab` command (installed with the package): list, run, reproduce, bench.

  jaxlab list                           experiments, their presets and the claim each one tests
  jaxlab run NAME [--preset=quick] --workdir=W [--config.a.b=value ...]
  jaxlab reproduce [--preset=quick] [--workdir=runs/demo] [--only=lm,fp4]
  jaxlab bench [--out=runs/bench/bench.json] [--only=decode] [--preset=quick]

`run`, `reproduce` and `bench` are `python -m launch.main`, `launch.reproduce` and
`launch.bench` under another name: the same flags (`jaxlab run NAME --help` lists
them), the same exit status. `run NAME --preset=P` stands for
`--config=configs/NAME.py:P`; every command works from any directory, on the
configs installed with jaxlab.
"""

import difflib
import importlib
import sys

from absl import app, flags

from jaxlab.experiments import REGISTRY
from jaxlab.presets import PRESETS
from launch import configs

COMMANDS = ("list", "run", "reproduce", "bench")
# The tiny byte LM every LM row builds on (README's method table): a sanity row, not a method.
REFERENCE = ("lm",)
# The absl module each command runs. Only the chosen one is imported: `launch.main` and
# `launch.reproduce` both define --workdir, and absl refuses a flag defined twice.
_MODULES = {"run": "launch.main", "reproduce": "launch.reproduce", "bench": "launch.bench"}
_HELP = ("-h", "--help", "-help", "--helpfull", "--helpshort")


def _claim(config) -> str:
  """The claim of the config's first primary mechanism criterion (else first primary)."""
  criteria = [(k, c) for k, c in config.get("criteria", {}).items() if c.get("primary", True)]
  criteria.sort(key=lambda kc: not kc[1].get("mechanism", False))
  return " ".join(criteria[0][1].claim.split()) if criteria else ""


def presets_of(name: str) -> list[str]:
  """The presets `configs/<name>.py` accepts, among `jaxlab.presets.PRESETS`."""
  accepted = []
  for preset in PRESETS:
    try:
      configs.load_config(name, preset)
    except ValueError:
      continue
    accepted.append(preset)
  return accepted


def listing() -> str:
  """The text of `jaxlab list`: one line per experiment (name, presets, claim), methods first.

  Example:
    >>> print(listing().splitlines()[0])
    19 methods: jaxlab run NAME --preset=PRESET --workdir=W (presets: smoke, quick, full; default quick)
  """
  methods = [n for n in REGISTRY if n not in REFERENCE]
  width = max(map(len, REGISTRY)) + 2

  def row(name: str) -> str:
    return (f"  {name:<{width}}{','.join(presets_of(name)):<18}"
            f"{_claim(configs.load_config(name, 'quick'))}")

  benches = [n.removeprefix("bench_") for n in configs.config_names() if n.startswith("bench_")]
  lines = [f"{len(methods)} methods: jaxlab run NAME --preset=PRESET --workdir=W "
           f"(presets: {', '.join(PRESETS)}; default quick)",
           f"  {'NAME':<{width}}{'PRESETS':<18}CLAIM TESTED (the criterion that decides the row)"]
  lines += [row(n) for n in methods]
  lines += ["reference pipeline (the tiny byte LM the LM rows build on):"]
  lines += [row(n) for n in REFERENCE]
  lines += [f"benchmarks: jaxlab bench --only=NAME: {', '.join(benches)}"]
  return "\n".join(lines)


def _usage() -> str:
  return f"{__doc__.strip()}\n\n{listing()}\n"


def _fail(message: str) -> int:
  sys.stderr.write(f"jaxlab: {message}\n")
  return 2


def _option(args: list[str], name: str) -> tuple[str | None, list[str]]:
  """(value of `--name=v` / `--name v`, the other args)."""
  value, rest, i = None, [], 0
  while i < len(args):
    flag, eq, v = args[i].partition("=")
    if flag in (f"--{name}", f"-{name}"):
      if eq:
        value = v
      elif i + 1 < len(args):
        value, i = args[i + 1], i + 1
      else:
        value = ""
    else:
      rest.append(args[i])
    i += 1
  return value, rest


def _run_argv(args: list[str]) -> list[str] | int:
  """`jaxlab run NAME [--preset=P] ...` as launch.main's argv, or an exit status."""
  name = next((a for a in args if not a.startswith("-")), None)
  if name is None:
    return _fail("run needs an experiment name: jaxlab run NAME [--preset=quick] --workdir=W "
                 "(`jaxlab list` shows them)")
  args = [a for a in args if a is not name]
  if name not in REGISTRY:
    close = difflib.get_close_matches(name, REGISTRY, n=1)
    hint = f"did you mean {close[0]!r}?" if close else f"have {', '.join(REGISTRY)}"
    return _fail(f"unknown experiment {name!r}; {hint} (`jaxlab list` shows them)")
  preset, rest = _option(args, "preset")
  if preset is not None and preset not in PRESETS:
    return _fail(f"--preset={preset}: expected one of {', '.join(PRESETS)}")
  return ["jaxlab run", f"--config={name}:{preset or 'quick'}", *rest]


def main(argv: list[str] | None = None) -> int:
  """The `jaxlab` console script: dispatches to the command's absl entry point.

  Args:
    argv: the command line without the program name (default: `sys.argv[1:]`).

  Returns:
    The exit status (`run`, `reproduce` and `bench` exit the process themselves).
  """
  args = list(sys.argv[1:] if argv is None else argv)
  if not args or args[0] in _HELP:
    sys.stdout.write(_usage())
    return 0 if args else 2
  command, args = args[0], args[1:]
  if command not in COMMANDS:
    return _fail(f"unknown command {command!r}; expected one of {', '.join(COMMANDS)}")
  if command == "list":
    print(listing())
    return 0
  module = importlib.import_module(_MODULES[command])
  if any(a in _HELP for a in args):
    sys.stdout.write(f"{(module.__doc__ or '').strip()}\n\n{flags.FLAGS.module_help(module)}\n")
    if command == "run":
      sys.stdout.write(f"\n{listing()}\n")
    return 0
  if command == "run":
    run_argv = _run_argv(args)
    if isinstance(run_argv, int):
      return run_argv
    module.run(run_argv)
  else:
    sys.argv[:] = [f"jaxlab {command}", *args]
    app.run(module.main, argv=sys.argv)
  return 0


if __name__ == "__main__":
  sys.exit(main())
