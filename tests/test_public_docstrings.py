"""Every public function and class of jaxlab/ and pallas_kernels/ has a docstring.

Public: defined at the top level of a module whose path has no `_`-prefixed part (a
package's `__init__.py` included), with a name that does not start with `_`. Read from
the source (no imports), so the check takes well under a second.
"""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _public_modules() -> list[pathlib.Path]:
  files = []
  for package in ("jaxlab", "pallas_kernels"):
    for path in sorted((ROOT / package).rglob("*.py")):
      parts = path.relative_to(ROOT).parts
      if not any(p.startswith("_") and p != "__init__.py" for p in parts):
        files.append(path)
  return files


def undocumented(source: str) -> list[str]:
  """"<module>" and the names of the top-level public functions and classes in `source` that
  have no docstring."""
  tree = ast.parse(source)
  names = [n.name for n in tree.body
           if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
           and not n.name.startswith("_") and ast.get_docstring(n) is None]
  return names if ast.get_docstring(tree) is not None else ["<module>"] + names


def test_the_check_finds_a_missing_docstring():
  src = 'def f():\n  """Doc."""\n\ndef g():\n  pass\n\nclass C:\n  x: int\n\ndef _h():\n  pass\n'
  assert undocumented(src) == ["<module>", "g", "C"]
  assert undocumented('"""Module."""\n' + src) == ["g", "C"]


def test_public_api_is_documented():
  modules = _public_modules()
  assert len(modules) >= 100
  missing = {}
  for path in modules:
    names = undocumented(path.read_text())
    if names:
      missing[str(path.relative_to(ROOT))] = names
  assert not missing, f"public names without a docstring: {missing}"
