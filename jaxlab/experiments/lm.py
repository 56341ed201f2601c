"""The reference experiment: train the tiny LM, report val bits/byte.

Every other experiment copies this pattern: build data, model, optimizer
from the config; restore from `workdir`; train with `jaxlab.train.train_loop`;
evaluate; write `results.json` with a `report` row. QAT, ECO and FP4 reuse the
model through `pretrained` (a trained base model cached in a workdir).
"""

import dataclasses
import math
import os
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from jaxlab import data, report, train
from jaxlab.nn import Transformer, TransformerConfig

OPTIMIZERS = {"adamw": optax.adamw}


def make_model(config: ml_collections.ConfigDict, **overrides: Any) -> Transformer:
  """The decoder of `config.model` (+ overrides such as `dense=` or `ffn=`)."""
  return Transformer(TransformerConfig(vocab_size=256, **config.model.to_dict(), **overrides))


def make_optimizer(config: ml_collections.ConfigDict, num_steps: int) -> optax.GradientTransformation:
  """Clipped optimizer with linear warmup and cosine decay from `config.optimizer`."""
  opt = config.optimizer
  if opt.name not in OPTIMIZERS:
    raise ValueError(f"Unknown optimizer {opt.name!r}; expected one of {sorted(OPTIMIZERS)}")
  schedule = optax.warmup_cosine_decay_schedule(
      0.0, opt.learning_rate, warmup_steps=min(opt.warmup_steps, max(num_steps - 1, 1)),
      decay_steps=max(num_steps, 1), end_value=opt.learning_rate * 0.1)
  return optax.chain(
      optax.clip_by_global_norm(opt.grad_clip),
      OPTIMIZERS[opt.name](schedule, b1=opt.b1, b2=opt.b2, weight_decay=opt.weight_decay))


def next_byte_loss(model: Transformer):
  """`loss(params, batch, rng)`: mean next-byte cross-entropy (nats) of [B, T+1] windows."""
  def loss_fn(params, batch, rng):
    del rng
    logits = model.apply({"params": params}, batch[:, :-1])
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, batch[:, 1:]).mean()
    return loss, {}
  return loss_fn


def eval_bits_per_byte(model: Transformer, params: Any, tokens: np.ndarray, *, batch_size: int,
                       seq_len: int, num_batches: int, seed: int) -> float:
  """Mean next-byte cross-entropy in bits over fixed, seeded windows of `tokens`."""
  loss_fn = jax.jit(next_byte_loss(model))
  total = 0.0
  for i in range(num_batches):
    batch = data.lm_batch(tokens, i, batch_size=batch_size, seq_len=seq_len, seed=seed)
    total += float(loss_fn(params, batch, None)[0])
  return total / num_batches / math.log(2)


def train_lm(config: ml_collections.ConfigDict, workdir: str, *, model: Transformer | None = None,
             tx: optax.GradientTransformation | None = None, loss_fn=None):
  """Trains (or resumes) the LM of `config` in `workdir`.

  Args:
    config: an `lm`-style config (data, model, train, optimizer, mesh; val
      bits/byte is logged every `train.eval_every` steps when that key exists).
    workdir: checkpoints and metrics.
    model: the decoder (default `make_model(config)`), e.g. with an MoE FFN.
    tx: the optimizer (default `make_optimizer`).
    loss_fn: `loss(params, batch, rng) -> (loss, metrics)` (default
      `next_byte_loss(model)`), e.g. adding an auxiliary loss.

  Returns:
    (model, final TrainState, corpus).
  """
  corpus = data.load_corpus(max_bytes=config.data.max_bytes, val_fraction=config.data.val_fraction)
  model = model or make_model(config)
  t = config.train
  tx = tx or make_optimizer(config, t.num_steps)

  mesh = train.make_mesh({k: config.mesh[k] for k in train.AXES})
  shards = mesh.shape["data"] * mesh.shape["fsdp"]
  if t.batch_size % shards:
    raise ValueError(f"train.batch_size={t.batch_size} must be divisible by the data*fsdp "
                     f"mesh size {shards}")
  init_tokens = jnp.zeros((1, t.seq_len), jnp.int32)
  # Partition-annotated params (e.g. MoE experts on 'expert') are stored as plain arrays.
  params = nn.meta.unbox(model.init(jax.random.key(config.seed), init_tokens)["params"])
  state = train.create_train_state(params, tx, seed=config.seed)
  state_sharding = train.state_sharding(state, mesh, fsdp=config.mesh.fsdp_params)
  batch_sharding = train.batch_sharding(mesh)
  state = jax.device_put(state, state_sharding)
  step = train.make_train_step(loss_fn or next_byte_loss(model), tx,
                               state_sharding=state_sharding, batch_sharding=batch_sharding)

  def batch_fn(i):
    batch = data.lm_batch(corpus.train, i, batch_size=t.batch_size, seq_len=t.seq_len,
                          seed=config.seed)
    return jax.device_put(batch, batch_sharding)

  def eval_fn(params):
    return {"bits_per_byte": eval_bits_per_byte(
        model, params, corpus.val, batch_size=config.eval.batch_size, seq_len=t.seq_len,
        num_batches=config.eval.num_batches, seed=config.eval.seed)}

  has_eval = t.get("eval_every") is not None
  state = train.train_loop(state, step, batch_fn, num_steps=t.num_steps, workdir=workdir,
                           checkpoint_every=t.checkpoint_every, log_every=t.log_every,
                           eval_fn=eval_fn if has_eval else None,
                           eval_every=t.eval_every if has_eval else 0, desc=config.experiment)
  return model, state, corpus


def pretrained(preset: str, cache_dir: str, **overrides: Any):
  """The `lm` experiment's trained model for `preset`, trained once into `cache_dir`.

  Args:
    preset: "smoke", "quick" or "full".
    cache_dir: workdir of the base model; a finished run there is reloaded
      without training.
    **overrides: dotted config overrides, e.g. `{"train.num_steps": 100}`.

  Returns:
    (model, params, corpus).
  """
  from jaxlab.experiments import load_config
  config = load_config("lm", preset)
  for key, value in overrides.items():
    node = config
    *parents, leaf = key.split(".")
    for p in parents:
      node = node[p]
    node[leaf] = value
  model, state, corpus = train_lm(config, cache_dir)
  return model, state.params, corpus


def run(config: ml_collections.ConfigDict, workdir: str) -> dict:
  """Trains the tiny LM and reports val bits/byte against the unigram baseline."""
  model, state, corpus = train_lm(config, workdir)
  t = config.train
  bpb = eval_bits_per_byte(model, state.params, corpus.val, batch_size=config.eval.batch_size,
                           seq_len=t.seq_len, num_batches=config.eval.num_batches,
                           seed=config.eval.seed)
  unigram = data.unigram_bits_per_byte(corpus.train, corpus.val)
  num_params = sum(x.size for x in jax.tree.leaves(state.params))
  rows = train.read_metrics(os.path.join(workdir, "metrics.jsonl"))
  curve = [(r["step"], r["loss"] / math.log(2)) for r in rows if r.get("loss") is not None]
  plots = ()
  if curve:
    def draw(ax):
      ax.plot(*zip(*curve, strict=True), label="train (bits/byte)")
      ax.axhline(unigram, color="gray", ls="--", label=f"unigram {unigram:.2f}")
      ax.axhline(bpb, color="C1", ls=":", label=f"val {bpb:.2f}")
      ax.set_xlabel("step")
      ax.set_ylabel("bits / byte")
      ax.legend()
    plots = (report.save_plot(workdir, "lm_loss.png", draw),)
  margin = unigram - bpb
  verdict = "held" if margin >= 0.5 else ("partly held" if margin > 0 else "did not hold")
  row = report.ReportRow(
      method="Tiny Llama-style byte LM (reference pipeline)",
      paper_claim="sanity check: a trained LM beats the unigram byte model on held-out stdlib files",
      baseline=f"unigram {unigram:.3f} bits/byte",
      ours=f"{bpb:.3f} bits/byte",
      verdict=verdict,
      details=(f"preset={config.preset}; {num_params:,} params, {int(state.step)} steps of "
               f"batch {t.batch_size}x{t.seq_len} bytes; {len(corpus.train_files)} train / "
               f"{len(corpus.val_files)} val files; verdict 'held' needs >= 0.5 bits/byte "
               "below unigram."),
      plots=plots)
  results = {"val_bits_per_byte": bpb, "unigram_bits_per_byte": unigram,
             "num_params": num_params, "steps": int(state.step),
             "report": dataclasses.asdict(row)}
  report.write_results(workdir, results)
  return results
