"""Experiment `fp4`: MixFP4 vs NVFP4 vs MXFP4 (method 1, quantization.md §1).

(a) Tensor-level error (SQNR, MSE) of FP8 E4M3, INT4-g16, MXFP4 (OCP floor and
RCEIL), NVFP4 and MixFP4 on synthetic Gaussian/Laplace/Student-t(3)/uniform
tensors and on the tiny LM's projection weights, with MixFP4's E1M2 share.
(b) Post-training quantization of the tiny LM: validation bits/byte under
W4A16 (weights fake-quantized along their input axis) and W4A4 (plus every
projection input fake-quantized per token in blocks along d) for NVFP4,
MXFP4 and MixFP4 against the FP32 model.

jaxlab interpretations (config knobs): the LM head stays FP32
(`lm.quantize_lm_head`); W4A4 activations use the same format as the weights
and a dynamic NVFP4/MixFP4 tensor scale over the whole activation tensor of a
forward call (`lm.act_scale="tensor"`; "token" gives every token its own
tensor scale, so a sequence's score does not depend on the other rows of its
eval batch).

Verdict: `jaxlab.report.judge_all` on `config.criteria` (see configs/fp4.py),
with per-seed bits/byte of every arm on the seed's held-out windows (paired);
MixFP4's SQNR >= NVFP4's is true by construction and reported as a `Fact`.
"""

import dataclasses
import functools
import math
import os
import time
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import traverse_util

from jaxlab import data, formats, report
from jaxlab.nn import Transformer
from jaxlab.nn.transformer import default_dense
from jaxlab.presets import config_seeds
from jaxlab.train import lm as train_lm

# Format names are `jaxlab.formats` presets (the one quantization vocabulary).
FORMATS = formats.PRESETS


def _format(name: str) -> tuple[str, dict[str, Any]]:
  if name not in FORMATS:
    raise ValueError(f"Unknown format {name!r}; expected one of {sorted(FORMATS)}")
  return name, {}


def synthetic_tensor(dist: str, key: jax.Array, shape: tuple[int, int]) -> jax.Array:
  """A float32 tensor of i.i.d. samples from `dist`."""
  if dist == "gaussian":
    return jax.random.normal(key, shape)
  if dist == "laplace":
    return jax.random.laplace(key, shape)
  if dist == "student_t3":
    return jax.random.t(key, 3.0, shape)
  if dist == "uniform":
    return jax.random.uniform(key, shape, minval=-1.0, maxval=1.0)
  raise ValueError(f"Unknown distribution {dist!r}")


@functools.partial(jax.jit, static_argnames=("name", "axis"))
def _qdq_stats(x: jax.Array, name: str, axis: int) -> tuple[jax.Array, jax.Array, jax.Array]:
  fmt, opts = _format(name)
  q = formats.quantize(x, fmt, axis=axis, **opts)
  xh = formats.dequantize(q)
  return jnp.sum((x - xh) ** 2), jnp.sum(x * x), q.e1m2_fraction()


def format_error(x: jax.Array, name: str, *, axis: int = -1) -> dict[str, float]:
  """SQNR (dB), MSE, bits/element and E1M2 share of format `name` on `x`."""
  fmt, opts = _format(name)
  err, sig, share = (float(v) for v in _qdq_stats(x, name, axis))
  return {"sqnr_db": 10 * math.log10(sig / max(err, 1e-30)), "mse": err / x.size,
          "sum_sq_err": err, "sum_sq": sig, "e1m2_share": share,
          "bits_per_element": formats.make_format(fmt, **opts).bits_per_element(x.shape[axis])}


@functools.partial(jax.jit, static_argnames=("names", "axis"))
def _multi_stats(xs: tuple[jax.Array, ...], names: tuple[str, ...], axis: int):
  """Per format, per stacked group [g, ...]: (sum sq err, sum sq, E1M2 share) of shape [g].

  `jax.vmap` keeps every tensor-level scale per tensor of the group, and one
  compiled instance serves all tensors of a shape (much less compile time).
  """
  return {n: [jax.vmap(lambda x, n=n: _qdq_stats(x, n, axis))(g) for g in xs] for n in names}


def synthetic_study(config: ml_collections.ConfigDict,
                    seed: int | None = None) -> dict[str, dict[str, dict[str, float]]]:
  """{distribution: {format: SQNR/MSE/E1M2 share}} on tensors drawn with `seed` (default config.seed)."""
  s = config.synthetic
  seed = config.seed if seed is None else seed
  names = tuple(config.formats)
  out = {}
  for i, dist in enumerate(s.distributions):
    x = synthetic_tensor(dist, jax.random.key(seed * 1000 + i), (s.rows, s.cols))
    stats = _multi_stats((x[None],), names, -1)
    out[dist] = {n: _summarize(n, [x], stats[n]) for n in names}
  return out


def _mean_tables(tables: list[Any]) -> Any:
  """Seed mean of nested {..: {key: float}} tables of the same structure."""
  first = tables[0]
  if isinstance(first, dict):
    return {k: _mean_tables([t[k] for t in tables]) for k in first}
  return float(np.mean(tables))


def _summarize(name: str, xs: list[jax.Array], stats: list) -> dict[str, float]:
  """Totals over tensors: SQNR = total signal / total error, size-weighted E1M2 share."""
  err = float(sum(jnp.sum(st[0]) for st in stats))
  sig = float(sum(jnp.sum(st[1]) for st in stats))
  shares = np.concatenate([np.asarray(st[2]) for st in stats])
  sizes = [x.size for x in xs]
  return {"sqnr_db": 10 * math.log10(sig / max(err, 1e-30)), "mse": err / sum(sizes),
          "e1m2_share": float(np.average(shares, weights=sizes))}


def _kernels(params: Any) -> dict[str, jax.Array]:
  flat = traverse_util.flatten_dict(params, sep="/")
  return {k: v for k, v in flat.items() if k.endswith("/kernel") and v.ndim == 2}


def weight_study(params: Any, names: tuple[str, ...]) -> dict[str, dict[str, float]]:
  """Aggregate SQNR over every projection kernel ([in, out], blocks along `in`).

  SQNR = total signal / total error over all kernels; E1M2 share weighted by size.
  """
  groups: dict[tuple[int, ...], list[jax.Array]] = {}
  for w in _kernels(params).values():
    groups.setdefault(tuple(w.shape), []).append(w)
  stacked = tuple(jnp.stack(g) for g in groups.values())
  order = [w for g in groups.values() for w in g]
  stats = _multi_stats(stacked, tuple(names), 0)
  return {n: _summarize(n, order, stats[n]) for n in names}


ACT_SCALES = ("tensor", "token")


class FakeQuantDense(nn.Module):
  """Bias-free Dense whose input is fake-quantized per token (W4A4 PTQ).

  The kernel is used as given (quantize it beforehand for W4A4); the input
  [..., d] is fake-quantized in blocks along d with `act_format`, its tensor
  scale taken over the whole input (`act_scale="tensor"`) or over each token's
  d values (`"token"`). Parameter names match `nn.Dense`, so FP32 checkpoints
  load unchanged.
  """
  features: int
  act_format: str
  act_scale: str = "tensor"
  dtype: Any = jnp.float32
  param_dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    kernel = self.param("kernel", nn.initializers.lecun_normal(), (x.shape[-1], self.features),
                        self.param_dtype)
    fmt, opts = _format(self.act_format)
    x32 = x.astype(jnp.float32)
    if self.act_scale == "tensor":
      xq = formats.fake_quant(x32, fmt, axis=-1, **opts)
    elif self.act_scale == "token":
      rows = x32.reshape(-1, 1, x.shape[-1])  # each token its own [1, d] tensor
      xq = jax.vmap(lambda r: formats.fake_quant(r, fmt, axis=-1, **opts))(rows)
      xq = xq.reshape(x.shape)
    else:
      raise ValueError(f"act_scale must be one of {ACT_SCALES}, got {self.act_scale!r}")
    return jnp.dot(xq.astype(self.dtype), kernel.astype(self.dtype))


def w4a4_dense_factory(act_format: str, quantize_lm_head: bool, act_scale: str = "tensor"):
  """A `TransformerConfig.dense` factory that fake-quantizes projection inputs."""

  def dense(features: int, *, name: str, dtype: Any, param_dtype: Any) -> nn.Module:
    if name == "lm_head" and not quantize_lm_head:
      return default_dense(features, name=name, dtype=dtype, param_dtype=param_dtype)
    return FakeQuantDense(features, act_format, act_scale, dtype=dtype, param_dtype=param_dtype,
                          name=name)
  return dense


@functools.partial(jax.jit, static_argnames=("name", "quantize_lm_head"))
def quantize_weights(params: Any, name: str, *, quantize_lm_head: bool) -> Any:
  """Params with every projection kernel fake-quantized along its input axis."""
  fmt, opts = _format(name)
  flat = traverse_util.flatten_dict(params, sep="/")
  new = {}
  for k, v in flat.items():
    is_proj = k.endswith("/kernel") and v.ndim == 2
    if is_proj and (quantize_lm_head or not k.startswith("lm_head")):
      v = formats.fake_quant(v, fmt, axis=0, **opts)
    new[k] = v
  return traverse_util.unflatten_dict(new, sep="/")


EVAL_SEED_STRIDE = 1000  # window seed of evaluation seed s: lm.eval_seed + 1000 * s


def _evaluator(corpus, c, seed: int):
  """bits/byte(model, params) on evaluation seed `seed`'s val windows; one compile per model."""
  batches = [data.lm_batch(corpus.val, i, batch_size=c.eval_batch_size, seq_len=c.eval_seq_len,
                           seed=c.eval_seed + EVAL_SEED_STRIDE * seed)
             for i in range(c.eval_num_batches)]
  compiled = {}

  def bpb(model, params):
    if model not in compiled:
      compiled[model] = jax.jit(train_lm.next_byte_loss(model))
    loss = compiled[model]
    v = sum(float(loss(params, b, None)[0]) for b in batches) / len(batches) / math.log(2)
    return v if math.isfinite(v) else math.nan  # a diverged arm is a missing seed
  return bpb


def ptq_study(config: ml_collections.ConfigDict, workdir: str,
              seeds: tuple[int, ...] | None = None) -> dict[str, Any]:
  """PTQ of the base LM of `config` (its lm sections), trained once into `config.base_lm_dir`.

  Returns per-seed lists (in `seeds` order) of val bits/byte: "fp32" [seeds] and
  "w4a16"/"w4a4" {format: [seeds]}, plus the weight SQNR study.
  """
  c = config.lm
  seeds = tuple(int(s) for s in (config.seeds if seeds is None else seeds))
  cache_dir = config.base_lm_dir or os.path.join(workdir, "base_lm")
  t0 = time.perf_counter()
  model, params, corpus = train_lm.pretrained(config, cache_dir)
  t1 = time.perf_counter()
  arms = [("fp32", None, model, params)]
  for name in c.ptq_formats:
    qparams = quantize_weights(params, name, quantize_lm_head=c.quantize_lm_head)
    w4a4 = Transformer(dataclasses.replace(model.config,
                                           dense=w4a4_dense_factory(name, c.quantize_lm_head,
                                                                    c.act_scale)))
    arms += [("w4a16", name, model, qparams), ("w4a4", name, w4a4, qparams)]
  res: dict[str, Any] = {"fp32": [], "w4a16": {n: [] for n in c.ptq_formats},
                         "w4a4": {n: [] for n in c.ptq_formats}, "seeds": list(seeds)}
  for s in seeds:
    bpb = _evaluator(corpus, c, s)
    for regime, name, m, p in arms:
      (res["fp32"] if name is None else res[regime][name]).append(bpb(m, p))
  t2 = time.perf_counter()
  res["weights"] = weight_study(params, tuple(config.formats))
  res["timings_s"] = {"pretrained": t1 - t0, "ptq_evals": t2 - t1,
                      "weights": time.perf_counter() - t2}
  res["num_params"] = int(sum(x.size for x in jax.tree.leaves(params)))
  return res


def measure(syn_per_seed: list[dict], ptq: dict | None) -> dict[str, Any]:
  """Per-seed values of `configs/fp4.py`'s criteria (absent = not measured)."""
  out: dict[str, Any] = {}
  if ptq is not None:
    for regime in ("w4a16", "w4a4"):
      r = ptq[regime]
      if "mixfp4" in r and "nvfp4" in r:
        out[f"{regime}_mix_vs_nv"] = (r["mixfp4"], r["nvfp4"])
      if "nvfp4" in r and "mxfp4_floor" in r:
        out[f"{regime}_nv_vs_mx"] = (r["nvfp4"], r["mxfp4_floor"])
  present = next(iter(syn_per_seed[0].values()))
  mx = [n for n in ("mxfp4_floor", "mxfp4_rceil") if n in present]
  if mx:
    out["sqnr_nv_vs_mx"] = [min(r["nvfp4"]["sqnr_db"] - max(r[n]["sqnr_db"] for n in mx)
                                for r in syn.values()) for syn in syn_per_seed]
  return out


def facts(syn_per_seed: list[dict], ptq: dict | None,
          config: ml_collections.ConfigDict) -> list[report.Fact]:
  """What holds by construction: reported beside the criteria, never judged."""
  tensors = [r for syn in syn_per_seed for r in syn.values()]
  if ptq is not None:
    tensors.append(ptq["weights"])
  gain = min(r["mixfp4"]["sqnr_db"] - r["nvfp4"]["sqnr_db"] for r in tensors)
  bits = {n: formats.make_format(n).bits_per_element(config.synthetic.cols)
          for n in ("nvfp4", "mixfp4")}
  return [
      report.Fact("sqnr_mix_ge_nv", "SQNR MixFP4 >= NVFP4 on every tensor (each block keeps the "
                  "lower-error of E2M1 / E1M2 on the same scales); min gain over tensors and seeds",
                  round(gain, 3), "dB"),
      report.Fact("bits_per_element", "MixFP4 and NVFP4 store the same bits per element "
                  "(the E1M2 flag is the scale byte's sign bit)",
                  f"MixFP4 {bits['mixfp4']:g}, NVFP4 {bits['nvfp4']:g}", "bits")]


def run(config: ml_collections.ConfigDict, workdir: str) -> dict:
  """Runs parts (a) and (b) and writes results.json with the report row."""
  os.makedirs(workdir, exist_ok=True)
  for name in config.formats:
    _format(name)
  for needed in ("nvfp4", "mixfp4"):
    if needed not in config.formats:
      raise ValueError(f"config.formats must include {needed!r} (the comparison)")
  for name in config.lm.ptq_formats:
    _format(name)
  if config.lm.act_scale not in ACT_SCALES:  # before the base LM trains
    raise ValueError(f"lm.act_scale must be one of {ACT_SCALES}, got {config.lm.act_scale!r}")
  seeds = tuple(config_seeds(config))
  t0 = time.perf_counter()
  syn_per_seed = [synthetic_study(config, s) for s in seeds]
  syn = _mean_tables(syn_per_seed)
  t1 = time.perf_counter()
  ptq = ptq_study(config, workdir, seeds) if config.lm.enabled else None
  timings = {"synthetic": t1 - t0, "lm": time.perf_counter() - t1}
  verdict, criteria = report.judge_all(config.criteria, measure(syn_per_seed, ptq))
  fact_list = facts(syn_per_seed, ptq, config)
  # Seed means for display (the criteria judge the per-seed values).
  ptq_mean = None if ptq is None else {
      "fp32": float(np.nanmean(ptq["fp32"])), "weights": ptq["weights"],
      **{regime: {n: float(np.nanmean(v)) for n, v in ptq[regime].items()}
         for regime in ("w4a16", "w4a4")}}

  plots = [report.save_plot(workdir, "fp4_sqnr.png", lambda ax: _draw_sqnr(ax, syn, config))]
  if ptq_mean is not None:
    plots.append(report.save_plot(workdir, "fp4_ptq.png", lambda ax: _draw_ptq(ax, ptq_mean)))

  def line(r):
    return ", ".join(f"{d} {r[d]['sqnr_db']:.2f}" for d in r)
  nv = {d: syn[d]["nvfp4"] for d in syn}
  mix = {d: syn[d]["mixfp4"] for d in syn}
  baseline = f"NVFP4 SQNR dB: {line(nv)}"
  ours = f"MixFP4 SQNR dB: {line(mix)}"
  if ptq_mean is not None:
    baseline = (f"NVFP4 W4A16 {ptq_mean['w4a16'].get('nvfp4', float('nan')):.3f}, W4A4 "
                f"{ptq_mean['w4a4'].get('nvfp4', float('nan')):.3f} bits/byte (FP32 "
                f"{ptq_mean['fp32']:.3f}); " + baseline)
    ours = (f"MixFP4 W4A16 {ptq_mean['w4a16'].get('mixfp4', float('nan')):.3f}, W4A4 "
            f"{ptq_mean['w4a4'].get('mixfp4', float('nan')):.3f} bits/byte; " + ours)
  table = _table(syn, ptq_mean, config)
  seed_text = (f"{len(seeds)} evaluation seeds {list(seeds)}: each scores every arm on its own "
               f"{config.lm.eval_num_batches}x{config.lm.eval_batch_size} held-out windows of "
               f"{config.lm.eval_seq_len} bytes and draws its own synthetic tensors; one base LM, "
               "RTN (calibration-free) quantizers, so the seed noise is the held-out sample's. "
               "Values are seed means. ")
  row = report.ReportRow(
      method="MixFP4: per-block E2M1/E1M2 choice in NVFP4's layout (formats + Pallas kernels)",
      paper_claim=("MixFP4 gives \"more robust and more accurate FP4 quantization than NVFP4\" "
                   "at the same 4.5 bits/element (judged: tiny-LM PTQ bits/byte at W4A16 and "
                   "W4A4; spec's expected order NVFP4 >= MXFP4 as diagnostics)"),
      baseline=baseline, ours=ours, verdict=verdict,
      details=f"preset={config.preset}. " + seed_text + table,
      plots=tuple(plots), criteria=criteria, facts=fact_list)
  results = {"seeds": list(seeds), "synthetic": syn, "synthetic_per_seed": syn_per_seed,
             "ptq": ptq, "ptq_mean": ptq_mean, "timings_s": timings,
             "criteria": [dataclasses.asdict(r) for r in criteria],
             "facts": [dataclasses.asdict(f) for f in fact_list],
             "report": dataclasses.asdict(row)}
  report.write_results(workdir, results)
  return results


def _table(syn: dict, ptq: dict | None, config: ml_collections.ConfigDict) -> str:
  parts = []
  for dist, r in syn.items():
    cells = ", ".join(f"{n} {r[n]['sqnr_db']:.2f}" for n in config.formats)
    parts.append(f"{dist} SQNR dB: {cells} (MixFP4 E1M2 share {r['mixfp4']['e1m2_share']:.2f})")
  if ptq is not None:
    w = ptq["weights"]
    parts.append("LM weights SQNR dB: " + ", ".join(
        f"{n} {w[n]['sqnr_db']:.2f}" for n in config.formats)
        + f" (MixFP4 E1M2 share {w['mixfp4']['e1m2_share']:.2f})")
    for regime in ("w4a16", "w4a4"):
      parts.append(f"PTQ {regime} bits/byte: FP32 {ptq['fp32']:.4f}, " + ", ".join(
          f"{n} {v:.4f}" for n, v in ptq[regime].items()))
  return "; ".join(parts) + "."


def _draw_sqnr(ax, syn, config):
  dists = list(syn)
  width = 0.8 / len(config.formats)
  for j, name in enumerate(config.formats):
    ax.bar(np.arange(len(dists)) + j * width, [syn[d][name]["sqnr_db"] for d in dists], width,
           label=name)
  ax.set_xticks(np.arange(len(dists)) + 0.4 - width / 2, dists)
  ax.set_ylabel("SQNR (dB)")
  ax.legend(fontsize=7, ncol=3)


def _draw_ptq(ax, ptq):
  names = list(ptq["w4a16"])
  x = np.arange(len(names))
  ax.bar(x - 0.2, [ptq["w4a16"][n] for n in names], 0.4, label="W4A16")
  ax.bar(x + 0.2, [ptq["w4a4"][n] for n in names], 0.4, label="W4A4")
  ax.axhline(ptq["fp32"], color="gray", ls="--", label="FP32")
  ax.set_xticks(x, names)
  ax.set_ylabel("val bits / byte")
  lo = min(ptq["fp32"], *ptq["w4a16"].values(), *ptq["w4a4"].values())
  hi = max(ptq["fp32"], *ptq["w4a16"].values(), *ptq["w4a4"].values())
  ax.set_ylim(lo - 0.1 * (hi - lo + 1e-3), hi + 0.1 * (hi - lo + 1e-3))
  ax.legend()
