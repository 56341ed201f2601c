"""The byte-level LM recipe: model and optimizer builders, loss, bits/byte, `train_lm`.

Every experiment that trains the tiny decoder goes through here; `pretrained`
trains the base model once into a cache directory and reloads it afterwards
(QAT, ECO and FP4 build on it). An lm config has the sections `seed`, `data`,
`model`, `train`, `optimizer`, `mesh` and `eval` (see `configs/lm.py`).
"""

import json
import math
import os
from collections.abc import Callable, Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from jax.typing import ArrayLike

from jaxlab import data
from jaxlab.nn import Transformer, TransformerConfig
from jaxlab.train import mesh as mesh_lib
from jaxlab.train.loop import train_loop
from jaxlab.train.optimizers import optimizer
from jaxlab.train.state import create_train_state, make_train_step

# The sections of a config that determine the trained base model.
LM_SECTIONS = ("seed", "data", "model", "train", "optimizer", "mesh")


def make_model(config: ml_collections.ConfigDict, **overrides: Any) -> Transformer:
  """The decoder of `config.model` (+ overrides such as `dense=` or `ffn=`)."""
  return Transformer(TransformerConfig(vocab_size=256, **config.model.to_dict(), **overrides))


def make_optimizer(config: ml_collections.ConfigDict, num_steps: int) -> optax.GradientTransformation:
  """`jaxlab.train.optimizer(config.optimizer, num_steps)`, for callers not yet ported to it."""
  return optimizer(config.optimizer, num_steps)


def next_byte_loss(model: Transformer):
  """`loss(params, batch, rng)`: mean next-byte cross-entropy (nats) of [B, T+1] windows."""
  def loss_fn(params, batch, rng):
    del rng
    logits = model.apply({"params": params}, batch[:, :-1])
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, batch[:, 1:]).mean()
    return loss, {}
  return loss_fn


def bits_per_byte(nats: Callable[[Any, Any], ArrayLike], params: Any, batches: Sequence[Any], *,
                  num_bytes: int | float | None = None) -> float | np.ndarray:
  """Held-out bits/byte of `params`: the nats `nats` gives on `batches`, per byte, in bits.

  The one bits/byte evaluator of the library. A byte-level model predicts the same
  number of bytes in every batch, and `nats(params, batch)` is a batch's mean next-byte
  cross-entropy: the result is the mean over batches / ln 2 (`num_bytes` None). A model
  over other tokens (each covering one or more bytes of text) returns each batch's total
  nats instead, and `num_bytes` is the bytes of text its batches cover: the result is
  total nats / `num_bytes` / ln 2, comparable across tokenizers.

  Args:
    nats: `nats(params, batch)` -> a scalar, or [S] for S models evaluated at once (e.g.
      vmapped over seeds); jit it once and reuse it across calls.
    params: the model's parameters (any pytree `nats` takes).
    batches: the held-out batches, in a fixed order (accumulated in float64 in that order).
    num_bytes: None for per-batch means of a byte-level model, else the total bytes.

  Returns:
    bits/byte, a float (or a float64 array [S]); NaN where the total is not finite: a
    diverged model is a missing value, never +inf.

  Raises:
    ValueError: `batches` is empty, or `num_bytes` is not > 0.

  Example:
    >>> import numpy as np
    >>> uniform = lambda params, batch: np.float32(np.log(256.0))  # mean nats of a byte
    >>> round(bits_per_byte(uniform, None, [0, 1]), 6)
    8.0
    >>> total = lambda params, batch: np.float32(2 * np.log(256.0))  # two bytes per batch
    >>> round(bits_per_byte(total, None, [0, 1, 2], num_bytes=6), 6)
    8.0
  """
  if not len(batches):
    raise ValueError("batches must hold at least one batch")
  if num_bytes is not None and not num_bytes > 0:
    raise ValueError(f"num_bytes must be > 0 (the bytes the batches cover), got {num_bytes!r}")
  total = 0.0
  for batch in batches:
    total = total + np.asarray(nats(params, batch), np.float64)
  per_byte = total / (len(batches) if num_bytes is None else num_bytes) / math.log(2)
  per_byte = np.where(np.isfinite(per_byte), per_byte, np.nan)
  return float(per_byte) if per_byte.ndim == 0 else per_byte


def eval_bits_per_byte(model: Transformer, params: Any, tokens: np.ndarray, *, batch_size: int,
                       seq_len: int, num_batches: int, seed: int) -> float:
  """Mean next-byte cross-entropy in bits over fixed, seeded windows of `tokens`.

  `bits_per_byte` on `num_batches` windows `data.lm_batch(tokens, i, ..., seed=seed)`;
  NaN for a diverged model.
  """
  loss_fn = jax.jit(next_byte_loss(model))
  batches = [data.lm_batch(tokens, i, batch_size=batch_size, seq_len=seq_len, seed=seed)
             for i in range(num_batches)]
  return bits_per_byte(lambda p, batch: loss_fn(p, batch, None)[0], params, batches)


def train_lm(config: ml_collections.ConfigDict, workdir: str, *, model: Transformer | None = None,
             tx: optax.GradientTransformation | None = None, loss_fn=None):
  """Trains (or resumes) the LM of `config` in `workdir`.

  Args:
    config: an lm config (data, model, train, optimizer, mesh; val bits/byte
      is logged every `train.eval_every` steps when that key exists).
    workdir: checkpoints and metrics.
    model: the decoder (default `make_model(config)`), e.g. with an MoE FFN.
    tx: the optimizer (default `jaxlab.train.optimizer(config.optimizer, train.num_steps)`).
    loss_fn: `loss(params, batch, rng) -> (loss, metrics)` (default
      `next_byte_loss(model)`), e.g. adding an auxiliary loss.

  Returns:
    (model, final TrainState, corpus).
  """
  corpus = data.load_corpus(max_bytes=config.data.max_bytes, val_fraction=config.data.val_fraction)
  model = model or make_model(config)
  t = config.train
  tx = tx or optimizer(config.optimizer, t.num_steps)

  mesh = mesh_lib.make_mesh({k: config.mesh[k] for k in mesh_lib.AXES})
  shards = mesh.shape["data"] * mesh.shape["fsdp"]
  if t.batch_size % shards:
    raise ValueError(f"train.batch_size={t.batch_size} must be divisible by the data*fsdp "
                     f"mesh size {shards}")
  init_tokens = jnp.zeros((1, t.seq_len), jnp.int32)
  # Partition-annotated params (e.g. MoE experts on 'expert') are stored as plain arrays.
  params = nn.meta.unbox(model.init(jax.random.key(config.seed), init_tokens)["params"])
  state = create_train_state(params, tx, seed=config.seed)
  state_sharding = mesh_lib.state_sharding(state, mesh, fsdp=config.mesh.fsdp_params)
  batch_sharding = mesh_lib.batch_sharding(mesh)
  state = jax.device_put(state, state_sharding)
  step = make_train_step(loss_fn or next_byte_loss(model), tx,
                         state_sharding=state_sharding, batch_sharding=batch_sharding)

  def batch_fn(i):
    # The global batch of step i is the same on every process (seeded by (seed, i)); each
    # process hands only its own devices' rows to JAX, so the global array equals the
    # one-process batch whatever the number of processes.
    batch = data.lm_batch(corpus.train, i, batch_size=t.batch_size, seq_len=t.seq_len,
                          seed=config.seed)
    return jax.make_array_from_callback(batch.shape, batch_sharding, lambda index: batch[index])

  def eval_fn(params):
    return {"bits_per_byte": eval_bits_per_byte(
        model, params, corpus.val, batch_size=config.eval.batch_size, seq_len=t.seq_len,
        num_batches=config.eval.num_batches, seed=config.eval.seed)}

  has_eval = t.get("eval_every") is not None
  state = train_loop(state, step, batch_fn, num_steps=t.num_steps, workdir=workdir,
                     checkpoint_every=t.checkpoint_every, log_every=t.log_every,
                     eval_fn=eval_fn if has_eval else None,
                     eval_every=t.eval_every if has_eval else 0,
                     desc=config.get("experiment", "lm"))
  return model, state, corpus


def base_lm_config(config: ml_collections.ConfigDict) -> dict:
  """The sections of `config` that determine its base LM, as a plain dict."""
  missing = [k for k in LM_SECTIONS if k not in config]
  if missing:
    raise ValueError(f"config lacks the base-LM sections {missing} (expected {LM_SECTIONS})")
  return {k: (config[k].to_dict() if isinstance(config[k], ml_collections.ConfigDict)
              else config[k]) for k in LM_SECTIONS}


def _jsonable(tree: Any) -> Any:
  return json.loads(json.dumps(tree, default=list, sort_keys=True))


def pretrained(config: ml_collections.ConfigDict, cache_dir: str):
  """The base LM of `config`, trained once into `cache_dir` and reloaded afterwards.

  Args:
    config: a config with the lm sections (`LM_SECTIONS`, plus `eval` when
      `train.eval_every` is set): the `lm` experiment's config, or an
      experiment's config that embeds one (e.g. `configs/fp4.py`).
    cache_dir: workdir of the base model. It records the base-LM sections in
      `base_lm.json`; a cache trained under different sections is refused
      rather than silently reused.

  Returns:
    (model, params, corpus).

  Example:
    >>> from launch.configs import load_config        # doctest: +SKIP
    >>> model, params, corpus = pretrained(load_config("lm", "smoke"), "runs/base_lm")  # doctest: +SKIP
  """
  key = _jsonable(base_lm_config(config))
  os.makedirs(cache_dir, exist_ok=True)
  path = os.path.join(cache_dir, "base_lm.json")
  if os.path.exists(path):
    with open(path) as f:
      stored = json.load(f)
    if stored != key:
      changed = sorted(k for k in key if stored.get(k) != key[k])
      raise ValueError(f"{cache_dir} holds a base LM trained with different {changed}; "
                       "use another cache directory")
  else:
    with open(path + ".tmp", "w") as f:
      json.dump(key, f, indent=1, sort_keys=True)
    os.replace(path + ".tmp", path)
  model, state, corpus = train_lm(config, cache_dir)
  return model, state.params, corpus
