"""CRAMER reproduction: can request-aware masks steer a frozen SASRec toward a request?

Per seed: one synthetic world (`jaxlab.recsys.world`), one SASRec backbone trained on
request-free histories and kept in the workdir (`backbone/seed<s>.<hash>.msgpack`), then
frozen for every arm. Requests and item texts are embedded once with the offline MiniLM
encoder, each distinct string once, cached in `cramer_embeddings.npz`
(`jaxlab.text.encode_cached`). Each arm trains its own parameters on the training users'
request steps (seeds vmapped; CRAMER's ρ / noise sharing are traced, so the ρ sweep
shares one compiled program) and is evaluated on held-out users with held-out
paraphrases. The "cramer_oracle" arm is CRAMER fed each request's true intent and genre
(`world.oracle_requests`) instead of its MiniLM embedding: what the masks can do with
perfect request understanding. The backbones, every arm and the timing are arms of a
`jaxlab.study.Study` (cached, resumed). Seeds are paired across arms (same world, same
backbone, same arm key). Ranking criteria are floored at a random ranking of the sampled
candidates; time per request is measured per seed, backbone and CRAMER interleaved.
"""

import functools
import json
import os

import jax
import jax.numpy as jnp
import numpy as np

import jaxlab.train
from jaxlab.presets import config_names
from jaxlab.recsys import arms as arms_lib
from jaxlab.recsys import metrics as rec_metrics
from jaxlab.recsys import pipeline, sasrec, training, world
from jaxlab.recsys.pipeline import FUSION, ORACLE, time_per_request
from jaxlab.report import Fact, seed_summary
from jaxlab.study import Study, mean_std
from jaxlab.text import encode_cached
from jaxlab.train.optimizers import resolve

PAPER_CLAIM = ("Request-aware row/column masks on a frozen sequential recommender (CRAMER) "
               "beat the backbone alone on request-bearing steps (SASRec-ReDial HR@10 .426 -> "
               ".578) and the fusion baselines, and shift genre share toward 'want' and away "
               "from 'avoid' requests")
METHOD, BACKBONE = "cramer", "frozen"
GROUPS = ("request", "want", "avoid", "none", "all")
METRICS = ("s_hr", "s_ndcg", "s_mrr", "f_hr", "f_ndcg", "f_mrr", "share", "share_neutral")


def make_arm(name: str, config) -> tuple[arms_lib.ArmConfig, arms_lib.ArmHyper]:
  """(ArmConfig, ArmHyper) of an arm name (`jaxlab.recsys.pipeline.make_arm`)."""
  return pipeline.make_arm(name, config.cramer, config.baselines)


def _configs(config):
  """(WorldConfig, SASRecConfig, backbone TrainConfig, arm TrainConfig) of a config."""
  w = config.world.to_dict()
  w["request_probs"] = tuple(w["request_probs"])
  world_cfg = world.WorldConfig(**w)
  model_cfg = sasrec.SASRecConfig(num_items=world_cfg.num_items, max_len=world_cfg.max_len,
                                  **config.model.to_dict())
  b, t = config.backbone, config.train
  backbone_cfg = training.TrainConfig(num_steps=b.num_steps, batch_size=b.batch_size,
                                      optimizer=resolve(config.optimizer, "backbone"))
  arm_cfg = training.TrainConfig(num_steps=t.num_steps, batch_size=t.batch_size,
                                 optimizer=resolve(config.optimizer))
  return world_cfg, model_cfg, backbone_cfg, arm_cfg


def _embeddings(strings: list[str], workdir: str, batch_size: int) -> dict:
  """{string: MiniLM embedding}, cached in the workdir."""
  emb = encode_cached(strings, os.path.join(workdir, "cramer_embeddings.npz"),
                      batch_size=batch_size)
  return dict(zip(strings, emb, strict=True))


def _measure(table: dict, arms: list[str], high_rho: str | None, chance: dict,
             latency: dict | None = None) -> dict:
  """Per-seed values of each criterion: (method, baseline[, chance reference]).

  Args:
    table: {arm: {group: {metric: seed_summary}}}.
    arms: the arms run.
    high_rho: the ρ-sweep arm `high_rho_hurts` compares with (`high_rho_arm`), or None.
    chance: the random ranking's "hr" and "ndcg" (`metrics.chance_metrics`), the floor.
    latency: {"backbone": [s per seed], "cramer": [s per seed]}, or None (not timed).
  """
  def seeds(arm, group, metric):
    return np.asarray(table[arm][group][metric]["per_seed"])

  measured = {}
  if METHOD not in arms:
    return measured
  n = len(seeds(METHOD, "request", "s_hr"))
  hr_ref, ndcg_ref = np.full(n, chance["hr"]), np.full(n, chance["ndcg"])
  hr = seeds(METHOD, "request", "s_hr")
  if BACKBONE in arms:
    measured["hr_over_frozen"] = (hr, seeds(BACKBONE, "request", "s_hr"), hr_ref)
    measured["ndcg_over_frozen"] = (seeds(METHOD, "request", "s_ndcg"),
                                    seeds(BACKBONE, "request", "s_ndcg"), ndcg_ref)
    if ORACLE in arms:
      measured["oracle_hr_over_frozen"] = (seeds(ORACLE, "request", "s_hr"),
                                           seeds(BACKBONE, "request", "s_hr"), hr_ref)
  fusion = [a for a in FUSION if a in arms]
  if fusion:
    best = np.max([seeds(a, "request", "s_hr") for a in fusion], axis=0)
    measured["vs_best_fusion"] = (hr, best, hr_ref)
  measured["want_shift"] = (seeds(METHOD, "want", "share"), seeds(METHOD, "want", "share_neutral"))
  measured["avoid_shift"] = (seeds(METHOD, "avoid", "share"),
                             seeds(METHOD, "avoid", "share_neutral"))
  if "cramer_shared" in arms:
    measured["per_instance_over_shared"] = (hr, seeds("cramer_shared", "request", "s_hr"),
                                            hr_ref)
  if high_rho is not None:
    measured["high_rho_hurts"] = (hr, seeds(high_rho, "request", "s_hr"), hr_ref)
  if latency is not None:
    measured["latency_vs_backbone"] = (np.asarray(latency[METHOD]),
                                       np.asarray(latency[BACKBONE]))
  return measured


def high_rho_arm(arm_defs: dict, rho: float) -> str | None:
  """The ρ-sweep arm that `high_rho_hurts` compares CRAMER with, or None.

  The sweep's highest ρ, if it is "too high" (>= 0.25, the paper's) and above CRAMER's own
  `config.cramer.rho`: otherwise the criterion would compare CRAMER with a lower or an
  equal drop ratio and read the result as "a high ρ hurts".
  """
  sweep = [a for a in arm_defs if a.startswith("cramer_rho")]
  high = max(sweep, key=lambda a: arm_defs[a][1].rho, default=None)
  if high is None or arm_defs[high][1].rho < 0.25 or arm_defs[high][1].rho <= rho:
    return None
  return high


def run(config, workdir: str) -> dict:
  """Runs every arm (resuming finished ones), writes results.json, returns the results."""
  arms = config_names(config, "arms")
  arm_defs = {a: make_arm(a, config) for a in arms}
  world_cfg, model_cfg, backbone_cfg, arm_cfg = _configs(config)
  study = Study(config, workdir, key=(config.seeds, config.world, config.model,
                                      config.backbone, config.optimizer),
                total=len(arms) + 2)
  seeds = study.seeds
  worlds = [world.make_world(world_cfg, s) for s in seeds]
  strings = sorted({s for w in worlds for s in (*w.item_texts, *w.train.requests,
                                                *w.test.requests, w.neutral_request)})
  data = pipeline.stack_worlds(worlds, _embeddings(strings, workdir, config.encoder_batch_size),
                               world_cfg.num_genres)
  hist = np.concatenate([data["train"]["history"], data["test"]["history"]], 1)
  tag = jaxlab.train.config_hash(config.seeds, config.world, config.model, config.backbone,
                                 resolve(config.optimizer, "backbone"))
  paths = [os.path.join(workdir, "backbone", f"seed{s}.{tag}.msgpack") for s in seeds]
  load = functools.partial(pipeline.backbones, model_cfg, backbone_cfg, hist, seeds, paths)
  # An arm for the final losses (resumed with the rest); the params live in `paths`.
  backbone_info = study.arm("backbone", lambda: dict(final_loss=load()[1]))
  backbones = load()[0]
  stacked = jax.tree.map(lambda *x: jnp.stack(x), *backbones)
  keys = jax.vmap(lambda s: jax.random.fold_in(jax.random.key(s), 2))(np.asarray(seeds))
  per_arm = study.arms({a: functools.partial(
      pipeline.fit_arm, *arm_defs[a], model_cfg, arm_cfg, stacked, data, keys,
      oracle=a == ORACLE, k=config.eval.k) for a in arms}, config.train,
                       config.cramer, config.baselines, config.eval.k)
  table = {a: {g: {m: seed_summary(v) for m, v in ms.items()} for g, ms in r["groups"].items()}
           for a, r in per_arm.items()}
  high = high_rho_arm(arm_defs, float(config.cramer.rho))
  chance = rec_metrics.chance_metrics(1 + world_cfg.num_negatives, config.eval.k)
  timing = study.arm("timing", lambda: time_per_request(
      model_cfg, backbones, data, *make_arm(METHOD, config), config.eval.timing_repeats),
      config.cramer, config.baselines, config.eval)
  study.judge(_measure(table, arms, high, chance, timing))
  study.plot("cramer_hr.png", functools.partial(pipeline.draw_ranking, table=table, arms=arms))
  study.plot("cramer_genre_share.png", functools.partial(pipeline.draw_genre_share, table=table,
                                                         arms=arms))

  pm = {a: {g: {m: mean_std(v) for m, v in ms.items()} for g, ms in table[a].items()}
        for a in arms}

  def describe(arm):
    t = pm[arm]
    return (f"{arm}: request-bearing HR@10 {t['request']['s_hr']}, NDCG@10 "
            f"{t['request']['s_ndcg']} (1 + 100 sampled); full-ranking HR@10 "
            f"{t['request']['f_hr']}; genre share want {t['want']['share']} vs "
            f"{t['want']['share_neutral']} neutral, avoid {t['avoid']['share']} vs "
            f"{t['avoid']['share_neutral']} neutral")

  n_gates = sasrec.num_gates(model_cfg, config.cramer.scope)
  lines = [f"Arm: request-bearing steps HR@10 / NDCG@10 / MRR@10 (1 + {world_cfg.num_negatives} "
           f"sampled) | full ranking HR@10 / NDCG@10 | no-request steps HR@10; mean ± std over "
           f"{len(seeds)} paired seeds (paper SASRec-ReDial: backbone .426/.373, best fusion "
           "REARANK .549/.414, CRAMER .578/.428):"]
  lines += [f"{a}: " + " / ".join(t["request"][m] for m in ("s_hr", "s_ndcg", "s_mrr")) + " | "
            + " / ".join(t["request"][m] for m in ("f_hr", "f_ndcg")) + f" | {t['none']['s_hr']}."
            for a, t in pm.items()]
  lines.append(
      f"World: {world_cfg.num_items} items, {world_cfg.num_genres} genres, "
      f"{world_cfg.num_train_users} train / {world_cfg.num_test_users} test users, histories "
      f"{world_cfg.min_len}-{world_cfg.max_len}; request step {world_cfg.request_probs} "
      "(none / want / avoid), test users get held-out paraphrases. Backbone SASRec "
      f"{model_cfg.num_layers}x d={model_cfg.d_model}, {backbone_cfg.num_steps} steps; arms "
      f"{arm_cfg.num_steps} steps x {arm_cfg.batch_size}. CRAMER: MiniLM (frozen) -> linear -> "
      f"{n_gates} gates ({config.cramer.scope}), rho={config.cramer.rho}, "
      f"lambda_KL={config.cramer.lambda_kl}, tau {config.cramer.tau_start} -> "
      f"{config.cramer.tau_end} ({config.cramer.tau_schedule}).")
  lines.append(
      f"Chance (random ranking of 1 + {world_cfg.num_negatives}): HR@{config.eval.k} "
      f"{chance['hr']:.3f}, NDCG@{config.eval.k} {chance['ndcg']:.3f} (the ranking floors).")
  if ORACLE in arms and METHOD in arms and BACKBONE in arms:
    gain = lambda a: (np.asarray(table[a]["request"]["s_hr"]["per_seed"])  # noqa: E731
                      - np.asarray(table[BACKBONE]["request"]["s_hr"]["per_seed"]))
    lines.append(
        f"Oracle requests (true intent and genre as the embedding): HR@10 gain over frozen "
        f"{gain(ORACLE).mean():+.3f} vs MiniLM CRAMER's {gain(METHOD).mean():+.3f}: what the "
        "masks can do with perfect request understanding, against what they do with MiniLM's.")
  lines.append(
      f"Time per request (CPU, batch 1, median per seed, mean over seeds): backbone "
      f"{1e3 * np.mean(timing[BACKBONE]):.3f} ms, CRAMER {1e3 * np.mean(timing[METHOD]):.3f} ms "
      f"({np.mean(np.asarray(timing[METHOD]) / np.asarray(timing[BACKBONE])):.2f}x; paper 1.55x "
      "on GPU). MiniLM's request encoding is excluded (computed once per string); the paper "
      "does not say whether its PLM is in its figure.")
  lines.append(
      "jaxlab interpretations: the synthetic world, the baselines' forms (concat head residual "
      "MLP; late fusion score + alpha cos; adapter h.E + u(h, e_q).A(e_text)); fine-tune = the "
      "request as a last token; the oracle's one-hot request; frozen backbone run without "
      "dropout; ties rank against the target.")
  facts = [
      Fact("latency_backbone", "backbone scoring time per request (CPU, batch 1; median per "
           "seed, mean over seeds)", round(1e3 * float(np.mean(timing[BACKBONE])), 3), "ms"),
      Fact("latency_cramer", "CRAMER scoring time per request (gates + masked backbone; "
           "MiniLM encoding excluded)", round(1e3 * float(np.mean(timing[METHOD])), 3), "ms"),
      Fact("num_gates", "gates d = sum over masked matrices of rows + columns", n_gates),
  ]
  return study.finish(
      method="CRAMER (request-aware masking of a frozen SASRec)", paper_claim=PAPER_CLAIM,
      baseline=describe(BACKBONE) if BACKBONE in arms else "frozen arm not run",
      ours=describe(METHOD) if METHOD in arms else "cramer arm not run",
      details=" ".join(lines), facts=facts,
      results=dict(experiment="cramer", preset=config.preset, seeds=seeds, arms=arms,
                   table=table, arm_final_loss={a: r["final_loss"] for a, r in per_arm.items()},
                   backbone=backbone_info, num_strings=len(strings),
                   seconds_per_request=timing, config=json.loads(config.to_json_best_effort())))
