"""EB / EB+ batching (Zhang et al., ICML 2026): roofline-backed simulator + tiny JAX engine.

  python -m launch.main --config=configs/ebplus.py:quick --workdir=runs/ebplus

Presets: smoke (2 seeds, ~10 s of CPU, used by tests), quick (3 seeds, <= ~3 min
of CPU on 2 cores: the report row), full (more requests per run, the spec's
60 MB engine model over a 3x3x2 grid).

What EB+ sees and what it is measured on are different. Fig. 4, Table 4,
Table 5 and the bandwidth sweep run on the physics roofline backend
(`cost.RooflineModel`, spec 1d (B)); EB and EB+ decide with the linear step
model fitted to that backend by the paper's calibration sweep
(`cost.calibrate_roofline`), as the paper calibrates on the GPU. The gain is
therefore measured outside the model EB+ decides with
(`--config.sim.backend=linear` restores the old in-model runs on the shipped
calibrations with b refitted to r-dagger 0.8 / 0.2). The tiny JAX engine
(`jaxlab.serving.engine`) runs MB / EB / EB+ over a (mu_L, mu_O, c) grid with
its own step model calibrated on this machine; Prop. 4's accuracy there is
judged against always predicting MB.

Seeds are the simulator's workload seeds (request lengths; the engine's also
seed its weights). Every criterion is judged on the same seeds for method and
baseline (`jaxlab.report.judge_all`). Quick shrinks each seed's work to fit 3
seeds: 1000 measured completions after a warm-up of 2c (Fig. 4 at c = 1024 =
N), 500 requests per Table 5 phase, 3 engine repeats.
Every field can be overridden, e.g. `--config.sim.num_requests=4000`.
"""

import ml_collections

from jaxlab.presets import parse_preset


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  preset = parse_preset(arg)
  c = ml_collections.ConfigDict()
  c.experiment = "ebplus"
  c.preset = preset
  c.seed = 0
  c.seeds = (0, 1, 2)

  # Declared before any run. Per seed, each value is a ratio of
  # steady-state (or whole-run) throughputs on the roofline backend, or the
  # engine's prediction accuracy; thresholds come from the paper's claims: the
  # sign pattern of its Tables 4-5 (EB+ = MB at c=32, EB at c=2048), the RTX
  # prefill-heavy EB gain of ~+40%, the H200 EB/MB gap <= 3%, EB+ never more than
  # ~0.5% below the better pure mode, and a gain that falls monotonically.
  tol = 0.005
  c.criteria = ml_collections.ConfigDict(dict(
      fig4_rtx=dict(
          claim="Fig. 4: EB beats vLLM v1 (MB) on RTX PRO 6000 in all three synthetic workloads "
                "(RPS 6.1 vs 5.3, 9.2 vs 7.7, 14.6 vs 10.3; \"up to 41.9%\")",
          metric="min over the 3 workloads of EB / MB steady throughput (RTX PRO 6000)",
          direction="higher", kind="ratio", threshold=1.0, primary=True),
      fig4_h200=dict(
          claim="Fig. 4: on H200 EB and MB are within a few percent (spec: |EB/MB - 1| <= 3%)",
          metric="max over the 3 workloads of |EB / MB - 1| (H200)",
          direction="lower", kind="difference", threshold=-0.03, primary=True),
      table4_low=dict(
          claim="Table 4: EB+ equals MB at low concurrency (c=32: 11,586 vs 11,584 tok/s)",
          metric="min over GPUs of EB+ / MB at the lowest Table 4 concurrency",
          direction="higher", kind="ratio", threshold=1 - tol, primary=True),
      table4_high=dict(
          claim="Table 4: EB+ follows EB at high concurrency (c=2048)",
          metric="min over GPUs of EB+ / EB at the highest Table 4 concurrency",
          direction="higher", kind="ratio", threshold=1 - tol, primary=True),
      ebplus_vs_best=dict(
          mechanism=True,  # EB+'s threshold switch against the better of the two modes it switches
          claim="EB+ is never more than ~0.5% below the better pure mode (steady load)",
          metric="min over Fig. 4 and Table 4 cells, both GPUs, of EB+ / max(MB, EB)",
          direction="higher", kind="ratio", threshold=1 - tol, primary=True),
      table5_rtx=dict(
          claim="Table 5: EB+ beats v1 under a distribution shift (RTX PRO 6000 +37.5%; "
                "abstract \"up to 36.4%\")",
          metric="EB+ / MB whole-run throughput, distribution shift, RTX PRO 6000",
          direction="higher", kind="ratio", threshold=1.0, primary=True),
      bandwidth=dict(
          claim="The EB gain falls as memory bandwidth grows (L40S +42.3% ... B300 ~0)",
          metric="EB/MB at the lowest swept bandwidth / EB/MB at the highest (roofline, balanced)",
          direction="higher", kind="ratio", threshold=1.0, primary=True),
      engine_prop4=dict(
          claim="Prop. 4: the crossover condition predicts whether EB or MB is faster",
          metric="share of engine grid cells whose faster scheduler Prop. 4 predicts, "
                 "minus the share always-MB gets right",
          direction="higher", kind="difference", threshold=0.0, primary=True),
      table5_h200=dict(
          claim="Table 5: EB+ beats v1 under a distribution shift on H200 (+13.5%)",
          metric="EB+ / MB whole-run throughput, distribution shift, H200",
          direction="higher", kind="ratio", threshold=1.0, primary=False),
      table5_conc_rtx=dict(
          claim="Table 5: EB+ beats v1 under a concurrency shift on RTX PRO 6000 (+14.3%)",
          metric="EB+ / MB whole-run throughput, concurrency shift, RTX PRO 6000",
          direction="higher", kind="ratio", threshold=1.0, primary=False),
      engine_ebplus=dict(
          claim="EB+ is never more than ~0.5% below the better pure mode (tiny JAX engine)",
          metric="median over engine cells of EB+ / max(MB, EB)",
          direction="higher", kind="ratio", threshold=1 - tol, primary=False),
  ))

  c.sim = ml_collections.ConfigDict(dict(
      backend="roofline",         # "roofline": EB/EB+ decide with the linear fit of the backend they run on;
                                  # "linear": the backend is the linear model they decide with (in-model)
      roofline_kappa=1.0,         # jaxlab interpretation: the roofline fit cannot reach r-dagger 0.8 / 0.2
      num_requests=1000,          # measured completions per steady run
      warmup_per_client=2.0,      # warm-up completions per unit of concurrency (not measured)
      max_num_seqs=1024,          # N cap for every scheduler
      token_budget=8192,          # B (max_num_batched_tokens)
      fig4_concurrency=1024,
      table4_concurrency=(32, 512, 2048),
      table5_requests_per_phase=500,
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
      table4_shipped=False,       # also simulate Table 4 on the shipped H200 linear model (in-model ablation)
  ))
  c.sweep = ml_collections.ConfigDict(dict(
      bandwidths_tbs=(0.8, 1.6, 3.2, 4.8, 8.0),
      kappa=1.0,                  # jaxlab interpretation: the roofline cannot reach r*=0.8/0.2
      concurrency=1024,
      num_requests=500,
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
      repeats=3,                  # interleaved MB/EB/EB+ runs per cell; step-wise medians
      calibration_repeats=5,
      # jaxlab interpretation: the code's EB+ evaluation period (100 completions),
      # occupancy floor (16) and EB refresh (30 samples / 100 completions) exceed
      # these runs, so they are scaled down.
      ebplus_eval_every=8, ebplus_n_obs_min=2.0, eb_min_samples=8, eb_update_every=8,
      crossover_theta="cfr",
  ))
  if preset == "smoke":
    c.seeds = (0, 1)
    c.sim.update(num_requests=80, warmup_per_client=0.5, fig4_concurrency=64, table4_concurrency=(16, 64),
                 table5_requests_per_phase=40, table5_concurrency=64,
                 table5_concurrency_phases=(16, 64, 32))
    c.sweep.update(bandwidths_tbs=(0.8, 8.0), num_requests=100, concurrency=64)
    c.engine.update(model=dict(vocab_size=32, d_model=16, num_layers=1, num_heads=2, num_kv_heads=1, d_ff=32),
                    mu_l=(6,), mu_o=(4,), concurrency=(2,), token_budget=2, repeats=2,  # shapes of the engine tests
                    calibration_repeats=2, min_requests=8)
  elif preset == "full":
    c.seeds = (0, 1, 2, 3, 4)
    c.sim.update(num_requests=10000, fig4_concurrency=2048, table5_requests_per_phase=2000,
                 table4_shipped=True)
    c.sweep.update(num_requests=6000)
    c.engine.update(model=dict(vocab_size=4096, d_model=512, num_layers=4, num_heads=8, num_kv_heads=2,
                               d_ff=1536),  # the spec's engine (~60 MB fp32)
                    mu_l=(32, 128, 256), mu_o=(16, 64, 128), concurrency=(4, 16), token_budget=256,
                    repeats=5, calibration_repeats=9, requests_per_client=8)
  return c
