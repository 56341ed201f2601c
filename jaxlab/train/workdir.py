"""A workdir belongs to one config: its fingerprint is stored, and a different config is refused.

A run resumes whatever it finds in its workdir (checkpoints, arm caches,
results.json). Without a record of the config that produced them, rerunning
a finished workdir with another config would return the old results under
the new config's name. `check_or_write_fingerprint` closes that hole: the
first run writes `config.json` (for people) and `fingerprint.json` (the
SHA-256 of the canonical JSON config, and that config); a later run with a
different fingerprint raises `WorkdirConfigError` naming the fields that
differ, unless `overwrite=True`, which deletes the old run's files first.

Fields that cannot change any result are left out of the fingerprint
(`NON_RESULT_FIELDS`): `train.log_every` (how many rows metrics.jsonl gets)
and `train.checkpoint_every` (when state is saved; a resumed run is bitwise
equal to an uninterrupted one). Everything else counts, including `mesh.*`
(a different device layout can change float reduction order) and `preset`.

`check_config` validates every value of the config (`jaxlab.config_checks`:
finite numbers, declared ranges such as `train.num_steps` >= 1) before any work
starts, so a bad value is a `ValueError` naming the config field, not an error
deep inside optax or a NaN that runs to plausible-looking results.
"""

import hashlib
import json
import os
import shutil
import warnings
from collections.abc import Mapping
from typing import Any

import jax
from jax.experimental import multihost_utils

from jaxlab import config_checks

NON_RESULT_FIELDS: tuple[str, ...] = ("train.log_every", "train.checkpoint_every")
CONFIG_FILE, FINGERPRINT_FILE = "config.json", "fingerprint.json"
# Files whose presence means "a run already wrote here".
_RUN_ARTIFACTS = ("checkpoints", "results.json", "metrics.jsonl", "arms")


class WorkdirConfigError(ValueError):
  """The workdir holds a run of a different config (or of an unrecorded one)."""


def _plain(config: Any) -> dict:
  if hasattr(config, "to_json_best_effort"):  # ml_collections.ConfigDict
    try:
      return json.loads(config.to_json_best_effort(sort_keys=True))
    except ArithmeticError as e:  # a field computed from others, e.g. 1 / (1 - x) at x = 1
      raise ValueError(f"a config field computed from other fields cannot be evaluated ({e}); "
                       "check the values it is computed from") from e
  if isinstance(config, Mapping):
    return json.loads(json.dumps(config, sort_keys=True, default=str))
  raise TypeError(f"config must be a ConfigDict or a mapping, got {type(config).__name__}")


def _flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
  if isinstance(tree, dict) and tree:
    out = {}
    for k, v in tree.items():
      out.update(_flatten(v, f"{prefix}{k}."))
    return out
  return {prefix[:-1]: tree}


def _fingerprinted(config: Any) -> dict:
  """The config as plain JSON, without `NON_RESULT_FIELDS`."""
  plain = _plain(config)
  for dotted in NON_RESULT_FIELDS:
    *parents, leaf = dotted.split(".")
    node = plain
    for p in parents:
      node = node.get(p) if isinstance(node, dict) else None
    if isinstance(node, dict):
      node.pop(leaf, None)
  return plain


def config_fingerprint(config: Any) -> str:
  """SHA-256 (hex) of the canonical JSON of `config` without `NON_RESULT_FIELDS`.

  Args:
    config: an `ml_collections.ConfigDict` or a JSON-like mapping.

  Returns:
    64 hex characters; equal configs (up to key order and the excluded
    fields) give equal fingerprints.

  Example:
    >>> a = config_fingerprint({"train": {"num_steps": 10, "log_every": 1}})
    >>> a == config_fingerprint({"train": {"num_steps": 10, "log_every": 5}})
    True
    >>> a == config_fingerprint({"train": {"num_steps": 11, "log_every": 1}})
    False
  """
  text = json.dumps(_fingerprinted(config), sort_keys=True, separators=(",", ":"))
  return hashlib.sha256(text.encode()).hexdigest()


def _describe_diff(old: dict, new: dict, limit: int = 8) -> str:
  a, b = _flatten(old), _flatten(new)
  lines = []
  for key in sorted(set(a) | set(b)):
    if key not in b:
      lines.append(f"{key}: {a[key]!r} -> (absent)")
    elif key not in a:
      lines.append(f"{key}: (absent) -> {b[key]!r}")
    elif a[key] != b[key]:
      lines.append(f"{key}: {a[key]!r} -> {b[key]!r}")
  more = f"\n  ... and {len(lines) - limit} more" if len(lines) > limit else ""
  return "\n".join("  " + line for line in lines[:limit]) + more


class _DamagedRecord(ValueError):
  """The workdir's record of its config (fingerprint.json / config.json) cannot be read."""


def _read_record(path: str, key: str | None) -> dict:
  """The JSON object in `path` (its `key` entry when given); a damaged file names itself."""
  try:
    with open(path) as f:
      record = json.load(f)
    if key is not None:
      record = record[key]
    if not isinstance(record, dict):
      raise TypeError(f"expected a JSON object, got {type(record).__name__}")
  except (OSError, ValueError, KeyError, TypeError) as e:  # JSONDecodeError is a ValueError
    why = f"no {e} entry" if isinstance(e, KeyError) else str(e)
    raise _DamagedRecord(f"{path} is damaged ({type(e).__name__}: {why})") from e
  return record


def _stored(workdir: str) -> dict | None:
  """The fingerprinted config of the run recorded in `workdir`, else None.

  Raises:
    _DamagedRecord: the record exists but cannot be read (e.g. a truncated file).
  """
  path = os.path.join(workdir, FINGERPRINT_FILE)
  if os.path.exists(path):
    return _read_record(path, "config")
  legacy = os.path.join(workdir, CONFIG_FILE)  # workdirs from before fingerprints
  if os.path.exists(legacy):
    return _fingerprinted(_read_record(legacy, None))
  return None


def check_workdir_path(workdir: str) -> None:
  """Refuses a `workdir` that cannot be a run's directory: empty, or an existing non-directory.

  Raises:
    ValueError: naming the workdir and what is wrong with it.

  Example:
    >>> check_workdir_path("")
    Traceback (most recent call last):
    ...
    ValueError: workdir must name a directory, got ''
  """
  if not isinstance(workdir, str) or not workdir.strip():
    raise ValueError(f"workdir must name a directory, got {workdir!r}")
  if os.path.exists(workdir) and not os.path.isdir(workdir):
    raise ValueError(f"workdir {workdir} exists and is not a directory")
  parent = os.path.dirname(os.path.abspath(workdir))
  while not os.path.exists(parent):
    parent = os.path.dirname(parent)
  if not os.path.isdir(parent):
    raise ValueError(f"workdir {workdir} cannot be created: {parent} is not a directory")


def _clear(workdir: str) -> None:
  for name in os.listdir(workdir):
    path = os.path.join(workdir, name)
    if os.path.isdir(path) and not os.path.islink(path):
      shutil.rmtree(path)
    else:
      os.remove(path)


def _write_atomic(path: str, text: str) -> None:
  tmp = f"{path}.{os.getpid()}.tmp"
  with open(tmp, "w") as f:
    f.write(text)
  os.replace(tmp, path)


def check_or_write_fingerprint(workdir: str, config: Any, *, overwrite: bool = False) -> str:
  """Refuses a workdir that holds another config's run; records `config` otherwise.

  Args:
    workdir: the run's directory (created if missing).
    config: the run's config (`ConfigDict` or mapping).
    overwrite: when the workdir holds a different (or unrecorded) run, delete
      everything in it and start over instead of raising.

  Returns:
    The fingerprint of `config` (see `config_fingerprint`).

  Raises:
    WorkdirConfigError: the stored fingerprint differs (the message lists the
      fields that differ), or the workdir holds checkpoints/results with no
      readable record of their config (a damaged fingerprint.json is named);
      and `overwrite` is False. A damaged record in a workdir that holds no
      run is written anew (with a `RuntimeWarning`).
    ValueError: `workdir` is empty, or names a file (`check_workdir_path`).

  Example:
    >>> import tempfile
    >>> w = tempfile.mkdtemp()
    >>> fp = check_or_write_fingerprint(w, {"train": {"num_steps": 10}})
    >>> check_or_write_fingerprint(w, {"train": {"num_steps": 10}}) == fp
    True
    >>> try:
    ...   check_or_write_fingerprint(w, {"train": {"num_steps": 20}})
    ... except WorkdirConfigError as e:
    ...   print(str(e).splitlines()[1])
      train.num_steps: 10 -> 20
  """
  check_workdir_path(workdir)
  new = _fingerprinted(config)
  fingerprint = config_fingerprint(config)
  problem, damaged = None, None
  try:
    old = _stored(workdir) if os.path.isdir(workdir) else None
  except _DamagedRecord as e:
    old, damaged = None, str(e)
  has_run = os.path.isdir(workdir) and any(
      os.path.exists(os.path.join(workdir, a)) for a in _RUN_ARTIFACTS)
  if old is not None and config_fingerprint(old) != fingerprint:
    problem = (f"workdir {workdir} holds a run of a different config; fields that differ "
               f"(stored -> this run):\n{_describe_diff(old, new)}")
  elif old is None and has_run:
    problem = (f"{damaged}, so the run in workdir {workdir} has no readable record of its config"
               if damaged else
               f"workdir {workdir} holds a run (checkpoints or results) with no record of its config")
  elif damaged:  # nothing was computed under the unreadable record: write it anew
    warnings.warn(f"{damaged}; workdir {workdir} holds no run, so it is recorded anew",
                  RuntimeWarning, stacklevel=2)
  if problem and not overwrite:
    raise WorkdirConfigError(
        f"{problem}\nRefusing to resume or report it as this config's run. Choose another "
        "workdir, or pass overwrite=True (--overwrite) to delete its contents and start over.")
  if jax.process_index() == 0:
    if problem:
      _clear(workdir)
    os.makedirs(workdir, exist_ok=True)
    # config.json is rewritten even when equal: NON_RESULT_FIELDS may have changed.
    _write_atomic(os.path.join(workdir, CONFIG_FILE), json.dumps(_plain(config), indent=2,
                                                                 sort_keys=True))
    _write_atomic(os.path.join(workdir, FINGERPRINT_FILE), json.dumps(
        {"sha256": fingerprint, "excluded_fields": list(NON_RESULT_FIELDS), "config": new},
        indent=2, sort_keys=True))
  if jax.process_count() > 1:  # nobody restores before process 0 has cleared the old run
    multihost_utils.sync_global_devices("jaxlab_check_or_write_fingerprint")
  return fingerprint


def check_config(config: Any) -> None:
  """Validates every value of `config` before any work, naming the field in each error.

  Every float is finite, and every field in `jaxlab.config_checks.RANGES` lies
  in its range: among them the shared vocabulary (`train.num_steps`,
  `train.batch_size`, `train.checkpoint_every`, `train.log_every` integers >= 1;
  `train.eval_every` and seeds integers >= 0; learning rates > 0).

  Raises:
    ValueError: one line naming the first bad field.

  Example:
    >>> check_config({"train": {"num_steps": 0}})
    Traceback (most recent call last):
    ...
    ValueError: config.train.num_steps must be an integer >= 1, got 0
  """
  config_checks.check_config(config)
