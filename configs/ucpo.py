"""UCPO: abstention-aware GRPO on the toy knowledge-boundary task (`jaxlab.rl.knowledge_task`).

Command:
  python -m launch.main --config=configs/ucpo.py:quick --workdir=runs/ucpo

Presets:
  smoke  a 64-prompt task, 40 SFT + 20 RL steps, 3 seeds, every arm (pipeline check;
         a few seconds once compiled).
  quick  256 prompts (60% known / 20% partial / 20% unlearnable), 600 SFT steps, then
         600 RL steps of 32 prompts x G = 8 rollouts for each of the six arms, 3 seeds
         vmapped (~2-3 min on 2 cores, most of it compilation).
  full   the same task, 2000 RL steps, 5 seeds.

Arms (`config.arms`): "grpo" (binary GRPO, IDK = 0), "fixed_<r>" (GRPO with a fixed
abstention reward r_u = r), "tad" (TAD + NTF, the uncertain channel a constant
`ucpo.tad_uncertain_advantage`), "ucpo" (TAD + DURA + NTF). TAD, DURA and NTF are
jaxlab interpretations of the paper (its code was unavailable); every constant is
under `config.ucpo`.

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
  config.seeds = (0, 1, 2)
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
      eps_high=0.28, max_grad_norm=1.0, num_evals=10))
  # optimizer.learning_rate is the RL stage's; optimizer.sft the SFT stage's.
  config.optimizer = ml_collections.ConfigDict(dict(
      learning_rate=1e-3, schedule="constant", warmup_steps=0,
      sft=dict(learning_rate=3e-3)))
  # jaxlab interpretations (spec defaults s=1, k=2, b=0): a_U = s tanh(k (rho_w - rho_c)
  # + b (0.5 - g_t)), g_t an EMA of batch accuracy; "TAD only" uses a constant a_U.
  config.ucpo = ml_collections.ConfigDict(dict(
      dura_scale=1.0, dura_k=2.0, dura_b=0.0, ema_decay=0.9, adv_eps=1e-6,
      tad_uncertain_advantage=0.0))

  # Declared before the run; judged on paired seeds by jaxlab.report.judge_all.
  config.criteria = ml_collections.ConfigDict(dict(
      abstention_concentrated=dict(
          claim="UCPO concentrates abstention on the unlearnable bucket",
          metric="UCPO abstention rate, unlearnable bucket minus answerable (known + partial)",
          direction="higher", threshold=0.5, unit="abstention"),
      known_accuracy=dict(
          claim="UCPO keeps known-bucket accuracy within 2 points of binary GRPO",
          metric="known-bucket accuracy, UCPO minus binary GRPO",
          direction="higher", threshold=-0.02, unit="accuracy"),
      paq_over_every_arm=dict(
          claim="UCPO raises PAQ over every other arm",
          metric="PAQ over all prompts, UCPO minus the best other arm of the same seed",
          direction="higher", threshold=0.0, unit="PAQ"),
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
  elif preset == "full":
    config.seeds = (0, 1, 2, 3, 4)
    config.train.num_steps = 2000
  return config
