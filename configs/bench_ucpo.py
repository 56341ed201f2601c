"""Benchmark `ucpo`: RL samples/s of one UCPO step vs one binary-GRPO step.

  python -m launch.bench --only=ucpo [--preset=quick]

Both are the same jitted RL step of `jaxlab.rl.knowledge_task` (sample G answers
per prompt, outcomes, advantages, clipped-surrogate update) on the quick
preset's policy and task; only the arm differs (TAD + DURA + NTF vs binary GRPO
with dynamic sampling). Timed interleaved in one process (medians); reports
rollouts (samples) per second of each and the UCPO / GRPO step-time ratio.
"""

import ml_collections

from jaxlab.presets import parse_preset


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  preset = parse_preset(arg)
  c = ml_collections.ConfigDict()
  c.benchmark = "ucpo"
  c.preset = preset
  c.seed = 0
  c.task = ml_collections.ConfigDict(dict(num_values=16, num_answers=10))
  c.model = ml_collections.ConfigDict(dict(
      kind="transformer", d_model=48, num_layers=1, num_heads=2, num_kv_heads=1, d_ff=96))
  c.batch_prompts, c.group_size = 32, 8      # 256 rollouts per step
  c.steps_per_call = 10                      # steps per timed call (one lax.scan)
  c.repeats = 11
  if preset == "smoke":
    c.task.num_values = 8
    c.model.update(kind="mlp", d_model=16, d_ff=32)
    c.batch_prompts, c.steps_per_call, c.repeats = 8, 2, 3
  elif preset == "full":
    c.batch_prompts, c.steps_per_call, c.repeats = 128, 20, 21
  return c
