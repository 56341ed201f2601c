"""QAT scaling law (W4A4) at CPU scale: delta(N, D, G), its fit, kurtosis, FC2 fix.

Every cell trains the tiny decoder from the same initial parameters on the same
batch sequence (paired runs) in full precision and with fake quantization
(`jaxlab.quant.QDense`, INT4 AbsMax + STE; the LM head and embedding stay full
precision), and measures

  delta = smoothed final train loss (quantized) - smoothed final train loss (FP32)

in nats/byte, "smoothed" = mean train loss over the last `train.smooth_frac`
of the steps (the paper's definition; val-loss deltas are stored as well).
N = non-embedding parameters (blocks + final norm; embedding and LM head
excluded: a jaxlab interpretation for an untied head), D = steps x batch x
sequence length tokens.

Training is a lean jitted loop (AdamW on `jaxlab.train.warmup_cosine`, clipping
1.0; the `lm` recipe) rather than `train_lm`: compiling dominates on CPU, so the
model of each size is built once with `QuantPolicy(runtime_group_sizes=...)`
and the bits, G and step count of a run are traced arguments: every cell of
one size shares one compiled program, and every seed of a cell runs in it at
once (`jax.vmap` over seeds: init key and batch order). Seed s of every
precision shares the init and batches of seed s of FP32 (paired). Each
finished cell is one arm of a `jaxlab.train.ArmCache` in `workdir`, so a
killed run resumes at cell granularity.

Verdict: the criteria declared in `configs/qat_scaling.py` (delta falls with
N, rises with D, rises with G; FC2's input kurtosis is the largest; FC2-INT8
lowers delta), judged once by `jaxlab.report.judge_all` on the per-seed
contrasts of `measure`. A diverged seed is NaN (counted as missing). The
signed-exponent law fit (Huber + L-BFGS, on the seed-mean deltas) is reported
beside them, not judged: with a handful of cells its exponents are fragile.
"""

import dataclasses
import time
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from jaxlab import data, report, train
from jaxlab.presets import config_seeds
from jaxlab.quant import QuantPolicy, qdense_factory, runtime_knobs, scaling_law
from jaxlab.train import lm as train_lm
from jaxlab.train.schedules import make_schedule

LINEARS = {"QKV": "attn/q", "O": "attn/o", "FC1": "mlp/gate", "FC2": "mlp/down"}


def make_policy(config: ml_collections.ConfigDict, precision: str, group_size: int | None,
                *, fc2_int8: bool = False) -> QuantPolicy:
  """The `QuantPolicy` of a precision label ("FP32", "W4A4", "W4A16", "W16A4")."""
  q = config.quant
  fp = 16
  bits = {"FP32": (fp, fp), "W4A4": (q.bits, q.bits), "W4A16": (q.bits, fp),
          "W16A4": (fp, q.bits)}
  if precision not in bits:
    raise ValueError(f"precision must be one of {sorted(bits)}, got {precision!r}")
  w, a = bits[precision]
  overrides = {"mlp/down": {"a_bits": q.fc2_bits}} if fc2_int8 else {}
  return QuantPolicy(w_bits=w, a_bits=a, group_size=group_size, fmt=q.fmt, absmax_m=q.absmax_m,
                     act_quantizer=q.act_quantizer, overrides=overrides)


def non_embedding_params(params: Any) -> int:
  """Parameter count without the token embedding and the LM head."""
  return int(sum(x.size for k, v in params.items() if k not in ("embed", "lm_head")
                 for x in jax.tree.leaves(v)))


def make_trainer(model, t: ml_collections.ConfigDict, opt: ml_collections.ConfigDict):
  """A jitted `train(keys, qat, batches, num_steps, val_batches) -> dict` for `model`.

  keys: the init keys, one per seed [S] (parameters are initialized inside the
  program, so every run with the same key starts from identical weights and
  init costs no extra compile); qat: the run-time quantization knobs
  (`jaxlab.quant.runtime_knobs`), shared by the seeds;
  batches: int32 [S, max_steps, B, T+1] (the first `num_steps` are used, in order);
  num_steps: traced int32 (the schedule of `opt` stretches to it); val_batches:
  int32 [V, B, T+1], shared. Knobs and budget are traced, so every precision, G
  and D of one model size share one compiled program; seeds are vmapped.
  Returns {"train_loss" (smoothed) [S], "val_loss" [S], "kurtosis" (tree of [S])}.
  """
  tx = optax.chain(optax.clip_by_global_norm(opt.grad_clip),
                   optax.scale_by_adam(b1=opt.b1, b2=opt.b2),
                   optax.add_decayed_weights(opt.weight_decay))

  def ce(params, qat, batch):
    logits = model.apply({"params": params, "qat": qat}, batch[:, :-1])
    return optax.softmax_cross_entropy_with_integer_labels(logits, batch[:, 1:]).mean()

  def train(key, qat, batches, num_steps, val_batches):
    params = model.init(key, batches[0, :1, :-1])["params"]
    schedule = make_schedule(opt, num_steps)
    window = jnp.maximum(jnp.floor(t.smooth_frac * num_steps), 1).astype(jnp.int32)

    def body(i, carry):
      params, opt_state, acc = carry
      loss, grads = jax.value_and_grad(ce)(params, qat, batches[i])
      updates, opt_state = tx.update(grads, opt_state, params)
      lr = schedule(i)
      params = jax.tree.map(lambda p, u: p - lr * u, params, updates)
      return params, opt_state, acc + jnp.where(i >= num_steps - window, loss, 0.0)

    params, _, acc = jax.lax.fori_loop(0, num_steps, body,
                                       (params, tx.init(params), jnp.float32(0)))
    val = jax.lax.map(lambda b: ce(params, qat, b), val_batches).mean()
    _, state = model.apply({"params": params, "qat": qat}, val_batches[0, :, :-1],
                           mutable=["kurtosis"])
    kurt = jax.tree.map(lambda v: v[0], state["kurtosis"],
                        is_leaf=lambda v: isinstance(v, tuple))
    return {"train_loss": acc / window, "val_loss": val, "kurtosis": kurt}

  # Optional cheaper XLA optimization: compile time dominates small CPU runs.
  options = ({"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}
             if t.get("fast_compile", False) else None)
  return jax.jit(jax.vmap(train, in_axes=(0, None, 0, None, None)), compiler_options=options)


def _kurtosis_table(tree: dict) -> dict[str, list[float]]:
  """Per seed, the mean over blocks of the input kurtosis of QKV / O / FC1 / FC2."""
  out = {}
  for label, sub in LINEARS.items():
    group, name = sub.split("/")
    vals = [np.asarray(blk[group][name]["input"], np.float64) for key, blk in tree.items()
            if key.startswith("block_")]
    out[label] = np.mean(vals, axis=0).tolist()
  return out


def _cell_key(size, steps, precision, g, fc2):
  return f"d{size[0]}_f{size[1]}_s{steps}_{precision}_g{g}" + ("_fc2int8" if fc2 else "")


def run_cells(config: ml_collections.ConfigDict, workdir: str) -> dict[str, dict]:
  """Trains (or loads from `workdir`'s `ArmCache`) every cell of the grid for every seed.

  Returns:
    {cell key: record}; a record's `train_loss`, `val_loss` and each kurtosis entry
    are per-seed lists in `config.seeds` order (NaN where a seed diverged).
  """
  gr, t = config.grid, config.train
  seeds = config_seeds(config)
  # Refused before any training (a wrong value would otherwise surface after the whole grid,
  # or, for smooth_frac > 1, silently divide the loss sum by more steps than were run).
  if not 0.0 < float(t.smooth_frac) <= 1.0:
    raise ValueError(f"train.smooth_frac must lie in (0, 1], got {t.smooth_frac}")
  missing = sorted({int(g) for g in gr.fc2_group_sizes} - {int(g) for g in gr.group_sizes})
  if missing:
    raise ValueError(f"grid.fc2_group_sizes {missing} need W4A4 cells at the same G; add them "
                     "to grid.group_sizes")
  corpus = data.load_corpus(max_bytes=config.data.max_bytes, val_fraction=config.data.val_fraction)
  max_steps = max(gr.steps)
  # [S, steps, B, T+1]: seed s draws its own batch order; every precision reuses it.
  batches = jnp.asarray(np.stack([np.stack([
      data.lm_batch(corpus.train, i, batch_size=t.batch_size, seq_len=t.seq_len, seed=seed)
      for i in range(max_steps)]) for seed in seeds]))
  val = jnp.asarray(np.stack([
      data.lm_batch(corpus.val, i, batch_size=config.eval.batch_size, seq_len=t.seq_len,
                    seed=config.eval.seed) for i in range(config.eval.num_batches)]))
  cache = train.ArmCache(workdir)
  # What determines a cell besides its own (size, steps, precision, G, FC2) name.
  shared = train.config_hash(seeds, config.data, config.model, config.quant, config.train,
                             config.optimizer, config.eval)
  runs = [("FP32", None, False)]
  runs += [(p, g, False) for p in gr.precisions for g in gr.group_sizes]
  runs += [("W4A4", g, True) for g in gr.fc2_group_sizes]
  groups = tuple(dict.fromkeys(tuple(gr.group_sizes) + tuple(gr.fc2_group_sizes)))
  runtime = make_policy(config, "W4A4", groups[0])
  runtime = dataclasses.replace(runtime, runtime_group_sizes=groups)
  # One model per size; its program compiles on a worker thread while the cells of the
  # sizes before it run (on 2 cores compiling is a large part of a quick run). A size
  # whose cells are all cached compiles nothing.
  init_keys = jnp.stack([jax.random.key(seed) for seed in seeds])
  sizes = []
  for size in gr.sizes:
    size = tuple(int(s) for s in size)
    mcfg = ml_collections.ConfigDict(config.model.to_dict())
    mcfg.update(d_model=size[0], d_ff=size[1])
    model = train_lm.make_model(ml_collections.ConfigDict({"model": mcfg}),
                                dense=qdense_factory(runtime))
    # One init key per seed, shared by every precision of this size: paired runs
    # start from identical weights (initialized inside the compiled program).
    variables = jax.eval_shape(model.init, init_keys[0], batches[0, 0, :1, :-1])
    sizes.append((size, model, variables))
  records = {}
  with train.CompileAhead() as ahead:
    trainers = {}
    for size, model, variables in sizes:
      if all(cache.load(_cell_key(size, steps, precision, g, fc2), shared) is not None
             for precision, g, fc2 in runs for steps in gr.steps):
        continue
      qat = runtime_knobs(make_policy(config, "FP32", None), variables["qat"], group_sizes=groups)
      trainers[size] = ahead.submit(make_trainer(model, t, config.optimizer), init_keys, qat,
                                    batches, jax.ShapeDtypeStruct((), jnp.int32), val)
    for size, _, variables in sizes:
      n = non_embedding_params(variables["params"])
      for precision, g, fc2 in runs:
        for steps in gr.steps:
          key = _cell_key(size, steps, precision, g, fc2)

          def cell(precision=precision, g=g, fc2=fc2, steps=steps, size=size, n=n,
                   variables=variables):
            qat = runtime_knobs(make_policy(config, precision, g, fc2_int8=fc2),
                                variables["qat"], group_sizes=groups)
            t0 = time.time()
            out = jax.device_get(trainers[size](init_keys, qat, batches, jnp.int32(steps), val))
            # A diverged seed stays NaN: judged as missing, never dropped.
            return {"d_model": size[0], "d_ff": size[1], "n": n,
                    "d": steps * t.batch_size * t.seq_len, "steps": steps,
                    "precision": precision, "group_size": g, "fc2_int8": fc2, "seeds": seeds,
                    "train_loss": np.asarray(out["train_loss"], np.float64).tolist(),
                    "val_loss": np.asarray(out["val_loss"], np.float64).tolist(),
                    "kurtosis": _kurtosis_table(out["kurtosis"]), "seconds": time.time() - t0}

          records[key] = cache.get_or_run(key, shared, cell)
  return records


def _per_seed(values: Any) -> np.ndarray:
  """A stored per-seed list as float64 (None, from a JSON NaN, becomes NaN)."""
  return np.array([np.nan if v is None else v for v in values], np.float64)


def deltas(config: ml_collections.ConfigDict, records: dict[str, dict]) -> list[dict]:
  """One row per (size, steps, precision, G): per-seed delta (train, val) vs the paired FP32."""
  rows = []
  gr = config.grid
  for size in gr.sizes:
    size = tuple(int(s) for s in size)
    for steps in gr.steps:
      fp = records[_cell_key(size, steps, "FP32", None, False)]
      cells = [(p, g, False) for p in gr.precisions for g in gr.group_sizes]
      cells += [("W4A4", g, True) for g in gr.fc2_group_sizes]
      for p, g, fc2 in cells:
        r = records[_cell_key(size, steps, p, g, fc2)]
        delta = _per_seed(r["train_loss"]) - _per_seed(fp["train_loss"])
        rows.append({"precision": p + ("+FC2int8" if fc2 else ""), "n": r["n"], "d": r["d"],
                     "g": g, "d_model": size[0], "steps": steps,
                     "delta": delta.tolist(),
                     "delta_mean": float(np.mean(delta)),
                     "delta_val": (_per_seed(r["val_loss"]) - _per_seed(fp["val_loss"])).tolist(),
                     "fp32_train_loss": _per_seed(fp["train_loss"]).tolist()})
  return rows


def fit_law(rows: list[dict], precision: str, config: ml_collections.ConfigDict) -> dict | None:
  """Signed-exponent fit of the law on `precision`'s seed-mean deltas; None if under 3 cells."""
  sel = [r for r in rows if r["precision"] == precision and np.isfinite(r["delta_mean"])]
  if len(sel) < 3:
    return None
  n, d, g, dl = (np.array([r[k] for r in sel], np.float64)
                 for k in ("n", "d", "g", "delta_mean"))
  free = tuple(name for name, v in (("gamma_n", n), ("gamma_d", d), ("gamma_g", g))
               if len(np.unique(v)) > 1)
  space = config.fit.space if config.fit.space == "linear" or np.all(dl > 0) else "linear"
  res = scaling_law.fit_qat_law(n, d, g, dl, huber_delta=config.fit.huber_delta,
                                positive_exponents=False, space=space, fit_exponents=free,
                                init_exponents=(-0.3, 0.1, 0.5))
  return {"k": res.law.k, "gamma_n": res.law.gamma_n if "gamma_n" in free else None,
          "gamma_d": res.law.gamma_d if "gamma_d" in free else None,
          "gamma_g": res.law.gamma_g if "gamma_g" in free else None,
          "r2": res.r2, "num_cells": len(sel), "fitted": list(free), "space": space}


def _axis_contrast(rows: list[dict], precision: str, axis: str) -> tuple | None:
  """Per seed: mean delta at the largest `axis` value vs at the smallest (others averaged)."""
  sel = [r for r in rows if r["precision"] == precision]
  values = sorted({r[axis] for r in sel})
  if len(values) < 2:
    return None

  def at(v):
    return np.mean([r["delta"] for r in sel if r[axis] == v], axis=0)
  return at(values[-1]), at(values[0])


def kurtosis_by_precision(records: dict[str, dict]) -> dict[str, dict[str, list[float]]]:
  """Per seed, the input kurtosis of each linear, mean over the cells of FP32 / of W4A4."""
  out = {}
  for label, sel in (("FP32", lambda r: r["precision"] == "FP32"),
                     ("W4A4", lambda r: r["precision"] == "W4A4" and not r["fc2_int8"])):
    tables = [r["kurtosis"] for r in records.values() if sel(r)]
    out[label] = {k: np.mean([_per_seed(tb[k]) for tb in tables], axis=0).tolist()
                  for k in LINEARS}
  return out


def measure(config: ml_collections.ConfigDict, rows: list[dict],
            kurt: dict[str, dict[str, Any]]) -> dict[str, Any]:
  """Per-seed (method, baseline) values of every criterion in `configs/qat_scaling.py`.

  Args:
    config: the experiment config (its grid says which axes were swept).
    rows: `deltas(...)`, per-seed deltas of every cell.
    kurt: `kurtosis_by_precision(...)`.

  Returns:
    criterion name -> (method [seeds], baseline [seeds]) in seed order, or None when the
    grid does not measure it (one model size: no N contrast; one FC2 group size: no
    coarse-vs-fine comparison; no W4A16 / W16A4 runs).
  """
  gr = config.grid

  def fc2_pair(g):
    base = np.mean([r["delta"] for r in rows if r["precision"] == "W4A4" and r["g"] == g], 0)
    fixed = np.mean([r["delta"] for r in rows if r["precision"] == "W4A4+FC2int8"
                     and r["g"] == g], 0)
    return fixed, base

  fc2_groups = sorted(int(g) for g in gr.fc2_group_sizes)
  missing = [g for g in fc2_groups if g not in set(int(x) for x in gr.group_sizes)]
  if missing:
    raise ValueError(f"grid.fc2_group_sizes {missing} need W4A4 cells at the same G; add them "
                     "to grid.group_sizes")

  def top_vs_others(table):
    others = np.max([table[k] for k in LINEARS if k != "FC2"], axis=0)
    return np.asarray(table["FC2"], np.float64), others

  out = {"delta_falls_with_n": _axis_contrast(rows, "W4A4", "n"),
         "delta_rises_with_d": _axis_contrast(rows, "W4A4", "d"),
         "delta_rises_with_g": _axis_contrast(rows, "W4A4", "g"),
         "fc2_kurtosis_top_fp32": top_vs_others(kurt["FP32"]),
         "fc2_kurtosis_top_w4a4": top_vs_others(kurt["W4A4"]),
         "fc2_int8_lowers_delta": fc2_pair(fc2_groups[-1]) if fc2_groups else None,
         "fc2_gain_larger_at_coarse_g": None, "w16a4_above_w4a16": None}
  if len(fc2_groups) >= 2:
    (cf, cb), (ff, fb) = fc2_pair(fc2_groups[-1]), fc2_pair(fc2_groups[0])
    out["fc2_gain_larger_at_coarse_g"] = (cb - cf, fb - ff)
  if {"W4A16", "W16A4"} <= set(gr.precisions):
    # "At small D/N": the smallest budget, averaged over sizes and G.
    d0 = min(r["d"] for r in rows)

    def at(p):
      return np.mean([r["delta"] for r in rows if r["precision"] == p and r["d"] == d0], 0)
    out["w16a4_above_w4a16"] = (at("W16A4"), at("W4A16"))
  return out


def _plots(workdir, rows, fit):
  """delta vs N, D and G (W4A4 cells) with the fitted law."""
  sel = [r for r in rows if r["precision"] == "W4A4"]
  law = None if fit is None else scaling_law.QATLaw(
      fit["k"], fit["gamma_n"] or 0.0, fit["gamma_d"] or 0.0, fit["gamma_g"] or 0.0)
  axes = (("n", "N (non-embedding params)", "delta_vs_N.png"),
          ("d", "D (tokens)", "delta_vs_D.png"), ("g", "G (group size)", "delta_vs_G.png"))
  names = []
  for axis, label, fname in axes:
    others = [a for a, _, _ in axes if a != axis]

    def draw(ax, axis=axis, label=label, others=others):
      combos = sorted({tuple(r[o] for o in others) for r in sel})
      for i, combo in enumerate(combos):
        pts = sorted((r[axis], r["delta_mean"]) for r in sel
                     if tuple(r[o] for o in others) == combo)
        xs, ys = zip(*pts, strict=True)
        tag = ", ".join(f"{o}={v:.3g}" for o, v in zip(others, combo, strict=True))
        ax.plot(xs, ys, "o", color=f"C{i % 10}", label=tag)
        if law is not None and len(xs) > 1:
          grid = np.geomspace(min(xs), max(xs), 30)
          kw = dict(zip(others, combo, strict=True))
          kw[axis] = grid
          ax.plot(grid, np.asarray(scaling_law.qat_error(kw["n"], kw["d"], kw["g"], law)),
                  "-", color=f"C{i % 10}", alpha=0.6)
      ax.set_xscale("log")
      ax.set_xlabel(label)
      ax.set_ylabel("delta W4A4 (nats/byte, seed mean)")
      ax.legend(fontsize=6)
    names.append(report.save_plot(workdir, fname, draw))
  return tuple(names)


def run(config: ml_collections.ConfigDict, workdir: str) -> dict:
  """Runs the grid for every seed, judges the declared criteria, writes `results.json`."""
  t0 = time.time()
  records = run_cells(config, workdir)
  rows = deltas(config, records)
  gr = config.grid
  seeds = [int(s) for s in config.seeds]
  kurt = kurtosis_by_precision(records)
  row_verdict, criteria = report.judge_all(config.criteria, measure(config, rows, kurt))
  fits = {p: fit_law(rows, p, config) for p in gr.precisions}
  fit = fits.get("W4A4")
  plots = _plots(workdir, rows, fit)

  # FC2 fix, relative delta reduction at each rerun G (seed-mean deltas, mean over cells).
  fc2 = {}
  for g in gr.fc2_group_sizes:
    base = np.mean([r["delta_mean"] for r in rows if r["precision"] == "W4A4" and r["g"] == g])
    fixed = np.mean([r["delta_mean"] for r in rows
                     if r["precision"] == "W4A4+FC2int8" and r["g"] == g])
    fc2[int(g)] = float((base - fixed) / abs(base)) if base else float("nan")
  w4a4 = [r["delta_mean"] for r in rows if r["precision"] == "W4A4"]
  fp_loss = [np.mean(r["fp32_train_loss"]) for r in rows if r["precision"] == "W4A4"]
  kmean = {p: {k: float(np.nanmean(v)) for k, v in t.items()} for p, t in kurt.items()}

  def fmt(v):
    return "n/a" if v is None else f"{v:+.3f}"
  fit_text = ("no fit" if fit is None else
              f"gN={fmt(fit['gamma_n'])} gD={fmt(fit['gamma_d'])} gG={fmt(fit['gamma_g'])} "
              f"k={fit['k']:.3g} R^2={fit['r2']:.2f} ({fit['num_cells']} cells, seed means)")
  tokens = config.train.batch_size * config.train.seq_len
  sizes = sorted({(r["d_model"], r["n"]) for r in rows})
  facts = [
      report.Fact("n_params", "non-embedding parameters N per size (d_model: N)",
                  ", ".join(f"{dm}: {n}" for dm, n in sizes)),
      report.Fact("d_tokens", "training tokens D per budget (steps x batch x seq_len)",
                  ", ".join(str(int(st) * tokens) for st in gr.steps), "tokens"),
      report.Fact("paired", "seed s of every precision uses the init and batches of FP32 seed s",
                  f"{len(seeds)} seeds {seeds}")]
  row = report.ReportRow(
      method="W4A4 QAT scaling law (INT4 AbsMax + STE, tiny decoder)",
      paper_claim=("delta = k D^gD (log2 G)^gG / N^gN with gN, gD, gG > 0 (0.219, 0.075, 0.778); "
                   "FC2 input is the kurtosis outlier; FC2 input INT8 cuts delta 20.5% at G=32, "
                   "42.9% at G=256"),
      baseline=f"FP32 paired runs, smoothed train loss {np.mean(fp_loss):.3f} nats/byte (mean)",
      ours=(f"W4A4 delta mean {np.mean(w4a4):+.4f} nats/byte; fit {fit_text}; kurtosis FC2 "
            f"{kmean['FP32']['FC2']:.1f} (FP32) / {kmean['W4A4']['FC2']:.1f} (W4A4) vs max other "
            f"{max(v for k, v in kmean['FP32'].items() if k != 'FC2'):.1f}; FC2-INT8 delta "
            "reduction " + ", ".join(f"G={g}: {100 * v:.0f}%" for g, v in fc2.items())),
      verdict=row_verdict,
      details=(f"preset={config.preset}; {len(seeds)} paired seeds; "
               f"sizes={list(map(tuple, gr.sizes))} (d_model, d_ff), steps={list(gr.steps)} x "
               f"{config.train.batch_size}x{config.train.seq_len} tokens, "
               f"G={list(gr.group_sizes)}, precisions FP32 + {list(gr.precisions)}, FC2-INT8 at "
               f"G={list(gr.fc2_group_sizes)}; delta = smoothed final train loss difference vs "
               "the paired FP32 run. The criteria judge per-seed contrasts (largest vs smallest "
               "N / D / G, FC2 vs the other inputs, FC2-INT8 vs W4A4); the signed-exponent "
               "Huber+L-BFGS fit on seed means is reported, not judged. Tiny models: magnitudes "
               "do not transfer."),
      plots=plots, criteria=criteria, facts=facts)
  results = {"rows": rows, "fits": fits, "kurtosis": kurt, "fc2_reduction": fc2,
             "seeds": seeds, "criteria": [dataclasses.asdict(c) for c in criteria],
             "facts": [dataclasses.asdict(f) for f in facts], "verdict": row_verdict,
             "seconds": time.time() - t0, "report": dataclasses.asdict(row)}
  report.write_results(workdir, results)
  return results
