"""APC: placeholder code completion with the critical-entropy threshold and cost-reward RL.

Command:
  python -m launch.main --config=configs/apc.py:quick --workdir=runs/apc

Presets:
  smoke  a tiny base LM (30 steps), 32 held-out completions, 5 SFT + 2 RL steps, 3 seeds
         (pipeline check, nearly all of it tracing and compiling; the seeds share one
         trace of each step. The default tests run it once through colabs/apc.ipynb; its
         own resume test is `slow`).
  quick  a 0.18M-parameter byte decoder pretrained for 600 steps (cached in the workdir),
         3 paired seeds x 256 held-out line completions; SFT on the model's own edit logs,
         then 40 cost-reward GRPO steps. The 2-4M-parameter decoder of our implementation
         notes does not fit the quick budget (a train, SFT or GRPO step costs about 5x more
         at 2M, 7x at 3.3M), nor does it pay at equal CPU time: pretrained for quick's
         budget, its held-out bits/byte is worse than the 0.18M model's. The lm
         experiment's cached base models (`jaxlab.train.lm.pretrained`) are 0.35M (quick)
         and 0.85M (full), also below 2M.
  full   our notes' size: a 3.3M-parameter byte decoder (d = 256, 4 layers, SwiGLU 768)
         pretrained for 3000 steps, 5 seeds, 1024 completions, more SFT and RL.

The sections seed / data / model / train / optimizer / mesh / eval are the base LM's
(`jaxlab.train.lm`: `train.num_steps`, `train.batch_size`, `optimizer.learning_rate` mean
what they mean everywhere); `sft`, `rl`, `apc` and the sections `optimizer.{sft,rl}` are
the method's (they never touch the cached base LM). Every cost constant and
the Fano vocabulary are jaxlab interpretations and live under `apc`.

Expected result: a cost-vs-threshold curve and the table of arms (relative editing cost
vs hard completion, exact match, edit similarity, placeholder rate and precision) over
paired seeds; the criteria below are judged whatever the outcome.
"""

import ml_collections

import jaxlab.presets


def get_config(arg=None):
  preset = jaxlab.presets.parse_preset(arg)
  c = ml_collections.ConfigDict()
  c.experiment = "apc"
  c.preset = preset
  c.seed = 0                  # the base LM's seed (shared by every paired seed)
  c.seeds = (0, 1, 2)         # paired seeds: eval draw, edit logs, SFT batches, RL samples

  # The base byte LM (jaxlab.train.lm); PH is the byte 0, absent from the corpus.
  c.data = ml_collections.ConfigDict(dict(max_bytes=4_000_000, val_fraction=0.1))
  c.model = ml_collections.ConfigDict(dict(
      d_model=64, num_layers=3, num_heads=4, num_kv_heads=2, d_ff=192, max_len=128))
  c.train = ml_collections.ConfigDict(dict(
      batch_size=32, seq_len=96, num_steps=600, checkpoint_every=300, log_every=50,
      eval_every=0))
  c.optimizer = ml_collections.ConfigDict(dict(
      name="adamw", learning_rate=3e-3, schedule="warmup_cosine", warmup_steps=50, b1=0.9,
      b2=0.95, weight_decay=0.1, grad_clip=1.0))
  # The method's two stages, each a section over the base LM's keys (it keeps the clip at
  # 1.0 and b1): constant learning rates, AdamW with optax's default b2 and a weight decay
  # of 1e-4 for SFT, Adam (AdamW without decay) for RL.
  c.optimizer.sft = ml_collections.ConfigDict(dict(
      learning_rate=1e-3, schedule="constant", b2=0.999, weight_decay=1e-4))
  c.optimizer.rl = ml_collections.ConfigDict(dict(
      learning_rate=2e-4, schedule="constant", b2=0.999, weight_decay=0.0))
  c.eval = ml_collections.ConfigDict(dict(batch_size=32, num_batches=4, seed=12345))
  c.mesh = ml_collections.ConfigDict(dict(data=-1, fsdp=1, expert=1, fsdp_params=False))

  c.apc = ml_collections.ConfigDict(dict(
      prefix_len=64, max_target_len=24, num_eval=256, num_tune=256,
      fano_vocab_size=256,    # jaxlab interpretation: V in H*(rho, V) = the byte vocabulary
      thresholds=(0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0),
      # jaxlab interpretation of the simulated user, in keystrokes (jaxlab.codecomp.CostModel;
      # the paper's C_edit = 2 len + 1, C_fill = len + 1). A typed byte costs type_cost wherever it
      # is typed. navigation: "per_region" reaches each edit region once (nav_cost), as a
      # placeholder span with one Tab; "per_byte" pays nav_cost for every edited byte, so a
      # missing byte costs twice a byte typed into a placeholder. Both readings are reported.
      costs=ml_collections.ConfigDict(dict(
          nav_cost=1.0, delete_cost=1.0, type_cost=1.0, tab_cost=1.0,
          navigation="per_region"))))
  # SFT on placeholder targets from the base model's own edit logs (jaxlab interpretation:
  # similarity >= min_similarity keeps a pair; differing spans <= max_span bytes -> <PH>).
  c.sft = ml_collections.ConfigDict(dict(
      num_logs=1024, min_similarity=0.8, max_span=8, num_steps=150, batch_size=32))
  # Cost-reward GRPO: batch_size prompts x group_size samples per step, one update each.
  c.rl = ml_collections.ConfigDict(dict(
      num_steps=40, batch_size=16, group_size=8, temperature=1.0,
      eps_low=0.2, eps_high=0.28, malformed_penalty=1.0))

  # Declared before the run; judged on paired seeds by jaxlab.report.judge_all.
  # Floors: a cost comparison counts only where its baseline arm is cheaper than the trivial
  # suggestion (the cheaper of the empty and the all-placeholder suggestion, measured per seed):
  # beating a baseline that is worse than suggesting nothing shows nothing about placeholders.
  trivial = dict(floor="trivial suggestion (the cheaper of empty and all-placeholder)",
                 floor_margin=1.0)
  c.criteria = ml_collections.ConfigDict(dict(
      trained_cost_reduction=dict(
          claim="APC (SFT + cost-reward RL) cuts the expected editing cost by >= 19% vs hard "
                "completion (paper: 19-50%)",
          metric="mean editing cost per held-out completion, sft_rl vs hc",
          direction="lower", kind="ratio", threshold=1.0 / 0.81, unit="keystrokes", **trivial),
      # The mechanism: the same trained model on the same inputs, its placeholders replaced by
      # the tokens its greedy decode puts there with <PH> excluded (its own guesses).
      placeholders_vs_own_guesses=dict(
          claim="placeholders at the model's uncertain positions cost strictly less than its "
                "guesses there (the paper's theorem: strictly lower expected cost than HC)",
          metric="mean editing cost, sft_rl vs sft_rl with each <PH> replaced by its own "
                 "greedy token (sft_rl_guess)",
          direction="lower", kind="ratio", threshold=1.0, unit="keystrokes", mechanism=True,
          **trivial),
      hc_exact_match_kept=dict(
          claim="APC training keeps hard-completion performance",
          metric="exact match of the trained model with <PH> removed, minus the base model's",
          direction="higher", threshold=-0.02, unit="exact match",
          # The 0.02 the criterion may lose must be less than the base model has: else losing
          # every exact match would still pass.
          floor="empty suggestion (exact match 0)", floor_value=0.0, floor_margin=0.02),
      fano_threshold_cost=dict(
          claim="placeholders above the critical entropy H* cost strictly less than guessing",
          metric="mean editing cost, greedy with <PH> where H > H*(rho, V), vs hc (the same "
                 "greedy tokens without placeholders)",
          direction="lower", kind="ratio", threshold=1.0, unit="keystrokes", mechanism=True,
          **trivial),
      tuned_threshold_cost=dict(
          claim="an entropy threshold tuned on training files cuts the cost vs hc",
          metric="mean editing cost, greedy with <PH> at the tuned threshold, vs hc",
          direction="lower", kind="ratio", threshold=1.0, unit="keystrokes", primary=False,
          **trivial),
      placeholder_precision=dict(
          claim="placeholders go where hard completion is wrong more often than chance",
          metric="share of sft_rl placeholders at positions its hard completion got wrong, "
                 "minus that hard completion's error rate over the same completions' "
                 "positions (placement by chance)",
          direction="higher", threshold=0.0, unit="share", primary=False),
      # Training also teaches a weak model where to stop (a shorter, cheaper hard completion):
      # this one compares with the trained model's own hard completion, decoded anew.
      placeholder_own_effect=dict(
          claim="the trained model's placeholders cut its cost vs its own hard completion",
          metric="mean editing cost, sft_rl vs sft_rl with <PH> removed (sft_rl_hc)",
          direction="lower", kind="ratio", threshold=1.0, unit="keystrokes", primary=False,
          **trivial)))

  if preset == "smoke":
    c.data.max_bytes = 400_000
    c.model.update(d_model=32, num_layers=2, num_heads=4, num_kv_heads=2, d_ff=64, max_len=64)
    c.train.update(batch_size=8, seq_len=32, num_steps=30, checkpoint_every=30, log_every=10)
    c.optimizer.warmup_steps = 5
    c.eval.update(batch_size=8, num_batches=2)
    c.apc.update(prefix_len=16, max_target_len=8, num_eval=32, num_tune=32,
                 thresholds=(0.5, 2.0, 4.0, 6.0))
    # The 30-step model is no near miss for anything: keep every pair (pipeline check only).
    c.sft.update(num_logs=64, min_similarity=0.0, num_steps=5, batch_size=8)
    c.rl.update(num_steps=2, batch_size=4, group_size=4)
  elif preset == "full":
    c.seeds = (0, 1, 2, 3, 4)
    c.model.update(d_model=256, num_layers=4, d_ff=768, max_len=256)  # 3.28M parameters
    c.train.update(num_steps=3000, seq_len=128)
    c.apc.update(num_eval=1024)
    c.sft.update(num_logs=4096, num_steps=500)
    c.rl.update(num_steps=300)
  return c
