"""The APC reproduction's per-seed pipeline (`jaxlab.experiments.apc`), from its config.

Per paired seed, on line completions from files the base model never saw: hard
completion, the trivial suggestions, threshold APC (at the Fano threshold, the
per-token Bayes rule and a threshold tuned on training files), then the base
model fine-tuned on placeholder targets from its own edit logs (SFT) and trained
further with the cost reward (GRPO), each scored with and without its
placeholders (`run_seed`). Every arm is scored at each reading of the
jaxlab-interpretation knob `apc.costs.navigation` (`readings`).

Example:
  >>> import ml_collections
  >>> readings(ml_collections.ConfigDict(dict(apc=dict(costs=dict(navigation="per_byte")))))
  ('per_byte', 'per_region')
"""

import dataclasses
from collections.abc import Callable
from typing import NamedTuple

import jax
import ml_collections
import numpy as np
import optax

from jaxlab import codecomp
from jaxlab.codecomp.evaluation import (
    Suggestion,
    completions,
    cost_sweep,
    hard_in_chunks,
    position_error_rate,
    score_arms,
    trained_suggestions,
    trivial_suggestions,
)
from jaxlab.train.optimizers import optimizer as build_optimizer

ARMS = ("hc", "empty", "all_ph", "apc_fano", "apc_pmax", "apc_tuned", "sft", "sft_guess",
        "sft_hc", "sft_rl", "sft_rl_guess", "sft_rl_hc")


def cost_model(config) -> codecomp.CostModel:
  """The cost model of `config.apc.costs`.

  Example:
    >>> cost_model(load_config("apc", "smoke")).rho  # doctest: +SKIP
  """
  return codecomp.CostModel(**config.apc.costs.to_dict())


def stage_optimizer(config: ml_collections.ConfigDict, stage: str) -> optax.GradientTransformation:
  """The optimizer of a stage after the base LM, "sft" or "rl": `jaxlab.train.optimizer` of
  the section `config.optimizer.<stage>` (over the base LM's keys) for `config.<stage>`'s
  steps.

  Example:
    >>> tx = stage_optimizer(load_config("apc", "smoke"), "sft")  # doctest: +SKIP
  """
  if stage not in ("sft", "rl"):
    raise ValueError(f"stage must be 'sft' or 'rl', got {stage!r}")
  return build_optimizer(config.optimizer, config[stage].num_steps, stage=stage)


class Stages(NamedTuple):
  """The jitted SFT and GRPO steps and their optimizers, built once per run and shared by
  every seed (a step built per seed would be traced again for each)."""
  sft_tx: optax.GradientTransformation
  sft_step: Callable
  rl_tx: optax.GradientTransformation
  grpo_step: Callable


def make_stages(config: ml_collections.ConfigDict, model) -> Stages:
  """The `Stages` of `config` (optimizers `config.optimizer.{sft,rl}`, GRPO knobs `config.rl`).

  Example:
    >>> stages = make_stages(config, model)  # doctest: +SKIP
  """
  r = config.rl
  rl_tx = stage_optimizer(config, "rl")
  sft_tx = stage_optimizer(config, "sft")
  return Stages(sft_tx, codecomp.make_sft_step(model, sft_tx), rl_tx,
                codecomp.make_grpo_step(model, rl_tx, cost_model(config),
                                        num_tokens=config.apc.max_target_len,
                                        group_size=r.group_size, temperature=r.temperature,
                                        eps_low=r.eps_low, eps_high=r.eps_high,
                                        malformed_penalty=r.malformed_penalty))


def readings(config: ml_collections.ConfigDict) -> tuple[str, ...]:
  """The readings of `apc.costs.navigation` every arm is scored at, the config's first.

  Example:
    >>> c = ml_collections.ConfigDict(dict(apc=dict(costs=dict(navigation="per_byte"))))
    >>> readings(c)
    ('per_byte', 'per_region')
  """
  own = config.apc.costs.navigation
  return (own,) + tuple(r for r in codecomp.NAVIGATION if r != own)


def run_seed(config, model, base_params, corpus, seed: int, stages: Stages | None = None) -> dict:
  """Every arm for one paired seed; returns per-arm summaries and the sweep.

  The top-level `arms`, `sweep` and `tuned_threshold` are at the config's cost reading;
  `readings[r]` holds them at each reading r of `apc.costs.navigation`. `base_params`
  should be uncommitted arrays (see `run`); `stages` defaults to
  `make_stages(config, model)`.

  Example:
    >>> out = run_seed(config, model, base_params, corpus, seed=0)  # doctest: +SKIP
    >>> out["arms"]["sft_rl"]["rel_cost"]                           # doctest: +SKIP
  """
  a, costs = config.apc, cost_model(config)
  stages = stages or make_stages(config, model)
  n, chunk = a.max_target_len, a.num_eval
  h_star = codecomp.critical_entropy(costs.rho, a.fano_vocab_size)
  thresholds = np.asarray(a.thresholds, np.float64)
  models = {r: dataclasses.replace(costs, navigation=r) for r in readings(config)}

  ex = completions(a, corpus.val, a.num_eval, seed)  # held-out files only
  dec = hard_in_chunks(model, base_params, ex.prompts, n, chunk)
  with_ph = lambda scores, t: codecomp.threshold_placeholders(dec.tokens, scores, t)
  arms = dict(hc=Suggestion(dec.tokens, dec.lengths, dec.tokens),
              **trivial_suggestions(dec.tokens),
              apc_fano=Suggestion(with_ph(dec.entropy, h_star), dec.lengths, dec.tokens),
              apc_pmax=Suggestion(with_ph(1.0 - dec.p_max, costs.rho), dec.lengths, dec.tokens))
  # The tuned threshold is chosen on training files, never on the evaluation set.
  tune = completions(a, corpus.train, a.num_tune, 10_000 + seed)
  tune_dec = hard_in_chunks(model, base_params, tune.prompts, n, chunk)
  tuned = {r: float(thresholds[int(np.argmin(cost_sweep(tune_dec, tune, thresholds, c)))])
           for r, c in models.items()}

  # Edit logs: the base model's own suggestions on training files vs the truth.
  logs = completions(a, corpus.train, config.sft.num_logs, 20_000 + seed)
  log_dec = hard_in_chunks(model, base_params, logs.prompts, n, chunk)
  targets, keep = [], []
  for i in range(len(logs.prompts)):
    t = codecomp.placeholder_target(log_dec.tokens[i, :log_dec.lengths[i]],
                                    logs.targets[i, :logs.target_lens[i]],
                                    min_similarity=config.sft.min_similarity,
                                    max_span=config.sft.max_span)
    if t is not None:
      targets.append(t)
      keep.append(i)
  if not keep:
    raise ValueError("no edit-log pair reached sft.min_similarity; lower it or train the base "
                     "model longer")
  rows, mask = codecomp.sft_sequences(logs.prompts[keep], targets, n)
  pairs_with_ph = float(np.mean([codecomp.PLACEHOLDER in t for t in targets]))

  s = config.sft
  params, opt_state = base_params, stages.sft_tx.init(base_params)
  rng = np.random.default_rng(seed)
  sft_losses = []
  for _ in range(s.num_steps):
    idx = rng.integers(0, len(rows), size=s.batch_size)
    params, opt_state, loss = stages.sft_step(params, opt_state, rows[idx], mask[idx])
    sft_losses.append(loss)  # on device: one host transfer after the loop, not one per step
  sft_arms, _ = trained_suggestions(model, params, ex, n, "sft", chunk)
  arms.update(sft_arms)

  r = config.rl
  opt_state = stages.rl_tx.init(params)
  key = jax.random.key(seed)
  rl_rewards = []
  for _ in range(r.num_steps):
    key, k = jax.random.split(key)
    idx = rng.integers(0, len(logs.prompts), size=r.batch_size)
    params, opt_state, m = stages.grpo_step(params, opt_state, logs.prompts[idx],
                                            logs.targets[idx], logs.target_lens[idx], k)
    rl_rewards.append(m["reward"])
  rl_arms, shown = trained_suggestions(model, params, ex, n, "sft_rl", chunk)
  arms.update(rl_arms)

  by_reading = {}
  for reading, c in models.items():
    scored = score_arms(dict(arms, apc_tuned=Suggestion(with_ph(dec.entropy, tuned[reading]),
                                                     dec.lengths, dec.tokens)), ex, c)
    # Chance for each arm's precision: its OWN hard completion's error rate over the
    # positions of its completions (another model's rate is at other positions).
    for name, sugg in arms.items():
      if name in ("hc", "sft", "sft_rl"):
        scored[name]["position_error_rate"] = position_error_rate(
            sugg.hard, sugg.lengths, ex.targets, ex.target_lens)
    by_reading[reading] = dict(arms={name: scored[name] for name in ARMS}, tuned_threshold=tuned[
        reading], sweep=(cost_sweep(dec, ex, thresholds, c) / scored["hc"]["cost"]).tolist())

  # Examples for display: a few held-out completions with their placeholders.
  examples = [dict(prefix=bytes(ex.prompts[i, -40:].astype(np.uint8)).decode("utf-8", "replace"),
                   truth=bytes(ex.targets[i, :ex.target_lens[i]].astype(np.uint8)).decode(
                       "utf-8", "replace"),
                   hard=codecomp.render_snippet(dec.tokens[i, :int(dec.lengths[i])]),
                   apc=codecomp.render_snippet(shown.tokens[i, :shown.lengths[i]]))
              for i in range(min(6, len(ex.prompts)))]
  return dict(**by_reading[costs.navigation], readings=by_reading, h_star=h_star,
              sft_pairs=len(keep), sft_pairs_with_placeholder=pairs_with_ph,
              sft_losses=np.asarray(jax.device_get(sft_losses), np.float64).tolist(),
              rl_rewards=np.asarray(jax.device_get(rl_rewards), np.float64).tolist(),
              examples=examples)


