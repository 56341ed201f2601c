"""Orbax checkpoints of a `TrainState`: save every N steps, resume on start.

Resume precedence: the workdir's own latest checkpoint, else the freshly
initialised state the caller passes in. Restores always use an abstract
target built from that state, so NamedTuple optimizer states and integer
leaves come back with their own types and dtypes (not as dicts).
"""

import os
from typing import Any

import jax
import orbax.checkpoint as ocp


class Checkpointer:
  """A thin owner of an `ocp.CheckpointManager` in `workdir/checkpoints`.

  Example:
    >>> with Checkpointer(workdir, every=100) as ckpt:
    ...   state = ckpt.restore_or(init_state)
    ...   ...; ckpt.save(state)
  """

  def __init__(self, workdir: str, *, every: int, keep: int = 2):
    if every < 1 or keep < 1:
      raise ValueError(f"every and keep must be >= 1, got {every}, {keep}")
    self.directory = os.path.abspath(os.path.join(workdir, "checkpoints"))
    options = ocp.CheckpointManagerOptions(
        save_decision_policy=ocp.checkpoint_managers.FixedIntervalPolicy(every),
        preservation_policy=ocp.checkpoint_managers.LatestN(keep),
        create=True)
    self._manager = ocp.CheckpointManager(self.directory, options=options)

  def latest_step(self) -> int | None:
    return self._manager.latest_step()

  def restore_or(self, state: Any) -> Any:
    """The latest checkpoint restored into `state`'s structure, else `state`."""
    step = self._manager.latest_step()
    if step is None:
      return state
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, state)
    return self._manager.restore(step, args=ocp.args.StandardRestore(abstract))

  def save(self, state: Any, *, force: bool = False) -> bool:
    """Saves at `state.step` when the interval policy says so (or `force`)."""
    step = int(jax.device_get(state.step))
    if step in self._manager.all_steps():
      return False
    return self._manager.save(step, args=ocp.args.StandardSave(state), force=force)

  def wait(self) -> None:
    self._manager.wait_until_finished()

  def close(self) -> None:
    self._manager.close()

  def __enter__(self) -> "Checkpointer":
    return self

  def __exit__(self, *exc) -> None:
    self.close()
