"""Orbax checkpoints of a `TrainState`: save every N steps, resume on start.

Resume precedence: the workdir's newest *intact* checkpoint, else the freshly
initialised state the caller passes in. A checkpoint that cannot be restored
(torn by a kill, an empty `_METADATA`, missing array files) is moved out of
the way to `workdir/checkpoints.corrupt/<step>` with a warning and the next
older one is tried, so one bad directory never blocks a resume and that step
can be saved again. A readable checkpoint of a different tree or shapes is
another config's, not corruption: `CheckpointMismatchError`, nothing moved.
Restores always use an abstract target built from the state, so NamedTuple
optimizer states and integer leaves come back with their own types and dtypes
(not as dicts).

A failed save (unwritable or missing directory, full disk) raises
`CheckpointSaveError` promptly. Orbax saves asynchronously, so the error of a
save at step s may surface at the next save or at `wait()`; the message names
the directory and the underlying error. Directories are created in the
calling thread (not in orbax's background threads), because a failure there
used to leave threads waiting for a signal that never came and the process
hung at exit for the 300 s orbax barrier timeout.
"""

import json
import os
import warnings
from typing import Any

import jax
import orbax.checkpoint as ocp


class CheckpointSaveError(RuntimeError):
  """A checkpoint could not be written; the run must stop (its state is not saved)."""


class CheckpointMismatchError(ValueError):
  """An intact checkpoint whose tree or shapes differ from the run's state (another config)."""


# Orbax's messages for a readable checkpoint of another state (orbax 0.12.x;
# other trees are also recognised from the stored _METADATA). Should they
# change, such a checkpoint is set aside as unreadable (moved, never deleted).
_MISMATCH_MARKERS = ("tree structures do not match", "Structure mismatch",
                     "not compatible with the stored shape")


class Checkpointer:
  """A thin owner of an `ocp.CheckpointManager` in `workdir/checkpoints`.

  Example:
    >>> with Checkpointer(workdir, every=100) as ckpt:       # doctest: +SKIP
    ...   state = ckpt.restore_or(init_state)
    ...   ...; ckpt.save(state)
  """

  def __init__(self, workdir: str, *, every: int, keep: int = 2):
    if every < 1 or keep < 1:
      raise ValueError(f"every and keep must be >= 1, got {every}, {keep}")
    self.directory = os.path.abspath(os.path.join(workdir, "checkpoints"))
    self.corrupt_directory = self.directory + ".corrupt"
    if os.path.exists(self.directory) and not os.path.isdir(self.directory):
      raise CheckpointSaveError(f"cannot save checkpoints: {self.directory} exists and is not a "
                                "directory")
    options = ocp.CheckpointManagerOptions(
        save_decision_policy=ocp.checkpoint_managers.FixedIntervalPolicy(every),
        preservation_policy=ocp.checkpoint_managers.LatestN(keep),
        create=True,
        async_options=ocp.AsyncOptions(create_directories_asynchronously=False))
    self._manager = ocp.CheckpointManager(self.directory, options=options)

  def latest_step(self) -> int | None:
    return self._manager.latest_step()

  def restore_or(self, state: Any) -> Any:
    """The newest intact checkpoint restored into `state`'s structure, else `state`.

    Unreadable checkpoints are moved to `checkpoints.corrupt/` with a
    `RuntimeWarning` each; when none is readable, the run starts from `state`
    (step 0) with one more warning.

    Raises:
      CheckpointMismatchError: a readable checkpoint holds another tree
        structure or other shapes (a different model or optimizer): that is a
        config error, not corruption, so nothing is set aside.
    """
    steps = sorted(self._manager.all_steps(), reverse=True)
    if not steps:
      return state
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, state)
    for step in steps:
      try:
        return self._manager.restore(step, args=ocp.args.StandardRestore(abstract))
      except Exception as e:  # noqa: BLE001  any unreadable checkpoint is skipped, not fatal
        mismatch = self._tree_mismatch(step, abstract) or (
            _first_line(e) if any(m in str(e) for m in _MISMATCH_MARKERS) else None)
        if mismatch:
          raise CheckpointMismatchError(
              f"checkpoint {self.directory}/{step} is intact but holds a different state "
              f"structure or shapes than this run ({mismatch}); it belongs to another "
              "config: use another workdir, or delete it to start over") from e
        moved = self._set_aside(step)
        warnings.warn(f"checkpoint {self.directory}/{step} cannot be restored "
                      f"({type(e).__name__}: {_first_line(e)}); moved to {moved}, "
                      "trying the next older one", RuntimeWarning, stacklevel=2)
    warnings.warn(f"no intact checkpoint in {self.directory}; starting from step 0",
                  RuntimeWarning, stacklevel=2)
    return state

  def _tree_mismatch(self, step: int, abstract: Any) -> str | None:
    """How the tree stored at `step` differs from `abstract`; None if equal or unreadable."""
    path = os.path.join(self.directory, str(step), "default", "_METADATA")
    try:
      with open(path) as f:
        tree = json.load(f)["tree_metadata"]
      stored = {tuple(str(k["key"]) for k in v["key_metadata"]) for v in tree.values()
                if not v["value_metadata"].get("skip_deserialize")}  # skip empty nodes
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
      return None  # an unreadable tree is corruption, not another config
    wanted = set(ocp.tree.to_flat_dict(abstract))
    if stored == wanted:
      return None
    return (f"paths only in this run: {sorted(wanted - stored)[:3]}, only in the checkpoint: "
            f"{sorted(stored - wanted)[:3]}")

  def _set_aside(self, step: int) -> str:
    """Moves step `step` out of orbax's view (kept for inspection, never deleted)."""
    os.makedirs(self.corrupt_directory, exist_ok=True)
    dest, n = os.path.join(self.corrupt_directory, str(step)), 1
    while os.path.exists(dest):
      dest, n = os.path.join(self.corrupt_directory, f"{step}.{n}"), n + 1
    if jax.process_index() == 0:
      os.replace(os.path.join(self.directory, str(step)), dest)
    self._manager.reload()
    return dest

  def save(self, state: Any, *, force: bool = False) -> bool:
    """Saves at `state.step` when the interval policy says so (or `force`).

    Raises:
      CheckpointSaveError: this save, or an earlier asynchronous one, failed.
    """
    step = int(jax.device_get(state.step))
    if step in self._manager.all_steps():
      return False
    try:
      return self._manager.save(step, args=ocp.args.StandardSave(state), force=force)
    except Exception as e:
      raise CheckpointSaveError(f"saving checkpoint step {step} to {self.directory} failed: "
                                f"{type(e).__name__}: {_first_line(e)}") from e

  def wait(self) -> None:
    """Blocks until pending saves are written; raises `CheckpointSaveError` if one failed."""
    try:
      self._manager.wait_until_finished()
    except Exception as e:
      raise CheckpointSaveError(f"a checkpoint save to {self.directory} failed: "
                                f"{type(e).__name__}: {_first_line(e)}") from e

  def close(self) -> None:
    self._manager.close()

  def __enter__(self) -> "Checkpointer":
    return self

  def __exit__(self, exc_type, *exc) -> None:
    if exc_type is None:
      self.close()
      return
    # Already failing: a second error from closing must not replace the first.
    try:
      self.close()
    except Exception:  # noqa: BLE001, S110
      pass


def _first_line(e: BaseException) -> str:
  text = str(e).strip()
  return text.splitlines()[0] if text else ""
