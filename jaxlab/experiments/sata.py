"""SATA reproduction: does semantic (text) modulation make a motion autoencoder topology-agnostic?

Per seed: procedural biped and quadruped clips (each on its own random skeleton,
unpaired) train a SATA autoencoder; it is scored on reconstruction of fresh
clips of the seen species (JR, JP), on a held-out hexapod (out of topology),
and on zero-shot biped -> quadruped retargeting against hidden pairs (same gait
parameters; never seen in training). The retargeting task holds out what a
quadruped decoder could otherwise learn by itself (`generate.make_splits`):
the pairs move at speeds the training quadrupeds never had (only the bipeds
did), on quadruped skeletons of a morphology never trained on (limb tips, long
tails). Each retargeted clip is written as a BVH file of its target skeleton
(`workdir/bvh/<arm>/seed<s>/`), read back, and scored against the hidden pair
(`jaxlab.motion.retarget`): joint-position error, root-velocity error,
gait-phase correlation. The floor is the mean-pose predictor (each target joint
at its role's mean training rotation). Arms (the ablations) are vmapped over
seeds in one compiled program each and resume through `jaxlab.train.ArmCache`;
seeds are paired (same data, same init key). The joint descriptions are
embedded by MiniLM once and cached in the workdir (`sata_text.npz`).
"""

import dataclasses
import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

import jaxlab.report
import jaxlab.train
from jaxlab.motion import bvh, generate, retarget, strips, text_cache, training
from jaxlab.motion import model as sata
from jaxlab.presets import config_names, config_seeds, split_names
from jaxlab.report import seed_summary

PAPER_CLAIM = ("SATA (joint-text FiLM modulation + graph/attention blocks + max-pooled latent) "
               "retargets zero-shot across species with far lower error than a SAME-like GNN "
               "(34.6 vs 398 JP) while reconstructing seen species as well")
METHOD = "sata"
ARMS = ("sata", "no_film", "no_text", "shuffled_text", "gnn_only")
SPLITS = ("seen", "heldout", "retarget")
METRICS = ("jr_deg", "jp_cm", "root_vel", "gait_corr", "contact_f1")
# Retargeting scored on the BVH files read back (`retarget.METRICS`): the held-out
# morphology, and the same pairs on target skeletons of the trained morphology.
BVH_SPLITS = ("retarget_bvh", "retarget_common_bvh")
FLOOR = "mean_pose"
_DATA_SPLITS = ("train", "test_seen", "test_heldout", "pair_source", "pair_target",
                "pair_target_common")
# Reported split -> (encoded clips, decoded-on and scored-against clips); retargeting last.
_EVAL = {"seen": ("test_seen", "test_seen"), "heldout": ("test_heldout", "test_heldout"),
         "retarget": ("pair_source", "pair_target")}
# Decoded retargeting outputs that are written as BVH: data split of the targets.
_BVH = {"retarget_bvh": "pair_target", "retarget_common_bvh": "pair_target_common"}


# Each arm's static model (jaxlab interpretation of the spec's ablations) and the
# switches that make the shared "both"-modulation model compute the same function.
_ARM_MODELS = {"sata": {}, "shuffled_text": {}, "no_film": dict(modulation="concat"),
               "no_text": dict(use_text=False),
               "gnn_only": dict(spatial_attention=False, use_text=False, modulation="concat")}
_ARM_SWITCHES = {"sata": (1, 1, 1), "shuffled_text": (1, 1, 1), "no_film": (1, 0, 1),
                 "no_text": (0, 1, 1), "gnn_only": (0, 0, 0)}  # (text, film, spatial_attention)


def _base_model(config) -> dict:
  m = config.model
  return dict(width=m.width, num_blocks=m.num_blocks, num_heads=m.num_heads,
              latent_dim=m.latent_dim, num_freqs=m.num_freqs,
              max_frames=max(config.data.num_frames, 1))


def model_config(name: str, config) -> sata.SataConfig:
  """The static `SataConfig` of an arm (jaxlab interpretation of the spec's ablations)."""
  if name not in _ARM_MODELS:
    raise ValueError(f"Unknown arm {name!r}; expected one of {ARMS}")
  return sata.SataConfig(**_base_model(config), **_ARM_MODELS[name])


def shared_model_config(config) -> sata.SataConfig:
  """The model every arm runs: all ablated parts built, `arm_switches` turn them off."""
  return sata.SataConfig(**_base_model(config), modulation="both")


def arm_switches(name: str) -> sata.Switches:
  """The `Switches` under which `shared_model_config` computes `model_config(name)`'s function."""
  if name not in _ARM_SWITCHES:
    raise ValueError(f"Unknown arm {name!r}; expected one of {ARMS}")
  return sata.Switches(*(np.float32(v) for v in _ARM_SWITCHES[name]))


def make_optimizer(config) -> optax.GradientTransformation:
  """Adam on `config.optimizer` (schedule over `config.train.num_steps`), global-norm clipped."""
  lr = jaxlab.train.make_schedule(config.optimizer, config.train.num_steps)
  return optax.chain(optax.clip_by_global_norm(config.train.max_grad_norm), optax.adam(lr))


def _embeddings(descriptions: list[str], config, workdir: str) -> tuple[np.ndarray, float]:
  """MiniLM rows for `descriptions` (each embedded once), cached in the workdir."""
  key = jaxlab.train.config_hash(descriptions)
  path = os.path.join(workdir, "sata_text.npz")
  if os.path.exists(path):
    with np.load(path) as f:
      if str(f["key"]) == key:
        return f["embeddings"], 0.0
  start = time.time()
  emb = text_cache.minilm_embedder()(descriptions)
  tmp = f"{path}.{os.getpid()}.tmp.npz"
  np.savez(tmp, embeddings=emb, key=key)
  os.replace(tmp, path)
  return emb, time.time() - start


def _splits(config, seeds: list[int]) -> list[dict[str, list[generate.Clip]]]:
  d = config.data
  return [generate.make_splits(
      s, num_train=d.num_train, num_test=d.num_test, num_frames=d.num_frames, fps=d.fps,
      train_species=tuple(split_names(d.train_species)), heldout_species=d.heldout_species,
      pair=(d.pair_source, d.pair_target), bone_jitter=d.bone_jitter,
      split_speed=d.split_speed, heldout_morphology=d.heldout_morphology) for s in seeds]


def _data(config, seeds: list[int], workdir: str):
  d = config.data
  splits = _splits(config, seeds)
  descriptions = sorted({t for sp in splits for clips in sp.values() for c in clips
                         for t in c.skeleton.descriptions})
  table, seconds = _embeddings(descriptions, config, workdir)
  index = {t: i for i, t in enumerate(descriptions)}
  # Training clips are padded to their largest skeleton (over seeds), the evaluation
  # splits (one forward pass) to theirs: the model is joint-count agnostic, and padding
  # to `max_joints` everywhere would cost compute.
  joints = {k: max(c.skeleton.num_joints for sp in splits for c in sp[k]) for k in splits[0]}
  widest = {k: j if k == "train" else max(v for n, v in joints.items() if n != "train")
            for k, j in joints.items()}
  for k, j in joints.items():
    if j > d.max_joints:
      raise ValueError(f"a {k} skeleton has {j} joints > config.data.max_joints={d.max_joints}")
  packed = [{k: generate.pack(v, index, widest[k]) for k, v in sp.items()} for sp in splits]
  # The shuffled-text arm's training and test descriptions, drawn once per seed.
  for s, p in zip(seeds, packed, strict=True):
    rng = np.random.default_rng([s, 7])
    p.update({f"{k}_shuffled": generate.shuffle_text(v, rng) for k, v in list(p.items())})
  stacked = {k: {f: np.stack([getattr(p[k], f) for p in packed]) for f in
                 generate.MotionData._fields} for k in packed[0]}
  depth = max(int(v["depth"].max()) for v in stacked.values())
  example = dict(source_parents=splits[0]["pair_source"][0].skeleton.parents.tolist(),
                 target_parents=splits[0]["pair_target"][0].skeleton.parents.tolist())
  return stacked, table, depth + 1, seconds, example, splits


def _program(config, tx: optax.GradientTransformation, table: np.ndarray, num_levels: int):
  """jit(vmap over seeds) of: train, then evaluate every split (+ one retargeted example).

  The arm enters only through its data and its (traced, unbatched) `Switches`, so every
  arm reuses one compilation.
  """
  net = sata.SataAutoencoder(shared_model_config(config))
  weights = training.LossWeights(**config.loss.to_dict())
  t = config.train

  def one_seed(data, key, switches):
    stats = training.feature_stats(data["train"])
    params, losses = training.train(net, tx, data["train"], table, key, num_steps=t.num_steps,
                                    batch_size=t.batch_size, num_levels=num_levels,
                                    weights=weights, stats=stats, switches=switches)
    # Every split in one forward pass (fewer copies of the network to compile): the
    # evaluation splits share one padded joint count. The pairs' trained-morphology
    # targets come last; only their decoded outputs are used (scored from BVH).
    sources = [data[s] for s, _ in _EVAL.values()] + [data["pair_source"]]
    tgts = [data[g] for _, g in _EVAL.values()] + [data["pair_target_common"]]
    cat = lambda ds: jax.tree.map(lambda *x: jnp.concatenate(x), *ds)  # noqa: E731
    pred = training.predict(net, params, cat(sources), cat(tgts), table, num_levels=num_levels,
                            stats=stats, switches=switches)
    out, decoded, start = {}, {}, 0
    for split, g in zip((*_EVAL, "retarget_common"), tgts, strict=True):
      n = g["features"].shape[0]
      part = jax.tree.map(lambda x, a=start, b=start + n: x[a:b], pred)
      if split in _EVAL:
        out[split] = training.metrics(part, training.targets(g), g)
      if split.startswith("retarget"):
        decoded[f"{split}_bvh"] = dict(rot=part["rot"], root=part["root"])
      start += n
    # The first hidden pair (the retargeting block of the forward pass).
    src, tgt = data["pair_source"], data["pair_target"]
    r0 = start - 2 * tgt["features"].shape[0]
    lift = lambda pos, h: pos + jnp.stack([jnp.zeros_like(h), h, jnp.zeros_like(h)], -1)[  # noqa
        ..., None, :]
    example = dict(
        source=lift(src["features"][0, ..., generate.POS], src["features"][0, :, 0, 16]),
        target=lift(tgt["features"][0, ..., generate.POS], tgt["features"][0, :, 0, 16]),
        retargeted=lift(pred["pos"][r0], pred["root"][r0, :, 3]))
    return out, {k: v[-1] for k, v in losses.items()}, example, decoded

  level = config.train.get("xla_opt_level")
  options = None if level is None else {"xla_backend_optimization_level": int(level)}
  return jax.jit(jax.vmap(one_seed, in_axes=(0, 0, None)), compiler_options=options)


def _arm_data(data: dict, name: str) -> dict:
  """The splits an arm trains and is scored on (its own descriptions for shuffled_text)."""
  suffix = "_shuffled" if name == "shuffled_text" else ""
  return {k: data[k + suffix] for k in _DATA_SPLITS}


def _write_and_score(workdir: str, arm: str, seeds: list[int], splits: list[dict],
                     decoded: dict, fps: float) -> dict:
  """Writes each decoded retargeting clip as BVH, reads it back, scores it: {split: {metric:
  [per seed]}} (mean over the seed's pairs)."""
  out = {}
  for split, target_key in _BVH.items():
    per_seed = {m: [] for m in retarget.METRICS}
    for i, seed in enumerate(seeds):
      folder = os.path.join(workdir, "bvh", arm, f"seed{seed}")
      os.makedirs(folder, exist_ok=True)
      scores = []
      for n, (src, tgt) in enumerate(zip(splits[i]["pair_source"], splits[i][target_key],
                                         strict=True)):
        path = os.path.join(folder, f"{split.removesuffix('_bvh')}_{n:03d}.bvh")
        bvh.write_bvh(path, retarget.to_bvh(
            tgt.skeleton, decoded[split]["rot"][i, n], decoded[split]["root"][i, n], fps=fps,
            heading0=float(src.heading[0])))
        rot, root = retarget.motion_arrays(bvh.read_bvh(path))
        scores.append(retarget.score(rot, root, tgt, fps=fps))
      for m in retarget.METRICS:
        per_seed[m].append(float(np.mean([s[m] for s in scores])))
    out[split] = per_seed
  return out


def _mean_pose_floor(config, splits: list[dict]) -> dict:
  """{split: {metric: [per seed]}}: the mean-pose predictor on the same hidden pairs."""
  target = config.data.pair_target
  out = {}
  for split, target_key in _BVH.items():
    per_seed = {m: [] for m in retarget.METRICS}
    for sp in splits:
      table = retarget.mean_pose([c for c in sp["train"] if c.skeleton.species == target])
      scores = [retarget.score(*retarget.mean_pose_clip(table, t), t, fps=t.fps)
                for t in sp[target_key]]
      for m in retarget.METRICS:
        per_seed[m].append(float(np.mean([s[m] for s in scores])))
    out[split] = per_seed
  return out


def _pm(s: dict, digits: int = 2) -> str:
  return f"{s['mean']:.{digits}f} ± {s['std']:.{digits}f}"


def _measure(table: dict, arms: list[str], floor: dict, split: str = "retarget_bvh") -> dict:
  """Per-seed values of each criterion; retargeting read back from `split`'s BVH files."""
  def seeds(arm, split, metric):
    return np.asarray(table[arm][split][metric]["per_seed"])

  measured = {}
  if METHOD not in arms:
    return measured
  reference = np.asarray(floor[split]["jp_cm"])
  for base in ("gnn_only", "no_text", "no_film", "shuffled_text"):
    if base in arms:
      measured[f"retarget_vs_{base}"] = (seeds(METHOD, split, "jp_cm"),
                                         seeds(base, split, "jp_cm"), reference)
  pairs = {"gait_vs_no_text": ("no_text", split, "gait_corr"),
           "heldout_vs_gnn_only": ("gnn_only", "heldout", "jp_cm"),
           "recon_comparable": ("gnn_only", "seen", "jr_deg")}
  for name, (base, sp, metric) in pairs.items():
    if base in arms:
      measured[name] = (seeds(METHOD, sp, metric), seeds(base, sp, metric))
  return measured


def _plots(workdir: str, table: dict, arms: list[str], example: dict | None) -> list[str]:
  def draw_bars(ax):
    x = np.arange(len(arms))
    for i, (split, label) in enumerate((("seen", "seen species (recon)"),
                                        ("heldout", "held-out hexapod (recon)"),
                                        ("retarget", "biped -> quadruped (retarget)"))):
      means = [table[a][split]["jp_cm"]["mean"] for a in arms]
      stds = [table[a][split]["jp_cm"]["std"] for a in arms]
      ax.bar(x + 0.27 * i, means, 0.27, yerr=stds, label=label)
    ax.set_xticks(x + 0.27, arms)
    ax.set_ylabel("joint-position error (cm)")
    ax.set_title("SATA ablations: reconstruction and zero-shot retargeting")
    ax.legend(fontsize=7)

  plots = [jaxlab.report.save_plot(workdir, "sata_errors.png", draw_bars)]
  if example is not None:
    plots.append(jaxlab.report.save_plot(workdir, "sata_retarget_strip.png",
                                         lambda ax: draw_example(ax, example)))
  return plots


def draw_example(ax, example: dict) -> None:
  """Source (biped), retargeted and hidden-pair (quadruped) clips as frame strips."""
  src_par = np.asarray(example["source_parents"])
  tgt_par = np.asarray(example["target_parents"])
  rows = (("target", tgt_par, "C2"), ("retargeted", tgt_par, "C3"), ("source", src_par, "C0"))
  y = 0.0
  for key, par, color in rows:  # stacked bottom to top, each above the previous one's top
    pos = np.asarray(example[key])[:, :len(par)]
    y -= float(pos[..., 1].min())
    label = {"source": "source (biped)", "retargeted": "SATA retargeted (quadruped)",
             "target": "hidden pair (quadruped)"}[key]
    strips.draw_strip(ax, pos, par, frames=6, spacing=1.2, y_offset=y, color=color, label=label)
    y += float(pos[..., 1].max()) + 0.2
  ax.legend(fontsize=7, loc="upper right")
  ax.set_title("Zero-shot biped -> quadruped retargeting (seed 0, first hidden pair)")


def run(config, workdir: str) -> dict:
  """Runs every arm (resuming finished ones), writes results.json, returns the results."""
  os.makedirs(workdir, exist_ok=True)
  t0 = time.time()
  arms = config_names(config, "arms", choices=ARMS)
  seeds = config_seeds(config)
  for a in arms:
    model_config(a, config)  # fail on a bad knob before any work
  tx = make_optimizer(config)  # one optimizer (and learning rate) for every arm
  cache = jaxlab.train.ArmCache(workdir)
  data_key = jaxlab.train.config_hash(config.seeds, config.data)
  run_key = jaxlab.train.config_hash(data_key, config.model, config.loss, config.train,
                                     config.optimizer)
  loaded = {}

  def data():
    if not loaded:
      d, table, levels, seconds, example, splits = _data(config, seeds, workdir)
      loaded.update(data=jax.device_put(d), table=table, levels=levels, encode=seconds,
                    example=example, splits=splits,
                    program=_program(config, tx, table, levels))
    return loaded

  def clips():
    return loaded["splits"] if loaded else loaded.setdefault("splits", _splits(config, seeds))

  keys = jax.vmap(jax.random.key)(np.asarray(seeds))

  def run_arm(name):
    d = data()
    start = time.time()
    out, final_loss, example, decoded = jax.device_get(
        d["program"](_arm_data(d["data"], name), keys, arm_switches(name)))
    metrics = {s: {m: np.asarray(out[s][m]) for m in METRICS} for s in SPLITS}
    metrics.update(_write_and_score(workdir, name, seeds, d["splits"], decoded,
                                    float(config.data.fps)))
    result = dict(metrics=metrics, final_loss={k: np.asarray(v) for k, v in final_loss.items()},
                  seconds=time.time() - start)
    if name == METHOD:
      result["example"] = dict({k: np.asarray(v[0]) for k, v in example.items()},
                               **d["example"])
    return result

  per_arm = {a: cache.get_or_run(a, jaxlab.train.config_hash(run_key, a),
                                 lambda a=a: run_arm(a)) for a in arms}
  # The floor depends on the data only; cached like an arm.
  floor = cache.get_or_run(FLOOR, data_key, lambda: _mean_pose_floor(config, clips()))
  metric_names = {**{s: METRICS for s in SPLITS}, **{s: retarget.METRICS for s in BVH_SPLITS}}
  table = {a: {s: {m: seed_summary(r["metrics"][s][m]) for m in ms}
               for s, ms in metric_names.items()} for a, r in per_arm.items()}
  floor_table = {s: {m: seed_summary(v) for m, v in floor[s].items()} for s in BVH_SPLITS}
  row_verdict, criteria = jaxlab.report.judge_all(config.criteria, _measure(table, arms, floor))
  # jaxlab interpretation: the target morphology. The same trained arms re-scored on the
  # same pairs decoded on skeletons of the morphology the quadrupeds trained on.
  knob = "data.heldout_morphology"
  readings = [jaxlab.report.interpretation(
      knob, bool(config.data.heldout_morphology), config.criteria,
      _measure(table, arms, floor), default=True, source="jaxlab interpretation")]
  if config.data.heldout_morphology:
    readings.append(jaxlab.report.interpretation(
        knob, "False (re-scored: the same pairs on quadrupeds of the trained morphology)",
        config.criteria, _measure(table, arms, floor, "retarget_common_bvh"),
        source="jaxlab interpretation"))
  example = per_arm[METHOD].get("example") if METHOD in arms else None
  plots = _plots(workdir, table, arms, example)

  def describe(arm):
    t = table[arm]
    return (f"{arm}: retarget JP {_pm(t['retarget_bvh']['jp_cm'])} cm (trained morphology "
            f"{_pm(t['retarget_common_bvh']['jp_cm'])}), gait corr "
            f"{_pm(t['retarget_bvh']['gait_corr'])}, root vel err "
            f"{_pm(t['retarget_bvh']['root_vel'], 3)} m/s, contact F1 "
            f"{_pm(t['retarget']['contact_f1'])}; recon JR {_pm(t['seen']['jr_deg'])} deg / "
            f"JP {_pm(t['seen']['jp_cm'])} cm; hexapod JP {_pm(t['heldout']['jp_cm'])} cm")

  d = config.data
  lines = [f"Mean ± std over {len(seeds)} paired seeds; JR degrees, JP cm (root-relative), "
           "root velocity m/s; retargeting scored on the BVH files read back (facing frame)."]
  lines += [describe(a) + "." for a in arms]
  lines.append(
      f"Floor (mean pose: each target joint at its role's mean training rotation): retarget "
      f"JP {_pm(floor_table['retarget_bvh']['jp_cm'])} cm (trained morphology "
      f"{_pm(floor_table['retarget_common_bvh']['jp_cm'])}).")
  held_out = ("quadrupeds of a held-out morphology (limb tips, 3-4 tail segments; trained "
              "on none)" if d.heldout_morphology else f"{d.pair_target}s")
  lines.append(
      f"Data: {d.num_train} clips per species ({d.train_species}), each on its own random "
      f"skeleton (bone lengths ±{d.bone_jitter:.0%}, segment counts, naming styles), "
      f"{d.num_frames} frames at {d.fps:g} fps; {d.pair_source}s train below "
      f"{d.split_speed} m/s, {d.pair_target}s at or above it; {d.num_test} hidden "
      f"{d.pair_source} -> {d.pair_target} pairs below {d.split_speed} m/s, decoded on "
      f"{held_out}; held-out {d.heldout_species}. Model width {config.model.width}, "
      f"{config.model.num_blocks} block(s), {config.train.num_steps} steps x "
      f"{config.train.batch_size} clips. Paper anchor (AT-HumanML3D -> AniMo zero-shot JP): "
      "SATA 34.6 vs SAME 398.1.")
  lines.append(
      "jaxlab interpretation (the paper's data, loss weights and exact layers are not "
      "available): procedural species with sinusoidal controllers; MiniLM instead of T5 for "
      "joint descriptions; gnn_only = no spatial Transformer, no text, concatenation "
      "(SAME-like); shuffled_text permutes each skeleton's descriptions among its joints; "
      "output per joint 6-D rotation + 4 root + 1 contact; the held-out speeds and "
      "morphology stand for the paper's unseen species.")
  baselines = [a for a in arms if a != METHOD]
  report = jaxlab.report.ReportRow(
      method="SATA (topology-agnostic motion autoencoder)", paper_claim=PAPER_CLAIM,
      baseline="; ".join(describe(a) for a in baselines) or "no baseline arm run",
      ours=describe(METHOD) if METHOD in arms else "sata arm not run",
      verdict=row_verdict, details=" ".join(lines), plots=tuple(plots), criteria=criteria,
      interpretations=tuple(readings))
  results = dict(
      experiment="sata", preset=config.preset, seeds=seeds, arms=arms, table=table,
      floor=floor_table,
      final_loss={a: {k: seed_summary(v) for k, v in r["final_loss"].items()}
                  for a, r in per_arm.items()},
      arm_seconds={a: r["seconds"] for a, r in per_arm.items()},
      example=example, encode_seconds=loaded.get("encode", 0.0),
      seconds=time.time() - t0, config=json.loads(config.to_json_best_effort()),
      report=dataclasses.asdict(report))
  jaxlab.report.write_results(workdir, results)
  return results
