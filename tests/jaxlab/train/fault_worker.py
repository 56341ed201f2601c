"""A tiny `train_loop` run that the fault tests start, kill and break in a subprocess.

  python tests/jaxlab/train/fault_worker.py WORKDIR OUT.npz [--hang-at-save=S]
      [--fail-save=mkdir|write] [--nan-at=K] [--num-steps=N]

Trains a 2-layer MLP regression with Adam for NUM_STEPS steps (or N),
checkpointing every CKPT_EVERY, and writes the final params to OUT.npz. The
hidden layer is HIDDEN wide so that each weight matrix's checkpoint data lands
in orbax's array data files (small arrays are stored inline in its
CRC-checked index). Fault injection:
  --hang-at-save=S  when orbax writes the files of checkpoint S, print
                    "SAVING S" and block, so the parent can SIGKILL mid-save.
  --fail-save=...   every checkpoint directory creation (mkdir) or file
                    write (write) fails with ENOSPC, as on a full disk.
  --nan-at=K        the batch of step K (1-based) is NaN, so the loss diverges.
`flip_array_data` and `flip_file_bytes` damage a saved checkpoint's array data.
"""

import argparse
import errno
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
import tensorstore as ts
from orbax.checkpoint._src.path import async_path

from jaxlab import train

NUM_STEPS, CKPT_EVERY, HIDDEN = 12, 3, 1024


def loss_fn(params, batch, rng):
  del rng
  x, y = batch
  h = jnp.tanh(x @ params["w1"])
  return jnp.mean((h @ params["w2"] - y) ** 2), {}


def batches(step: int, nan_at: int = 0):
  rng = np.random.default_rng(step)
  x = rng.normal(size=(16, 4)).astype(np.float32)
  y = np.sin(x.sum(-1, keepdims=True)).astype(np.float32)
  if step + 1 == nan_at:
    x = np.full_like(x, np.nan)
  return x, y


def init_params() -> dict:
  key1, key2 = jax.random.split(jax.random.key(0))
  return {"w1": jax.random.normal(key1, (4, HIDDEN)),
          "w2": jax.random.normal(key2, (HIDDEN, 1))}


def run(workdir: str, *, nan_at: int = 0, num_steps: int = NUM_STEPS) -> train.TrainState:
  params = init_params()
  tx = optax.adam(1e-2)
  state = train.create_train_state(params, tx, seed=0)
  step = train.make_train_step(loss_fn, tx)
  return train.train_loop(state, step, lambda i: batches(i, nan_at), num_steps=num_steps,
                          workdir=workdir, checkpoint_every=CKPT_EVERY, log_every=1)


def flip_array_data(workdir, step, offset=0, nbytes=8, name="params.w1"):
  """Inverts `nbytes` bytes of array `name`'s stored data in checkpoint `step`, `offset`
  bytes past the middle of the array, as a bit flip in its data file would.

  The bytes are flipped in the decoded array (rewritten through tensorstore into the
  same OCDBT store): the files' own layers (zstd-compressed chunks, CRC-checked index)
  then stay valid, as for the flips that used to restore silently. A flip in the
  compressed file bytes instead may or may not break decompression, depending on where
  it lands (`flip_file_bytes`).
  """
  path = os.path.join(workdir, "checkpoints", str(step), "default")
  arr = ts.open({"driver": "zarr", "kvstore": {"driver": "ocdbt", "base": f"file://{path}/",
                                               "path": f"{name}/"}}).result()
  data = bytearray(np.ascontiguousarray(arr.read().result()).tobytes())
  at = len(data) // 2 + offset
  data[at:at + nbytes] = bytes(b ^ 0xFF for b in data[at:at + nbytes])
  arr.write(np.frombuffer(bytes(data), arr.dtype.numpy_dtype).reshape(arr.shape)).result()


def flip_file_bytes(workdir, step, offset=0, nbytes=8):
  """Inverts `nbytes` bytes mid-way (+ `offset`) through the largest array data file of
  checkpoint `step` (under a `d/` directory of its OCDBT store). Returns that file."""
  files = [os.path.join(root, name)
           for root, _, names in os.walk(os.path.join(workdir, "checkpoints", str(step)))
           if os.path.basename(root) == "d" for name in names]
  path = max(files, key=os.path.getsize)
  with open(path, "r+b") as f:
    data = bytearray(f.read())
    at = len(data) // 2 + offset
    data[at:at + nbytes] = bytes(b ^ 0xFF for b in data[at:at + nbytes])
    f.seek(0)
    f.write(data)
  return path


def _inject(hang_at_save: int, fail_save: str) -> None:
  write_bytes, write_text, mkdir = async_path.write_bytes, async_path.write_text, async_path.mkdir

  def hit(path) -> bool:
    return f"{os.sep}{hang_at_save}.orbax-checkpoint-tmp" in str(path)

  async def hanging_bytes(path, data):
    if hit(path):
      print(f"SAVING {hang_at_save}", flush=True)
      time.sleep(600)
    return await write_bytes(path, data)

  async def hanging_text(path, text):
    if hit(path):
      print(f"SAVING {hang_at_save}", flush=True)
      time.sleep(600)
    return await write_text(path, text)

  async def full_disk_write(path, data):
    raise OSError(errno.ENOSPC, "No space left on device (injected)", str(path))

  async def full_disk_mkdir(path, *args, **kwargs):
    if "orbax-checkpoint-tmp" in str(path):
      raise OSError(errno.ENOSPC, "No space left on device (injected)", str(path))
    return await mkdir(path, *args, **kwargs)

  if hang_at_save:
    async_path.write_bytes, async_path.write_text = hanging_bytes, hanging_text
  if fail_save == "write":
    async_path.write_bytes = async_path.write_text = full_disk_write
  elif fail_save == "mkdir":
    async_path.mkdir = full_disk_mkdir


def main() -> None:
  parser = argparse.ArgumentParser()
  parser.add_argument("workdir")
  parser.add_argument("out")
  parser.add_argument("--hang-at-save", type=int, default=0)
  parser.add_argument("--fail-save", choices=("mkdir", "write"), default=None)
  parser.add_argument("--nan-at", type=int, default=0)
  parser.add_argument("--num-steps", type=int, default=NUM_STEPS)
  args = parser.parse_args()
  _inject(args.hang_at_save, args.fail_save)
  state = run(args.workdir, nan_at=args.nan_at, num_steps=args.num_steps)
  np.savez(args.out, **{k: np.asarray(v) for k, v in state.params.items()})
  print("DONE", int(state.step), flush=True)


if __name__ == "__main__":
  sys.exit(main())
