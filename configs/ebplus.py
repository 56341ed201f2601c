"""EB / EB+ batching (Zhang et al., ICML 2026): calibrated simulator + tiny JAX engine.

  python -m launch.main --config=configs/ebplus.py:quick --workdir=runs/ebplus

Presets: smoke (~20 s of CPU, used by tests), quick (~3 min of CPU on 2
cores: the report row), full (10k requests
per run, the spec's 60 MB engine model over a 3x3x2 grid).
Quick computes, from the shipped H200 / RTX PRO 6000 calibrations with the
interference refitted to crossover shares 0.8 / 0.2: Fig. 4's workloads,
Table 4's load sweep, Table 5's shifts and a roofline bandwidth sweep; then
MB / EB / EB+ on the tiny JAX engine over a 2x2x2 (mu_L, mu_O, c) grid, with
the engine's own step model calibrated on this machine (CPU timings: noisy;
interleaved repeats, step-wise medians). Steady runs measure `num_requests`
completions after a warm-up of `warmup_per_client` x c completions with the
server kept at concurrency c (shorter runs are dominated by the synchronised
start and the drain, by up to 2x at c = 2048). Expected result: verdict
"partly held" (H200 EB about 7-11% below MB where the paper has +-1%, so the
H200 checks fail; the bandwidth trend fails; engine prediction near chance).
With b refitted to r-dagger = 0.8, Prop. 4 picks MB at every N for Table 4's
H200 workload, so `table4_shipped` also runs Table 4 on the shipped H200 b.
Every field can be overridden, e.g. `--config.sim.num_requests=6000`.
"""

import ml_collections

from jaxlab.presets import parse_preset


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  preset = parse_preset(arg)
  c = ml_collections.ConfigDict()
  c.experiment = "ebplus"
  c.preset = preset
  c.seed = 0

  c.sim = ml_collections.ConfigDict(dict(
      num_requests=4000,          # measured completions per steady run
      warmup_per_client=2.0,      # warm-up completions per unit of concurrency (not measured)
      max_num_seqs=1024,          # N cap for every scheduler
      token_budget=8192,          # B (max_num_batched_tokens)
      fig4_concurrency=2048,
      table4_concurrency=(32, 512, 2048),
      table5_requests_per_phase=2000,
      table5_concurrency=2048,
      table5_concurrency_phases=(32, 512, 1024, 256, 2048),
      mb_share="window",          # jaxlab interpretation: r of beta_MB^e(r) = token-weighted recent decode share
      memory_utilization=0.9,     # KV capacity = (0.9 memory - weights) / KV bytes per token
      eps=0.01,                   # allowed KV overflow probability (Prop. 3)
      ifr=True,                   # camera-ready IFR threshold path
      n_form="clt",               # memory-safe N: "clt" (code) or "paper"
      delta=1e-7,                 # EB+ hysteresis, s/token (code: 1e-4 ms/token)
      n_obs_up=0.5, n_obs_down=0.05,  # jaxlab interpretation: asymmetric occupancy EMA
      crossover_theta="cfr",      # EB+ prices Prop. 4 with the CFR theta_0 at the EMA of p ("eb": EB's theta)
      ebplus_tolerance=0.02,      # "never more than 2% below the better pure mode"
      table4_shipped=True,        # also simulate Table 4 on the shipped H200 b (r-dagger 0.365)
  ))
  c.sweep = ml_collections.ConfigDict(dict(
      bandwidths_tbs=(0.8, 1.6, 3.2, 4.8, 8.0),
      kappa=1.0,                  # jaxlab interpretation: the roofline cannot reach r*=0.8/0.2
      concurrency=1024,
      num_requests=2000,
  ))
  # The tiny JAX engine (jaxlab.serving.engine) on this machine.
  c.engine = ml_collections.ConfigDict(dict(
      enabled=True,
      model=dict(vocab_size=256, d_model=64, num_layers=2, num_heads=4, num_kv_heads=2, d_ff=192),
      mu_l=(16, 64), mu_o=(8, 32), concurrency=(2, 8),
      jitter=0.5, output_dist="uniform",
      token_budget=64,            # B for MB chunks and EB prefill steps
      midpoints=False,            # token buckets: powers of two only (fewer compiles)
      requests_per_client=6, min_requests=16,
      repeats=5,                  # interleaved MB/EB/EB+ runs per cell; step-wise medians
      calibration_repeats=9,
      # jaxlab interpretation: the code's EB+ evaluation period (100 completions),
      # occupancy floor (16) and EB refresh (30 samples / 100 completions) exceed
      # these runs, so they are scaled down.
      ebplus_eval_every=8, ebplus_n_obs_min=2.0, eb_min_samples=8, eb_update_every=8,
      crossover_theta="cfr",
      accuracy_threshold=2 / 3,   # jaxlab interpretation of "predicts the faster scheduler"
  ))
  if preset == "smoke":
    c.sim.update(num_requests=120, warmup_per_client=0.5, fig4_concurrency=128, table4_concurrency=(16, 128),
                 table5_requests_per_phase=60, table5_concurrency=128,
                 table5_concurrency_phases=(32, 128, 64), table4_shipped=False)
    c.sweep.update(bandwidths_tbs=(0.8, 8.0), num_requests=100, concurrency=64)
    c.engine.update(model=dict(vocab_size=32, d_model=16, num_layers=1, num_heads=2, num_kv_heads=1, d_ff=32),
                    mu_l=(6,), mu_o=(4,), concurrency=(2,), token_budget=2, repeats=2,  # shapes of the engine tests
                    calibration_repeats=2, min_requests=8)
  elif preset == "full":
    c.sim.update(num_requests=10000)
    c.sweep.update(num_requests=6000)
    c.engine.update(model=dict(vocab_size=4096, d_model=512, num_layers=4, num_heads=8, num_kv_heads=2,
                               d_ff=1536),  # the spec's engine (~60 MB fp32)
                    mu_l=(32, 128, 256), mu_o=(16, 64, 128), concurrency=(4, 16), token_budget=256,
                    repeats=5, requests_per_client=8)
  return c
