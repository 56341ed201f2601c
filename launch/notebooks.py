r"""Executes the notebooks in colabs/ on their smoke setting and saves their outputs in place.

  python -m launch.notebooks                      # every notebook (or: make notebooks)
  python -m launch.notebooks --only=quickstart,fp4
  python -m launch.notebooks --setup_only         # only rewrite each first code cell

Each notebook runs top to bottom in a fresh `python3` kernel started in colabs/ with
`JAXLAB_SMOKE=1`, the same way `tests/colabs/test_notebooks.py` runs it (both call `execute`),
and is written back with its outputs, so the committed notebooks show a real run. Before it
runs, its first code cell is replaced by `SETUP_CELL`, the one setup cell every notebook shares.
"""

import contextlib
import os
import tempfile

import nbformat
from absl import app, flags
from nbclient import NotebookClient

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLABS = os.path.join(ROOT, "colabs")

# The first code cell of every notebook (a test checks they are all this text). Inside a checkout
# (the notebook's parent folder holds jaxlab/) it puts that checkout on sys.path and installs
# nothing; elsewhere (Google Colab) it clones JAXLAB_REPO and pip-installs it with its
# dependencies. The import works at once because the source tree goes on sys.path: a pip install
# into a running kernel (above all `pip install -e`, whose .pth hook runs only at start-up) is
# otherwise invisible until the runtime restarts. The tree also brings launch/ and configs/,
# which the notebooks load configs from and which are not part of the installed package.
SETUP_CELL = """\
# Setup: uses the jaxlab checkout this notebook sits in; elsewhere (e.g. Google Colab) clones
# JAXLAB_REPO and pip-installs it. No runtime restart is needed either way.
import importlib, os, subprocess, sys
JAXLAB_REPO = "https://github.com/jaxlab/jaxlab"  # placeholder organisation: set the real URL
ROOT = os.path.abspath("..")
if not os.path.isfile(os.path.join(ROOT, "jaxlab", "__init__.py")):  # not in a checkout
  ROOT = os.path.abspath("jaxlab-src")
  if not os.path.isdir(ROOT):
    subprocess.check_call(["git", "clone", "-q", "--depth=1", JAXLAB_REPO, ROOT])
    subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", ROOT])
# The source tree on sys.path: jaxlab, pallas_kernels, launch/ and configs/ import right away.
sys.path.insert(0, ROOT)
importlib.invalidate_caches()
jaxlab = importlib.import_module("jaxlab")  # fails here if the setup did not work"""


_ONLY = flags.DEFINE_list("only", [], "Notebook names to run, without .ipynb (default: all).")
_SETUP_ONLY = flags.DEFINE_bool("setup_only", False,
                                "Only rewrite each notebook's first code cell; run nothing.")
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


def first_code_cell(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
  """The notebook's first code cell (the setup cell)."""
  for cell in nb.cells:
    if cell.cell_type == "code":
      return cell
  raise ValueError("notebook has no code cell")


def set_setup_cell(nb: nbformat.NotebookNode) -> bool:
  """Makes the first code cell `SETUP_CELL`; returns whether the notebook changed.

  An old-style setup cell (`try: import jaxlab ... pip install`) is replaced; any lines it held
  after its `import jaxlab` move to a new code cell right after it. A notebook whose first code
  cell is neither gets `SETUP_CELL` inserted before it.
  """
  cell = first_code_cell(nb)
  if cell.source == SETUP_CELL:
    return False
  index = next(i for i, c in enumerate(nb.cells) if c is cell)
  setup = nbformat.v4.new_code_cell(SETUP_CELL)
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
def _smoke_env():
  """JAXLAB_SMOKE=1 (and no progress bars, which are noise in saved outputs) in this process's
  environment, which the kernel inherits, with TMPDIR a fresh folder removed afterwards: the
  notebooks keep their runs in `tempfile.mkdtemp()` folders (Colab discards them with the
  runtime), which would otherwise pile up in the system's temp folder run after run."""
  with tempfile.TemporaryDirectory(prefix="jaxlab_notebook_") as tmp:
    settings = {"JAXLAB_SMOKE": "1", "TQDM_DISABLE": "1", "TMPDIR": tmp}
    old = {k: os.environ.get(k) for k in settings}
    os.environ.update(settings)
    try:
      yield
    finally:
      for k, v in old.items():
        if v is None:
          del os.environ[k]
        else:
          os.environ[k] = v


def execute(path: str, *, timeout: int = 600) -> nbformat.NotebookNode:
  """Runs the notebook at `path` top to bottom on its smoke setting and returns it with outputs.

  The kernel starts in the notebook's folder with `JAXLAB_SMOKE=1` and a TMPDIR of its own,
  removed when it ends. Saved outputs are ignored (each cell's outputs are replaced by its new
  ones), never compared.

  Args:
    path: an .ipynb file.
    timeout: seconds one cell may run.

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
  with _smoke_env():
    client.execute()
  return nb


def _sources(nb: nbformat.NotebookNode) -> list[tuple[str, str]]:
  return [(c.cell_type, c.source) for c in nb.cells]


def _write(nb: nbformat.NotebookNode, path: str) -> None:
  # Cell ids (nbformat 4.5) added once, so that reading the file back warns about nothing.
  _, nb = nbformat.validator.normalize(nb)
  nbformat.write(nbformat.from_dict(nb), path)


def sync_setup_cell(path: str) -> bool:
  """Rewrites the notebook at `path` with `SETUP_CELL` first; returns whether it changed."""
  nb = nbformat.read(path, as_version=4)
  changed = set_setup_cell(nb)
  if changed:
    _write(nb, path)
  return changed


def run_and_save(path: str, *, timeout: int = 600) -> int:
  """Sets the setup cell, executes the notebook, writes it back with outputs; returns its bytes.

  Raises:
    RuntimeError: the file's cells changed while it ran (someone edited it): nothing is written.
  """
  sync_setup_cell(path)
  nb = execute(path, timeout=timeout)
  if _sources(nbformat.read(path, as_version=4)) != _sources(nb):
    raise RuntimeError(f"{path} was edited while it ran; not saved, run it again")
  _write(nb, path)
  return os.path.getsize(path)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Too many command-line arguments: {argv[1:]}")
  for path in notebook_paths(_ONLY.value):
    name = os.path.relpath(path, ROOT)
    if _SETUP_ONLY.value:
      print(f"{name}: setup cell {'rewritten' if sync_setup_cell(path) else 'unchanged'}")
      continue
    size = run_and_save(path, timeout=_TIMEOUT.value)
    print(f"{name}: executed, saved with outputs ({size / 1024:.0f} KiB)")


if __name__ == "__main__":
  app.run(main)
