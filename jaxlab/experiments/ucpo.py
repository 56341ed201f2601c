"""UCPO reproduction: does decoupled, dynamic abstention reward put "I don't know" where it belongs?

The toy knowledge-boundary task (`jaxlab.rl.knowledge_task`): one SFT warm start
per seed (known + noisy partial prompts), then RL from it under each arm (binary
GRPO, GRPO with fixed r_u, TAD only, TAD + DURA = UCPO), seeds vmapped, every arm
the same compiled program. Arms resume through `jaxlab.train.ArmCache`. Seeds are
paired across arms: same task draw, same SFT policy, same RL key.
"""

import dataclasses
import json
import os
import time

import jax
import numpy as np

import jaxlab.report
import jaxlab.train
from jaxlab.presets import config_names, config_seeds
from jaxlab.report import seed_summary
from jaxlab.rl import knowledge_task as kt

PAPER_CLAIM = ("UCPO (TAD + DURA) removes GRPO's advantage bias on 'I don't know': abstention "
               "concentrates on questions beyond the model's knowledge, PAQ rises over GRPO and "
               "fixed-uncertainty-reward RL, and accuracy on known questions is kept")
METHOD, BINARY, FIXED_HALF = "ucpo", "grpo", "fixed_0.5"


def make_arm(name: str, config) -> kt.Arm:
  """The `knowledge_task.Arm` of an arm name ("grpo", "fixed_<r_u>", "tad", "ucpo")."""
  if name == "grpo":
    return kt.make_arm("grpo")
  if name.startswith("fixed_"):
    try:
      r_u = float(name[len("fixed_"):])
    except ValueError as e:
      raise ValueError(f"arm {name!r}: expected fixed_<r_u>, e.g. fixed_0.5") from e
    return kt.make_arm("grpo", reward_uncertain=r_u)
  if name in ("tad", "ucpo"):
    return kt.make_arm(name, uncertain_advantage=config.ucpo.tad_uncertain_advantage)
  raise ValueError(f"Unknown arm {name!r}; expected grpo, fixed_<r_u>, tad or ucpo")


def _configs(config):
  task_cfg = kt.TaskConfig(**{**config.task.to_dict(),
                              "fractions": tuple(config.task.fractions)})
  policy_cfg = kt.PolicyConfig(**config.model.to_dict())
  sft_cfg = kt.SFTConfig(**config.sft.to_dict(),
                          learning_rate=config.optimizer.sft.learning_rate)
  t, u = config.train, config.ucpo
  lr = jaxlab.train.make_schedule(config.optimizer, t.num_steps * t.updates_per_batch)
  rl_cfg = kt.RLConfig(
      num_steps=t.num_steps, batch_prompts=t.batch_size, group_size=t.group_size,
      learning_rate=lr, updates_per_batch=t.updates_per_batch, eps_low=t.eps_low,
      eps_high=t.eps_high, max_grad_norm=t.max_grad_norm, adv_eps=u.adv_eps,
      dura_scale=u.dura_scale, dura_k=u.dura_k, dura_b=u.dura_b, ema_decay=u.ema_decay,
      num_evals=t.num_evals)
  return task_cfg, policy_cfg, sft_cfg, rl_cfg


def _table(final: np.ndarray) -> dict:
  """[seeds, 4, 5] evaluation tables -> {group: {metric: summary}}."""
  return {g: {m: seed_summary(final[:, i, j]) for j, m in enumerate(kt.METRICS)}
          for i, g in enumerate(kt.GROUPS)}


def _pm(s: dict, pct: bool = True) -> str:
  f = 100.0 if pct else 1.0
  return f"{f * s['mean']:.1f} ± {f * s['std']:.1f}"


def _measure(table: dict, arms: list[str], counts: np.ndarray) -> dict:
  """Per-seed values for each declared criterion (None when an arm is missing)."""
  def seeds(arm, group, metric):
    return np.asarray(table[arm][group][metric]["per_seed"])

  measured = {}
  if METHOD in arms:
    w = counts[:2] / counts[:2].sum()  # answerable = known + partial, weighted by prompts
    answerable = (w[0] * seeds(METHOD, "known", "abstention")
                  + w[1] * seeds(METHOD, "partial", "abstention"))
    measured["abstention_concentrated"] = (seeds(METHOD, "unlearnable", "abstention"),
                                           answerable)
    if BINARY in arms:
      measured["known_accuracy"] = (seeds(METHOD, "known", "accuracy"),
                                    seeds(BINARY, "known", "accuracy"))
    others = [a for a in arms if a != METHOD]
    if others:
      best = np.max([seeds(a, "all", "paq") for a in others], axis=0)
      measured["paq_over_every_arm"] = (seeds(METHOD, "all", "paq"), best)
    if FIXED_HALF in arms:
      measured["no_avoidance"] = (seeds(METHOD, "partial", "abstention"),
                                  seeds(FIXED_HALF, "partial", "abstention"))
  return measured


def _plots(workdir: str, table: dict, curves: dict, arms: list[str], eval_steps) -> list[str]:
  def draw_abstention(ax):
    width = 0.8 / len(arms)
    x = np.arange(len(kt.BUCKETS))
    for i, arm in enumerate(arms):
      means = [table[arm][b]["abstention"]["mean"] for b in kt.BUCKETS]
      stds = [table[arm][b]["abstention"]["std"] for b in kt.BUCKETS]
      ax.bar(x + i * width, means, width, yerr=stds, label=arm)
    ax.set_xticks(x + 0.4 - width / 2, kt.BUCKETS)
    ax.set_ylabel("abstention rate (P(IDK))")
    ax.set_title("Where each arm says 'I don't know'")
    ax.legend(fontsize=7)

  def draw_paq(ax):
    for arm in arms:
      c = np.asarray(curves[arm])  # [seeds, evals, 4, 5]
      paq = c[:, :, kt.GROUPS.index("all"), kt.METRICS.index("paq")]
      ax.plot(eval_steps, paq.mean(0), label=arm)
    ax.set_xlabel("RL step")
    ax.set_ylabel("PAQ (all prompts)")
    ax.set_title("PAQ during RL (mean over seeds)")
    ax.legend(fontsize=7)

  return [jaxlab.report.save_plot(workdir, "ucpo_abstention.png", draw_abstention),
          jaxlab.report.save_plot(workdir, "ucpo_paq.png", draw_paq)]


def run(config, workdir: str) -> dict:
  """Runs every arm (resuming finished ones), writes results.json, returns the results."""
  os.makedirs(workdir, exist_ok=True)
  t0 = time.time()
  arms = config_names(config, "arms")
  seeds = config_seeds(config)
  arm_params = {a: make_arm(a, config) for a in arms}
  task_cfg, policy_cfg, sft_cfg, rl_cfg = _configs(config)
  model = kt.make_policy(policy_cfg, task_cfg)
  tasks = kt.stack_tasks([kt.make_task(task_cfg, s) for s in seeds])
  counts = np.bincount(np.asarray(tasks.buckets[0]), minlength=3)
  # Per seed: init, SFT and RL keys; the RL key is shared by the arms (paired seeds).
  keys = jax.vmap(lambda s: jax.random.split(jax.random.key(s), 3))(np.asarray(seeds))

  @jax.jit
  @jax.vmap
  def sft(task, k):
    params = kt.init_params(model, k[0])
    params, losses = kt.sft_train(model, params, task, k[1], task_cfg, sft_cfg)
    return params, losses, kt.evaluate(model, params, task, task_cfg)

  @jax.jit
  def rl(params, arm):
    return jax.vmap(lambda p, t, k: kt.rl_train(model, p, t, arm, k[2], task_cfg, rl_cfg))(
        params, tasks, keys)

  sft_out = {}

  def sft_params():
    if not sft_out:
      start = time.time()
      out = jax.block_until_ready(sft(tasks, keys))
      sft_out.update(params=out[0], loss=np.asarray(out[1]), eval=np.asarray(out[2]),
                     seconds=time.time() - start)
    return sft_out["params"]

  def run_sft():
    sft_params()
    return dict(eval=sft_out["eval"], final_loss=sft_out["loss"][:, -1],
                seconds=sft_out["seconds"])

  def run_arm(name):
    start = time.time()
    _, curves = jax.block_until_ready(rl(sft_params(), arm_params[name]))
    curves = jax.device_get(curves)
    return dict(eval=np.asarray(curves["eval"]), final=np.asarray(curves["eval"][:, -1]),
                step_metrics={k: np.asarray(v) for k, v in curves.items() if k != "eval"},
                seconds=time.time() - start)

  cache = jaxlab.train.ArmCache(workdir)
  shared = jaxlab.train.config_hash(config.seeds, config.task, config.model, config.sft,
                                    config.optimizer.sft)
  sft_result = cache.get_or_run("sft", shared, run_sft)
  rl_key = jaxlab.train.config_hash(shared, config.train, config.optimizer, config.ucpo)
  per_arm = {a: cache.get_or_run(a, jaxlab.train.config_hash(rl_key, a),
                                 lambda a=a: run_arm(a)) for a in arms}

  table = {a: _table(np.asarray(r["final"])) for a, r in per_arm.items()}
  table_sft = _table(np.asarray(sft_result["eval"]))
  row_verdict, criteria = jaxlab.report.judge_all(config.criteria, _measure(table, arms, counts))

  chunk = rl_cfg.num_steps // rl_cfg.num_evals
  eval_steps = [chunk * (i + 1) for i in range(rl_cfg.num_evals)]
  plots = _plots(workdir, table, {a: r["eval"] for a, r in per_arm.items()}, arms, eval_steps)

  def describe(arm):
    t = table[arm]
    return (f"{arm}: PAQ {_pm(t['all']['paq'])} %, abstention known/partial/unlearnable "
            f"{_pm(t['known']['abstention'])} / {_pm(t['partial']['abstention'])} / "
            f"{_pm(t['unlearnable']['abstention'])} %, known acc {_pm(t['known']['accuracy'])} %")

  lines = [f"Arm x bucket, mean ± std over {len(seeds)} paired seeds, in % "
           "(acc / abstention / hallucination / PAQ / F1):"]
  for arm in ["sft", *arms]:
    t = table_sft if arm == "sft" else table[arm]
    cells = "; ".join(f"{g} " + " / ".join(_pm(t[g][m]) for m in kt.METRICS)
                      for g in kt.GROUPS)
    lines.append(f"{arm}: {cells}.")
  lines.append(
      f"Task: {task_cfg.num_prompts} prompts ({counts[0]} known / {counts[1]} partial / "
      f"{counts[2]} unlearnable), K = {task_cfg.num_answers} answers + IDK; SFT "
      f"{sft_cfg.num_steps} steps; RL {rl_cfg.num_steps} steps x {rl_cfg.batch_prompts} prompts "
      f"x G = {rl_cfg.group_size}. Metrics are exact expectations under the sampling policy; an "
      "unlearnable answer is redrawn uniformly at every query, so its PAQ is 1/K by construction.")
  lines.append(
      "jaxlab interpretation (unverified against the paper's code): TAD z-scores correct/wrong "
      "rollouts among themselves; DURA a_U = s tanh(k (rho_w - rho_c) + b (0.5 - g_t)) with "
      f"s={rl_cfg.dura_scale}, k={rl_cfg.dura_k}, b={rl_cfg.dura_b}; NTF drops groups with "
      "identical outcomes; 'tad' uses a constant a_U = "
      f"{config.ucpo.tad_uncertain_advantage}; SFT shows IDK on {task_cfg.idk_label_rate:.0%} "
      "of its labels; PAQ = correct / (correct + wrong), F1 = harmonic mean of PAQ and accuracy.")
  baselines = [a for a in (BINARY, FIXED_HALF) if a in arms]
  report = jaxlab.report.ReportRow(
      method="UCPO (uncertainty-aware policy optimisation)", paper_claim=PAPER_CLAIM,
      baseline="; ".join(describe(a) for a in baselines) or "no baseline arm run",
      ours=describe(METHOD) if METHOD in arms else "ucpo arm not run",
      verdict=row_verdict, details=" ".join(lines), plots=tuple(plots), criteria=criteria)
  results = dict(
      experiment="ucpo", preset=config.preset, seeds=seeds, arms=arms,
      bucket_counts=dict(zip(kt.BUCKETS, counts.tolist(), strict=True)),
      table=table, sft=dict(table=table_sft, seconds=sft_result["seconds"]),
      curves={a: dict(steps=eval_steps, eval=r["eval"], **r["step_metrics"])
              for a, r in per_arm.items()},
      arm_seconds={a: r["seconds"] for a, r in per_arm.items()},
      seconds=time.time() - t0, config=json.loads(config.to_json_best_effort()),
      report=dataclasses.asdict(report))
  jaxlab.report.write_results(workdir, results)
  return results
