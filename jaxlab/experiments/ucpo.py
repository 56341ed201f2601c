"""UCPO reproduction: does decoupled, dynamic abstention reward put "I don't know" where it belongs?

The toy knowledge-boundary task (`jaxlab.rl.knowledge_task`): one SFT warm start
per seed (known + noisy partial prompts), then RL from it under each arm (binary
GRPO, GRPO with fixed r_u, TAD only, TAD + DURA = UCPO), seeds vmapped, every arm
the same compiled program (`knowledge_task.make_seed_runs`). Arms resume through
`jaxlab.study.Study`. Seeds are paired across arms: same task draw, same SFT policy,
same RL key. The SFT and RL optimizers are `optimizer.sft` and the top level of
`config.optimizer` (`jaxlab.train.optimizer`).

Interpretation readings: for each knob in `config.readings` and each of its
other values, the arms that knob changes are re-run under it (named
`<arm>@<knob>=<value>`), the criteria re-judged with them in place, and the row's
verdict at every reading goes into the report.
"""

import json

import jax
import numpy as np

import jaxlab.train
from jaxlab.presets import config_names
from jaxlab.rl import knowledge_task as kt
from jaxlab.study import Study, mean_std

PAPER_CLAIM = ("UCPO (TAD + DURA) removes GRPO's advantage bias on 'I don't know': abstention "
               "concentrates on questions beyond the model's knowledge, PAQ rises over GRPO and "
               "fixed-uncertainty-reward RL, and accuracy on known questions is kept")
METHOD, BINARY, FIXED_HALF, TAD = "ucpo", "grpo", "fixed_0.5", "tad"


def make_arm(name: str, config, **overrides) -> kt.Arm:
  """`knowledge_task.named_arm` of an arm name under `config.ucpo`'s knobs and `overrides`."""
  u = {**config.ucpo.to_dict(), **overrides}
  return kt.named_arm(name, **{k: u[k] for k in kt.ARM_KNOBS})


def reading_runs(config, arms: list[str]) -> dict[str, tuple[str, object, str]]:
  """`knowledge_task.reading_runs` of `config.readings`: {"<arm>@<knob>=<value>": ...}."""
  return kt.reading_runs(config.get("readings", {}), arms)


def _configs(config):
  """The task, policy, SFT and RL settings of `config`, and the SFT and RL optimizers."""
  task_cfg = kt.TaskConfig(**{**config.task.to_dict(),
                              "fractions": tuple(config.task.fractions)})
  sft_cfg = kt.SFTConfig(**config.sft.to_dict())
  t, u = config.train, config.ucpo
  rl_cfg = kt.RLConfig(
      num_steps=t.num_steps, batch_prompts=t.batch_size, group_size=t.group_size,
      updates_per_batch=t.updates_per_batch, eps_low=t.eps_low, eps_high=t.eps_high,
      adv_eps=u.adv_eps, ema_decay=u.ema_decay, num_evals=t.num_evals)
  sft_tx = jaxlab.train.optimizer(config.optimizer, sft_cfg.num_steps, stage="sft")
  rl_tx = jaxlab.train.optimizer(config.optimizer, rl_cfg.num_gradient_steps)
  return task_cfg, kt.PolicyConfig(**config.model.to_dict()), sft_cfg, rl_cfg, sft_tx, rl_tx


def _measure(table: dict, arms: list[str], counts: np.ndarray, num_answers: int) -> dict:
  """Per-seed values for each declared criterion (absent when an arm is missing).

  The PAQ and accuracy comparisons carry a third element, the floor's reference
  per seed: a uniform guess over the `num_answers` answers (1/K).
  """
  def seeds(arm, group, metric):
    return np.asarray(table[arm][group][metric]["per_seed"], np.float64)

  def versus(arm, other, group, metric, floor=True):
    pair = (seeds(arm, group, metric), seeds(other, group, metric))
    return (*pair, np.full(pair[0].shape, 1.0 / num_answers)) if floor else pair

  measured = {}
  if METHOD in arms:
    w = counts[:2] / counts[:2].sum()  # answerable = known + partial, weighted by prompts
    answerable = (w[0] * seeds(METHOD, "known", "abstention")
                  + w[1] * seeds(METHOD, "partial", "abstention"))
    measured["abstention_concentrated"] = (seeds(METHOD, "unlearnable", "abstention"),
                                           answerable)
    if FIXED_HALF in arms:
      measured["paq_vs_fixed"] = versus(METHOD, FIXED_HALF, "all", "paq")
      measured["f1_vs_fixed"] = versus(METHOD, FIXED_HALF, "all", "f1")
      measured["no_avoidance"] = versus(METHOD, FIXED_HALF, "partial", "abstention", floor=False)
    if BINARY in arms:
      measured["known_accuracy"] = versus(METHOD, BINARY, "known", "accuracy")
    if TAD in arms:
      measured["dura_vs_tad"] = versus(METHOD, TAD, "all", "paq")
  if TAD in arms and FIXED_HALF in arms:
    measured["tad_vs_fixed"] = versus(TAD, FIXED_HALF, "all", "paq")
  return measured


def _interpretations(interpret, config, table: dict, arms: list[str], counts: np.ndarray,
                     num_answers: int) -> list:
  """The row's verdict at the config's reading of each knob and at each alternative.

  `interpret(knob, reading, measured, default=, source=)` judges one reading
  (`Study.interpretation`); `table` holds the reading runs beside the arms.
  """
  out = []
  runs = reading_runs(config, arms)
  for knob, values in config.get("readings", {}).items():
    default = config.ucpo[knob]
    out.append(interpret(f"ucpo.{knob}", default, _measure(table, arms, counts, num_answers),
                         default=True, source=kt.reading_source(knob, default)))
    for value in values:
      swapped = {**table, **{arm: table[name] for name, (k, v, arm) in runs.items()
                             if k == knob and v == value}}
      out.append(interpret(f"ucpo.{knob}", value, _measure(swapped, arms, counts, num_answers),
                           source=kt.reading_source(knob, value)))
  return out


def run(config, workdir: str) -> dict:
  """Runs every arm (resuming finished ones), writes results.json, returns the results."""
  arms = config_names(config, "arms")
  runs = reading_runs(config, arms)
  arm_params = {a: make_arm(a, config) for a in arms}
  arm_params.update({name: make_arm(arm, config, **{knob: value})
                     for name, (knob, value, arm) in runs.items()})
  task_cfg, policy_cfg, sft_cfg, rl_cfg, sft_tx, rl_tx = _configs(config)
  study = Study(config, workdir, total=1 + len(arm_params),
                key=(config.seeds, config.task, config.model, config.sft, config.optimizer))
  seeds, num_answers = study.seeds, task_cfg.num_answers
  model = kt.make_policy(policy_cfg, task_cfg)
  tasks = kt.stack_tasks([kt.make_task(task_cfg, s) for s in seeds])
  counts = np.bincount(np.asarray(tasks.buckets[0]), minlength=3)
  sft, rl = kt.make_seed_runs(model, tasks, kt.seed_keys(seeds), task_cfg, sft_cfg, rl_cfg,
                              sft_tx, rl_tx)
  sft_out = []  # computed once, only if an arm is not cached

  def sft_params():
    if not sft_out:
      sft_out.extend(jax.block_until_ready(sft()))
    return sft_out[0]

  def run_sft():
    sft_params()
    return dict(eval=np.asarray(sft_out[2]), final_loss=np.asarray(sft_out[1])[:, -1])

  def run_arm(name):
    curves = jax.device_get(rl(sft_params(), arm_params[name])[1])
    return dict(eval=np.asarray(curves["eval"]), final=np.asarray(curves["eval"][:, -1]),
                step_metrics={k: np.asarray(v) for k, v in curves.items() if k != "eval"})

  sft_result = study.arm("sft", run_sft)
  per_run = study.arms({a: lambda a=a: run_arm(a) for a in arm_params},
                       config.train, config.ucpo)
  per_arm = {a: per_run[a] for a in arms}
  tables = {a: kt.seed_table(r["final"]) for a, r in per_run.items()}
  table = {a: tables[a] for a in arms}
  table_sft = kt.seed_table(sft_result["eval"])
  study.judge(_measure(table, arms, counts, num_answers))
  _interpretations(study.interpretation, config, tables, arms, counts, num_answers)
  chunk = rl_cfg.num_steps // rl_cfg.num_evals
  eval_steps = [chunk * (i + 1) for i in range(rl_cfg.num_evals)]
  study.plot("ucpo_abstention.png", lambda ax: kt.draw_abstention(ax, table, arms))
  study.plot("ucpo_paq.png", lambda ax: kt.draw_paq(
      ax, {a: r["eval"] for a, r in per_arm.items()}, eval_steps))
  pm = lambda s: mean_std(s, digits=1, scale=100)

  def describe(arm):
    t = tables[arm]
    return (f"{arm}: PAQ {pm(t['all']['paq'])} %, abstention known/partial/unlearnable "
            f"{pm(t['known']['abstention'])} / {pm(t['partial']['abstention'])} / "
            f"{pm(t['unlearnable']['abstention'])} %, known acc {pm(t['known']['accuracy'])} %")

  lines = [f"Arm x bucket, mean ± std over {len(seeds)} paired seeds, in % "
           "(acc / abstention / hallucination / PAQ / F1):"]
  for arm in ["sft", *arms]:
    t = table_sft if arm == "sft" else table[arm]
    lines.append(f"{arm}: " + "; ".join(f"{g} " + " / ".join(pm(t[g][m]) for m in kt.METRICS)
                                        for g in kt.GROUPS) + ".")
  if runs:
    lines.append("Alternative readings (re-run arms): " + "; ".join(describe(r) for r in runs)
                 + ".")
  lines.append(
      f"Task: {task_cfg.num_prompts} prompts ({counts[0]} known / {counts[1]} partial / "
      f"{counts[2]} unlearnable), K = {task_cfg.num_answers} answers + IDK; SFT "
      f"{sft_cfg.num_steps} steps; RL {rl_cfg.num_steps} steps x {rl_cfg.batch_prompts} prompts "
      f"x G = {rl_cfg.group_size}. Metrics are exact expectations under the sampling policy; an "
      "unlearnable answer is redrawn uniformly at every query, so its PAQ is 1/K by construction.")
  u = config.ucpo
  lines.append(
      "jaxlab interpretation (unverified against the paper's code): TAD z-scores correct/wrong "
      "rollouts among themselves per group, and the uncertain rollouts among themselves "
      f"(ucpo.uncertain_norm = {u.uncertain_norm}: 'batch' z-scores the uncertain-channel "
      "value r_U over the kept groups' uncertain rollouts of the step, 'direct' uses r_U as "
      "their advantage); DURA r_U = s tanh(k (rho_w - rho_c) + b (0.5 - g_t)) with "
      f"s={u.dura_scale}, k={u.dura_k}, b={u.dura_b}, g_t an EMA (decay {u.ema_decay}) of "
      "batch accuracy; NTF drops groups with identical outcomes; 'tad' uses a constant "
      f"r_U = {u.tad_uncertain_reward}; SFT shows IDK on {task_cfg.idk_label_rate:.0%} "
      "of its labels; PAQ = correct / (correct + wrong), F1 = harmonic mean of PAQ and accuracy.")
  baselines = [a for a in (BINARY, FIXED_HALF) if a in arms]
  return study.finish(
      method="UCPO (uncertainty-aware policy optimisation)", paper_claim=PAPER_CLAIM,
      baseline="; ".join(describe(a) for a in baselines) or "no baseline arm run",
      ours=describe(METHOD) if METHOD in arms else "ucpo arm not run", details=" ".join(lines),
      results=dict(
          experiment="ucpo", preset=config.preset, seeds=seeds, arms=arms,
          bucket_counts=dict(zip(kt.BUCKETS, counts.tolist(), strict=True)),
          table=table, sft=dict(table=table_sft),
          readings={name: dict(knob=k, value=v, arm=a, table=tables[name])
                    for name, (k, v, a) in runs.items()},
          curves={a: dict(steps=eval_steps, eval=r["eval"], **r["step_metrics"])
                  for a, r in per_arm.items()},
          config=json.loads(config.to_json_best_effort())))
