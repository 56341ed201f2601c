"""The QAT scaling-law grid: paired FP32 / fake-quantized training of the tiny decoder.

The study of the QAT scaling-law paper (W4A4; Sec. 3 and 4; notes: quantization.md
§3), at CPU scale, as library code. Every cell (model size, token budget,
precision, group size G, FC2 at INT8 or not) trains the tiny decoder from the same
initial parameters on the same batch sequence (paired runs) in full precision and
with fake quantization (`QDense`, INT4 AbsMax + STE; the LM head and embedding stay
full precision), and records the smoothed final train loss (mean over the last
`train.smooth_frac` of the steps, the paper's definition), the val loss and each
linear's input kurtosis, per seed.

Compiling dominates on CPU, so the model of each size is built once with
`QuantPolicy(runtime_group_sizes=...)` and the bits, G and step count of a run are
traced arguments: every cell of one size shares one compiled program, and every seed
of a cell runs in it at once (`jax.vmap` over seeds: init key and batch order). The
optimizer is `jaxlab.train.optimizer(config.optimizer, num_steps)`.

  records = train_cells(config, seeds)          # {cell_key(...): record}
  rows = deltas(config, records)                # per-seed delta vs the paired FP32 run
  fit_law(rows, "W4A4", config)                 # signed-exponent law fit on seed means

N = non-embedding parameters (blocks + final norm; embedding and LM head excluded: a
jaxlab interpretation for an untied head), D = steps x batch x sequence length tokens.

Example:
  >>> cell_key((32, 96), 12, "W4A4", 8, True)
  'd32_f96_s12_W4A4_g8_fc2int8'
"""

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from jaxlab import data
from jaxlab.quant import scaling_law
from jaxlab.quant.qdense import QuantPolicy, qdense_factory, runtime_knobs
from jaxlab.train import CompileAhead, optimizer
from jaxlab.train import lm as train_lm

LINEARS = {"QKV": "attn/q", "O": "attn/o", "FC1": "mlp/gate", "FC2": "mlp/down"}

__all__ = ["LINEARS", "cell_key", "check_grid", "deltas", "draw_deltas", "fc2_reduction",
           "fit_law", "kurtosis_by_precision", "kurtosis_table", "make_policy", "make_trainer",
           "non_embedding_params", "per_seed", "train_cells"]


def make_policy(config: ml_collections.ConfigDict, precision: str, group_size: int | None,
                *, fc2_int8: bool = False) -> QuantPolicy:
  """The `QuantPolicy` of a precision label ("FP32", "W4A4", "W4A16", "W16A4").

  Example:
    >>> cfg = ml_collections.ConfigDict(dict(quant=dict(bits=4, fc2_bits=8, fmt="int",
    ...     absmax_m="paper", act_quantizer="absmax")))
    >>> make_policy(cfg, "W4A4", 32, fc2_int8=True).name
    'W4A4 G32 +overrides'
  """
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
  """Parameter count without the token embedding and the LM head.

  Example:
    >>> non_embedding_params({"embed": {"e": np.zeros((256, 8))}, "block_0": {"w": np.zeros(5)}})
    5
  """
  return int(sum(x.size for k, v in params.items() if k not in ("embed", "lm_head")
                 for x in jax.tree.leaves(v)))


def make_trainer(model, t: ml_collections.ConfigDict, opt: ml_collections.ConfigDict):
  """A jitted `train(keys, qat, batches, num_steps, val_batches) -> dict` for `model`.

  The optimizer is `jaxlab.train.optimizer(opt, num_steps)` (`opt`: the config's
  `optimizer` section); `t`: `smooth_frac` and `fast_compile` of the `train` section.

  keys: the init keys, one per seed [S] (parameters are initialized inside the
  program, so every run with the same key starts from identical weights and
  init costs no extra compile); qat: the run-time quantization knobs
  (`jaxlab.quant.runtime_knobs`), shared by the seeds;
  batches: int32 [S, max_steps, B, T+1] (the first `num_steps` are used, in order);
  num_steps: traced int32 (the schedule of `opt` stretches to it); val_batches:
  int32 [V, B, T+1], shared. Knobs and budget are traced, so every precision, G
  and D of one model size share one compiled program; seeds are vmapped.
  Returns {"train_loss" (smoothed) [S], "val_loss" [S], "kurtosis" (tree of [S])}.

  Example::

    train = make_trainer(model, config.train, config.optimizer)
    out = train(init_keys, qat, batches, jnp.int32(steps), val_batches)
  """
  def ce(params, qat, batch):
    logits = model.apply({"params": params, "qat": qat}, batch[:, :-1])
    return optax.softmax_cross_entropy_with_integer_labels(logits, batch[:, 1:]).mean()

  def train(key, qat, batches, num_steps, val_batches):
    params = model.init(key, batches[0, :1, :-1])["params"]
    tx = optimizer(opt, num_steps)  # the schedule stretches to the traced num_steps
    window = jnp.maximum(jnp.floor(t.smooth_frac * num_steps), 1).astype(jnp.int32)

    def body(i, carry):
      params, opt_state, acc = carry
      loss, grads = jax.value_and_grad(ce)(params, qat, batches[i])
      updates, opt_state = tx.update(grads, opt_state, params)
      params = optax.apply_updates(params, updates)
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


def kurtosis_table(tree: dict) -> dict[str, list[float]]:
  """Per seed, the mean over blocks of the input kurtosis of QKV / O / FC1 / FC2.

  Example:
    >>> blk = {"attn": {"q": {"input": [3.0]}, "o": {"input": [4.0]}},
    ...        "mlp": {"gate": {"input": [5.0]}, "down": {"input": [9.0]}}}
    >>> kurtosis_table({"block_0": blk})["FC2"]
    [9.0]
  """
  out = {}
  for label, sub in LINEARS.items():
    group, name = sub.split("/")
    vals = [np.asarray(blk[group][name]["input"], np.float64) for key, blk in tree.items()
            if key.startswith("block_")]
    out[label] = np.mean(vals, axis=0).tolist()
  return out


def cell_key(size: Sequence[int], steps: int, precision: str, g: int | None,
             fc2: bool) -> str:
  """The name of a cell: size (d_model, d_ff), steps, precision, G, FC2 at INT8.

  Example:
    >>> cell_key((32, 96), 24, "FP32", None, False)
    'd32_f96_s24_FP32_gNone'
  """
  return f"d{size[0]}_f{size[1]}_s{steps}_{precision}_g{g}" + ("_fc2int8" if fc2 else "")


def check_grid(config: ml_collections.ConfigDict) -> None:
  """ValueError naming the key for a grid or train value refused before any training.

  A wrong value would otherwise surface after the whole grid, or, for smooth_frac > 1,
  silently divide the loss sum by more steps than were run.

  Example:
    >>> cfg = ml_collections.ConfigDict(dict(train=dict(smooth_frac=0.1),
    ...     grid=dict(group_sizes=(8, 32), fc2_group_sizes=(32,))))
    >>> check_grid(cfg)
  """
  gr, t = config.grid, config.train
  if not 0.0 < float(t.smooth_frac) <= 1.0:
    raise ValueError(f"train.smooth_frac must lie in (0, 1], got {t.smooth_frac}")
  missing = sorted({int(g) for g in gr.fc2_group_sizes} - {int(g) for g in gr.group_sizes})
  if missing:
    raise ValueError(f"grid.fc2_group_sizes {missing} need W4A4 cells at the same G; add them "
                     "to grid.group_sizes")


def train_cells(config: ml_collections.ConfigDict, seeds: Sequence[int],
                run_arm: Callable[[str, Callable[[], Any]], Any] | None = None
                ) -> dict[str, dict]:
  """Trains every cell of `config.grid` for every seed (vmapped), one `run_arm` per cell.

  Args:
    config: `grid` (sizes, steps, precisions, group_sizes, fc2_group_sizes), `model`,
      `quant`, `train`, `optimizer`, `eval`, `data`.
    seeds: the paired seeds (init key and batch order of seed s, shared by every
      precision).
    run_arm: `run_arm(cell key, fn)` -> `fn()`'s record, e.g. a cached `Study.arm`;
      default: `fn()`. The programs of every size compile ahead on a worker thread.

  Returns:
    {cell key: record}; a record's `train_loss`, `val_loss` and each kurtosis entry
    are per-seed lists in `seeds` order (NaN where a seed diverged).

  Example::

    records = train_cells(config, config.seeds)
  """
  check_grid(config)
  gr, t = config.grid, config.train
  seeds = [int(s) for s in seeds]
  run_arm = run_arm or (lambda name, fn: fn())
  corpus = data.load_corpus(max_bytes=config.data.max_bytes, val_fraction=config.data.val_fraction)
  max_steps = max(gr.steps)
  # [S, steps, B, T+1]: seed s draws its own batch order; every precision reuses it.
  batches = jnp.asarray(np.stack([np.stack([
      data.lm_batch(corpus.train, i, batch_size=t.batch_size, seq_len=t.seq_len, seed=seed)
      for i in range(max_steps)]) for seed in seeds]))
  val = jnp.asarray(np.stack([
      data.lm_batch(corpus.val, i, batch_size=config.eval.batch_size, seq_len=t.seq_len,
                    seed=config.eval.seed) for i in range(config.eval.num_batches)]))
  runs = [("FP32", None, False)]
  runs += [(p, g, False) for p in gr.precisions for g in gr.group_sizes]
  runs += [("W4A4", g, True) for g in gr.fc2_group_sizes]
  groups = tuple(dict.fromkeys(tuple(gr.group_sizes) + tuple(gr.fc2_group_sizes)))
  runtime = make_policy(config, "W4A4", groups[0])
  runtime = dataclasses.replace(runtime, runtime_group_sizes=groups)
  # One model per size; its program compiles on a worker thread while the cells of the
  # sizes before it run (on 2 cores compiling is a large part of a run).
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
  with CompileAhead() as ahead:
    trainers = {}
    for size, model, variables in sizes:
      qat = runtime_knobs(make_policy(config, "FP32", None), variables["qat"], group_sizes=groups)
      trainers[size] = ahead.submit(make_trainer(model, t, config.optimizer), init_keys, qat,
                                    batches, jax.ShapeDtypeStruct((), jnp.int32), val)
    for size, _, variables in sizes:
      n = non_embedding_params(variables["params"])
      for precision, g, fc2 in runs:
        for steps in gr.steps:
          key = cell_key(size, steps, precision, g, fc2)

          def cell(precision=precision, g=g, fc2=fc2, steps=steps, size=size, n=n,
                   variables=variables):
            qat = runtime_knobs(make_policy(config, precision, g, fc2_int8=fc2),
                                variables["qat"], group_sizes=groups)
            out = jax.device_get(trainers[size](init_keys, qat, batches, jnp.int32(steps), val))
            # A diverged seed stays NaN: judged as missing, never dropped.
            return {"d_model": size[0], "d_ff": size[1], "n": n,
                    "d": steps * t.batch_size * t.seq_len, "steps": steps,
                    "precision": precision, "group_size": g, "fc2_int8": fc2, "seeds": seeds,
                    "train_loss": np.asarray(out["train_loss"], np.float64).tolist(),
                    "val_loss": np.asarray(out["val_loss"], np.float64).tolist(),
                    "kurtosis": kurtosis_table(out["kurtosis"])}

          records[key] = run_arm(key, cell)
  return records


def per_seed(values: Any) -> np.ndarray:
  """A stored per-seed list as float64 (None, from a JSON NaN, becomes NaN).

  Example:
    >>> per_seed([1.0, None]).tolist()
    [1.0, nan]
  """
  return np.array([np.nan if v is None else v for v in values], np.float64)


def deltas(config: ml_collections.ConfigDict, records: dict[str, dict]) -> list[dict]:
  """One row per (size, steps, precision, G): per-seed delta (train, val) vs the paired FP32.

  Example::

    rows = deltas(config, train_cells(config, seeds))
  """
  rows = []
  gr = config.grid
  for size in gr.sizes:
    size = tuple(int(s) for s in size)
    for steps in gr.steps:
      fp = records[cell_key(size, steps, "FP32", None, False)]
      cells = [(p, g, False) for p in gr.precisions for g in gr.group_sizes]
      cells += [("W4A4", g, True) for g in gr.fc2_group_sizes]
      for p, g, fc2 in cells:
        r = records[cell_key(size, steps, p, g, fc2)]
        delta = per_seed(r["train_loss"]) - per_seed(fp["train_loss"])
        rows.append({"precision": p + ("+FC2int8" if fc2 else ""), "n": r["n"], "d": r["d"],
                     "g": g, "d_model": size[0], "steps": steps,
                     "delta": delta.tolist(),
                     "delta_mean": float(np.mean(delta)),
                     "delta_val": (per_seed(r["val_loss"]) - per_seed(fp["val_loss"])).tolist(),
                     "fp32_train_loss": per_seed(fp["train_loss"]).tolist()})
  return rows


def fit_law(rows: list[dict], precision: str, config: ml_collections.ConfigDict) -> dict | None:
  """Signed-exponent fit of the law on `precision`'s seed-mean deltas; None if under 3 cells.

  Only the exponents of the axes the grid varies are fitted (Huber + L-BFGS,
  `config.fit`); with a handful of cells they are fragile, so they are reported,
  never judged.

  Example::

    fit = fit_law(deltas(config, records), "W4A4", config)   # {"k", "gamma_n", ...}
  """
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


def kurtosis_by_precision(records: dict[str, dict]) -> dict[str, dict[str, list[float]]]:
  """Per seed, the input kurtosis of each linear, mean over the cells of FP32 / of W4A4.

  Example::

    kurt = kurtosis_by_precision(train_cells(config, seeds))   # kurt["FP32"]["FC2"]
  """
  out = {}
  for label, sel in (("FP32", lambda r: r["precision"] == "FP32"),
                     ("W4A4", lambda r: r["precision"] == "W4A4" and not r["fc2_int8"])):
    tables = [r["kurtosis"] for r in records.values() if sel(r)]
    out[label] = {k: np.mean([per_seed(tb[k]) for tb in tables], axis=0).tolist()
                  for k in LINEARS}
  return out


def fc2_reduction(rows: list[dict], group_sizes: Sequence[int]) -> dict[int, float]:
  """The FC2 fix: relative delta reduction of W4A4+FC2int8 vs W4A4 at each G.

  On seed-mean deltas, mean over the cells of that G; NaN where W4A4's delta is 0.

  Example:
    >>> rows = [{"precision": "W4A4", "g": 32, "delta_mean": 0.2},
    ...         {"precision": "W4A4+FC2int8", "g": 32, "delta_mean": 0.15}]
    >>> round(fc2_reduction(rows, (32,))[32], 6)
    0.25
  """
  out = {}
  for g in group_sizes:
    base = np.mean([r["delta_mean"] for r in rows if r["precision"] == "W4A4" and r["g"] == g])
    fixed = np.mean([r["delta_mean"] for r in rows
                     if r["precision"] == "W4A4+FC2int8" and r["g"] == g])
    out[int(g)] = float((base - fixed) / abs(base)) if base else float("nan")
  return out


_AXIS_LABELS = {"n": "N (non-embedding params)", "d": "D (tokens)", "g": "G (group size)"}


def draw_deltas(ax: Any, rows: list[dict], axis: str, fit: dict | None) -> None:
  """Draws W4A4's seed-mean delta against `axis` ("n", "d" or "g"), one series per setting of
  the other two, with the fitted law (`fit_law`'s dict; None: points only).

  Example::

    jaxlab.report.save_plot(workdir, "delta_vs_G.png",
                            lambda ax: draw_deltas(ax, rows, "g", fit_law(rows, "W4A4", config)))
  """
  sel = [r for r in rows if r["precision"] == "W4A4"]
  law = None if fit is None else scaling_law.QATLaw(
      fit["k"], fit["gamma_n"] or 0.0, fit["gamma_d"] or 0.0, fit["gamma_g"] or 0.0)
  others = [a for a in _AXIS_LABELS if a != axis]
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
  ax.set_xlabel(_AXIS_LABELS[axis])
  ax.set_ylabel("delta W4A4 (nats/byte, seed mean)")
  ax.legend(fontsize=6)
