"""Experiment `eco`: training without master weights (ECO, quantization.md §2).

(a) Convex toy (least squares, uniform grid, SGDM): distance of the deployed
on-grid weights to the optimum, per arm and learning rate, averaged over the
last 10% of the steps and over 3 problems; the master arm (FP32 master
weights, gradients through the RTN-quantized forward, the spec's reference)
deploys Q_RTN(W_master), so every arm is measured on grid weights and shares
the floor |Q(w*) - w*| (jaxlab interpretation of the toy's metric).
Gradients are exact (full batch), H = curvature * A^T A / rows.
(b) Tiny byte LM with FP8 E4M3 / INT4 weights and AdamW: val bits/byte vs
static bytes per parameter (params + optimizer state,
counted from the actual pytrees), and a memory-vs-loss Pareto plot.
Arms: master (FP32 master + quantized forward), naive-RTN, naive-SR, ECO-RTN,
ECO-SR, exact-EF (SR). The master arm evaluates Q_RTN(W_master) (the weights
its quantized forward uses); 1-D leaves stay FP32 in every arm (`lm.min_ndim`).
"""

import dataclasses
import math
import os
import time
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from jaxlab import data, optim, report, train
from jaxlab.train import lm as train_lm

_INJECTION = {"naive_rtn": ("none", False), "naive_sr": ("none", True), "eco_rtn": ("eco", False),
              "eco_sr": ("eco", True), "exact_ef": ("exact", True)}


# ----------------------------------------------------------------------------- (a) convex toy


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
  quant = optim.Quantizer("grid", step=cfg.grid_step)
  steps = cfg.num_steps
  tail = max(1, int(round(steps * cfg.tail_fraction)))
  if cfg.master_forward not in ("quantized", "fp32"):
    raise ValueError(f"toy.master_forward must be 'quantized' or 'fp32', got {cfg.master_forward!r}")

  @jax.jit
  def run(lr0, lr_end, h, c, w_star, key):
    lr = lambda count: lr0 * (lr_end / lr0) ** (jnp.minimum(count, steps) / steps)
    w0 = {"w": jnp.zeros_like(w_star)}
    if arm == "master":
      tx = optax.sgd(lr, momentum=cfg.momentum)
      params = w0
      deploy = lambda p: quant.dequantize(quant.quantize(p["w"]))
      # The reference of the spec: FP32 master weights, gradients through the
      # quantized (RTN) forward; "fp32" evaluates them at the master weights.
      forward = deploy if cfg.master_forward == "quantized" else (lambda p: p["w"])
    else:
      inj, sr = _INJECTION[arm]
      tx = optim.eco_sgdm(lr, cfg.momentum, quantizer=quant, stochastic_rounding=sr, key=key,
                          injection=inj)
      params = optim.quantize_params(w0, quant)
      deploy = forward = lambda p: p["w"].dequantize()

    def body(i, carry):
      p, s, mid, acc, last, e_prev, cos_acc = carry
      g = {"w": h @ forward(p) - c}
      u, s_new = tx.update(g, s, p)
      new = optim.apply_eco(p, u)  # QParam leaves land on Q(W + u); floats p + u
      moved = jnp.any(deploy(new) != deploy(p))
      last = jnp.where(moved, i, last)
      dist = jnp.linalg.norm(deploy(new) - w_star)
      mid = jnp.where(i == steps // 2, dist, mid)
      in_tail = i >= steps - tail
      acc = acc + jnp.where(in_tail, dist, 0.0)
      # ECO's premise E_t ~ E_{t+1}: cosine of consecutive requantization residuals
      # e = W~ - Q(W~), W~ = W - lr (beta M + g) (the spec's diagnostic; not for master and
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
               cache: train.ArmCache | None = None) -> dict:
  """The convex toy over `cfg.seeds` problems (each offset by `seed`).

  Each arm's table is computed once per config when `cache` is given.

  Table entries per arm and setting: "dist" (the tail-mean distance averaged
  over problems; the compared metric), "dist_final", "dist_mid", per-problem
  "dist_per_seed", "last_move" (the latest step any weight moved, max over
  problems) and "residual_cos" (mean cosine of consecutive residuals
  e = W~ - Q(W~) over the tail, ECO's E_t ~ E_{t+1} premise; None for master
  and exact-EF).
  """
  seeds = [seed + s for s in cfg.seeds]
  problems = [_toy_problem(cfg, s) for s in seeds]
  quant = optim.Quantizer("grid", step=cfg.grid_step)
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

  key = train.config_hash({k: v for k, v in cfg.items() if k != "arms"}, seed)
  table: dict[str, dict[str, Any]] = {
      arm: cache.get_or_run(f"toy_{arm}", key, lambda arm=arm: arm_table(arm)) if cache
      else arm_table(arm) for arm in cfg.arms}
  return {"table": table, "settings": [s[0] for s in settings], "grid_floor": floor,
          "init_dist": float(np.mean([jnp.linalg.norm(w) for _, _, w in problems])),
          "num_steps": cfg.num_steps, "seeds": seeds, "master_forward": cfg.master_forward}


# ----------------------------------------------------------------------------- (b) tiny LM


def _quantizer(fmt: str, lm_cfg: ml_collections.ConfigDict) -> optim.Quantizer:
  if fmt == "fp8_e4m3":
    return optim.Quantizer("fp8_e4m3", granularity=lm_cfg.fp8_granularity)
  if fmt == "int4":
    return optim.Quantizer("int4", block_size=lm_cfg.int4_block)
  raise ValueError(f"lm.formats entries must be 'fp8_e4m3' or 'int4', got {fmt!r}")


def train_arm(config: ml_collections.ConfigDict, arm: str, fmt: str, corpus, model) -> dict:
  """Trains one arm; returns val bits/byte (deployed weights) and static bytes."""
  L, t, o = config.lm, config.train, config.optimizer
  quant = _quantizer(fmt, L)
  sched = train.make_schedule(o, t.num_steps)
  init_tokens = jnp.zeros((1, t.seq_len), jnp.int32)
  w0 = nn.meta.unbox(model.init(jax.random.key(config.seed), init_tokens)["params"])
  loss_of = train_lm.next_byte_loss(model)
  adam_kw = dict(b1=o.b1, b2=o.b2, eps=o.eps, weight_decay=o.weight_decay)
  clip = optax.clip_by_global_norm(o.grad_clip)
  if arm == "master":
    tx = optax.chain(clip, optim.master_adamw(sched, **adam_kw))
    params = w0
    forward = lambda p: optim.fake_quant_params(p, quant, min_ndim=L.min_ndim)
  else:
    inj, sr = _INJECTION[arm]
    tx = optax.chain(clip, optim.eco_adamw(sched, **adam_kw, quantizer=quant,
                                           stochastic_rounding=sr, key=config.seed,
                                           injection=inj))
    params = optim.quantize_params(w0, quant, min_ndim=L.min_ndim)
    forward = optim.dequantize_params
  state = tx.init(params)
  num_params = sum(int(x.size) for x in jax.tree.leaves(w0))
  static = optim.static_bytes(params, state)

  @jax.jit
  def step(params, state, batch):
    if arm == "master":
      loss, g = jax.value_and_grad(lambda p: loss_of(forward(p), batch, None)[0])(params)
    else:
      loss, g = jax.value_and_grad(lambda w: loss_of(w, batch, None)[0])(forward(params))
    u, state = tx.update(g, state, params)
    return optim.apply_eco(params, u), state, loss

  t0 = time.perf_counter()
  losses = []
  for i in range(t.num_steps):
    batch = data.lm_batch(corpus.train, i, batch_size=t.batch_size, seq_len=t.seq_len,
                          seed=config.seed)
    params, state, loss = step(params, state, batch)
    losses.append(loss)  # kept on device: no host sync per step
  weights = jax.jit(forward)(params)
  bpb = train_lm.eval_bits_per_byte(model, weights, corpus.val,
                                    batch_size=config.eval.batch_size, seq_len=t.seq_len,
                                    num_batches=config.eval.num_batches, seed=config.eval.seed)
  return {"val_bits_per_byte": bpb, "static_bytes": static,
          "bytes_per_param": static / num_params, "num_params": num_params,
          "final_train_loss": float(np.mean(np.asarray(jax.device_get(losses[-10:]), np.float64))),
          "train_s": time.perf_counter() - t0}


def tiny_lm(config: ml_collections.ConfigDict, cache: train.ArmCache) -> dict:
  """Every (format, arm) of the LM study; finished arms come from `cache`."""
  corpus = data.load_corpus(max_bytes=config.data.max_bytes, val_fraction=config.data.val_fraction)
  model = train_lm.make_model(config)
  shared = train.config_hash(config.seed, config.data, config.model, config.train,
                             config.optimizer, config.eval,
                             {k: v for k, v in config.lm.items() if k not in ("formats", "arms")})
  out = {}
  for fmt in config.lm.formats:
    out[fmt] = {arm: cache.get_or_run(f"lm_{fmt}_{arm}", shared,
                                      lambda fmt=fmt, arm=arm: train_arm(config, arm, fmt, corpus,
                                                                         model))
                for arm in config.lm.arms}
  return out


# ----------------------------------------------------------------------------- verdicts


def _verdicts(toy: dict, lm: dict, claims) -> dict[str, Any]:
  v: dict[str, Any] = {}
  t = toy["table"]
  if "master" in t:
    ratios = {arm: {s: t[arm][s]["dist"] / t["master"][s]["dist"] for s in toy["settings"]}
              for arm in t if arm != "master"}
    v["toy_ratio_to_master"] = ratios
    eco_arms = [a for a in ("eco_rtn", "eco_sr") if a in ratios]
    v["toy_eco_within"] = bool(eco_arms) and all(
        r <= claims.toy_ratio for a in eco_arms for r in ratios[a].values())
    # Each ECO arm's worst setting, so a failed check says where it failed.
    v["toy_eco_worst"] = {a: max(((round(r, 3), s) for s, r in ratios[a].items()),
                                 key=lambda x: x[0]) for a in eco_arms}
    if "naive_rtn" in t:
      # Stalled: no weight moved in the second half of the run while master is >= 2x closer.
      half = toy["num_steps"] // 2
      stalled = {s: bool(t["naive_rtn"][s]["last_move"] < half
                         and ratios["naive_rtn"][s] >= claims.toy_ratio) for s in toy["settings"]}
      v["toy_naive_rtn_stalled"] = stalled
      small = [s for s in toy["settings"][:-1] if float(s) <= 1e-3]
      v["toy_naive_rtn_stalls"] = bool(small) and all(stalled[s] for s in small)
    if "naive_sr" in t:
      consts = toy["settings"][:-1]
      d = [t["naive_sr"][s]["dist"] for s in consts]
      v["toy_naive_sr_grew"] = bool(d[-1] > d[0])
  fp8 = lm.get("fp8_e4m3", {})
  if "master" in fp8:
    m = fp8["master"]["val_bits_per_byte"]
    if "eco_sr" in fp8:
      v["lm_fp8_eco_sr_rel_gap"] = (fp8["eco_sr"]["val_bits_per_byte"] - m) / m
      v["lm_fp8_eco_within"] = bool(v["lm_fp8_eco_sr_rel_gap"] <= claims.lm_rel_gap)
    if "naive_rtn" in fp8:
      v["lm_fp8_naive_rtn_rel_gap"] = (fp8["naive_rtn"]["val_bits_per_byte"] - m) / m
      v["lm_fp8_naive_rtn_worse"] = bool(v["lm_fp8_naive_rtn_rel_gap"] > claims.lm_rel_gap)
    eco = [a for a in ("eco_sr", "eco_rtn") if a in fp8]
    if eco:
      saving = 1.0 - fp8[eco[0]]["static_bytes"] / fp8["master"]["static_bytes"]
      v["lm_memory_saving"] = saving
      v["lm_memory_ok"] = bool(saving >= claims.memory_saving)
  return v


def _plots(workdir: str, toy: dict, lm: dict) -> tuple[str, ...]:
  plots = []
  consts = toy["settings"][:-1]
  lrs = [float(s) for s in consts]

  def draw_toy(ax):
    for arm, row in toy["table"].items():
      ax.plot(lrs, [row[s]["dist"] for s in consts], marker="o", label=arm)
    ax.axhline(toy["grid_floor"], color="gray", ls="--", label="grid floor |Q(w*)-w*|")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("learning rate")
    ax.set_ylabel("final |W - w*| (deployed, on grid)")
    ax.legend(fontsize=7)
  plots.append(report.save_plot(workdir, "eco_toy.png", draw_toy))

  if lm:
    def draw_pareto(ax):
      for k, (fmt, arms) in enumerate(lm.items()):
        for arm, r in arms.items():
          ax.scatter(r["bytes_per_param"], r["val_bits_per_byte"], marker="os"[k % 2],
                     color=f"C{list(arms).index(arm)}", label=f"{fmt} {arm}")
      ax.set_xlabel("static bytes / parameter (params + optimizer state)")
      ax.set_ylabel("val bits / byte")
      ax.legend(fontsize=6)
    plots.append(report.save_plot(workdir, "eco_pareto.png", draw_pareto))
  return tuple(plots)


def run(config: ml_collections.ConfigDict, workdir: str) -> dict:
  """Runs the convex toy and the tiny-LM study; writes results.json."""
  os.makedirs(workdir, exist_ok=True)
  t0 = time.perf_counter()
  cache = train.ArmCache(workdir)
  toy = convex_toy(config.toy, config.seed, cache)
  toy_s = time.perf_counter() - t0
  lm = tiny_lm(config, cache) if config.lm.formats else {}
  v = _verdicts(toy, lm, config.claims)
  checks = [v[k] for k in ("toy_eco_within", "toy_naive_rtn_stalls", "lm_fp8_eco_within",
                           "lm_fp8_naive_rtn_worse", "lm_memory_ok") if k in v]
  verdict = ("not measured" if not checks else "held" if all(checks)
             else "partly held" if any(checks) else "did not hold")

  def fmt_toy(arm):
    return ", ".join(f"{s}: {toy['table'][arm][s]['dist']:.3f}" for s in toy["settings"])

  def fmt_cos(arm):
    return ", ".join(f"{s}: {toy['table'][arm][s]['residual_cos']:.2f}" for s in toy["settings"])

  ours, base = [], []
  if "eco_sr" in toy["table"] or "eco_rtn" in toy["table"]:
    for a in ("eco_rtn", "eco_sr"):
      if a in toy["table"]:
        ours.append(f"toy {a} |W-w*| {fmt_toy(a)}")
  if "master" in toy["table"]:
    base.append(f"toy master {fmt_toy('master')}")
  for a in ("naive_rtn", "naive_sr"):
    if a in toy["table"]:
      base.append(f"toy {a} {fmt_toy(a)}")
  for fmt, arms in lm.items():
    for arm, r in arms.items():
      line = (f"LM {fmt} {arm}: {r['val_bits_per_byte']:.4f} bpb @ "
              f"{r['bytes_per_param']:.3f} B/param")
      (base if arm in ("master", "naive_rtn", "naive_sr") else ours).append(line)
  details = (
      f"preset={config.preset}; toy: d={config.toy.dim}, grid step {config.toy.grid_step:g} "
      f"(grid floor {toy['grid_floor']:.3f}, start {toy['init_dist']:.2f}), SGDM "
      f"beta={config.toy.momentum}, {config.toy.num_steps} steps, |W-w*| averaged over the last "
      f"{config.toy.tail_fraction:.0%} of steps and {len(toy['seeds'])} problem(s), master "
      f"gradients through the {config.toy.master_forward} forward; cosine of consecutive "
      f"residuals e_t, e_t+1 (ECO's premise E_t ~ E_t+1) per lr: "
      + "; ".join(f"{a} {fmt_cos(a)}" for a in ("eco_rtn", "eco_sr") if a in toy["table"])
      + "; verdict checks: "
      + "; ".join(f"{k}={v[k]!r}" for k in ("toy_eco_within", "toy_eco_worst",
                                            "toy_naive_rtn_stalls", "toy_naive_sr_grew",
                                            "lm_fp8_eco_sr_rel_gap", "lm_fp8_eco_within",
                                            "lm_fp8_naive_rtn_rel_gap", "lm_fp8_naive_rtn_worse",
                                            "lm_memory_saving", "lm_memory_ok") if k in v)
      + ". 'held' needs every measured check true (ECO <= 2x master at every toy lr, naive RTN "
      "stalled at lr <= 1e-3, FP8 ECO-SR within 2% of master, naive RTN > 2% worse, ECO static "
      "memory >= 20% below master AdamW); the paper's own numbers were not retrieved.")
  row = report.ReportRow(
      method="ECO: quantized training without FP32 master weights (arXiv 2601.22101)",
      paper_claim=("near-lossless vs master weights with ~25% less static memory; naive "
                   "master-weight removal degrades (error grows as lr decays)"),
      baseline="; ".join(base), ours="; ".join(ours), verdict=verdict, details=details,
      plots=_plots(workdir, toy, lm))
  results = {"toy": toy, "lm": lm, "verdicts": v, "toy_s": toy_s,
             "total_s": time.perf_counter() - t0, "report": dataclasses.asdict(row)}
  report.write_results(workdir, results)
  return results
