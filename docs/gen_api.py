"""Writes the API reference pages, docs/api/<area>.rst, from the code.

  python docs/gen_api.py          # from the repository root, after adding a public name

One page per area of jaxlab (and per kernel family of pallas_kernels): the package's
docstring, each name of its `__all__`, then every public
submodule with its members (the names the package already re-exports left out, so nothing
shows twice). Public follows the project's rule: a top-level function or class whose module
path has no `_`-prefixed part, or a name in a package's `__all__`.
tests/test_docs.py checks that the committed pages still cover every public name.
"""

import importlib
import inspect
import pathlib
import pkgutil
import sys
import types

ROOT = pathlib.Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "api"
# Areas in the order of the reference's table of contents: the methods' areas first.
AREAS = (
    "jaxlab.formats", "jaxlab.quant", "jaxlab.optim", "jaxlab.moe", "jaxlab.serving",
    "jaxlab.autotune", "jaxlab.uq", "jaxlab.rl", "jaxlab.codecomp", "jaxlab.retrieval",
    "jaxlab.zeroshot", "jaxlab.privacy", "jaxlab.pc", "jaxlab.causal", "jaxlab.motion",
    "jaxlab.distill", "jaxlab.diffusion", "jaxlab.recsys", "jaxlab.text", "pallas_kernels.fp4",
    "pallas_kernels.moe", "pallas_kernels.tuning", "jaxlab.nn", "jaxlab.data", "jaxlab.train",
    "jaxlab.study", "jaxlab.report", "jaxlab.presets", "jaxlab.validation", "jaxlab.config_checks",
    "jaxlab.benchmarking",
)


def module_members(module: types.ModuleType) -> list[str]:
  """The names autodoc's `:members:` documents: `__all__`, else the public functions and
  classes the module defines."""
  if hasattr(module, "__all__"):
    return list(module.__all__)
  return [n for n, o in vars(module).items()
          if not n.startswith("_") and (inspect.isclass(o) or is_function(o))
          and getattr(o, "__module__", None) == module.__name__]


def is_function(obj) -> bool:
  """A function, also under `jax.jit` or `functools.wraps` (not a callable instance)."""
  return inspect.isfunction(inspect.unwrap(obj)) if callable(obj) else False


def public_submodules(module: types.ModuleType) -> list[types.ModuleType]:
  """The module's public submodules, depth first (none for a plain module)."""
  out = []
  for info in pkgutil.iter_modules(getattr(module, "__path__", [])):
    if not info.name.startswith("_"):
      sub = importlib.import_module(f"{module.__name__}.{info.name}")
      out += [sub] + public_submodules(sub)
  return out


def _entry(name: str, obj) -> str:
  if inspect.isclass(obj):
    return f".. autoclass:: {name}\n   :members:\n"
  if is_function(obj):
    return f".. autofunction:: {name}\n"
  return f".. autodata:: {name}\n   :no-value:\n"


def area_page(area: str) -> str:
  """The reST source of one area's page."""
  module = importlib.import_module(area)
  title = f"``{area}``"
  lines = [title, "=" * len(title), "", f".. automodule:: {area}", "",
           f".. currentmodule:: {area}", ""]
  shown = set()  # ids of the objects documented so far
  exported = module_members(module) if hasattr(module, "__all__") or not hasattr(
      module, "__path__") else []
  names = [n for n in exported if not isinstance(getattr(module, n), types.ModuleType)]
  if names:
    for n in names:
      obj = getattr(module, n)
      lines.append(_entry(n, obj))
      if inspect.isclass(obj) or is_function(obj):
        shown.add(id(obj))
  for sub in public_submodules(module):
    members = module_members(sub)
    skip = [n for n in members if id(getattr(sub, n, None)) in shown]
    heading = f"``{sub.__name__}``"
    lines += [heading, "-" * len(heading), "", f".. automodule:: {sub.__name__}",
              "   :members:"]
    if sub.__name__.rsplit(".", 1)[-1] in names:
      # The package exports a function of the module's name (`quant.fake_quant`): the
      # function keeps the name as a link target.
      lines.append("   :no-index:")
    if skip:
      lines.append(f"   :exclude-members: {', '.join(skip)}")
    lines.append("")
    shown.update(id(getattr(sub, n)) for n in members
                 if inspect.isclass(getattr(sub, n, None)) or is_function(getattr(sub, n, None)))
  return "\n".join(lines).rstrip() + "\n"


def index_page() -> str:
  lines = ["API reference", "=============", "",
           "Generated from the docstrings by ``python docs/gen_api.py``; each area's page opens",
           "with its package docstring, then lists its public names and submodules.", "",
           ".. toctree::", "   :maxdepth: 1", ""]
  return "\n".join(lines + [f"   {a}" for a in AREAS]) + "\n"


def main() -> None:
  sys.path.insert(0, str(ROOT))
  OUT.mkdir(parents=True, exist_ok=True)
  for old in OUT.glob("*.rst"):
    old.unlink()
  (OUT / "index.rst").write_text(index_page())
  for area in AREAS:
    (OUT / f"{area}.rst").write_text(area_page(area))


if __name__ == "__main__":
  main()
