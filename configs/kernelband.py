"""KernelBand: bandit autotuning of kernel configurations under the tile-roofline cost model.

Command:
  python -m launch.main --config=configs/kernelband.py:quick --workdir=runs/kernelband

Presets:
  smoke  12 tasks (one device), 3 seeds, budgets T = 5 / 10, one other parent rule (a few
         seconds).
  quick  36 tasks (12 op/shape pairs x TPU v5e, H100, H200), 5 seeds, T = 10 / 20 / 50, every
         method, and KernelBand, no-mask and K = 1 again at each other parent rule (the
         interpretation lines); plus a CPU timing run of KernelBand on one XLA-level blocked
         matmul.
  full   the same with T up to 100.

Methods: "kernelband" (systems.md 3a), baselines "bon", "greedy", "egreedy", ablations
"no_mask", "k1", "heuristic_strategy" (`jaxlab.autotune.benchmark`). Every [I]/[O] choice of
the spec is a knob under `config.kernelband` (jaxlab interpretation where marked).

Criteria: the primary mechanism criterion is the paper's own comparison (Table 1), KernelBand
vs best-of-N with the same proposer, evaluator and budget. The one component ablation the paper
reports with a number (Table 4: the bandit vs letting the LLM pick the strategy) is primary too;
the mask and clustering ablations are mechanism criteria but secondary, since the paper names
them as its key mechanisms without a per-component number. Every speedup comparison counts only
when its baseline beats the default config (1.0x) by 5 % (the floor).

Expected result: per method and budget, geo-mean speedup over the default config, Fast@1,
Correct % and simple regret vs the exhaustive oracle, mean +- std over paired seeds; the
criteria below are judged whatever the outcome.
"""

import ml_collections

import jaxlab.presets


def get_config(arg=None):
  preset = jaxlab.presets.parse_preset(arg)
  config = ml_collections.ConfigDict()
  config.experiment = "kernelband"
  config.preset = preset
  config.seeds = (0, 1, 2, 3, 4)
  config.methods = "kernelband,bon,greedy,egreedy,no_mask,k1,heuristic_strategy"
  config.devices = "tpu_v5e,h100,h200"
  config.budgets = (10, 20, 50)
  config.criteria_budget = 20       # the paper's Table 1 budget
  config.noise = 0.03               # log-normal timing noise of the cost model
  config.kernelband = ml_collections.ConfigDict(dict(
      num_clusters=3, tau=10, c=2.0,
      theta_sat=75.0,               # % (scalar; a 3-tuple gives one per resource)
      # The authors' code (ucb.py sample_from_cluster): softmax over headroom in % at
      # temperature 1, only cluster representatives profiled. Other readings below.
      parent_rule="code", parent_temperature=1.0,
      mu0=0.5, n0=1.0, kmeans_seed=42, kmeans_iters=50,
      epsilon=0.1))                 # of the e-greedy baseline
  # Parent rules also judged for the report (`kernelband.PARENT_RULES`; "" for none): the
  # verdict at each reading is an interpretation line.
  config.parent_rule_readings = "all_profiled,uniform,fastest"
  config.timing = ml_collections.ConfigDict(dict(
      enabled=True, op="matmul", shape=(256, 512, 256), dtype="float32", budget=10, repeats=5))

  # Floor: the default config (speedup 1.0x). A baseline arm whose geo-mean speedup over the
  # default is not above 1.05x (5 %, above the cost model's 3 % timing noise) found nothing to
  # compare against, so its criterion is `no signal`.
  floor = dict(floor="default config", floor_value=1.0, floor_margin=1.05)
  config.criteria = ml_collections.ConfigDict(dict(
      speedup_vs_bon=dict(
          claim="KernelBand beats best-of-N at equal budget (Table 1: 1.45-1.91x vs 0.96-0.99x "
                "geo-mean speedup at T = 20)",
          metric="geo-mean speedup over the default at T = criteria_budget, KernelBand / BoN "
                 "(the same proposer, evaluator and budget without the bandit)",
          direction="higher", kind="ratio", threshold=1.0, unit="x", mechanism=True, **floor),
      speedup_vs_greedy=dict(
          claim="KernelBand beats iterative refinement of the best kernel (Table 1: +21-43 % "
                "over GEAK; greedy refinement of the fastest config stands in for GEAK)",
          metric="geo-mean speedup at T = criteria_budget, KernelBand / greedy",
          direction="higher", kind="ratio", threshold=1.0, unit="x", **floor),
      speedup_vs_egreedy=dict(
          claim="KernelBand has the best sample efficiency (vs e-greedy over strategies)",
          metric="geo-mean speedup at T = criteria_budget, KernelBand / e-greedy",
          direction="higher", kind="ratio", threshold=1.0, unit="x", **floor),
      regret_vs_best_baseline=dict(
          claim="KernelBand reaches the oracle fastest",
          metric="mean simple regret at T = criteria_budget, KernelBand minus the best "
                 "baseline of the same seed (floor: the default config's regret, which the best "
                 "baseline must undercut by 0.05)",
          direction="lower", threshold=0.0, unit="regret", floor="default config",
          floor_margin=0.05),
      mask_helps=dict(
          claim="the hardware-aware pruning (mask) is one of the two key mechanisms (abstract); "
                "removing it hurts (no per-component number available)",
          primary=False, mechanism=True,
          metric="geo-mean speedup at T = criteria_budget, KernelBand / no-mask",
          direction="higher", kind="ratio", threshold=1.0, unit="x", **floor),
      clustering_helps=dict(
          claim="runtime-behaviour clustering is one of the two key mechanisms (abstract); "
                "removing it (K = 1) hurts (no per-component number available)",
          primary=False, mechanism=True,
          metric="geo-mean speedup at T = criteria_budget, KernelBand / K = 1",
          direction="higher", kind="ratio", threshold=1.0, unit="x", **floor),
      bandit_beats_heuristic_strategy=dict(
          claim="the bandit picks strategies better than the LLM does (Table 4: 1.57x vs 0.97x)",
          mechanism=True,
          metric="geo-mean speedup at T = criteria_budget, KernelBand / heuristic strategy "
                 "(fastest parent, strategy for its most-headroom resource)",
          direction="higher", kind="ratio", threshold=1.0, unit="x", **floor)))

  if preset == "smoke":
    config.seeds = (0, 1, 2)
    config.devices = "h100"
    config.budgets = (5, 10)
    config.criteria_budget = 10
    config.timing.enabled = False
    config.parent_rule_readings = "fastest"  # one reading keeps the path tested and cheap
  elif preset == "full":
    config.budgets = (10, 20, 50, 100)
  return config
