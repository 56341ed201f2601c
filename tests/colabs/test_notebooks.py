"""Executes every notebook in colabs/ top to bottom on its smoke setting.

The notebooks are committed with the outputs of that run (`python -m launch.notebooks`); the test
executes them afresh through the same `launch.notebooks.execute` and never compares outputs.
"""

import os

import nbformat
import pytest

from launch import notebooks

NOTEBOOKS = notebooks.notebook_paths()
# Saved outputs stay small: plots at a modest dpi, no long logs.
MAX_NOTEBOOK_BYTES = 512 * 1024


def test_there_are_notebooks():
  assert any(p.endswith("quickstart.ipynb") for p in NOTEBOOKS)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[os.path.basename(p) for p in NOTEBOOKS])
def test_saved_notebook_is_small(path):
  assert os.path.getsize(path) <= MAX_NOTEBOOK_BYTES


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[os.path.basename(p) for p in NOTEBOOKS])
def test_notebook_executes(path):
  nb = notebooks.execute(path, timeout=300)  # raises CellExecutionError on the first failing cell
  errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
            if o.get("output_type") == "error"]
  assert not errors
  # Every code cell ran in this execution (saved outputs, if any, were replaced, not kept).
  code = [c for c in nb.cells if c.cell_type == "code"]
  assert [c.execution_count for c in code] == list(range(1, len(code) + 1))


def test_a_notebooks_temp_files_are_removed_when_it_ends(tmp_path):
  # The notebooks write their runs to tempfile.mkdtemp() folders; `execute` gives the kernel a
  # TMPDIR of its own and removes it afterwards.
  nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
      "import tempfile\nd = tempfile.mkdtemp(prefix='run_')\nprint(d)")])
  path = tmp_path / "temp.ipynb"
  nbformat.write(nb, str(path))
  run_dir = notebooks.execute(str(path), timeout=60).cells[0].outputs[0]["text"].strip()
  assert os.path.basename(os.path.dirname(run_dir)).startswith("jaxlab_notebook_")
  assert not os.path.exists(os.path.dirname(run_dir))
