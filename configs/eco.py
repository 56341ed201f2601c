"""Experiment `eco`: ECO, training without FP32 master weights (quantization.md §2).

  python -m launch.main --config=configs/eco.py:quick --workdir=runs/eco

(a) Convex toy: least squares d=256 on a uniform grid (step `toy.grid_step`;
jaxlab interpretation of "a coarse grid"), SGDM beta=0.9, constant learning
rates 1e-1..1e-4 and an exponentially decaying schedule; distance of the
deployed (on-grid) weights to the optimum for master / naive-RTN / naive-SR /
ECO-RTN / ECO-SR / exact-EF, averaged over the last `toy.tail_fraction` of
the steps, per problem (`toy.seeds`, the paired seeds of the toy criteria).
The master arm is ECO's reference: FP32 master weights with gradients
through the quantized (RTN) forward (`toy.master_forward="fp32"` takes them at
the master weights).
(b) Tiny byte LM on the stdlib corpus with FP8 E4M3 (per-row scale) and INT4
(group 32) weights, AdamW with warmup + cosine decay run to its end (the decay
is where the paper says naive removal degrades): val bits/byte at mid-run and
at the end, and static bytes per parameter, per arm and per seed (`seeds`:
the same init, data order and SR stream for every arm of a seed).

Criteria (`criteria`, judged on paired seeds by `jaxlab.report.judge_all`) are
declared below before any run logic; static bytes are facts, never judged.

Presets: smoke (tests: 2 toy lrs, FP8 only, 2 LM arms, 2 seeds), quick (3 LM
arms x 2 formats x 3 seeds, 5 toy arms x 3 problems; the `make demo` budget),
full (every arm, 5 seeds, bigger LM, more steps). Override any field, e.g.
`--config.train.num_steps=600`.
"""

import ml_collections

from jaxlab.presets import parse_preset

ARMS = ("master", "naive_rtn", "naive_sr", "eco_rtn", "eco_sr", "exact_ef")

# The paper's words are from its abstract (../shared/papers/ABSTRACTS.md); thresholds are
# jaxlab's reading of them and of the research notes (quantization.md §2d), fixed before any
# run.
_WITHIN_2PCT = 1.0 / 1.02  # "lower" ratio threshold t: baseline/method >= t, i.e. method <= 1.02x


def _criteria() -> ml_collections.ConfigDict:
  return ml_collections.ConfigDict(dict(
      # Primary: the abstract's headline claims.
      lm_fp8_near_lossless=dict(
          claim="\"ECO matches baselines with master weights up to near-lossless accuracy\" "
                "(FP8 pretraining); jaxlab's bar: ECO-SR val loss within 2% of master-weight "
                "training (the spec expects about 1%)",
          metric="val bits/byte after the full LR decay, FP8 ECO-SR / FP8 master (quantized "
                 "forward)", direction="lower", kind="ratio", threshold=_WITHIN_2PCT,
          primary=True),
      lm_fp8_pareto_vs_naive=dict(
          mechanism=True,  # the same master-free update without ECO's error injection
          claim="\"significantly shifting the static memory vs validation loss Pareto "
                "frontier\": at the same static bytes (no master copy), ECO-SR beats naive "
                "master-weight removal (RTN)",
          metric="val bits/byte after the full LR decay, FP8 ECO-SR / FP8 naive-RTN",
          direction="lower", kind="ratio", threshold=1.0, primary=True),
      toy_eco_sr_within_2x=dict(
          claim="\"ECO converges to a constant-radius neighborhood of the optimum\"; jaxlab's bar: "
                "ECO's error stays within 2x of master weights at every learning rate of the "
                "sweep (SR: the theory assumes zero-mean rounding)",
          metric="convex toy, per problem: max over the lr sweep (4 constant + decay) of "
                 "tail-mean |W - w*|, ECO-SR / master", direction="lower", kind="ratio",
          threshold=0.5, primary=True),
      # Secondary: the research notes' expectations for the baselines and the other variants.
      toy_eco_rtn_within_2x=dict(
          claim="jaxlab's bar: ECO-RTN's error also stays within 2x of master at every lr",
          metric="convex toy, per problem: max over the lr sweep of tail-mean |W - w*|, "
                 "ECO-RTN / master", direction="lower", kind="ratio", threshold=0.5,
          primary=False),
      toy_naive_sr_grows=dict(
          claim="\"naive master-weight removal can incur an error that is inversely "
                "proportional to the learning rate\" (a bound: does it grow?)",
          metric="convex toy, per problem: tail-mean |W - w*| of naive-SR at the smallest "
                 "constant lr / at the largest", direction="higher", kind="ratio",
          threshold=1.0, primary=False),
      toy_naive_rtn_stalls=dict(
          claim="spec: naive-RTN stalls once lr |g| < grid step / 2 (it stops making "
                "progress), >= 2x master's error",
          metric="convex toy, per problem: min over constant lr <= 1e-3 of tail-mean "
                 "|W - w*|, naive-RTN / master", direction="higher", kind="ratio",
          threshold=2.0, primary=False),
      lm_fp8_naive_degrades=dict(
          claim="spec: naive-RTN clearly worse than master weights (visibly worse; "
                "judged as > 2%)",
          metric="val bits/byte after the full LR decay, FP8 naive-RTN / FP8 master",
          direction="higher", kind="ratio", threshold=1.02, primary=False),
      lm_fp8_naive_decay_gap=dict(
          claim="naive removal's error grows as the learning rate decays (the abstract's "
                "1/lr term): naive-RTN gains less than master over the decay",
          metric="FP8 val bits/byte, (end - mid-run) of naive-RTN minus (end - mid-run) of "
                 "master", direction="higher", threshold=0.0, unit="bits/byte",
          primary=False),
      lm_int4_near_lossless=dict(
          claim="INT4: ECO-SR within 2% of master (the paper's INT4 result is fine-tuning "
                "DeepSeek-MoE-16B, not pretraining from scratch: secondary here)",
          metric="val bits/byte after the full LR decay, INT4 ECO-SR / INT4 master",
          direction="lower", kind="ratio", threshold=_WITHIN_2PCT, primary=False),
      lm_int4_pareto_vs_naive=dict(
          claim="INT4: ECO-SR beats naive removal (RTN) at the same static bytes (spec: the "
                "gaps should widen, the case ECO was made for)",
          metric="val bits/byte after the full LR decay, INT4 ECO-SR / INT4 naive-RTN",
          direction="lower", kind="ratio", threshold=1.0, primary=False)))


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  preset = parse_preset(arg)
  c = ml_collections.ConfigDict()
  c.experiment = "eco"
  c.preset = preset
  c.seed = 0  # offsets the toy's problems (toy.seeds)
  c.seeds = (0, 1, 2)  # the LM's paired seeds: init, data order and SR stream

  c.toy = ml_collections.ConfigDict(dict(
      dim=256, rows=1024, curvature=3.0, grid_step=2.0 ** -4, momentum=0.9,
      lrs=(1e-1, 1e-2, 1e-3, 1e-4), decay=(1e-1, 1e-4), num_steps=6000, arms=ARMS,
      seeds=(0, 1, 2), tail_fraction=0.1, master_forward="quantized"))
  # exact-EF (an upper bound that stores e) is decided by no criterion: full preset only.
  c.toy.arms = tuple(a for a in ARMS if a != "exact_ef")
  # (b) the tiny LM: formats and arms here, its training in `train` / `optimizer`.
  # (The toy's `lrs` / `decay` are the swept variable of part (a), not a knob.)
  c.lm = ml_collections.ConfigDict(dict(
      formats=("fp8_e4m3", "int4"), int4_block=32, fp8_granularity="row",
      arms=("master", "naive_rtn", "eco_sr"), min_ndim=2))
  c.train = ml_collections.ConfigDict(dict(num_steps=200, batch_size=16, seq_len=64))
  c.optimizer = ml_collections.ConfigDict(dict(
      learning_rate=3e-3, schedule="warmup_cosine", warmup_steps=30, end_frac=0.1,
      b1=0.9, b2=0.95, eps=1e-8, weight_decay=0.1, grad_clip=1.0))
  c.data = ml_collections.ConfigDict(dict(max_bytes=2_000_000, val_fraction=0.1))
  c.model = ml_collections.ConfigDict(dict(
      d_model=64, num_layers=2, num_heads=4, num_kv_heads=2, d_ff=128, max_len=64))
  c.eval = ml_collections.ConfigDict(dict(batch_size=32, num_batches=8, seed=12345))
  c.criteria = _criteria()

  if preset == "smoke":
    c.toy.update(lrs=(1e-1, 1e-3), num_steps=500, arms=("master", "naive_rtn", "eco_rtn"),
                 seeds=(0, 1))
    c.seeds = (0, 1)
    c.lm.update(formats=("fp8_e4m3",), arms=("master", "eco_sr"))
    c.train.update(num_steps=10, batch_size=4, seq_len=32)
    c.optimizer.warmup_steps = 3
    c.data.max_bytes = 300_000
    c.model.update(d_model=32, num_layers=1, num_heads=2, num_kv_heads=1, d_ff=64, max_len=32)
    c.eval.update(batch_size=4, num_batches=1)
  elif preset == "full":
    c.seeds = (0, 1, 2, 3, 4)
    c.toy.arms = ARMS
    c.lm.arms = ARMS
    c.toy.num_steps = 20000
    c.train.update(num_steps=2000, batch_size=32, seq_len=128)
    c.optimizer.warmup_steps = 100
    c.data.max_bytes = 4_000_000
    c.model.update(d_model=128, num_layers=4, num_heads=4, num_kv_heads=2, d_ff=384, max_len=128)
    c.eval.num_batches = 16
  return c
