"""The `jaxlab` command, the wheel's contents, and one-line errors for bad config arguments."""

import os
import shutil
import subprocess
import sys
import zipfile

import ml_collections
import pytest

from jaxlab.experiments import REGISTRY
from launch import cli, configs

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The checkout's files a wheel is built from (not its caches, runs or virtual environments).
_NOT_SOURCE = shutil.ignore_patterns(".git", ".venv", "runs", "build", "*.egg-info", "__pycache__",
                                     ".pytest_cache", ".ipynb_checkpoints", "results")


def _python(*args, cwd, timeout=120):
  """`python *args` in `cwd` with only this checkout importable (as an installed copy would be)."""
  env = dict(os.environ, PYTHONPATH=ROOT)
  return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True,
                        text=True, timeout=timeout)


def test_wheel_ships_configs_launch_and_the_jaxlab_command(tmp_path):
  src = tmp_path / "src"
  shutil.copytree(ROOT, src, ignore=_NOT_SOURCE)  # the build writes build/ into its source tree
  out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", str(src),
                        "-w", str(tmp_path / "wheel")], capture_output=True, text=True,
                       timeout=300)
  assert out.returncode == 0, out.stderr[-3000:]
  (wheel,) = (tmp_path / "wheel").glob("jaxlab-*.whl")
  with zipfile.ZipFile(wheel) as z:
    names = set(z.namelist())
    info = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    entry_points = z.read(info).decode()
  config_files = {f"configs/{n}.py" for n in configs.config_names()}
  assert config_files | {"configs/__init__.py", "launch/__init__.py", "launch/main.py",
                         "launch/cli.py", "launch/configs.py", "launch/reproduce.py",
                         "launch/bench.py", "jaxlab/__init__.py"} <= names
  assert "[console_scripts]\njaxlab = launch.cli:main" in entry_points
  assert not any(n.startswith(("tests/", "colabs/")) for n in names)


def test_jaxlab_list_prints_every_experiment_with_presets_and_claim(capsys):
  assert cli.main(["list"]) == 0
  lines = capsys.readouterr().out.splitlines()
  assert lines[0].startswith("19 methods:")
  rows = {line.split()[0]: line.split(None, 2) for line in lines if line.startswith("  ")
          and line.split()[0] in REGISTRY}
  assert set(rows) == set(REGISTRY) and len(REGISTRY) == 20  # 19 methods + the lm reference
  method_rows = lines[2:lines.index(next(x for x in lines if x.startswith("reference")))]
  assert len(method_rows) == 19 and "lm" not in {r.split()[0] for r in method_rows}
  assert rows["fp4"][1] == "smoke,quick,full" and "NVFP4" in rows["fp4"][2]
  assert "unigram" in rows["lm"][2]


def test_help_lists_experiments_and_presets(capsys, tmp_path):
  assert cli.main(["--help"]) == 0
  out = capsys.readouterr().out
  assert "jaxlab run NAME" in out and "spatial_deconfounder" in out and "smoke, quick, full" in out
  # The launcher's own --help, from any directory, names them too.
  launch = _python("-m", "launch.main", "--help", cwd=tmp_path)  # absl's --help exits 1
  text = " ".join(launch.stdout.split())
  assert "Presets: smoke, quick, full" in text and "spatial_deconfounder" in text


def test_run_rejects_an_unknown_experiment_or_preset_in_one_line(capsys):
  assert cli.main(["run", "lmm", "--workdir=w"]) == 2
  assert cli.main(["run", "lm", "--preset=tiny", "--workdir=w"]) == 2
  assert cli.main(["frobnicate"]) == 2
  err = capsys.readouterr().err.splitlines()
  assert err == ["jaxlab: unknown experiment 'lmm'; did you mean 'lm'? (`jaxlab list` shows them)",
                 "jaxlab: --preset=tiny: expected one of smoke, quick, full",
                 "jaxlab: unknown command 'frobnicate'; expected one of list, run, reproduce, "
                 "bench"]


@pytest.mark.parametrize("override, expected", [
    ("--config.train.num_stepz=3",
     "configs/lm.py:smoke has no field 'train.num_stepz'; did you mean 'train.num_steps'?"),
    ("--config.trainn.num_steps=3",
     "configs/lm.py:smoke has no field 'trainn.num_steps'; did you mean 'train.num_steps'?"),
    ("--config.num_steps=3",
     "configs/lm.py:smoke has no field 'num_steps'; did you mean 'train.num_steps'?"),
    ("--config.train.num_steps=abc", "--config.train.num_steps=abc"),
])
def test_a_bad_override_is_one_line_naming_the_key_and_the_closest_one(tmp_path, override,
                                                                        expected):
  # From another directory: `configs/lm.py` is the installed config, not a path under the cwd.
  out = _python("-m", "launch.main", "--config=configs/lm.py:smoke", override,
                f"--workdir={tmp_path / 'w'}", cwd=tmp_path)
  assert out.returncode == 1
  assert out.stderr.count("\n") == 1 and out.stderr.startswith("FATAL "), out.stderr[-3000:]
  assert expected in out.stderr
  assert not (tmp_path / "w").exists()


def test_a_bad_preset_or_config_name_is_one_line(tmp_path):
  for arg, expected in [("configs/lm.py:tiny", "Unknown config preset 'tiny'"),
                        ("configs/lmm.py:smoke", "did you mean 'lm'?")]:
    out = _python("-m", "launch.main", f"--config={arg}", f"--workdir={tmp_path}", cwd=tmp_path)
    assert out.returncode == 1 and out.stderr.count("\n") == 1, out.stderr[-3000:]
    assert expected in out.stderr


def test_a_configs_folder_in_the_cwd_does_not_shadow_jaxlabs(tmp_path):
  # A user's own `configs` package in the current directory: fp4's config imports `configs.lm`,
  # which must still be jaxlab's. The bad override stops the run once the config has loaded.
  (tmp_path / "configs").mkdir()
  (tmp_path / "configs" / "__init__.py").write_text("raise ImportError('the user configs')\n")
  out = _python("-m", "launch.main", "--config=configs/fp4.py:smoke", "--config.nope=1",
                f"--workdir={tmp_path / 'w'}", cwd=tmp_path)
  assert out.returncode == 1
  assert out.stderr == "FATAL Flags parsing error: --config.nope=1: configs/fp4.py:smoke has no " \
                       "field 'nope'\n"


def test_config_arguments_resolve_to_the_installed_configs(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  lm = configs.config_path("lm")
  assert configs.resolve_config_arg("configs/lm.py:smoke") == lm + ":smoke"
  assert configs.resolve_config_arg("lm.py") == lm
  (tmp_path / "mine.py").write_text("def get_config(arg=None):\n  return None\n")
  (tmp_path / "lm").write_text("")  # a bare name is always jaxlab's config
  assert configs.resolve_config_arg("mine.py:x") == "mine.py:x"
  assert configs.resolve_config_arg("lm:quick") == lm + ":quick"
  with pytest.raises(ValueError, match="did you mean 'lm'"):
    configs.resolve_config_arg("configs/lmm.py")
  with pytest.raises(ValueError, match="No config file 'elsewhere/lm.py'"):
    configs.resolve_config_arg("elsewhere/lm.py")


def test_missing_field_names_the_closest_field():
  config = ml_collections.ConfigDict(dict(seed=0, train=dict(num_steps=3, batch_size=8),
                                          optimizer=dict(learning_rate=0.1)))
  assert configs.missing_field(config, "train.batch_size") is None
  assert configs.missing_field(config, "optimizer.learning_rat") == (
      "no field 'optimizer.learning_rat'; did you mean 'optimizer.learning_rate'?")
  assert configs.missing_field(config, "batch_size") == (
      "no field 'batch_size'; did you mean 'train.batch_size'?")
  assert configs.missing_field(config, "zzz") == "no field 'zzz'"
  assert configs.missing_field(config, "seed.x") == (
      "no field 'seed.x' ('seed' holds an int, not a section)")
