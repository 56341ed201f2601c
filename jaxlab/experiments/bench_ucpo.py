"""Benchmark `ucpo`: RL rollouts per second, UCPO vs binary GRPO, same step program.

Each candidate runs `steps_per_call` RL steps of `jaxlab.rl.knowledge_task`
(inside one jitted `lax.scan`) from its own carried state; both share the
compiled program, the arm being a traced input. Interleaved, medians.
"""

import jax
import ml_collections

from jaxlab.benchmarking import time_interleaved
from jaxlab.rl import knowledge_task as kt


def run_benchmark(config: ml_collections.ConfigDict) -> dict:
  """The timings and ratios of this benchmark (see the module docstring), as a dict."""
  task_cfg = kt.TaskConfig(num_values=config.task.num_values,
                           num_answers=config.task.num_answers)
  model = kt.make_policy(kt.PolicyConfig(**config.model.to_dict()), task_cfg)
  rl_cfg = kt.RLConfig(batch_prompts=config.batch_prompts, group_size=config.group_size)
  task = kt.make_task(task_cfg, config.seed)
  params = kt.init_params(model, jax.random.key(config.seed))
  step, tx = kt.make_rl_step(model, task_cfg, rl_cfg)

  @jax.jit
  def run_steps(state, arm):
    return jax.lax.scan(lambda s, _: step(s, task, arm), state, None,
                        length=config.steps_per_call)[0]

  arms = {"grpo": kt.make_arm("grpo"), "ucpo": kt.make_arm("ucpo")}
  state0 = kt.RLState(params, tx.init(params), jax.numpy.float32(0.5), jax.random.key(1))
  carry = dict.fromkeys(arms, state0)

  def make(name):
    def call():
      carry[name] = run_steps(carry[name], arms[name])
      return carry[name]
    return call

  t = time_interleaved({name: make(name) for name in arms}, repeats=config.repeats, warmup=2)
  samples = config.steps_per_call * config.batch_prompts * config.group_size
  per_s = {name: samples / t[name]["median_s"] for name in arms}
  return {"timings": t, "samples_per_call": samples, "backend": jax.default_backend(),
          "rl_samples_per_s": per_s,
          "ratios": {"ucpo_over_grpo_step_time": t["ucpo"]["median_s"] / t["grpo"]["median_s"],
                     "ucpo_rl_samples_per_s": per_s["ucpo"]}}
