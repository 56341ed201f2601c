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

Integrity: orbax checks its own index (b-tree nodes carry CRCs) but not the
array data files, so a bit flip there used to be restored as if intact. Each
save therefore records, in the step's orbax custom metadata (written and
committed atomically with the checkpoint), a 64-bit checksum of every array
(`array_checksums`, computed on device, so sharded and multi-process states need
no gather) and a digest of the tree's paths, shapes and dtypes. A restore
recomputes them on the restored state; any difference (or a record that cannot
be read) sets the checkpoint aside as corrupt, like a truncated one. A
checkpoint written before these records existed is restored unverified, with a
warning.

A failed save (unwritable or missing directory, full disk) raises
`CheckpointSaveError` promptly. Orbax saves asynchronously, so the error of a
save at step s may surface at the next save or at `wait()`; the message names
the directory and the underlying error. Directories are created in the
calling thread (not in orbax's background threads), because a failure there
used to leave threads waiting for a signal that never came and the process
hung at exit for the 300 s orbax barrier timeout.
"""

import hashlib
import json
import os
import warnings
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from jaxtyping import UInt32


class CheckpointSaveError(RuntimeError):
  """A checkpoint could not be written; the run must stop (its state is not saved)."""


class CheckpointMismatchError(ValueError):
  """An intact checkpoint whose tree or shapes differ from the run's state (another config)."""


# Orbax's messages for a readable checkpoint of another state (orbax 0.12.x;
# other trees are also recognised from the stored _METADATA). Should they
# change, such a checkpoint is set aside as unreadable (moved, never deleted).
_MISMATCH_MARKERS = ("tree structures do not match", "Structure mismatch",
                     "not compatible with the stored shape")
# The key of the integrity record in a step's orbax custom metadata.
_RECORD_KEY = "jaxlab_integrity"
_RECORD_VERSION = 1


def _fmix32(h: jax.Array) -> jax.Array:
  """MurmurHash3's finaliser: a bijection of uint32 that mixes every input bit."""
  h = h ^ (h >> 16)
  h = h * jnp.uint32(0x85EBCA6B)
  h = h ^ (h >> 13)
  h = h * jnp.uint32(0xC2B2AE35)
  return h ^ (h >> 16)


def _words(x: jax.Array) -> jax.Array:
  """The raw bits of `x` as a flat uint32 vector (narrow dtypes widened, wide ones split)."""
  if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
    x = jax.random.key_data(x)
  if x.dtype == jnp.bool_:
    x = x.astype(jnp.uint8)
  size = x.dtype.itemsize
  unsigned = {1: jnp.uint8, 2: jnp.uint16, 4: jnp.uint32, 8: jnp.uint32}[size]
  return jax.lax.bitcast_convert_type(x, unsigned).astype(jnp.uint32).reshape(-1)


@jax.jit
def _checksums(leaves: list) -> jax.Array:
  rows = []
  for x in leaves:
    w = _words(x)
    i = jnp.arange(w.size, dtype=jnp.uint32)
    # Two position-keyed lanes: each term is a bijection of its word, so changing any
    # one word changes both sums (modular, hence independent of order and sharding).
    rows.append(jnp.stack([jnp.sum(_fmix32(w ^ _fmix32(i))),
                           jnp.sum(_fmix32(w + i * jnp.uint32(0x9E3779B9) + jnp.uint32(1)))]))
  return jnp.stack(rows) if rows else jnp.zeros((0, 2), jnp.uint32)


def array_checksums(tree: Any) -> UInt32[np.ndarray, "n 2"]:
  """A 64-bit checksum (two uint32 lanes) of each array leaf's bits, in leaf order.

  Computed on device under `jit`: any single changed word changes both lanes, and
  the value does not depend on how the arrays are sharded (modular sums).

  Args:
    tree: a pytree of arrays (any dtype, typed PRNG keys included).

  Returns:
    [num_leaves, 2] uint32 on the host.

  Example:
    >>> import jax.numpy as jnp
    >>> a = array_checksums({"w": jnp.ones(3)})
    >>> b = array_checksums({"w": jnp.ones(3).at[1].set(1.0000001)})
    >>> a.shape, bool((a != b).all())
    ((1, 2), True)
  """
  return np.asarray(jax.device_get(_checksums(jax.tree.leaves(tree))))


def tree_digest(tree: Any) -> str:
  """sha256 of the tree's key paths, shapes and dtypes (what orbax's metadata describes).

  Values do not enter it (`array_checksums` covers them): a restore compares it with the
  saved record to tell a damaged record of this very tree from one of another tree.

  Args:
    tree: a pytree of arrays or `jax.ShapeDtypeStruct` leaves.

  Returns:
    64 hex digits.

  Example:
    >>> import jax.numpy as jnp
    >>> a = tree_digest({"w": jnp.ones(3)})
    >>> a == tree_digest({"w": jnp.zeros(3)}), a == tree_digest({"w": jnp.ones(4)})
    (True, False)
  """
  spec = [(jax.tree_util.keystr(path), list(s.shape), str(s.dtype))
          for path, s in jax.tree_util.tree_flatten_with_path(
              jax.tree.map(ocp.utils.to_shape_dtype_struct, tree))[0]]
  return hashlib.sha256(json.dumps(spec).encode()).hexdigest()


def _record(tree: Any) -> dict:
  paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(tree)[0]]
  sums = array_checksums(tree)
  return {"version": _RECORD_VERSION, "tree": tree_digest(tree),
          "arrays": {p: f"{int(a):08x}{int(b):08x}" for p, (a, b) in zip(paths, sums,
                                                                          strict=True)}}


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
      record = self._read_record(step)
      try:
        restored = self._manager.restore(step, args=ocp.args.StandardRestore(abstract))
      except Exception as e:  # noqa: BLE001  any unreadable checkpoint is skipped, not fatal
        # Saved from this very tree (its record says so): a mismatch is then a damaged
        # _METADATA, not another config.
        ours = isinstance(record, dict) and record.get("tree") == tree_digest(abstract)
        mismatch = None if ours else self._tree_mismatch(step, abstract) or (
            _first_line(e) if any(m in str(e) for m in _MISMATCH_MARKERS) else None)
        if mismatch:
          raise CheckpointMismatchError(
              f"checkpoint {self.directory}/{step} is intact but holds a different state "
              f"structure or shapes than this run ({mismatch}); it belongs to another "
              "config: use another workdir, or delete it to start over") from e
        problem = f"{type(e).__name__}: {_first_line(e)}"
      else:
        problem = self._verify(step, record, restored)
        if problem is None:
          return restored
      moved = self._set_aside(step)
      warnings.warn(f"checkpoint {self.directory}/{step} cannot be restored ({problem}); "
                    f"moved to {moved}, trying the next older one", RuntimeWarning,
                    stacklevel=2)
    warnings.warn(f"no intact checkpoint in {self.directory}; starting from step 0",
                  RuntimeWarning, stacklevel=2)
    return state

  def _read_record(self, step: int) -> dict | str | None:
    """The integrity record of `step`: a dict, None for a checkpoint saved without one,
    or a string saying why the step's checkpoint metadata cannot be read."""
    path = os.path.join(self.directory, str(step), "_CHECKPOINT_METADATA")
    try:
      with open(path) as f:
        custom = json.load(f).get("custom_metadata")
    except FileNotFoundError:
      return None
    except (OSError, ValueError, AttributeError) as e:
      return f"its checkpoint metadata is unreadable ({type(e).__name__}: {_first_line(e)})"
    if not custom:
      return None
    record = custom.get(_RECORD_KEY) if isinstance(custom, dict) else None
    if not (isinstance(record, dict) and isinstance(record.get("arrays"), dict)
            and isinstance(record.get("tree"), str)):
      return "its integrity record is damaged"
    return record

  def _verify(self, step: int, record: dict | str | None, restored: Any) -> str | None:
    """Why `restored` differs from what step `step` saved (None: identical or unrecorded)."""
    if isinstance(record, str):
      return record
    if record is None:
      warnings.warn(f"checkpoint {self.directory}/{step} has no integrity record (saved by an "
                    "older jaxlab); restored without verification", RuntimeWarning,
                    stacklevel=3)
      return None
    if record["tree"] != tree_digest(restored):
      return "checksum mismatch: its tree metadata differs from the recorded one"
    now = _record(restored)["arrays"]
    bad = [p for p in now if record["arrays"].get(p) != now[p]]
    if bad or set(record["arrays"]) != set(now):
      shown = ", ".join(bad[:3]) + (f" and {len(bad) - 3} more" if len(bad) > 3 else "")
      return f"checksum mismatch in {shown or 'the recorded array list'}"
    return None

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
    """Saves at `state.step` when the interval policy says so (or `force`), with the
    state's integrity record (checksums of every array and of the tree metadata).

    Raises:
      CheckpointSaveError: this save, or an earlier asynchronous one, failed.
    """
    step = int(jax.device_get(state.step))
    if step in self._manager.all_steps() or not (force or self._manager.should_save(step)):
      return False
    try:
      # The record is computed from the state being saved and committed with it.
      return self._manager.save(step, args=ocp.args.StandardSave(state), force=True,
                                custom_metadata={_RECORD_KEY: _record(state)})
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
