"""Loads `configs/<name>.py` by name: the launch side of the repository layout.

Library code (`jaxlab`) never reads the repository's files; tests, notebooks
and `launch/` scripts call `load_config(name, preset)` here, which returns
the same `ConfigDict` that `--config=configs/<name>.py:<preset>` gives.

`configs` is the package installed beside `launch` (the checkout's folder, or the
wheel's copy in site-packages), never whatever a `configs` folder in the current
directory holds: `configs` is a common folder name, and config files import each
other as `configs.<name>` (fp4 embeds the lm config), so the package is bound to
that folder in `sys.modules` before any config loads.
"""

import difflib
import importlib
import importlib.util
import os
import sys

import ml_collections

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG_DIR = os.path.join(ROOT, "configs")


def config_names() -> list[str]:
  """Names `x` of every `configs/x.py` (experiments and benchmarks)."""
  return sorted(f[:-3] for f in os.listdir(CONFIG_DIR)
                if f.endswith(".py") and not f.startswith("_"))


def config_path(name: str) -> str:
  """The absolute path of `configs/<name>.py`.

  Raises:
    ValueError: no such config; the message names the closest one.
  """
  names = config_names()
  if name not in names:
    close = difflib.get_close_matches(name, names, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else f"; have {', '.join(names)}"
    raise ValueError(f"No config file {os.path.join(CONFIG_DIR, name + '.py')} for {name!r}{hint}")
  return os.path.join(CONFIG_DIR, name + ".py")


def bind_configs_package() -> None:
  """Makes `import configs` mean `CONFIG_DIR`, whatever `sys.path` holds.

  Raises:
    ImportError: another `configs` package was imported first in this process.
  """
  module = sys.modules.get("configs")
  if module is not None:
    where = [os.path.abspath(p) for p in getattr(module, "__path__", [])]
    if where != [CONFIG_DIR]:
      raise ImportError(f"`configs` is already imported from {where or module}, not jaxlab's "
                        f"{CONFIG_DIR}: another package of that name was imported first")
    return
  spec = importlib.util.spec_from_file_location(
      "configs", os.path.join(CONFIG_DIR, "__init__.py"), submodule_search_locations=[CONFIG_DIR])
  module = importlib.util.module_from_spec(spec)
  sys.modules["configs"] = module
  spec.loader.exec_module(module)


def load_config(name: str, arg: str | None = None) -> ml_collections.ConfigDict:
  """`configs/<name>.py`'s `get_config(arg)`, the same config `--config` would load."""
  config_path(name)  # a clear error for an unknown name
  bind_configs_package()
  return importlib.import_module(f"configs.{name}").get_config(arg)


def resolve_config_arg(value: str) -> str:
  """`--config`'s value with its file part made a path that exists.

  `<name>:<preset>` names the config file installed beside `launch`; so do
  `configs/<name>.py:<preset>` (the repository-relative form of the README) and
  `<name>.py:<preset>` where no such file exists, so the same command line works
  from any directory. Any other path that exists is kept as it is.

  Args:
    value: `path[:preset]`.

  Returns:
    `path[:preset]` with an existing path.

  Raises:
    ValueError: the file does not exist and names no config; the message names the
      closest config.

  Example:
    >>> resolve_config_arg("lm:smoke") == config_path("lm") + ":smoke"
    True
  """
  path, colon, arg = value.partition(":")
  bare = os.sep not in path and not path.endswith(".py")  # a name: always jaxlab's config
  if os.path.isfile(path) and not bare:
    return value
  name = os.path.basename(path)
  name = name[:-3] if name.endswith(".py") else name
  parent = os.path.dirname(os.path.normpath(path))
  if parent not in ("", "configs") or not name:
    raise ValueError(f"No config file {path!r} (from {os.getcwd()}); name one of jaxlab's as "
                     "configs/<name>.py or <name>, e.g. configs/lm.py:smoke")
  return config_path(name) + colon + arg


def field_paths(config: ml_collections.ConfigDict, prefix: str = "") -> list[str]:
  """Every dotted field path of `config`, sections and leaves (e.g. 'train', 'train.num_steps')."""
  paths = []
  for key, value in config.items():
    paths.append(prefix + key)
    if isinstance(value, ml_collections.ConfigDict):
      paths += field_paths(value, prefix + key + ".")
  return paths


def missing_field(config: ml_collections.ConfigDict, path: str) -> str | None:
  """Why the dotted `path` names no field of `config` (None when it does).

  The message names the path and the closest field the config has, e.g.
  "no field 'train.num_stepz'; did you mean 'train.num_steps'?".

  Example:
    >>> config = ml_collections.ConfigDict(dict(train=dict(num_steps=3)))
    >>> missing_field(config, "train.num_stepz")
    "no field 'train.num_stepz'; did you mean 'train.num_steps'?"
    >>> missing_field(config, "train.num_steps") is None
    True
  """
  node = config
  parts = path.split(".")
  for i, part in enumerate(parts):
    if not isinstance(node, ml_collections.ConfigDict):
      kind = type(node).__name__
      return (f"no field '{path}' ('{'.'.join(parts[:i])}' holds a{'n' * (kind[0] in 'aeiou')} "
              f"{kind}, not a section)")
    if part not in node:
      break
    node = node[part]
  else:
    return None
  paths = field_paths(config)
  close = difflib.get_close_matches(path, paths, n=1, cutoff=0.6)
  if not close:  # e.g. the right name under the wrong section, or no section at all
    leaf = parts[-1]
    by_leaf = {p.rsplit(".", 1)[-1]: p for p in reversed(paths)}
    names = difflib.get_close_matches(leaf, list(by_leaf), n=1, cutoff=0.75)
    close = [by_leaf[names[0]]] if names else []
  hint = f"; did you mean '{close[0]}'?" if close else ""
  return f"no field '{path}'{hint}"
