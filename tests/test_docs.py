"""The documentation site's sources (docs/) and the README stay in step with the code.

* The API reference (docs/api/*.rst, written by `python docs/gen_api.py`) documents every
  public function and class: a top-level one of a module whose path has no `_`-prefixed
  part, or a name in a module's `__all__` (so a package's re-exports from private modules
  count). An object counts as documented when an `autofunction` / `autoclass` names it or an
  `automodule ... :members:` covers it, as autodoc resolves them.
* Every public function's docstring has an example (a doctest or an Example(s) section).
  The functions still without one are listed, exactly, in tests/docs_missing_examples.txt:
  a new function without an example fails, and so does a listed one that gained an example
  (remove it from the list).
* Every registered experiment has a method page, the README links only to files that exist,
  and it stays a short front door.

The checks read the rst and Python sources (no imports, so they take about a second);
they never build the site (`make docs` does, with warnings as errors).
"""

import ast
import functools
import inspect
import pathlib
import re

from jaxlab.experiments import REGISTRY

ROOT = pathlib.Path(__file__).resolve().parents[1]
API = ROOT / "docs" / "api"
MISSING_EXAMPLES = ROOT / "tests" / "docs_missing_examples.txt"
Def = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef


def _path(module: str) -> pathlib.Path | None:
  base = ROOT.joinpath(*module.split("."))
  for path in (base.with_suffix(".py"), base / "__init__.py"):
    if path.is_file():
      return path
  return None


@functools.cache
def _parse(module: str) -> tuple[dict, dict, tuple | None]:
  """A module's top-level defs, its `from X import y` names and its literal `__all__`."""
  tree = ast.parse(_path(module).read_text())
  defs = {n.name: n for n in tree.body if isinstance(n, Def)}
  imports, names = {}, None
  for node in tree.body:
    if isinstance(node, ast.ImportFrom) and node.level == 0:
      for alias in node.names:
        imports[alias.asname or alias.name] = (node.module, alias.name)
    elif (isinstance(node, ast.Assign) and len(node.targets) == 1
          and getattr(node.targets[0], "id", None) == "__all__"):
      names = tuple(ast.literal_eval(node.value))
  return defs, imports, names


def locate(module: str, name: str) -> tuple[str, str] | None:
  """(defining module, name) of the function or class `module.name`; None for anything else
  (a submodule, a constant, an object from outside jaxlab / pallas_kernels)."""
  if _path(module) is None:
    return None
  defs, imports, _ = _parse(module)
  if name in defs:
    return module, name
  # A package's `from pkg.sub import sub` binds the function over the submodule's name;
  # `from pkg import sub` inside pkg itself imports the submodule.
  if name in imports and imports[name] != (module, name):
    return locate(*imports[name])
  return None


def members(module: str) -> dict[str, tuple[str, str]]:
  """What autodoc's `:members:` documents of a module: its `__all__`, else its public
  top-level functions and classes (each located where it is defined)."""
  defs, _, names = _parse(module)
  names = names if names is not None else [n for n in defs if not n.startswith("_")]
  return {n: loc for n in names if (loc := locate(module, n)) is not None}


def _public_modules() -> list[str]:
  modules = []
  for package in ("jaxlab", "pallas_kernels"):
    for path in sorted((ROOT / package).rglob("*.py")):
      parts = path.relative_to(ROOT).with_suffix("").parts
      if parts[-1] == "__init__":
        parts = parts[:-1]
      if len(parts) < 2 or parts[1] == "experiments" or any(p.startswith("_") for p in parts):
        continue
      modules.append(".".join(parts))
  return modules


def public_objects() -> dict[tuple[str, str], str]:
  """(defining module, name) -> a public name, for every public function and class."""
  found = {}
  for module in _public_modules():
    for name, loc in members(module).items():
      found.setdefault(loc, f"{module}.{name}")
  return found


def documented_objects(rst: str) -> set[tuple[str, str]]:
  """The functions and classes (located) that the autodoc directives of one page document."""
  found = set()
  current = None
  lines = rst.splitlines()
  for i, line in enumerate(lines):
    if m := re.match(r"\.\. (?:py:)?currentmodule:: (\S+)", line):
      current = m.group(1)
    elif m := re.match(r"\.\. auto(?:function|class):: (\S+)", line):
      dotted = m.group(1) if "." in m.group(1) else f"{current}.{m.group(1)}"
      if loc := locate(*dotted.rsplit(".", 1)):
        found.add(loc)
    elif m := re.match(r"\.\. automodule:: (\S+)", line):
      options = []
      for opt in lines[i + 1:]:
        if not opt.startswith("   :"):
          break
        options.append(opt.strip())
      if ":members:" not in options:
        continue
      excluded = set()
      for opt in options:
        if opt.startswith(":exclude-members:"):
          excluded = {n.strip() for n in opt.split(":", 2)[2].split(",")}
      found.update(loc for n, loc in members(m.group(1)).items() if n not in excluded)
  return found


def test_the_rst_reader_follows_autodoc():
  rst = (".. automodule:: jaxlab.data.corpus\n   :members:\n   :exclude-members: lm_batch\n\n"
         ".. currentmodule:: jaxlab.formats\n\n.. autofunction:: quantize\n")
  found = documented_objects(rst)
  assert ("jaxlab.formats._api", "quantize") in found  # a re-export, located where defined
  assert ("jaxlab.data.corpus", "load_corpus") in found
  assert ("jaxlab.data.corpus", "lm_batch") not in found
  assert locate("jaxlab.autotune", "kernelband") is None  # a submodule, not a function


def test_api_reference_documents_every_public_name():
  assert (API / "index.rst").exists(), "docs/api/ is missing: run `python docs/gen_api.py`"
  documented = set()
  for page in sorted(API.glob("*.rst")):
    documented |= documented_objects(page.read_text())
  public = public_objects()
  assert len(public) >= 500
  missing = sorted(name for loc, name in public.items() if loc not in documented)
  assert not missing, (f"public names missing from docs/api (run `python docs/gen_api.py`): "
                       f"{missing}")


def has_example(doc: str | None) -> bool:
  """A doctest, or an Example / Examples section (napoleon's header, or a `::` block)."""
  doc = inspect.cleandoc(doc or "")
  return ">>>" in doc or re.search(r"^Examples?:{1,2}\s*$", doc, re.M) is not None


def test_has_example_reads_both_forms():
  assert has_example("Sums.\n\n  >>> f(1)\n  1\n")
  assert has_example("Sums.\n\n  Example::\n\n    f(1)\n")
  assert not has_example("Sums.\n\n  Args:\n    x: an example of a value.\n")


def test_public_functions_have_examples():
  missing_now = set()
  for module, name in public_objects():
    node = _parse(module)[0][name]
    if not isinstance(node, ast.ClassDef) and not has_example(ast.get_docstring(node)):
      missing_now.add(f"{module}.{name}")
  listed = {line.strip() for line in MISSING_EXAMPLES.read_text().splitlines()
            if line.strip() and not line.startswith("#")}
  new = sorted(missing_now - listed)
  gained = sorted(listed - missing_now)
  assert not new, f"public functions without a docstring example: {new}"
  assert not gained, (f"these now have an example (or are gone): remove them from "
                      f"{MISSING_EXAMPLES.name}: {gained}")


def test_every_experiment_has_a_method_page():
  index = (ROOT / "docs" / "methods" / "index.md").read_text()
  for name in REGISTRY:
    assert (ROOT / "docs" / "methods" / f"{name}.md").exists(), name
    assert f"{{doc}}`{name}`" in index, name


def test_readme_is_a_front_door_with_live_links():
  readme = (ROOT / "README.md").read_text()
  assert len(readme.splitlines()) <= 160
  assert "make demo" in readme and "make test" in readme
  links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme)
  local = [link for link in links if "://" not in link]
  assert local, "the README links to no docs page"
  dead = [link for link in local if not (ROOT / link).exists()]
  assert not dead, f"README links to missing files: {dead}"
