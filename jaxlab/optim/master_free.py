"""Training without master weights, measured: ECO's convex toy and its byte-LM arms.

The two studies of ECO's reproduction (the ECO paper, Sec. 4 and 5; notes in
quantization.md §2), as library code an experiment runs arm by arm:

  * `convex_toy(cfg, seed)`: least squares on a uniform grid with SGDM, exact
    gradients; per arm and learning rate, the distance of the deployed on-grid weights
    to the optimum.
  * `lm_program(config, arm, fmt, model)` and `train_arm(...)`: one arm of the tiny
    byte LM with quantized weights and AdamW, built by `jaxlab.train.optimizer`
    (`base=` ECO's AdamW, or AdamW on FP32 master weights for "master").

Arms (`ARMS`): "master" (FP32 master weights, gradients through the quantized
forward: the reference), "naive_rtn" / "naive_sr" (weights stored quantized, the
requantization residual dropped), "eco_rtn" / "eco_sr" (ECO) and "exact_ef" (exact
error feedback, SR).

Example:
  >>> ARMS
  ('master', 'naive_rtn', 'naive_sr', 'eco_rtn', 'eco_sr', 'exact_ef')
  >>> lm_quantizer("int4", block_size=32).name
  'int4'
"""

import functools
import math
from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from jaxlab import data
from jaxlab.optim.baselines import master_adamw, master_sgdm
from jaxlab.optim.eco import apply_eco, check_eco_state, eco_adamw, eco_sgdm
from jaxlab.optim.quantizers import (
  Quantizer,
  dequantize_params,
  fake_quant_params,
  quantize_params,
  static_bytes,
)
from jaxlab.train import CompileAhead, optimizer
from jaxlab.train import lm as train_lm

# Arm -> (ECO injection, stochastic rounding); "master" keeps FP32 master weights.
INJECTION = {"naive_rtn": ("none", False), "naive_sr": ("none", True), "eco_rtn": ("eco", False),
             "eco_sr": ("eco", True), "exact_ef": ("exact", True)}
ARMS = ("master", *INJECTION)

__all__ = ["ARMS", "INJECTION", "check_arms", "compile_ahead", "convex_toy", "init_weights",
           "lm_arms", "lm_program", "lm_quantizer", "train_arm"]


def check_arms(arms: Any, key: str) -> None:
  """ValueError naming `key` unless every arm is one of `ARMS`.

  Example:
    >>> check_arms(("master", "eco_sr"), "lm.arms")
  """
  unknown = [a for a in arms if a not in ARMS]
  if unknown:
    raise ValueError(f"{key} entries must be among {ARMS}, got {unknown}")


# ----------------------------------------------------------------------------- convex toy


def _toy_problem(cfg: ml_collections.ConfigDict, seed: int):
  k1, k2 = jax.random.split(jax.random.key(seed))
  a = jax.random.normal(k1, (cfg.rows, cfg.dim)) / math.sqrt(cfg.rows)
  w_star = jax.random.normal(k2, (cfg.dim, 1))
  h = cfg.curvature * (a.T @ a)
  return h, h @ w_star, w_star


def _toy_run(arm: str, cfg: ml_collections.ConfigDict):
  """A jitted fn (lr0, lr_end, h, c, w_star, key) -> distances of the deployed weights.

  Returns (final, tail mean, mid-run, last step any weight moved, tail-mean
  cosine of consecutive residuals); "tail mean" averages over the last
  `cfg.tail_fraction` of the steps, so one stochastic-rounding draw at the
  last step does not decide the comparison.
  """
  quant = Quantizer("grid", step=cfg.grid_step)
  steps = cfg.num_steps
  tail = max(1, int(round(steps * cfg.tail_fraction)))

  @jax.jit
  def run(lr0, lr_end, h, c, w_star, key):
    lr = lambda count: lr0 * (lr_end / lr0) ** (jnp.minimum(count, steps) / steps)
    w0 = {"w": jnp.zeros_like(w_star)}
    if arm == "master":
      tx = master_sgdm(lr, momentum=cfg.momentum)
      params = w0
      deploy = lambda p: quant.dequantize(quant.quantize(p["w"]))
      # ECO's reference (Sec. 5): FP32 master weights, gradients through the
      # quantized (RTN) forward; "fp32" evaluates them at the master weights.
      forward = deploy if cfg.master_forward == "quantized" else (lambda p: p["w"])
    else:
      inj, sr = INJECTION[arm]
      tx = eco_sgdm(lr, cfg.momentum, quantizer=quant, stochastic_rounding=sr, key=key,
                    injection=inj)
      params = quantize_params(w0, quant)
      deploy = forward = lambda p: p["w"].dequantize()

    def body(i, carry):
      p, s, mid, acc, last, e_prev, cos_acc = carry
      g = {"w": h @ forward(p) - c}
      u, s_new = tx.update(g, s, p)
      new = apply_eco(p, u)  # QParam leaves land on Q(W + u); floats p + u
      moved = jnp.any(deploy(new) != deploy(p))
      last = jnp.where(moved, i, last)
      dist = jnp.linalg.norm(deploy(new) - w_star)
      mid = jnp.where(i == steps // 2, dist, mid)
      in_tail = i >= steps - tail
      acc = acc + jnp.where(in_tail, dist, 0.0)
      # ECO's premise E_t ~ E_{t+1}: cosine of consecutive requantization residuals
      # e = W~ - Q(W~), W~ = W - lr (beta M + g) (a diagnostic; not for master and
      # exact-EF, whose W~ is formed differently).
      e = e_prev
      if arm not in ("master", "exact_ef"):
        w_tilde = deploy(p) - lr(s.count) * (cfg.momentum * s.mu["w"] + g["w"])
        e = (w_tilde - deploy(new)).ravel()
        cos = e @ e_prev / jnp.maximum(jnp.linalg.norm(e) * jnp.linalg.norm(e_prev), 1e-30)
        cos_acc = cos_acc + jnp.where(in_tail, cos, 0.0)
      return new, s_new, mid, acc, last, e, cos_acc

    z = jnp.float32(0.0)
    init = (params, tx.init(params), z, z, jnp.int32(-1), jnp.zeros(w_star.size), z)
    p, _, mid, acc, last, _, cos_acc = jax.lax.fori_loop(0, steps, body, init)
    return jnp.linalg.norm(deploy(p) - w_star), acc / tail, mid, last, cos_acc / tail

  return run


def convex_toy(cfg: ml_collections.ConfigDict, seed: int,
               run_arm: Callable[[str, Callable[[], Any]], Any] | None = None) -> dict:
  """The convex toy over `cfg.seeds` problems (each offset by `seed`).

  Args:
    cfg: the toy's section: dim, rows, curvature, grid_step, momentum, lrs, decay
      (lr0, lr_end: a geometric decay), num_steps, arms, seeds, tail_fraction,
      master_forward ("quantized" or "fp32").
    seed: offsets the problems' seeds.
    run_arm: `run_arm(name, fn)` -> `fn()`'s table, e.g. a cached `Study.arm`;
      default: `fn()`.

  Returns:
    {"table": {arm: {setting: entries}}, "settings", "grid_floor", "init_dist",
    "num_steps", "seeds", "master_forward"}. Entries: "dist" (the tail-mean distance
    averaged over problems; the compared metric), "dist_final", "dist_mid",
    per-problem "dist_per_seed", "last_move" (the latest step any weight moved,
    max over problems) and "residual_cos" (mean cosine of consecutive residuals over
    the tail, ECO's E_t ~ E_{t+1} premise; None for master and exact-EF).

  Raises:
    ValueError: unknown arms, tail_fraction outside (0, 1], empty or repeated
      seeds, or an unknown master_forward.

  Example::

    from configs import eco
    toy = convex_toy(eco.get_config("smoke").toy, seed=0)
    toy["table"]["eco_rtn"]["0.001"]["dist"] < toy["table"]["naive_rtn"]["0.001"]["dist"]
  """
  check_arms(cfg.arms, "toy.arms")
  if not 0.0 < cfg.tail_fraction <= 1.0:
    raise ValueError(f"toy.tail_fraction must lie in (0, 1], got {cfg.tail_fraction}")
  if cfg.master_forward not in ("quantized", "fp32"):
    raise ValueError(f"toy.master_forward must be 'quantized' or 'fp32', got {cfg.master_forward!r}")
  seeds = [seed + s for s in cfg.seeds]
  if not seeds or len(set(seeds)) != len(seeds):  # a repeated problem would count twice
    raise ValueError(f"toy.seeds must be non-empty and distinct, got {list(cfg.seeds)}")
  problems = [_toy_problem(cfg, s) for s in seeds]
  quant = Quantizer("grid", step=cfg.grid_step)
  floor = float(np.mean([jnp.linalg.norm(quant.dequantize(quant.quantize(w)) - w)
                         for _, _, w in problems]))
  settings = [(f"{lr:g}", lr, lr) for lr in cfg.lrs] + [
      (f"decay {cfg.decay[0]:g}->{cfg.decay[1]:g}", cfg.decay[0], cfg.decay[1])]

  def arm_table(arm: str) -> dict[str, Any]:
    run = _toy_run(arm, cfg)
    rows = {}
    for name, lr0, lr1 in settings:
      outs = [jax.device_get(run(jnp.float32(lr0), jnp.float32(lr1), h, c, w, jax.random.PRNGKey(s)))
              for (h, c, w), s in zip(problems, seeds, strict=True)]
      final, tail, mid, last, cos = (np.asarray(x) for x in zip(*outs, strict=True))
      rows[name] = {"dist": float(tail.mean()), "dist_final": float(final.mean()),
                    "dist_mid": float(mid.mean()),
                    "residual_cos": None if arm in ("master", "exact_ef") else float(cos.mean()),
                    "dist_per_seed": [float(x) for x in tail],
                    "last_move": int(last.max())}
    return rows

  run_arm = run_arm or (lambda name, fn: fn())
  table = {arm: run_arm(f"toy_{arm}", functools.partial(arm_table, arm)) for arm in cfg.arms}
  return {"table": table, "settings": [s[0] for s in settings], "grid_floor": floor,
          "init_dist": float(np.mean([jnp.linalg.norm(w) for _, _, w in problems])),
          "num_steps": cfg.num_steps, "seeds": seeds, "master_forward": cfg.master_forward}


# ----------------------------------------------------------------------------- tiny LM


def lm_quantizer(fmt: str, *, block_size: int = 32, granularity: str = "row") -> Quantizer:
  """The weight storage of an LM arm: "fp8_e4m3" (scaled per `granularity`) or "int4".

  Example:
    >>> lm_quantizer("fp8_e4m3").name
    'fp8_e4m3'
  """
  if fmt == "fp8_e4m3":
    return Quantizer("fp8_e4m3", granularity=granularity)
  if fmt == "int4":
    return Quantizer("int4", block_size=block_size)
  raise ValueError(f"lm.formats entries must be 'fp8_e4m3' or 'int4', got {fmt!r}")


def lm_program(config: ml_collections.ConfigDict, arm: str, fmt: str, model) -> dict[str, Any]:
  """One (arm, format)'s optimizer factory, jitted step and deployed-weights function.

  Every seed of the arm runs through the same jitted `step` (one compile per arm and
  format): a seed changes only arguments (init weights, batches, and the SR key, which
  ECO carries in its state; its update never reads the factory's `key`).

  Args:
    config: `optimizer` (the builder's keys; `base=` swaps in the arm's AdamW),
      `train.num_steps`, `lm.min_ndim` (leaves of fewer dims stay FP32),
      `lm.int4_block`, `lm.fp8_granularity`.
    arm: one of `ARMS`.
    fmt: "fp8_e4m3" or "int4".
    model: the `jaxlab.nn.Transformer`.

  Returns:
    {"make_tx": seed -> optax transform, "to_params": FP32 init -> stored params,
    "step": (params, state, batch) -> (params, state, loss), "deploy": params ->
    the FP32 weights the forward uses}.

  Example::

    program = lm_program(config, "eco_sr", "fp8_e4m3", train_lm.make_model(config))
  """
  L = config.lm
  quant = lm_quantizer(fmt, block_size=L.int4_block, granularity=L.fp8_granularity)
  if arm == "master":
    base = lambda seed: master_adamw
    to_params = lambda w0: w0
    forward = lambda p: fake_quant_params(p, quant, min_ndim=L.min_ndim)
  else:
    inj, sr = INJECTION[arm]
    base = lambda seed: functools.partial(eco_adamw, quantizer=quant, stochastic_rounding=sr,
                                          key=seed, injection=inj)
    to_params = lambda w0: quantize_params(w0, quant, min_ndim=L.min_ndim)
    forward = dequantize_params
  make_tx = lambda seed: optimizer(config.optimizer, config.train.num_steps, base=base(seed))
  tx = make_tx(0)
  loss_of = train_lm.next_byte_loss(model)

  @jax.jit
  def step(params, state, batch):
    if arm == "master":
      loss, g = jax.value_and_grad(lambda p: loss_of(forward(p), batch, None)[0])(params)
    else:
      loss, g = jax.value_and_grad(lambda w: loss_of(w, batch, None)[0])(forward(params))
    u, state = tx.update(g, state, params)
    return apply_eco(params, u), state, loss

  return {"make_tx": make_tx, "to_params": to_params, "step": step, "deploy": jax.jit(forward)}


def init_weights(model, seed: int, seq_len: int) -> Any:
  """The FP32 init weights of `model` for `seed` (unboxed `params`).

  Example:
    >>> from jaxlab.nn import Transformer, TransformerConfig
    >>> model = Transformer(TransformerConfig(d_model=16, num_layers=1, num_heads=2,
    ...                                       num_kv_heads=1, d_ff=32))
    >>> init_weights(model, 0, 8)["lm_head"]["kernel"].shape
    (16, 256)
  """
  return nn.meta.unbox(model.init(jax.random.key(seed), jnp.zeros((1, seq_len), jnp.int32))
                       ["params"])


def compile_ahead(ahead: CompileAhead, program: dict[str, Any], model,
                  config: ml_collections.ConfigDict) -> dict[str, Any]:
  """`program` with its step and deploy functions submitted to `ahead` (nothing runs).

  Example::

    with CompileAhead() as ahead:
      program = compile_ahead(ahead, lm_program(config, arm, fmt, model), model, config)
  """
  t = config.train
  w0 = jax.eval_shape(lambda: init_weights(model, 0, t.seq_len))
  params = jax.eval_shape(program["to_params"], w0)
  state = jax.eval_shape(lambda p: program["make_tx"](0).init(p), params)
  batch = jax.ShapeDtypeStruct((t.batch_size, t.seq_len + 1), jnp.int32)
  return {**program, "step": ahead.submit(program["step"], params, state, batch),
          "deploy": ahead.submit(program["deploy"], params)}


def train_arm(config: ml_collections.ConfigDict, program: dict[str, Any], model, corpus,
              val_bits_per_byte: Callable[[Any], float], seed: int = 0) -> dict:
  """Trains one arm on one seed through the whole learning-rate schedule.

  Args:
    config: `train` (num_steps, batch_size, seq_len).
    program: `lm_program(config, arm, fmt, model)` (or its `compile_ahead` form).
    model: the `jaxlab.nn.Transformer`.
    corpus: `jaxlab.data.load_corpus(...)`; training batches from `corpus.train`.
    val_bits_per_byte: FP32 weights -> held-out bits/byte (`jaxlab.train.lm.bits_per_byte`).
    seed: init weights, data order and the SR stream.

  Returns:
    val bits/byte of the deployed weights at mid-run (`num_steps // 2`) and at the end,
    static bytes (params + optimizer state, from the pytrees), bytes per parameter, the
    final train loss and the number of updates ECO skipped as non-finite. A diverged
    seed reports NaN (a missing value, never dropped).

  Example::

    result = train_arm(config, lm_program(config, "eco_sr", "fp8_e4m3", model), model,
                       corpus, lambda w: bits_per_byte(nats, w, val_batches), seed=0)
  """
  t = config.train
  w0 = init_weights(model, seed, t.seq_len)
  params = program["to_params"](w0)
  state = program["make_tx"](seed).init(params)
  num_params = sum(int(x.size) for x in jax.tree.leaves(w0))
  static = static_bytes(params, state)
  step, deploy = program["step"], program["deploy"]
  losses, mid = [], math.nan
  for i in range(t.num_steps):
    if i == t.num_steps // 2:
      mid = val_bits_per_byte(deploy(params))
    batch = data.lm_batch(corpus.train, i, batch_size=t.batch_size, seq_len=t.seq_len, seed=seed)
    params, state, loss = step(params, state, batch)
    losses.append(loss)  # kept on device: no host sync per step
  bpb = val_bits_per_byte(deploy(params))
  check_eco_state(state)
  # optax.chain's state is a tuple; ECO's (the last transform) counts skipped updates.
  skipped = int(getattr(state if hasattr(state, "skipped") else state[-1], "skipped", 0))
  return {"val_bits_per_byte": bpb, "val_bits_per_byte_mid": mid, "static_bytes": static,
          "bytes_per_param": static / num_params, "num_params": num_params,
          "final_train_loss": float(np.mean(np.asarray(jax.device_get(losses[-10:]), np.float64))),
          "skipped_updates": skipped}


def lm_arms(config: ml_collections.ConfigDict, ahead: CompileAhead) -> dict:
  """Every (format, arm) of `config.lm`, its program submitted to `ahead` in run order.

  The model, corpus and held-out windows (`config.eval`: batch_size, num_batches,
  seed) are shared; val bits/byte is `jaxlab.train.lm.bits_per_byte` on those windows.

  Args:
    config: the experiment's config (`lm.formats`, `lm.arms`, `model`, `data`, `train`,
      `optimizer`, `eval`).
    ahead: the `CompileAhead` the programs compile on (the val loss right after the
      first arm's).

  Returns:
    {(format, arm): fn(seed=...) -> `train_arm`'s result}.

  Example::

    with CompileAhead() as ahead:
      arms = lm_arms(config, ahead)
      result = arms["fp8_e4m3", "eco_sr"](seed=0)
  """
  model = train_lm.make_model(config)
  e, seq_len = config.eval, config.train.seq_len
  loss_fn = jax.jit(train_lm.next_byte_loss(model))
  programs = {}
  for fmt in config.lm.formats:
    for arm in config.lm.arms:
      programs[fmt, arm] = compile_ahead(ahead, lm_program(config, arm, fmt, model), model, config)
      if len(programs) == 1:  # the val loss is first needed at mid-run of the first arm
        w0 = jax.eval_shape(lambda: init_weights(model, 0, seq_len))
        val = jax.ShapeDtypeStruct((e.batch_size, seq_len + 1), jnp.int32)
        loss_fn = ahead.submit(loss_fn, w0, val, None)
  corpus = data.load_corpus(max_bytes=config.data.max_bytes, val_fraction=config.data.val_fraction)
  batches = [data.lm_batch(corpus.val, i, batch_size=e.batch_size, seq_len=seq_len, seed=e.seed)
             for i in range(e.num_batches)]

  def val_bits_per_byte(weights):
    return train_lm.bits_per_byte(lambda w, b: loss_fn(w, b, None)[0], weights, batches)
  return {k: functools.partial(train_arm, config, p, model, corpus, val_bits_per_byte)
          for k, p in programs.items()}
