"""Sphinx configuration for jaxlab's documentation (`make docs`)."""

import os
import pathlib
import shutil
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("JAX_PLATFORMS", "cpu")

project = "jaxlab"
author = "the jaxlab authors"
copyright = "the jaxlab authors, Apache-2.0"

extensions = [
    "myst_nb",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
]

# The notebooks live in colabs/ (where the tests execute them); a copy is rendered with the
# outputs they were committed with, never re-executed. Unchanged copies are left alone, so
# an incremental build does not read them again.
NOTEBOOKS = pathlib.Path(__file__).parent / "notebooks"
NOTEBOOKS.mkdir(exist_ok=True)
_sources = {nb.name: nb for nb in (ROOT / "colabs").glob("*.ipynb")}
for _copy in NOTEBOOKS.glob("*.ipynb"):
  if _copy.name not in _sources:
    _copy.unlink()
for _name, _nb in sorted(_sources.items()):
  _copy = NOTEBOOKS / _name
  if not _copy.exists() or _copy.read_bytes() != _nb.read_bytes():
    shutil.copyfile(_nb, _copy)
nb_execution_mode = "off"

myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence"]
myst_heading_anchors = 3

# Docstrings are Google style, with `name` for code.
napoleon_google_docstring = True
napoleon_numpy_docstring = False
default_role = "code"
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
# Attributes: sections as fields of their class, not as objects of their own (a Flax
# module's dataclass fields are documented once, by autodoc).
napoleon_use_ivar = True

exclude_patterns = ["_build"]
html_theme = "furo"
html_title = "jaxlab"


def _skip_namedtuple_fields(app, what, name, obj, skip, options):
  """NamedTuple fields' docstrings only say "Alias for field number N": the class's own
  docstring documents them."""
  del app, what, name, options
  doc = getattr(obj, "__doc__", None) or ""
  return True if doc.startswith("Alias for field number") else skip


def _drop_type_docstrings(app, what, name, obj, options, lines):
  """A constant (a dict, an array, a dataclass instance) shows its own doc comment, not
  its type's docstring (numpy's ndarray, dict's)."""
  del app, name, options
  first = next((line.strip() for line in lines if line.strip()), "")
  # An instance's __doc__ is its class's (numpy's carries a text signature on top).
  if what in ("data", "attribute") and first and first in (getattr(obj, "__doc__", None) or ""):
    lines.clear()


def setup(app):
  app.connect("autodoc-skip-member", _skip_namedtuple_fields)
  app.connect("autodoc-process-docstring", _drop_type_docstrings)
