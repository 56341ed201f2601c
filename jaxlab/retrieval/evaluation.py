"""One CVGL study cell end to end: cities, training, recall and uncertainty diagnostics.

`make_cities` draws every city of a config per seed (length-scales scaled for a sweep);
`fit_and_score` trains one arm on city 1 (seeds vmapped) and scores it on every city's
held-out area; `arm_table` / `sweep_table` summarise cells over seeds; `draw_recall` /
`draw_sweep` plot them; `city_order` and `uncertainty_readings` read and check a config's
cities and readings of u.

Example:
  >>> import numpy as np
  >>> from jaxlab.retrieval import evaluation
  >>> cell = {"city1": {"R@1": [0.5, 0.7], "R@5": [1.0, 1.0], "R@1%": [1.0, 1.0]}}
  >>> evaluation.arm_table(cell, [], [], "epistemic", kinds=())["same_area"]["R@1"]["mean"]
  0.6
"""

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import numpy as np

from jaxlab.report import seed_summary
from jaxlab.retrieval import metrics, training
from jaxlab.retrieval import world as world_lib

RECALLS = ("R@1", "R@5", "R@1%")
U_KINDS = ("epistemic", "aleatoric", "total")


def make_cities(world_cfg: world_lib.WorldConfig, specs: Mapping[str, Mapping[str, Any]],
                seeds: Sequence[int], factor: float = 1.0) -> dict[str, world_lib.City]:
  """Every city of `specs`, one draw per seed stacked, length-scales times `factor`.

  Args:
    world_cfg: the lattice.
    specs: city name -> `world.CitySpec` fields (seed, length_scale, noise, map_shift).
    seeds: the seeds (each draws its own cities).
    factor: multiplies every city's length-scale (the density sweep).

  Returns:
    name -> stacked `world.City`, in the order of `specs`.

  Example:
    >>> cfg = world_lib.WorldConfig(grid=8, train_frac=0.75)
    >>> c = make_cities(cfg, {"city1": dict(seed=1, length_scale=3.0, noise=0.1,
    ...                                     map_shift=0.0)}, [0, 1], factor=2.0)
    >>> list(c)
    ['city1']
  """
  out = {}
  for name, spec in specs.items():
    spec = world_lib.CitySpec(**{**spec, "length_scale": spec["length_scale"] * factor})
    out[name] = world_lib.stack_cities([world_lib.make_city(world_cfg, spec, s) for s in seeds])
  return out


def fit_and_score(train: Callable, evaluate: Callable, cities: Mapping[str, world_lib.City],
                  arm: Any, seeds: np.ndarray, eval_seed: int | np.integer) -> dict:
  """Trains an arm on city 1 (seeds vmapped) and scores it on every city's held-out area.

  Args:
    train: `training.make_train`'s function.
    evaluate: `training.make_evaluate`'s function.
    cities: `make_cities`' output; "city1" is trained on.
    arm: the arm's `training.ArmParams`.
    seeds: [S] int32 seeds.
    eval_seed: the test views' noise seed, shared by every arm and seed (paired).

  Returns:
    {"logs": training diagnostics [S, num_logs], "density": city 1's semi-positive density
    per seed, and per city: R@1 / R@5 / R@1% per seed, Spearman(roughness, rank of the true
    reference) and, per NIG uncertainty u, Spearman(u, roughness) and Spearman(u, rank)}.
    Lists and numpy arrays, JSON-ready after `tolist`.

  Example:
    >>> import jax.numpy as jnp
    >>> from jaxlab.retrieval import model, training
    >>> cfg = world_lib.WorldConfig(grid=8, train_frac=0.75)
    >>> m = model.CVGLModel(hidden=8, embed_dim=8, head_hidden=8)
    >>> tc = training.TrainConfig(num_steps=2, num_blocks=2, num_logs=1, num_hard=2)
    >>> from jaxlab.train import optimizer
    >>> tx = optimizer({"learning_rate": 1e-3, "schedule": "constant"}, 2)
    >>> c = make_cities(cfg, {"city1": dict(seed=1, length_scale=3.0, noise=0.1,
    ...                                     map_shift=0.0)}, [0])
    >>> out = fit_and_score(training.make_train(m, cfg, tc, tx),
    ...                     training.make_evaluate(m, cfg), c, training.make_arm("infonce"),
    ...                     np.asarray([0], np.int32), 7)
    >>> len(out["city1"]["R@1"])
    1
  """
  params, logs = jax.block_until_ready(train(cities["city1"], arm, seeds))
  out = {"logs": {k: np.asarray(v) for k, v in jax.device_get(logs).items()}}
  n = len(seeds)
  for name, city in cities.items():
    ev = jax.device_get(evaluate(params, city, eval_seed))
    ev["total"] = ev["epistemic"] + ev["aleatoric"]
    rec = [metrics.recall_at_k(ev["similarities"][i], (1, 5), one_percent=True)
           for i in range(n)]
    out[name] = {m: [r[m] for r in rec] for m in RECALLS}
    # Diagnostics: does u follow the realised difficulty (the true reference's rank), and
    # are rough locations harder to retrieve at all?
    rank = [metrics.ranks(ev["similarities"][i]) for i in range(n)]
    out[name]["roughness_rank_spearman"] = [metrics.spearman(ev["roughness"][i], rank[i])
                                            for i in range(n)]
    for u in U_KINDS:
      out[name][f"spearman_{u}"] = [metrics.spearman(ev[u][i], ev["roughness"][i])
                                    for i in range(n)]
      out[name][f"rank_spearman_{u}"] = [metrics.spearman(ev[u][i], rank[i]) for i in range(n)]
    if name == "city1":
      out["density"] = ev["density"].tolist()
  return out


def arm_table(cell: dict, zero_shot: Sequence[str], city_names: Sequence[str], u_kind: str,
              kinds: Sequence[str] = U_KINDS) -> dict:
  """One arm's per-seed summaries (`seed_summary`) from its `fit_and_score` result.

  Args:
    cell: `fit_and_score`'s result (or its JSON round trip).
    zero_shot: the zero-shot cities (their mean is "cross_city").
    city_names: every city, city 1 first.
    u_kind: the reading of u whose Spearman correlations are the row's.
    kinds: the uncertainties summarised per city.

  Returns:
    {"same_area", each zero-shot city, "cross_city": {recall: summary}} plus the
    Spearman diagnostics ("u_roughness_spearman_by_kind", "u_roughness_spearman",
    "u_rank_spearman", "roughness_rank_spearman") when `kinds` is not empty.

  Example:
    >>> cell = {"city1": {"R@1": [0.5], "R@5": [1.0], "R@1%": [1.0]},
    ...         "city2": {"R@1": [0.1], "R@5": [0.5], "R@1%": [0.5]}}
    >>> arm_table(cell, ["city2"], [], "epistemic", kinds=())["cross_city"]["R@1"]["mean"]
    0.1
  """
  t = {"same_area": {m: seed_summary(cell["city1"][m]) for m in RECALLS}}
  for name in zero_shot:
    t[name] = {m: seed_summary(cell[name][m]) for m in RECALLS}
  if zero_shot:
    t["cross_city"] = {m: seed_summary(np.mean([cell[n][m] for n in zero_shot], axis=0))
                       for m in RECALLS}
  if not kinds:
    return t
  t["u_roughness_spearman_by_kind"] = {
      u: {n: seed_summary(cell[n][f"spearman_{u}"]) for n in city_names} for u in kinds}
  t["u_roughness_spearman"] = t["u_roughness_spearman_by_kind"][u_kind]["city1"]
  t["u_rank_spearman"] = seed_summary(cell["city1"][f"rank_spearman_{u_kind}"])
  t["roughness_rank_spearman"] = seed_summary(cell["city1"]["roughness_rank_spearman"])
  return t


def draw_recall(ax: Any, table: dict, arms: Sequence[str]) -> None:
  """Bars of same-area and cross-city R@1 per arm (mean ± std over seeds).

  Args:
    ax: a matplotlib Axes.
    table: arm -> `arm_table`.
    arms: the arms, in order.

  Example:
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt
    >>> s = {"R@1": {"mean": 0.3, "std": 0.01}}
    >>> draw_recall(plt.figure().gca(), {"a": {"same_area": s, "cross_city": s}}, ["a"])
  """
  where = ["same_area", "cross_city"]
  width = 0.8 / len(arms)
  x = np.arange(len(where))
  for i, a in enumerate(arms):
    ax.bar(x + i * width, [table[a][w]["R@1"]["mean"] for w in where], width,
           yerr=[table[a][w]["R@1"]["std"] for w in where], label=a)
  ax.set_xticks(x + 0.4 - width / 2, ["same area (city 1)", "cross-city (zero-shot)"])
  ax.set_ylabel("R@1")
  ax.set_title("Street -> satellite R@1 per arm")
  ax.legend(fontsize=7)


def draw_sweep(ax: Any, sweep: dict, arms: Sequence[str]) -> None:
  """Cross-city R@1 against city 1's semi-positive density, per arm, over a sweep.

  Args:
    ax: a matplotlib Axes.
    sweep: length-scale factor -> arm -> {"density": [...], "cross_city_r1": [...]}.
    arms: the arms drawn.

  Example:
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt
    >>> sweep = {1.0: {"a": dict(density=[0.2], cross_city_r1=[0.3])}}
    >>> draw_sweep(plt.figure().gca(), sweep, ["a"])
  """
  for a in arms:
    pts = sorted((np.mean(c[a]["density"]), np.mean(c[a]["cross_city_r1"]))
                 for c in sweep.values() if a in c)
    if pts:
      ax.plot(*zip(*pts, strict=True), "o-", label=a)
  ax.set_xlabel("semi-positive density (city 1)")
  ax.set_ylabel("cross-city R@1")
  ax.set_title("Length-scale sweep")
  ax.legend(fontsize=7)


def sweep_table(cells: Mapping[tuple[str, float], dict], factors: Sequence[float],
                arms: Sequence[str], zero_shot: Sequence[str]) -> dict:
  """factor -> arm -> {"density", "same_area_r1", "cross_city_r1"} per seed, of a sweep.

  Args:
    cells: (arm, length-scale factor) -> `fit_and_score`'s result; missing cells are
      left out.
    factors: the sweep's factors (1.0, the main cells, is always included).
    arms: the sweep's arms.
    zero_shot: the zero-shot cities (their mean R@1 is "cross_city_r1").

  Returns:
    The sweep, factors ascending.

  Example:
    >>> cell = {"density": [0.2], "city1": {"R@1": [0.5]}, "city2": {"R@1": [0.1]}}
    >>> sweep_table({("a", 1.0): cell}, [2.0], ["a"], ["city2"])[1.0]["a"]["cross_city_r1"]
    [0.1]
  """
  sweep = {}
  for factor in sorted({1.0, *factors}):
    sweep[factor] = {}
    for a in arms:
      if (a, factor) in cells:
        c = cells[(a, factor)]
        sweep[factor][a] = dict(
            density=c["density"], same_area_r1=c["city1"]["R@1"],
            cross_city_r1=np.mean([c[n]["R@1"] for n in zero_shot], axis=0).tolist())
  return sweep


def city_order(names: Sequence[str]) -> list[str]:
  """The cities of a config, "city1" (the training city) first, the zero-shot ones sorted.

  Args:
    names: the keys of `config.cities`.

  Returns:
    ``["city1", *sorted(others)]``.

  Raises:
    ValueError: "city1" is missing or there is no zero-shot city.

  Example:
    >>> city_order(["city3", "city1", "city2"])
    ['city1', 'city2', 'city3']
  """
  names = list(names)
  if "city1" not in names or len(names) < 2:
    raise ValueError(f"config.cities must hold 'city1' (training) and >= 1 zero-shot city, got "
                     f"{names}")
  return ["city1"] + sorted(n for n in names if n != "city1")


def uncertainty_readings(default: str, readings: Sequence[str]) -> list[str]:
  """The readings of which NIG uncertainty is u that a row is judged at, the default first.

  Args:
    default: `config.cvgl.uncertainty`.
    readings: `config.cvgl.uncertainty_readings`, split.

  Returns:
    The default, then the other readings, deduplicated in order.

  Raises:
    ValueError: a reading that is not a key of `training.UNCERTAINTIES`.

  Example:
    >>> uncertainty_readings("epistemic", ["total", "epistemic", "total"])
    ['epistemic', 'total']
  """
  bad = [r for r in [default, *readings] if r not in training.UNCERTAINTIES]
  if bad:
    raise ValueError(f"config.cvgl.uncertainty / uncertainty_readings must name some of "
                     f"{tuple(training.UNCERTAINTIES)}, got {bad}")
  return [default] + [r for r in dict.fromkeys(readings) if r != default]
