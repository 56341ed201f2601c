"""The notebooks' shared first cell: Colab install path (pip mocked) and checkout path (no pip)."""

import json
import os
import re
import subprocess
import sys

import nbformat
import pytest

from launch import notebooks

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Runs in a fresh interpreter: hides the development install of jaxlab (so that only the cell can
# make it importable, as on Colab), replaces subprocess.check_call by a recorder, runs the cell
# (read from stdin) `runs` times, then reports what it called and where jaxlab and launch came from.
# The fake `git clone` puts a symlink to this checkout at the clone's path.
_HARNESS = r"""
import importlib.util, json, os, subprocess, sys
checkout, allow_calls, runs = sys.argv[1], sys.argv[2] == "1", int(sys.argv[3])
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in getattr(f, "__module__", "")]
sys.path_hooks[:] = [h for h in sys.path_hooks if "editable" not in getattr(h, "__module__", "")]
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != checkout]
sys.path_importer_cache.clear()
assert importlib.util.find_spec("jaxlab") is None, "jaxlab importable before the cell ran"
calls = []
def check_call(cmd, *args, **kwargs):
  calls.append([str(c) for c in cmd])
  if not allow_calls:
    raise AssertionError(f"unexpected subprocess call {cmd}")
  if list(cmd[:2]) == ["git", "clone"]:
    os.symlink(checkout, cmd[-1])
  return 0
subprocess.check_call = check_call
cell = sys.stdin.read()
for _ in range(runs):
  exec(compile(cell, "<setup cell>", "exec"), {"__name__": "__main__"})
import jaxlab, launch.configs
print(json.dumps({"calls": calls, "jaxlab": jaxlab.__file__, "launch": launch.configs.__file__,
                  "executable": sys.executable}))
"""


def _run_cell(cwd, *, allow_calls: bool, runs: int = 1) -> dict:
  env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
  proc = subprocess.run(
      [sys.executable, "-c", _HARNESS, ROOT, "1" if allow_calls else "0", str(runs)],
      input=notebooks.SETUP_CELL, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
  assert proc.returncode == 0, proc.stderr
  return json.loads(proc.stdout.strip().splitlines()[-1])


def test_outside_a_checkout_clones_and_pip_installs_then_imports_without_restart(tmp_path):
  out = _run_cell(tmp_path, allow_calls=True, runs=2)
  clone = os.path.join(os.path.realpath(tmp_path), "jaxlab-src")
  repo = re.search(r'^JAXLAB_REPO = "([^"]+)"', notebooks.SETUP_CELL, re.M).group(1)
  # Once: clone JAXLAB_REPO, then a normal pip install (dependencies included) of the clone; the
  # second run of the cell finds the clone and installs nothing.
  assert out["calls"] == [["git", "clone", "-q", "--depth=1", repo, clone],
                          [out["executable"], "-m", "pip", "install", "-q", clone]]
  # Imported in the same process, from the clone: no restart needed. launch/ comes with it.
  assert out["jaxlab"] == os.path.join(clone, "jaxlab", "__init__.py")
  assert out["launch"] == os.path.join(clone, "launch", "configs.py")


def test_inside_the_checkout_uses_it_and_never_calls_pip():
  out = _run_cell(os.path.join(ROOT, "colabs"), allow_calls=False)
  assert out["calls"] == []
  assert out["jaxlab"] == os.path.join(ROOT, "jaxlab", "__init__.py")
  assert out["launch"] == os.path.join(ROOT, "launch", "configs.py")


@pytest.mark.parametrize("path", notebooks.notebook_paths(),
                         ids=[os.path.basename(p) for p in notebooks.notebook_paths()])
def test_every_notebook_starts_with_the_shared_setup_cell(path):
  nb = nbformat.read(path, as_version=4)
  assert notebooks.first_code_cell(nb).source == notebooks.SETUP_CELL


def test_set_setup_cell_replaces_the_old_install_cell_and_keeps_its_other_lines():
  old = ("try:\n  import jaxlab\nexcept ImportError:\n  import subprocess, sys\n"
         "  subprocess.check_call([sys.executable, '-m', 'pip', 'install', '-e', '..'])\n"
         "  import jaxlab\nimport os\nSMOKE = os.environ.get('JAXLAB_SMOKE') == '1'")
  nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# Title"),
                                       nbformat.v4.new_code_cell(old),
                                       nbformat.v4.new_code_cell("print(SMOKE)")])
  assert notebooks.set_setup_cell(nb)
  assert [c.source for c in nb.cells] == [
      "# Title", notebooks.SETUP_CELL, "import os\nSMOKE = os.environ.get('JAXLAB_SMOKE') == '1'",
      "print(SMOKE)"]
  assert not notebooks.set_setup_cell(nb)  # idempotent


def test_set_setup_cell_inserts_before_a_first_cell_that_is_not_a_setup_cell():
  nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
  assert notebooks.set_setup_cell(nb)
  assert [c.source for c in nb.cells] == [notebooks.SETUP_CELL, "x = 1"]


def test_unknown_notebook_name_is_a_clear_error():
  with pytest.raises(ValueError, match="no_such_notebook"):
    notebooks.notebook_paths(["no_such_notebook"])
