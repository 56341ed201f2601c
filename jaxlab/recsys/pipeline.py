"""The CRAMER study's pipeline around the arms: naming, data, backbones, group means, timing.

`make_arm` turns an arm name into its (`ArmConfig`, `ArmHyper`); `stack_worlds` stacks
per-seed worlds into the arrays every arm reads (text looked up in an embedding table);
`backbones` trains the per-seed SASRec backbones once (seeds vmapped) and keeps them in
msgpack files; `group_means` averages per-row test metrics over request groups;
`fit_arm` trains and scores one arm on every seed; `time_per_request` times the backbone
alone against CRAMER on it, interleaved; `draw_ranking` / `draw_genre_share` plot an arm table.

Example:
  >>> import ml_collections
  >>> from jaxlab.recsys import pipeline
  >>> cramer = ml_collections.ConfigDict(dict(rho=0.1, lambda_kl=0.2, scope="wo",
  ...     tau_start=0.7, tau_end=0.3, tau_schedule="cosine"))
  >>> base = ml_collections.ConfigDict(dict(hidden=16, fusion_scale=10.0))
  >>> arm, hyper = pipeline.make_arm("cramer_rho0.25", cramer, base)
  >>> arm.kind, hyper.rho
  ('cramer', 0.25)
"""

import functools
import os
import time
from collections.abc import Sequence
from typing import Any

import flax.serialization
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

from jaxlab.recsys import arms as arms_lib
from jaxlab.recsys import sasrec, training, world

FUSION = ("concat", "late_fusion", "adapter")
ORACLE = "cramer_oracle"


def make_arm(name: str, cramer: Any, baselines: Any
             ) -> tuple[arms_lib.ArmConfig, arms_lib.ArmHyper]:
  """(ArmConfig, ArmHyper) of an arm name.

  Args:
    name: frozen, concat, late_fusion, adapter, finetune, cramer, cramer_shared,
      cramer_oracle (CRAMER on oracle request embeddings: the same program, other data)
      or cramer_rho<ρ> (CRAMER at drop ratio ρ).
    cramer: the `config.cramer` section (rho, lambda_kl, scope, tau_start, tau_end,
      tau_schedule).
    baselines: the `config.baselines` section (hidden, fusion_scale).

  Returns:
    The arm's static config and its traced hyper-parameters.

  Raises:
    ValueError: an unknown name, or a ρ that does not parse or lies outside [0, 1).

  Example:
    >>> import ml_collections
    >>> c = ml_collections.ConfigDict(dict(rho=0.1, lambda_kl=0.2, scope="wo",
    ...     tau_start=0.7, tau_end=0.3, tau_schedule="cosine"))
    >>> b = ml_collections.ConfigDict(dict(hidden=16, fusion_scale=10.0))
    >>> make_arm("cramer_shared", c, b)[1].shared_noise
    True
  """
  static = dict(scope=cramer.scope, tau_start=cramer.tau_start, tau_end=cramer.tau_end,
                tau_schedule=cramer.tau_schedule, hidden=baselines.hidden,
                fusion_scale=baselines.fusion_scale)
  hyper = arms_lib.ArmHyper(rho=float(cramer.rho), shared_noise=False,
                            lambda_kl=float(cramer.lambda_kl))
  if name in ("frozen", *FUSION, "finetune"):
    return arms_lib.ArmConfig(name, **static), hyper
  if name in ("cramer", ORACLE):
    return arms_lib.ArmConfig("cramer", **static), hyper
  if name == "cramer_shared":
    return arms_lib.ArmConfig("cramer", **static), hyper._replace(shared_noise=True)
  if name.startswith("cramer_rho"):
    try:
      rho = float(name[len("cramer_rho"):])
    except ValueError as e:
      raise ValueError(f"arm {name!r}: expected cramer_rho<rho>, e.g. cramer_rho0.25") from e
    if not 0.0 <= rho < 1.0:
      raise ValueError(f"arm {name!r}: rho must lie in [0, 1)")
    return arms_lib.ArmConfig("cramer", **static), hyper._replace(rho=rho)
  raise ValueError(f"Unknown arm {name!r}; expected frozen, concat, late_fusion, adapter, "
                   "finetune, cramer, cramer_shared, cramer_oracle or cramer_rho<rho>")


def stack_worlds(worlds: Sequence[world.World], table: dict[str, np.ndarray],
                 num_genres: int) -> dict:
  """Per-seed arrays stacked on a leading seed axis, every text replaced by its embedding.

  Args:
    worlds: one `world.make_world` per seed.
    table: {string: embedding [e]} holding every item text, request and neutral request.
    num_genres: the worlds' genre count (the oracle's one-hot width).

  Returns:
    {"train"/"test": {history, target, request, request_oracle, negatives, genre, intent},
    "item_text", "item_genres", "neutral", "neutral_oracle"}. "request_oracle" /
    "neutral_oracle" are the true (intent, genre) one-hots zero-padded to the embeddings'
    width, so the oracle arm shares CRAMER's compiled program.

  Example:
    >>> import numpy as np
    >>> from jaxlab.recsys import world
    >>> ws = [world.make_world(world.WorldConfig(num_items=40, num_genres=4,
    ...     num_train_users=8, num_test_users=4, max_len=6, min_len=3, num_negatives=5), 0)]
    >>> texts = {s for w in ws for s in (*w.item_texts, *w.train.requests, *w.test.requests,
    ...                                  w.neutral_request)}
    >>> d = stack_worlds(ws, {s: np.ones(12, np.float32) for s in texts}, 4)
    >>> d["train"]["request"].shape[::2], d["item_text"].shape
    ((1, 12), (1, 41, 12))
  """
  width = len(next(iter(table.values())))

  def episodes(name):
    eps = [getattr(w, name) for w in worlds]
    return dict(
        history=np.stack([e.history for e in eps]), target=np.stack([e.target for e in eps]),
        request=np.stack([np.stack([table[r] for r in e.requests]) for e in eps]),
        request_oracle=np.stack([world.oracle_requests(e.intent, e.genre, num_genres, width)
                                 for e in eps]),
        negatives=np.stack([e.negatives for e in eps]), genre=np.stack([e.genre for e in eps]),
        intent=np.stack([e.intent for e in eps]))
  neutral_oracle = world.oracle_requests(np.zeros(1, int), np.full(1, -1), num_genres, width)[0]
  return dict(train=episodes("train"), test=episodes("test"),
              item_text=np.stack([np.stack([table[t] for t in w.item_texts]) for w in worlds]),
              item_genres=np.stack([w.item_genres for w in worlds]),
              neutral=np.stack([table[w.neutral_request] for w in worlds]),
              neutral_oracle=np.stack([neutral_oracle] * len(worlds)))


def backbones(model_cfg: sasrec.SASRecConfig, train_cfg: training.TrainConfig,
              histories: np.ndarray, seeds: Sequence[int], paths: Sequence[str]
              ) -> tuple[list, list[float] | None]:
  """Per-seed SASRec backbones: read from `paths`, or trained (seeds vmapped) and written.

  Args:
    model_cfg, train_cfg: the backbone and its training.
    histories: [seeds, users, max_len] request-free histories, per seed.
    seeds: the seeds (each trains from `fold_in(key(seed), 1)`).
    paths: one msgpack file per seed (written whole, then renamed).

  Returns:
    (params per seed, the final tenth's mean training loss per seed, or None when read).

  Example:
    >>> import os, tempfile, numpy as np
    >>> cfg = sasrec.SASRecConfig(num_items=20, max_len=6, d_model=8, num_heads=2, d_ff=16)
    >>> tc = training.TrainConfig(num_steps=2, batch_size=4,
    ...                           optimizer={"learning_rate": 1e-3, "schedule": "constant"})
    >>> hist = np.random.default_rng(0).integers(1, 21, (1, 8, 6))
    >>> paths = [os.path.join(tempfile.mkdtemp(), "seed0.msgpack")]
    >>> params, loss = backbones(cfg, tc, hist, [0], paths)
    >>> len(params), len(loss), backbones(cfg, tc, hist, [0], paths)[1]
    (1, 1, None)
  """
  model = sasrec.SASRec(model_cfg)
  target = model.init(jax.random.key(0), jnp.zeros((1, model_cfg.max_len), jnp.int32))["params"]
  if all(os.path.exists(p) for p in paths):
    params = []
    for p in paths:
      with open(p, "rb") as f:
        params.append(flax.serialization.from_bytes(target, f.read()))
    return params, None
  keys = jax.vmap(lambda s: jax.random.fold_in(jax.random.key(s), 1))(np.asarray(seeds))
  fn = jax.jit(jax.vmap(lambda h, k: training.train_backbone(model_cfg, train_cfg, h, k)))
  stacked, losses = jax.block_until_ready(fn(histories, keys))
  params = []
  for i, p in enumerate(paths):
    one = jax.tree.map(lambda x, i=i: np.asarray(x[i]), stacked)
    os.makedirs(os.path.dirname(p) or ".", exist_ok=True)
    tmp = f"{p}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
      f.write(flax.serialization.to_bytes(one))
    os.replace(tmp, p)
    params.append(one)
  losses = np.asarray(losses)
  return params, losses[:, -max(1, losses.shape[1] // 10):].mean(1).tolist()


def group_means(rows: dict[str, np.ndarray], intent: np.ndarray) -> dict:
  """{group: {metric: [per-seed mean]}} of per-row [seeds, users] test metrics.

  Groups: request (want or avoid), want, avoid, none, all; the genre shares only where a
  genre is requested. A seed with no test row in a group has NaN there (not measured),
  never a 0 that a verdict would read as a measured HR or genre share.

  Args:
    rows: metric -> [seeds, users] per-row values (`training.evaluate_arm`, vmapped).
    intent: [seeds, users] request intent (0 none, 1 want, 2 avoid).

  Returns:
    The per-seed group means, as lists.

  Example:
    >>> g = group_means({"s_hr": np.array([[1.0, 0.0]])}, np.array([[0, 1]]))
    >>> g["want"]["s_hr"], g["all"]["s_hr"]
    ([0.0], [0.5])
  """
  masks = dict(request=intent > 0, want=intent == 1, avoid=intent == 2, none=intent == 0,
               all=np.ones_like(intent, bool))
  out = {}
  for g, m in masks.items():
    w = m.astype(np.float64)
    n = w.sum(1)
    out[g] = {k: np.where(n > 0, (np.asarray(v, np.float64) * w).sum(1) / np.maximum(n, 1.0),
                          np.nan).tolist()
              for k, v in rows.items()
              if g in ("want", "avoid", "request") or not k.startswith("share")}
  return out


def time_per_request(model_cfg: sasrec.SASRecConfig, backbone_params: Sequence[Any], data: dict,
                     arm: arms_lib.ArmConfig, hyper: arms_lib.ArmHyper, repeats: int
                     ) -> dict[str, list[float]]:
  """Median seconds to score one request (batch 1, jitted, text encoding excluded) per seed.

  Per seed: its backbone alone and `arm` on it (CRAMER: gates from the request embedding,
  masked backbone), each compiled once and warmed, then timed `repeats` times in
  alternation, so that a change of machine load hits both alike.

  Args:
    model_cfg: the backbone's sizes.
    backbone_params: per-seed backbone params.
    data: `stack_worlds`' arrays (the first test row of each seed is scored).
    arm, hyper: the arm timed against the backbone (freshly initialised: timing only).
    repeats: timed calls per arm and seed.

  Returns:
    {"frozen": [median s per seed], "cramer": [median s per seed]}.

  Example:
    >>> import numpy as np
    >>> cfg = sasrec.SASRecConfig(num_items=20, max_len=6, d_model=8, num_heads=2, d_ff=16)
    >>> bb = sasrec.SASRec(cfg).init(jax.random.key(0), jnp.zeros((1, 6), jnp.int32))["params"]
    >>> data = dict(test=dict(history=np.ones((1, 2, 6), np.int32),
    ...                       request=np.ones((1, 2, 5), np.float32)),
    ...             item_text=np.ones((1, 21, 5), np.float32))
    >>> t = time_per_request(cfg, [bb], data, arms_lib.ArmConfig("cramer", scope="wo"),
    ...                      arms_lib.DEFAULT_HYPER, repeats=2)
    >>> sorted(t), len(t["cramer"])
    (['cramer', 'frozen'], 1)
  """
  fns = {name: jax.jit(lambda p, b, bb, it, a=a: arms_lib.arm_logits(
      a, model_cfg, p, bb, b, it, hyper=hyper)[0])
         for name, a in (("frozen", arms_lib.ArmConfig("frozen")), ("cramer", arm))}
  out = {name: [] for name in fns}
  for i, backbone in enumerate(backbone_params):
    params = {"frozen": {}, "cramer": arms_lib.init_arm(
        arm, model_cfg, backbone, jax.random.key(i), data["test"]["request"].shape[-1])}
    args = (dict(history=jnp.asarray(data["test"]["history"][i, :1]),
                 request=jnp.asarray(data["test"]["request"][i, :1])),
            backbone, jnp.asarray(data["item_text"][i]))
    for _ in range(3):  # compiled once (first seed), then warm
      for name, fn in fns.items():
        jax.block_until_ready(fn(params[name], *args))
    times = {name: [] for name in fns}
    for _ in range(repeats):
      for name, fn in fns.items():
        t0 = time.perf_counter()
        jax.block_until_ready(fn(params[name], *args))
        times[name].append(time.perf_counter() - t0)
    for name, t in times.items():
      out[name].append(float(np.median(t)))
  return out


@functools.cache
def _program(arm: arms_lib.ArmConfig, model_cfg: sasrec.SASRecConfig,
             train_cfg: training.TrainConfig, k: int):
  def one(bb, tr, te, item_text, genres, neutral, key, hyper):
    params, losses = training.train_arm(arm, model_cfg, train_cfg, bb, tr, item_text, key,
                                        hyper)
    rows = training.evaluate_arm(arm, model_cfg, params, bb, te, item_text, genres, neutral,
                                 k=k, hyper=hyper)
    return rows, losses
  return jax.jit(jax.vmap(one, in_axes=(0, 0, 0, 0, 0, 0, 0, None)))


def fit_arm(arm: arms_lib.ArmConfig, hyper: arms_lib.ArmHyper, model_cfg: sasrec.SASRecConfig,
            train_cfg: training.TrainConfig, backbone: Any, data: dict, keys: Array, *,
            oracle: bool = False, k: int = 10) -> dict:
  """Trains an arm on every seed's frozen backbone (seeds vmapped) and scores its test rows.

  One compiled program per (arm, sizes, training, k): CRAMER's hyper-parameters are traced,
  so a ρ sweep and the oracle arm share it.

  Args:
    arm, hyper: the arm (`make_arm`).
    model_cfg, train_cfg: the backbone's sizes and the arm's training.
    backbone: the per-seed backbone params stacked on a leading seed axis.
    data: `stack_worlds`' arrays.
    keys: [seeds] PRNG keys of the arm.
    oracle: read the true (intent, genre) one-hots in place of the request embeddings.
    k: the metrics' list length.

  Returns:
    {"groups": `group_means` of the test rows, "final_loss": the final tenth's mean
    training loss per seed}.

  Example:
    >>> import numpy as np
    >>> from jaxlab.recsys import world
    >>> ws = [world.make_world(world.WorldConfig(num_items=40, num_genres=4,
    ...     num_train_users=8, num_test_users=4, max_len=6, min_len=3, num_negatives=5), 0)]
    >>> texts = {s for w in ws for s in (*w.item_texts, *w.train.requests, *w.test.requests,
    ...                                  w.neutral_request)}
    >>> d = stack_worlds(ws, {s: np.ones(12, np.float32) for s in texts}, 4)
    >>> cfg = sasrec.SASRecConfig(num_items=40, max_len=6, d_model=8, num_heads=2, d_ff=16)
    >>> bb = sasrec.SASRec(cfg).init(jax.random.key(0), jnp.zeros((1, 6), jnp.int32))["params"]
    >>> tc = training.TrainConfig(num_steps=2, batch_size=4,
    ...                           optimizer={"learning_rate": 1e-3, "schedule": "constant"})
    >>> out = fit_arm(arms_lib.ArmConfig("late_fusion"), arms_lib.DEFAULT_HYPER, cfg, tc,
    ...               jax.tree.map(lambda x: x[None], bb), d, jax.random.split(
    ...                   jax.random.key(1), 1))
    >>> len(out["final_loss"]), sorted(out["groups"])[:2]
    (1, ['all', 'avoid'])
  """
  def split(part):
    d = {n: jnp.asarray(v) for n, v in data[part].items() if n != "intent"}
    return dict(d, request=d["request_oracle"]) if oracle else d
  tr = {n: v for n, v in split("train").items() if n in ("history", "request", "request_oracle",
                                                          "target")}
  neutral = data["neutral_oracle" if oracle else "neutral"]
  # The oracle columns ride along unused (the same shapes: one compilation per ArmConfig).
  rows, losses = jax.block_until_ready(_program(arm, model_cfg, train_cfg, k)(
      backbone, tr, split("test"), jnp.asarray(data["item_text"]),
      jnp.asarray(data["item_genres"]), jnp.asarray(neutral), keys,
      jax.tree.map(jnp.asarray, hyper)))
  losses = np.asarray(losses)
  return dict(groups=group_means({n: np.asarray(v) for n, v in rows.items()},
                                 data["test"]["intent"]),
              final_loss=losses[:, -max(1, losses.shape[1] // 10):].mean(1).tolist())


def draw_ranking(ax: Any, table: dict, arms: Sequence[str]) -> None:
  """Bars of request-bearing HR@10 and NDCG@10 per arm (mean ± std over seeds).

  Args:
    ax: a matplotlib Axes.
    table: {arm: {group: {metric: seed_summary}}}.
    arms: the arms, in order.

  Example:
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt
    >>> cell = {"mean": 0.3, "std": 0.01}
    >>> draw_ranking(plt.figure().gca(), {"a": {"request": {"s_hr": cell, "s_ndcg": cell}}},
    ...              ["a"])
  """
  x = np.arange(len(arms))
  for i, (m, label) in enumerate((("s_hr", "HR@10"), ("s_ndcg", "NDCG@10"))):
    ax.bar(x + 0.4 * i, [table[a]["request"][m]["mean"] for a in arms], 0.4,
           yerr=[table[a]["request"][m]["std"] for a in arms], label=label)
  ax.set_xticks(x + 0.2, arms, rotation=30, fontsize=7)
  ax.set_ylabel("request-bearing test steps (1 + 100 sampled)")
  ax.set_title("Ranking quality per arm (mean ± std over seeds)")
  ax.legend(fontsize=7)


def draw_genre_share(ax: Any, table: dict, arms: Sequence[str]) -> None:
  """Bars of genre g's top-10 share under 'want g' / 'avoid g' and under a neutral request.

  Args:
    ax: a matplotlib Axes.
    table: {arm: {group: {metric: seed_summary}}}.
    arms: the arms, in order.

  Example:
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt
    >>> c = {"share": {"mean": 0.3}, "share_neutral": {"mean": 0.2}}
    >>> draw_genre_share(plt.figure().gca(), {"a": {"want": c, "avoid": c}}, ["a"])
  """
  x = np.arange(len(arms))
  for i, (g, m, label) in enumerate((
      ("want", "share_neutral", "want g, neutral request"), ("want", "share", "want g"),
      ("avoid", "share_neutral", "avoid g, neutral request"), ("avoid", "share", "avoid g"))):
    ax.bar(x + 0.2 * i, [table[a][g][m]["mean"] for a in arms], 0.2, label=label)
  ax.set_xticks(x + 0.3, arms, rotation=30, fontsize=7)
  ax.set_ylabel("share of genre g in the top 10")
  ax.set_title("Controllability: genre share under want / avoid")
  ax.legend(fontsize=6)
