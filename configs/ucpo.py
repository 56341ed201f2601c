"""UCPO: abstention-aware GRPO on the toy knowledge-boundary task (`jaxlab.rl.knowledge_task`).

Command:
  python -m launch.main --config=configs/ucpo.py:quick --workdir=runs/ucpo

Presets:
  smoke  a 64-prompt task, 40 SFT + 20 RL steps, 3 seeds, every arm and reading
         (pipeline check).
  quick  256 prompts (60% known / 20% partial / 20% unlearnable), 600 SFT steps, then
         600 RL steps of 32 prompts x G = 8 rollouts for each of the six arms and the
         three alternative-reading runs, 5 seeds vmapped (most of it compilation: every
         arm is the same compiled program).
  full   the same task, 2000 RL steps, 5 seeds.

Arms (`config.arms`): "grpo" (binary GRPO, IDK = 0), "fixed_<r>" (GRPO with a fixed
abstention reward r_u = r), "tad" (TAD + NTF, the uncertain channel a constant
`ucpo.tad_uncertain_reward`), "ucpo" (TAD + DURA + NTF). The mechanism criterion
compares "ucpo" with "fixed_0.5": the same RL pipeline and budget with the paper's
static-reward GRPO in place of TAD + DURA. TAD's pooling, DURA's form and NTF are
jaxlab interpretations of the paper (its code was unavailable); every constant is
under `config.ucpo`, and `config.readings` lists the other readings the report judges.

Expected result: per arm x bucket (known / partial / unlearnable / all) accuracy,
abstention, hallucination, PAQ and F1, mean +- std over seeds; the report judges the
criteria below on paired seeds, whatever the outcome.
"""

import ml_collections

import jaxlab.presets


def get_config(arg=None):
  preset = jaxlab.presets.parse_preset(arg)
  config = ml_collections.ConfigDict()
  config.experiment = "ucpo"
  config.preset = preset
  config.seeds = (0, 1, 2, 3, 4)
  config.arms = "grpo,fixed_0.3,fixed_0.5,fixed_0.7,tad,ucpo"

  # The task: prompts (a, b) in [0, num_values)^2, answers 0..num_answers-1 plus IDK.
  config.task = ml_collections.ConfigDict(dict(
      num_values=16, num_answers=10, fractions=(0.6, 0.2, 0.2),
      partial_label_accuracy=0.3,
      idk_label_rate=0.1))          # jaxlab interpretation: SFT shows the IDK token
  config.model = ml_collections.ConfigDict(dict(
      kind="transformer", d_model=48, num_layers=1, num_heads=2, num_kv_heads=1, d_ff=96))
  config.sft = ml_collections.ConfigDict(dict(num_steps=600, batch_size=64))
  # RL: train.batch_size prompts per step, each answered group_size times.
  config.train = ml_collections.ConfigDict(dict(
      num_steps=600, batch_size=32, group_size=8, updates_per_batch=1, eps_low=0.2,
      eps_high=0.28, num_evals=10))
  # The top level is the RL stage's optimizer (Adam after a global-norm clip at 1.0);
  # optimizer.sft the SFT stage's (Adam, unclipped). Both `jaxlab.train.optimizer`.
  config.optimizer = ml_collections.ConfigDict(dict(
      learning_rate=1e-3, schedule="constant", warmup_steps=0, grad_clip=1.0,
      sft=dict(learning_rate=3e-3, grad_clip=None)))
  # jaxlab interpretations (the paper's code was unavailable). TAD normalizes the uncertain
  # rollouts among themselves over the batch ("batch", the abstract's "independently
  # normalize") or takes DURA's value as their advantage ("direct").
  # DURA r_U = s tanh(k (rho_w - rho_c) + b (0.5 - g_t)), g_t an EMA of batch accuracy,
  # s = 1, k = 2; b = k = 2 keeps the abstract's model-evolution term on (b = 0 would switch
  # it off). "TAD only" uses the constant r_U tad_uncertain_reward.
  config.ucpo = ml_collections.ConfigDict(dict(
      uncertain_norm="batch", dura_scale=1.0, dura_k=2.0, dura_b=2.0, ema_decay=0.9,
      adv_eps=1e-6, tad_uncertain_reward=0.0))
  # Other documented readings of those knobs: the report gives the row's verdict at each
  # (re-running only the arms a knob changes).
  config.readings = ml_collections.ConfigDict(dict(uncertain_norm=("direct",), dura_b=(0.0,)))

  # Declared before the run; judged on paired seeds by jaxlab.report.judge_all. The PAQ and
  # accuracy comparisons count only when their baseline beats a uniform guess (1/K, measured
  # per seed from the task) by 0.1: below that the task was not learnt.
  chance = dict(floor="chance (a uniform guess: accuracy and PAQ 1/K)", floor_margin=0.1)
  config.criteria = ml_collections.ConfigDict(dict(
      paq_vs_fixed=dict(
          claim="UCPO's decoupled, dynamic uncertainty advantage makes the model more reliable "
                "than RL with a static uncertainty reward (the abstract; the paper's example "
                "r_u = 0.5): higher PAQ (79.63% average on Qwen3-8B math; the baseline's figure "
                "was not available to us, so the threshold is any gain)",
          metric="PAQ over all prompts, UCPO minus GRPO with fixed r_u = 0.5, equal RL steps",
          direction="higher", threshold=0.0, unit="PAQ", mechanism=True, **chance),
      abstention_concentrated=dict(
          claim="UCPO's abstention concentrates beyond the knowledge boundary (the abstract's "
                "'reliability beyond their knowledge boundaries'; the paper gives no figure: "
                "0.5 = most unlearnable questions, few answerable ones, is jaxlab's)",
          metric="UCPO abstention rate, unlearnable bucket minus answerable (known + partial)",
          direction="higher", threshold=0.5, unit="abstention"),
      known_accuracy=dict(
          claim="UCPO keeps known-bucket accuracy within 2 points of binary GRPO (spec §3(d): "
                "accuracy on known questions ~ binary GRPO; the margin is jaxlab's)",
          metric="known-bucket accuracy, UCPO minus binary GRPO",
          direction="higher", threshold=-0.02, unit="accuracy", **chance),
      tad_vs_fixed=dict(
          claim="TAD alone (constant uncertain reward) already beats a static-reward GRPO",
          metric="PAQ over all prompts, TAD only minus GRPO with fixed r_u = 0.5",
          direction="higher", threshold=0.0, unit="PAQ", primary=False, **chance),
      dura_vs_tad=dict(
          claim="DURA adds to TAD",
          metric="PAQ over all prompts, UCPO (TAD + DURA) minus TAD only",
          direction="higher", threshold=0.0, unit="PAQ", primary=False, **chance),
      f1_vs_fixed=dict(
          claim="UCPO's F1 does not collapse next to a static-reward GRPO (a summary of the "
                "paper: PAQ rises 'while F1 does not collapse'; the 2-point margin is jaxlab's)",
          metric="F1 (harmonic mean of PAQ and accuracy) over all prompts, UCPO minus GRPO "
                 "with fixed r_u = 0.5",
          direction="higher", threshold=-0.02, unit="F1", primary=False, **chance),
      no_avoidance=dict(
          claim="unlike a fixed r_u = 0.5, UCPO does not spread abstention into the "
                "partially known bucket",
          metric="partial-bucket abstention, UCPO minus fixed r_u = 0.5",
          direction="lower", threshold=0.0, unit="abstention", primary=False)))

  if preset == "smoke":
    config.task.num_values = 8
    config.model.update(kind="mlp", d_model=16, d_ff=32)
    config.sft.update(num_steps=40, batch_size=32)
    config.train.update(num_steps=20, batch_size=8, num_evals=2)
    config.seeds = (0, 1, 2)
  elif preset == "full":
    config.train.num_steps = 2000
  return config
