"""The launcher refuses bad config values and workdirs with one line and exit 1, before any work.

Before: `--config.noise=nan` (kernelband) ran to "1.00x +- 0.00" for every method
and exited 0; eco's `--config.toy.lrs='(-0.1,)'` ran its toy to distances of 2e9;
`--workdir=''` and a workdir that is a file crashed with a traceback; a truncated
`fingerprint.json` gave `FATAL Unterminated string ...` without the file's name.
Every case here fails before any training, so `launch.main.main` runs in this process.
"""

import json
import sys

import ml_collections
import pytest
from absl import flags
from absl.testing import flagsaver

from jaxlab.train import malloc
from launch import configs, main, runner


def _main(monkeypatch, capsys, config: str, *args: str) -> tuple[object, str]:
  """`launch.main.main` on `--config=config args` in this process: (exit code, stderr)."""
  name, _, preset = config.partition(":")
  configs.bind_configs_package()
  argv = ["main", f"--config={configs.config_path(name)}:{preset}", *args]
  monkeypatch.setattr(sys, "argv", argv)  # config_flags reads overrides from sys.argv
  monkeypatch.setattr(malloc, "applied", malloc.applied)
  with flagsaver.flagsaver():
    flags.FLAGS(argv)
    with pytest.raises(SystemExit) as info:
      main.main(["main"])
  return info.value.code, capsys.readouterr().err


@pytest.mark.parametrize("config, override, expected", [
    ("kernelband:smoke", "--config.noise=nan", "FATAL config.noise must be finite, got nan\n"),
    ("kernelband:smoke", "--config.kernelband.theta_sat=nan",
     "FATAL config.kernelband.theta_sat must be finite, got nan\n"),
    ("eco:smoke", "--config.toy.lrs=(-0.1,)", "FATAL config.toy.lrs[0] must be > 0, got -0.1\n"),
    ("lm:smoke", "--config.optimizer.learning_rate=inf",
     "FATAL config.optimizer.learning_rate must be finite, got inf\n"),
])
def test_non_finite_or_out_of_range_config_values_fail_before_any_work(
    monkeypatch, capsys, tmp_path, config, override, expected):
  code, err = _main(monkeypatch, capsys, config, override, f"--workdir={tmp_path / 'w'}")
  assert (code, err) == (1, expected)
  assert not (tmp_path / "w").exists()  # refused before the workdir was touched


def test_a_workdir_that_cannot_be_one_is_one_line(monkeypatch, capsys, tmp_path):
  a_file = tmp_path / "a_file"
  a_file.write_text("keep me")
  for workdir, expected in [
      ("", "FATAL workdir must name a directory, got ''\n"),
      (str(a_file), f"FATAL workdir {a_file} exists and is not a directory\n"),
      (f"{a_file}/run", f"FATAL workdir {a_file}/run cannot be created: {a_file} is not a "
                        "directory\n")]:
    assert _main(monkeypatch, capsys, "kernelband:smoke", f"--workdir={workdir}") == (1, expected)
  assert a_file.read_text() == "keep me"


def test_a_damaged_fingerprint_is_named(monkeypatch, capsys, tmp_path):
  (tmp_path / "results.json").write_text("{}")
  (tmp_path / "fingerprint.json").write_text('{\n "config": {\n  "experiment": "kernelb')
  code, err = _main(monkeypatch, capsys, "kernelband:smoke", f"--workdir={tmp_path}")
  assert code == 1
  assert err.startswith(f"FATAL {tmp_path / 'fingerprint.json'} is damaged (JSONDecodeError: "), err
  assert "--overwrite" in err and "Traceback" not in err
  assert json.loads((tmp_path / "results.json").read_text()) == {}


def test_reproduce_checks_every_config_and_the_workdir_before_running(monkeypatch, tmp_path):
  bad = ml_collections.ConfigDict(dict(experiment="lm", noise=float("nan")))
  monkeypatch.setattr(runner, "load_config", lambda name, preset: bad)
  ran = []
  monkeypatch.setattr(runner, "get", lambda name: ran.append(name))
  with pytest.raises(ValueError, match=r"^configs/lm\.py: config\.noise must be finite, got nan$"):
    runner.reproduce(str(tmp_path), "smoke", ["lm"])
  assert ran == [] and not (tmp_path / "lm").exists()
  with pytest.raises(ValueError, match="^workdir must name a directory, got ''$"):
    runner.check_reproduce("", "smoke", ["lm"])
