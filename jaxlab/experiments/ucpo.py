"""UCPO reproduction: does decoupled, dynamic abstention reward put "I don't know" where it belongs?

The toy knowledge-boundary task (`jaxlab.rl.knowledge_task`): one SFT warm start
per seed (known + noisy partial prompts), then RL from it under each arm (binary
GRPO, GRPO with fixed r_u, TAD only, TAD + DURA = UCPO), seeds vmapped, every arm
the same compiled program. Arms resume through `jaxlab.train.ArmCache`. Seeds are
paired across arms: same task draw, same SFT policy, same RL key.

Interpretation readings: for each knob in `config.readings` and each of its
other values, the arms that knob changes are re-run under it (named
`<arm>@<knob>=<value>`), the criteria re-judged with them in place, and the row's
verdict at every reading goes into the report.
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
METHOD, BINARY, FIXED_HALF, TAD = "ucpo", "grpo", "fixed_0.5", "tad"
UNCERTAIN_NORMS = ("batch", "direct")
# The arms each interpretation knob of `config.ucpo` changes (the others are not re-run).
KNOB_ARMS = {"uncertain_norm": (TAD, METHOD), "dura_b": (METHOD,)}


def make_arm(name: str, config, **overrides) -> kt.Arm:
  """The `knowledge_task.Arm` of an arm name ("grpo", "fixed_<r_u>", "tad", "ucpo").

  Args:
    name: the arm's name.
    config: the experiment's config (its `ucpo` knobs).
    **overrides: `config.ucpo` knobs replaced for this arm (an interpretation reading).

  Returns:
    The arm.
  """
  u = {**config.ucpo.to_dict(), **overrides}
  if u["uncertain_norm"] not in UNCERTAIN_NORMS:
    raise ValueError(f"ucpo.uncertain_norm must be one of {UNCERTAIN_NORMS}, "
                     f"got {u['uncertain_norm']!r}")
  if name == "grpo":
    return kt.make_arm("grpo")
  if name.startswith("fixed_"):
    try:
      r_u = float(name[len("fixed_"):])
    except ValueError as e:
      raise ValueError(f"arm {name!r}: expected fixed_<r_u>, e.g. fixed_0.5") from e
    return kt.make_arm("grpo", reward_uncertain=r_u)
  if name in (TAD, METHOD):
    return kt.make_arm(name, uncertain_reward=u["tad_uncertain_reward"],
                       normalize_uncertain=u["uncertain_norm"] == "batch",
                       dura_scale=u["dura_scale"], dura_k=u["dura_k"], dura_b=u["dura_b"])
  raise ValueError(f"Unknown arm {name!r}; expected grpo, fixed_<r_u>, tad or ucpo")


def reading_runs(config, arms: list[str]) -> dict[str, tuple[str, object, str]]:
  """The runs of the alternative readings in `config.readings`.

  Args:
    config: the experiment's config; `config.readings` maps a knob of `KNOB_ARMS`
      to its other values.
    arms: the configured arms (a reading re-runs only those of them its knob changes).

  Returns:
    {run name "<arm>@<knob>=<value>": (knob, value, arm)}.

  Example:
    >>> import ml_collections
    >>> config = ml_collections.ConfigDict(
    ...     dict(readings=dict(uncertain_norm=("direct",), dura_b=(0.0,))))
    >>> sorted(reading_runs(config, ["fixed_0.5", "ucpo"]))
    ['ucpo@dura_b=0.0', 'ucpo@uncertain_norm=direct']
  """
  runs = {}
  for knob, values in config.get("readings", {}).items():
    if knob not in KNOB_ARMS:
      raise ValueError(f"config.readings: unknown knob {knob!r}; expected one of "
                       f"{sorted(KNOB_ARMS)}")
    for value in values:
      for arm in KNOB_ARMS[knob]:
        if arm in arms:
          runs[f"{arm}@{knob}={value}"] = (knob, value, arm)
  return runs


def reading_source(knob: str, value) -> str:
  """Where a reading of an interpretation knob comes from (shown in the report).

  Args:
    knob: a key of `config.ucpo`.
    value: its reading.

  Returns:
    The source: the paper where it says, else "jaxlab interpretation" and why.

  Example:
    >>> reading_source("dura_b", 0.0)
    "jaxlab interpretation: the spec's unverified default, the model-evolution term off"
  """
  if knob == "uncertain_norm":
    return ("the paper, abstract ('independently normalize deterministic and uncertain "
            "rollouts'); pooling the batch's uncertain rollouts is jaxlab interpretation"
            if value == "batch" else
            "jaxlab interpretation: the spec's reading, DURA's value is the uncertain "
            "rollouts' advantage")
  if knob == "dura_b":
    return ("jaxlab interpretation: the spec's unverified default, the model-evolution term off"
            if float(value) == 0 else
            "jaxlab interpretation: the abstract's model-evolution term on, gain b = k")
  return "jaxlab interpretation"


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
      ema_decay=u.ema_decay, num_evals=t.num_evals)
  return task_cfg, policy_cfg, sft_cfg, rl_cfg


def _table(final: np.ndarray) -> dict:
  """[seeds, 4, 5] evaluation tables -> {group: {metric: summary}}."""
  return {g: {m: seed_summary(final[:, i, j]) for j, m in enumerate(kt.METRICS)}
          for i, g in enumerate(kt.GROUPS)}


def _pm(s: dict, pct: bool = True) -> str:
  f = 100.0 if pct else 1.0
  return f"{f * s['mean']:.1f} ± {f * s['std']:.1f}"


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


def _interpretations(config, table: dict, arms: list[str], counts: np.ndarray,
                     num_answers: int) -> list:
  """The row's verdict at the config's reading of each knob and at each alternative."""
  out = []
  runs = reading_runs(config, arms)
  for knob, values in config.get("readings", {}).items():
    default = config.ucpo[knob]
    out.append(jaxlab.report.interpretation(
        f"ucpo.{knob}", default, config.criteria,
        _measure(table, arms, counts, num_answers), default=True,
        source=reading_source(knob, default)))
    for value in values:
      swapped = {**table, **{arm: table[name] for name, (k, v, arm) in runs.items()
                             if k == knob and v == value}}
      out.append(jaxlab.report.interpretation(
          f"ucpo.{knob}", value, config.criteria,
          _measure(swapped, arms, counts, num_answers), source=reading_source(knob, value)))
  return out


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
  runs = reading_runs(config, arms)
  arm_params = {a: make_arm(a, config) for a in arms}
  arm_params.update({name: make_arm(arm, config, **{knob: value})
                     for name, (knob, value, arm) in runs.items()})
  task_cfg, policy_cfg, sft_cfg, rl_cfg = _configs(config)
  num_answers = task_cfg.num_answers
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
  per_run = {a: cache.get_or_run(a, jaxlab.train.config_hash(rl_key, a),
                                 lambda a=a: run_arm(a)) for a in arm_params}
  per_arm = {a: per_run[a] for a in arms}

  tables = {a: _table(np.asarray(r["final"])) for a, r in per_run.items()}
  table = {a: tables[a] for a in arms}
  table_sft = _table(np.asarray(sft_result["eval"]))
  row_verdict, criteria = jaxlab.report.judge_all(
      config.criteria, _measure(table, arms, counts, num_answers))
  readings = _interpretations(config, tables, arms, counts, num_answers)

  chunk = rl_cfg.num_steps // rl_cfg.num_evals
  eval_steps = [chunk * (i + 1) for i in range(rl_cfg.num_evals)]
  plots = _plots(workdir, table, {a: r["eval"] for a, r in per_arm.items()}, arms, eval_steps)

  def describe(arm):
    t = tables[arm]
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
  report = jaxlab.report.ReportRow(
      method="UCPO (uncertainty-aware policy optimisation)", paper_claim=PAPER_CLAIM,
      baseline="; ".join(describe(a) for a in baselines) or "no baseline arm run",
      ours=describe(METHOD) if METHOD in arms else "ucpo arm not run",
      verdict=row_verdict, details=" ".join(lines), plots=tuple(plots), criteria=criteria,
      interpretations=readings)
  results = dict(
      experiment="ucpo", preset=config.preset, seeds=seeds, arms=arms,
      bucket_counts=dict(zip(kt.BUCKETS, counts.tolist(), strict=True)),
      table=table, sft=dict(table=table_sft, seconds=sft_result["seconds"]),
      readings={name: dict(knob=k, value=v, arm=a, table=tables[name])
                for name, (k, v, a) in runs.items()},
      curves={a: dict(steps=eval_steps, eval=r["eval"], **r["step_metrics"])
              for a, r in per_arm.items()},
      arm_seconds={a: r["seconds"] for a, r in per_run.items()},
      seconds=time.time() - t0, config=json.loads(config.to_json_best_effort()),
      report=dataclasses.asdict(report))
  jaxlab.report.write_results(workdir, results)
  return results
