"""Executes every notebook in colabs/ top to bottom on its smoke setting."""

import glob
import os

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NOTEBOOKS = sorted(glob.glob(os.path.join(ROOT, "colabs", "*.ipynb")))


def test_there_are_notebooks():
  assert any(p.endswith("quickstart.ipynb") for p in NOTEBOOKS)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[os.path.basename(p) for p in NOTEBOOKS])
def test_notebook_executes(path, monkeypatch):
  monkeypatch.setenv("JAXLAB_SMOKE", "1")  # the kernel inherits this environment
  nb = nbformat.read(path, as_version=4)
  client = NotebookClient(nb, timeout=300, kernel_name="python3",
                          resources={"metadata": {"path": os.path.dirname(path)}})
  client.execute()  # raises CellExecutionError on the first failing cell
  errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
            if o.get("output_type") == "error"]
  assert not errors
