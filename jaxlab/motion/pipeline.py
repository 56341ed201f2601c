"""The SATA study's pipeline: arms, data, the per-arm program, BVH scoring, the floor, plots.

The ablation arms share one compiled model (`shared_model_config`, every part built) whose
`model.Switches` (traced) turn parts off (`arm_switches`), so each arm computes what its
static `model_config` would. `make_data` draws, packs and stacks the per-seed clips;
`make_program` is jit(vmap over seeds) of training then scoring every split;
`write_and_score` writes each retargeted clip as BVH, reads it back and scores it against
its hidden pair; `mean_pose_floor` is the floor on the same pairs.

Example:
  >>> from jaxlab.motion import pipeline
  >>> m = pipeline.model_config("gnn_only", dict(width=16, num_blocks=1, num_heads=2,
  ...                           latent_dim=4, num_freqs=4), num_frames=8)
  >>> m.use_text, m.spatial_attention, float(pipeline.arm_switches("gnn_only").text)
  (False, False, 0.0)
"""

import os
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxlab.motion import bvh, generate, retarget, strips, training
from jaxlab.motion import model as sata
from jaxlab.presets import split_names

ARMS = ("sata", "no_film", "no_text", "shuffled_text", "gnn_only")
SPLITS = ("seen", "heldout", "retarget")
METRICS = ("jr_deg", "jp_cm", "root_vel", "gait_corr", "contact_f1")
DATA_SPLITS = ("train", "test_seen", "test_heldout", "pair_source", "pair_target",
               "pair_target_common")
# Reported split -> (encoded clips, decoded-on and scored-against clips); retargeting last.
_EVAL = {"seen": ("test_seen", "test_seen"), "heldout": ("test_heldout", "test_heldout"),
         "retarget": ("pair_source", "pair_target")}
# Decoded retargeting outputs that are written as BVH: data split of the targets.
BVH = {"retarget_bvh": "pair_target", "retarget_common_bvh": "pair_target_common"}
# Each arm's static model (jaxlab interpretation of the paper's ablations) and the
# switches that make the shared "both"-modulation model compute the same function.
_ARM_MODELS = {"sata": {}, "shuffled_text": {}, "no_film": dict(modulation="concat"),
               "no_text": dict(use_text=False),
               "gnn_only": dict(spatial_attention=False, use_text=False, modulation="concat")}
_ARM_SWITCHES = {"sata": (1, 1, 1), "shuffled_text": (1, 1, 1), "no_film": (1, 0, 1),
                 "no_text": (0, 1, 1), "gnn_only": (0, 0, 0)}  # (text, film, spatial_attention)


def _base(model: Any, num_frames: int) -> dict:
  return dict(width=model["width"], num_blocks=model["num_blocks"],
              num_heads=model["num_heads"], latent_dim=model["latent_dim"],
              num_freqs=model["num_freqs"], max_frames=max(num_frames, 1))


def model_config(name: str, model: Any, num_frames: int) -> sata.SataConfig:
  """The static `SataConfig` of an arm (jaxlab interpretation of the paper's ablations).

  Args:
    name: one of `ARMS`.
    model: the `config.model` section (width, num_blocks, num_heads, latent_dim, num_freqs).
    num_frames: the clips' frame count (the positional table's length).

  Returns:
    The arm's model.

  Example:
    >>> model_config("no_film", dict(width=16, num_blocks=1, num_heads=2, latent_dim=4,
    ...                              num_freqs=4), 8).modulation
    'concat'
  """
  if name not in _ARM_MODELS:
    raise ValueError(f"Unknown arm {name!r}; expected one of {ARMS}")
  return sata.SataConfig(**_base(model, num_frames), **_ARM_MODELS[name])


def shared_model_config(model: Any, num_frames: int) -> sata.SataConfig:
  """The model every arm runs: all ablated parts built, `arm_switches` turn them off.

  Args:
    model: the `config.model` section.
    num_frames: the clips' frame count.

  Returns:
    The "both"-modulation model.

  Example:
    >>> shared_model_config(dict(width=16, num_blocks=1, num_heads=2, latent_dim=4,
    ...                          num_freqs=4), 8).modulation
    'both'
  """
  return sata.SataConfig(**_base(model, num_frames), modulation="both")


def arm_switches(name: str) -> sata.Switches:
  """The `Switches` under which `shared_model_config` computes `model_config(name)`'s function.

  Args:
    name: one of `ARMS`.

  Returns:
    float32 (text, film, spatial_attention) switches.

  Example:
    >>> [float(v) for v in arm_switches("no_text")]
    [0.0, 1.0, 1.0]
  """
  if name not in _ARM_SWITCHES:
    raise ValueError(f"Unknown arm {name!r}; expected one of {ARMS}")
  return sata.Switches(*(np.float32(v) for v in _ARM_SWITCHES[name]))


def make_splits(data: Any, seeds: Sequence[int]) -> list[dict[str, list[generate.Clip]]]:
  """Each seed's clips (`generate.make_splits`) under the `config.data` section.

  Args:
    data: the `config.data` section (num_train, num_test, num_frames, fps, train_species,
      heldout_species, pair_source, pair_target, bone_jitter, split_speed,
      heldout_morphology).
    seeds: the seeds.

  Returns:
    One {split: clips} per seed.

  Example:
    >>> import ml_collections
    >>> d = ml_collections.ConfigDict(dict(num_train=2, num_test=1, num_frames=8, fps=10.0,
    ...     train_species="biped,quadruped", heldout_species="hexapod", pair_source="biped",
    ...     pair_target="quadruped", bone_jitter=0.1, split_speed=1.0,
    ...     heldout_morphology=True))
    >>> sorted(make_splits(d, [0])[0])[:2]
    ['pair_source', 'pair_target']
  """
  return [generate.make_splits(
      s, num_train=data.num_train, num_test=data.num_test, num_frames=data.num_frames,
      fps=data.fps, train_species=tuple(split_names(data.train_species)),
      heldout_species=data.heldout_species, pair=(data.pair_source, data.pair_target),
      bone_jitter=data.bone_jitter, split_speed=data.split_speed,
      heldout_morphology=data.heldout_morphology) for s in seeds]


def descriptions(splits: Sequence[dict[str, list[generate.Clip]]]) -> list[str]:
  """Every joint description of the clips, sorted, each once (the text table's rows).

  Args:
    splits: `make_splits`' output.

  Returns:
    The sorted distinct descriptions.

  Example:
    >>> import ml_collections
    >>> d = ml_collections.ConfigDict(dict(num_train=2, num_test=1, num_frames=8, fps=10.0,
    ...     train_species="biped", heldout_species="hexapod", pair_source="biped",
    ...     pair_target="quadruped", bone_jitter=0.1, split_speed=1.0,
    ...     heldout_morphology=False))
    >>> t = descriptions(make_splits(d, [0]))
    >>> t == sorted(set(t))
    True
  """
  return sorted({t for sp in splits for clips in sp.values() for c in clips
                 for t in c.skeleton.descriptions})


def make_data(splits: Sequence[dict[str, list[generate.Clip]]], texts: Sequence[str],
              seeds: Sequence[int], max_joints: int) -> tuple[dict, int, dict]:
  """The per-seed clips packed and stacked on a leading seed axis (shuffled-text copies too).

  Training clips are padded to their largest skeleton (over seeds), the evaluation splits
  (one forward pass) to theirs: the model is joint-count agnostic, and padding to
  `max_joints` everywhere would cost compute.

  Args:
    splits: `make_splits`' output.
    texts: `descriptions(splits)` (row i of the text table embeds texts[i]).
    seeds: the seeds (each draws its shuffled-text permutation).
    max_joints: the largest skeleton allowed (`config.data.max_joints`).

  Returns:
    ({split or split_shuffled: {MotionData field: [seeds, ...]}}, the number of tree
    levels, the first hidden pair's parents {"source_parents", "target_parents"}).

  Raises:
    ValueError: a skeleton has more than `max_joints` joints.

  Example:
    >>> import ml_collections
    >>> d = ml_collections.ConfigDict(dict(num_train=2, num_test=1, num_frames=8, fps=10.0,
    ...     train_species="biped,quadruped", heldout_species="hexapod", pair_source="biped",
    ...     pair_target="quadruped", bone_jitter=0.1, split_speed=1.0,
    ...     heldout_morphology=True))
    >>> sp = make_splits(d, [0])
    >>> data, levels, example = make_data(sp, descriptions(sp), [0], max_joints=64)
    >>> data["train"]["features"].shape[0], "train_shuffled" in data
    (1, True)
  """
  index = {t: i for i, t in enumerate(texts)}
  joints = {k: max(c.skeleton.num_joints for sp in splits for c in sp[k]) for k in splits[0]}
  widest = {k: j if k == "train" else max(v for n, v in joints.items() if n != "train")
            for k, j in joints.items()}
  for k, j in joints.items():
    if j > max_joints:
      raise ValueError(f"a {k} skeleton has {j} joints > config.data.max_joints={max_joints}")
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
  return stacked, depth + 1, example


def arm_data(data: dict, name: str) -> dict:
  """The splits an arm trains and is scored on (its own descriptions for shuffled_text).

  Args:
    data: `make_data`'s stacked splits.
    name: the arm.

  Returns:
    {split: arrays} of `DATA_SPLITS`.

  Example:
    >>> d = {k + s: k + s for k in DATA_SPLITS for s in ("", "_shuffled")}
    >>> arm_data(d, "shuffled_text")["train"]
    'train_shuffled'
  """
  suffix = "_shuffled" if name == "shuffled_text" else ""
  return {k: data[k + suffix] for k in DATA_SPLITS}


def make_program(model_cfg: sata.SataConfig, tx: optax.GradientTransformation,
                 table: np.ndarray, num_levels: int, weights: training.LossWeights, *,
                 num_steps: int, batch_size: int, xla_opt_level: int | None = None
                 ) -> Callable:
  """jit(vmap over seeds) of: train, then evaluate every split (+ one retargeted example).

  The arm enters only through its data and its (traced, unbatched) `Switches`, so every
  arm reuses one compilation.

  Args:
    model_cfg: `shared_model_config`.
    tx: the optimizer (`jaxlab.train.optimizer`), one for every arm.
    table: the text table [len(descriptions), e].
    num_levels: tree levels (`make_data`).
    weights: the loss weights.
    num_steps, batch_size: the training run.
    xla_opt_level: XLA's backend optimisation level (None: its default).

  Returns:
    `program(arm_data, keys [S], switches) -> (metrics per split, final losses, the first
    hidden pair's example, decoded retargeting outputs per BVH split)`.

  Example:
    >>> import ml_collections
    >>> d = ml_collections.ConfigDict(dict(num_train=2, num_test=1, num_frames=8, fps=10.0,
    ...     train_species="biped,quadruped", heldout_species="hexapod", pair_source="biped",
    ...     pair_target="quadruped", bone_jitter=0.1, split_speed=1.0,
    ...     heldout_morphology=True))
    >>> sp = make_splits(d, [0])
    >>> texts = descriptions(sp)
    >>> data, levels, _ = make_data(sp, texts, [0], max_joints=64)
    >>> cfg = shared_model_config(dict(width=8, num_blocks=1, num_heads=2, latent_dim=4,
    ...                                num_freqs=2), 8)
    >>> fn = make_program(cfg, optax.adam(1e-3), np.zeros((len(texts), 4), np.float32),
    ...                   levels, training.LossWeights(), num_steps=1, batch_size=2)
    >>> out = fn(arm_data(data, "sata"), jax.random.split(jax.random.key(0), 1),
    ...          arm_switches("sata"))
    >>> sorted(out[0])
    ['heldout', 'retarget', 'seen']
  """
  net = sata.SataAutoencoder(model_cfg)

  def one_seed(data, key, switches):
    stats = training.feature_stats(data["train"])
    params, losses = training.train(net, tx, data["train"], table, key, num_steps=num_steps,
                                    batch_size=batch_size, num_levels=num_levels,
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

  options = (None if xla_opt_level is None
             else {"xla_backend_optimization_level": int(xla_opt_level)})
  return jax.jit(jax.vmap(one_seed, in_axes=(0, 0, None)), compiler_options=options)


def write_and_score(workdir: str, arm: str, seeds: Sequence[int], splits: Sequence[dict],
                    decoded: dict, fps: float) -> dict:
  """Writes each decoded retargeting clip as BVH, reads it back and scores the file.

  Args:
    workdir: files go to `workdir/bvh/<arm>/seed<s>/`.
    arm: the arm.
    seeds: the seeds.
    splits: `make_splits`' output (the hidden pairs).
    decoded: BVH split -> {"rot": [S, n, t, j, 3, 3], "root": [S, n, t, 4]}.
    fps: the clips' frame rate.

  Returns:
    {BVH split: {metric: [per seed]}}: `retarget.score`, mean over the seed's pairs.

  Example:
    >>> import tempfile
    >>> sp = generate.make_splits(0, num_train=2, num_test=1, num_frames=8, fps=10.0)
    >>> dec = {s: dict(rot=np.broadcast_to(np.eye(3), (1, 1, 8, 40, 3, 3)),
    ...                root=np.zeros((1, 1, 8, 4))) for s in BVH}
    >>> sorted(write_and_score(tempfile.mkdtemp(), "sata", [0], [sp], dec, 10.0))
    ['retarget_bvh', 'retarget_common_bvh']
  """
  out = {}
  for split, target_key in BVH.items():
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


def mean_pose_floor(target: str, splits: Sequence[dict]) -> dict:
  """The mean-pose predictor (each target joint at its role's mean training rotation).

  Args:
    target: the target species (`config.data.pair_target`).
    splits: `make_splits`' output.

  Returns:
    {BVH split: {metric: [per seed]}} on the same hidden pairs as `write_and_score`.

  Example:
    >>> sp = generate.make_splits(0, num_train=4, num_test=1, num_frames=8, fps=10.0)
    >>> mean_pose_floor("quadruped", [sp])["retarget_bvh"]["jp_cm"][0] > 0
    True
  """
  out = {}
  for split, target_key in BVH.items():
    per_seed = {m: [] for m in retarget.METRICS}
    for sp in splits:
      table = retarget.mean_pose([c for c in sp["train"] if c.skeleton.species == target])
      scores = [retarget.score(*retarget.mean_pose_clip(table, t), t, fps=t.fps)
                for t in sp[target_key]]
      for m in retarget.METRICS:
        per_seed[m].append(float(np.mean([s[m] for s in scores])))
    out[split] = per_seed
  return out


def draw_errors(ax: Any, table: dict, arms: Sequence[str]) -> None:
  """Bars of joint-position error per arm: seen-species and hexapod reconstruction, retargeting.

  Args:
    ax: a matplotlib Axes.
    table: arm -> split -> metric -> `seed_summary`.
    arms: the arms, in order.

  Example:
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt
    >>> c = {"jp_cm": {"mean": 2.0, "std": 0.1}}
    >>> draw_errors(plt.figure().gca(), {"a": {"seen": c, "heldout": c, "retarget": c}}, ["a"])
  """
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


def draw_example(ax: Any, example: dict) -> None:
  """Source (biped), retargeted and hidden-pair (quadruped) clips as frame strips.

  Args:
    ax: a matplotlib Axes.
    example: "source", "retargeted", "target" positions [t, j, 3] and the
      "source_parents" / "target_parents" of their skeletons.

  Example:
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt
    >>> pos = np.zeros((6, 2, 3)); pos[:, 1, 1] = 1.0
    >>> draw_example(plt.figure().gca(), dict(source=pos, retargeted=pos, target=pos,
    ...              source_parents=[-1, 0], target_parents=[-1, 0]))
  """
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
