"""Writes `loss_curve_golden.npz`: 20 training-step losses of the Transformer.

The file pins the training numerics of `jaxlab.nn.Transformer` so that speed
work on the model (attention layout, RoPE tables, scan over layers, ...) is
checked against the losses of the code as it was before that work
(`test_loss_curve.py`). It was made once, with jax 0.10.2 on CPU, from the
unoptimised model of commit a0e7b71 (5-D GQA einsums over the full causal
square, `nn.Dense` projections), before the issue-18 speed work, with

  cd /work/main && .venv/bin/python tests/jaxlab/nn/make_loss_curve_golden.py

Rerunning it overwrites the golden with the *current* model's curve: do that
only on purpose, when the numerics are meant to change, and say so in review.
The setup (`golden_setup`) is shared with the test so both run the same step.
"""

import os

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxlab.nn import Transformer, TransformerConfig

GOLDEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "loss_curve_golden.npz")
NUM_STEPS = 20
# Small enough for a fast test; every feature of the model is present:
# GQA (4 query / 2 KV heads), RoPE, RMSNorm, SwiGLU, AdamW + clipping.
CONFIG = dict(d_model=64, num_layers=2, num_heads=4, num_kv_heads=2, d_ff=192, max_len=64)
BATCH, SEQ = 8, 64


def golden_batches() -> np.ndarray:
  """[NUM_STEPS, BATCH, SEQ + 1] learnable bytes: arithmetic progressions + noise."""
  rng = np.random.default_rng(0)
  start = rng.integers(0, 256, (NUM_STEPS, BATCH, 1))
  stride = rng.integers(1, 8, (NUM_STEPS, BATCH, 1))
  seq = (start + stride * np.arange(SEQ + 1)) % 256
  noise = rng.random(seq.shape) < 0.1
  seq = np.where(noise, rng.integers(0, 256, seq.shape), seq)
  return seq.astype(np.int32)


def golden_setup(**overrides):
  """(model, params, step) with `step(params, opt_state, batch) -> (params, opt_state, loss)`."""
  model = Transformer(TransformerConfig(**CONFIG, **overrides))
  params = model.init(jax.random.key(0), jnp.zeros((1, SEQ), jnp.int32))["params"]
  tx = optax.chain(optax.clip_by_global_norm(1.0),
                   optax.adamw(3e-3, b1=0.9, b2=0.95, weight_decay=0.1))

  def loss_fn(p, batch):
    logits = model.apply({"params": p}, batch[:, :-1])
    return optax.softmax_cross_entropy_with_integer_labels(logits, batch[:, 1:]).mean()

  @jax.jit
  def step(p, opt_state, batch):
    loss, grads = jax.value_and_grad(loss_fn)(p, batch)
    updates, opt_state = tx.update(grads, opt_state, p)
    return optax.apply_updates(p, updates), opt_state, loss

  return model, params, tx, step


def loss_curve(params, tx, step) -> np.ndarray:
  opt_state = tx.init(params)
  losses = []
  for batch in golden_batches():
    params, opt_state, loss = step(params, opt_state, jnp.asarray(batch))
    losses.append(float(loss))
  return np.asarray(losses, np.float64)


if __name__ == "__main__":
  _, params, tx, step = golden_setup()
  losses = loss_curve(params, tx, step)
  np.savez(GOLDEN, losses=losses, jax_version=jax.__version__)
  print(f"wrote {GOLDEN}: {np.array2string(losses, precision=5)}")
