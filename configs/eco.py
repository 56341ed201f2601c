"""Experiment `eco`: ECO, training without FP32 master weights (quantization.md §2).

  python -m launch.main --config=configs/eco.py:quick --workdir=runs/eco

(a) Convex toy: least squares d=256 on a uniform grid (step `toy.grid_step`;
jaxlab interpretation of "a coarse grid"), SGDM beta=0.9, constant learning
rates 1e-1..1e-4 and an exponentially decaying schedule; distance of the
deployed (on-grid) weights to the optimum for master / naive-RTN / naive-SR /
ECO-RTN / ECO-SR / exact-EF, averaged over the last `toy.tail_fraction` of
the steps and over `toy.seeds` problems. The master arm is the spec's
reference: FP32 master weights with gradients through the quantized (RTN)
forward (`toy.master_forward="fp32"` takes them at the master weights).
(b) Tiny byte LM on the stdlib corpus with FP8 E4M3 (per-row scale) and INT4
(group 32) weights, AdamW with warmup + cosine: val bits/byte against static
bytes per parameter for the same arms.

Presets: smoke (tests: 2 toy lrs, FP8 only, 2 LM arms), quick (~3 min on
2 cores), full (bigger LM, more steps). Override any field, e.g.
`--config.train.num_steps=600`.
"""

import ml_collections

from jaxlab.presets import parse_preset

ARMS = ("master", "naive_rtn", "naive_sr", "eco_rtn", "eco_sr", "exact_ef")


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  preset = parse_preset(arg)
  c = ml_collections.ConfigDict()
  c.experiment = "eco"
  c.preset = preset
  c.seed = 0

  c.toy = ml_collections.ConfigDict(dict(
      dim=256, rows=1024, curvature=3.0, grid_step=2.0 ** -4, momentum=0.9,
      lrs=(1e-1, 1e-2, 1e-3, 1e-4), decay=(1e-1, 1e-4), num_steps=6000, arms=ARMS,
      seeds=(0, 1, 2), tail_fraction=0.1, master_forward="quantized"))
  # (b) the tiny LM: formats and arms here, its training in `train` / `optimizer`.
  # (The toy's `lrs` / `decay` are the swept variable of part (a), not a knob.)
  c.lm = ml_collections.ConfigDict(dict(
      formats=("fp8_e4m3", "int4"), int4_block=32, fp8_granularity="row", arms=ARMS,
      min_ndim=2))
  c.train = ml_collections.ConfigDict(dict(num_steps=200, batch_size=16, seq_len=64))
  c.optimizer = ml_collections.ConfigDict(dict(
      learning_rate=3e-3, schedule="warmup_cosine", warmup_steps=30, end_frac=0.1,
      b1=0.9, b2=0.95, eps=1e-8, weight_decay=0.1, grad_clip=1.0))
  c.data = ml_collections.ConfigDict(dict(max_bytes=2_000_000, val_fraction=0.1))
  c.model = ml_collections.ConfigDict(dict(
      d_model=64, num_layers=2, num_heads=4, num_kv_heads=2, d_ff=128, max_len=64))
  c.eval = ml_collections.ConfigDict(dict(batch_size=32, num_batches=8, seed=12345))
  # Verdict thresholds (the "Done when" lines).
  c.claims = ml_collections.ConfigDict(dict(toy_ratio=2.0, lm_rel_gap=0.02, memory_saving=0.2))

  if preset == "smoke":
    c.toy.update(lrs=(1e-1, 1e-3), num_steps=500, arms=("master", "naive_rtn", "eco_rtn"),
                 seeds=(0,))
    c.lm.update(formats=("fp8_e4m3",), arms=("master", "eco_sr"))
    c.train.update(num_steps=10, batch_size=4, seq_len=32)
    c.optimizer.warmup_steps = 3
    c.data.max_bytes = 300_000
    c.model.update(d_model=32, num_layers=1, num_heads=2, num_kv_heads=1, d_ff=64, max_len=32)
    c.eval.update(batch_size=4, num_batches=1)
  elif preset == "full":
    c.toy.num_steps = 20000
    c.train.update(num_steps=2000, batch_size=32, seq_len=128)
    c.optimizer.warmup_steps = 100
    c.data.max_bytes = 4_000_000
    c.model.update(d_model=128, num_layers=4, num_heads=4, num_kv_heads=2, d_ff=384, max_len=128)
    c.eval.num_batches = 16
  return c
