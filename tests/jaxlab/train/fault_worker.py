"""A tiny `train_loop` run that the fault tests start, kill and break in a subprocess.

  python tests/jaxlab/train/fault_worker.py WORKDIR OUT.npz [--hang-at-save=S]
      [--fail-save=mkdir|write] [--nan-at=K]

Trains a 2-layer MLP regression with Adam for NUM_STEPS steps, checkpointing
every CKPT_EVERY, and writes the final params to OUT.npz. Fault injection:
  --hang-at-save=S  when orbax writes the files of checkpoint S, print
                    "SAVING S" and block, so the parent can SIGKILL mid-save.
  --fail-save=...   every checkpoint directory creation (mkdir) or file
                    write (write) fails with ENOSPC, as on a full disk.
  --nan-at=K        the batch of step K (1-based) is NaN, so the loss diverges.
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
from orbax.checkpoint._src.path import async_path

from jaxlab import train

NUM_STEPS, CKPT_EVERY = 12, 3


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


def run(workdir: str, *, nan_at: int = 0, num_steps: int = NUM_STEPS) -> train.TrainState:
  key1, key2 = jax.random.split(jax.random.key(0))
  params = {"w1": jax.random.normal(key1, (4, 8)), "w2": jax.random.normal(key2, (8, 1))}
  tx = optax.adam(1e-2)
  state = train.create_train_state(params, tx, seed=0)
  step = train.make_train_step(loss_fn, tx)
  return train.train_loop(state, step, lambda i: batches(i, nan_at), num_steps=num_steps,
                          workdir=workdir, checkpoint_every=CKPT_EVERY, log_every=1)


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
  args = parser.parse_args()
  _inject(args.hang_at_save, args.fail_save)
  state = run(args.workdir, nan_at=args.nan_at)
  np.savez(args.out, **{k: np.asarray(v) for k, v in state.params.items()})
  print("DONE", int(state.step), flush=True)


if __name__ == "__main__":
  sys.exit(main())
