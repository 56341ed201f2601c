"""The KernelBand benchmark: tasks x seeds x methods at equal budget, scored against the oracle.

Metrics at a budget T (systems.md 3d), on noise-free cost-model times of the
config each method would ship (its best *measured* config after T proposals):

* speedup = T(default) / T(best); geo-mean over tasks;
* Fast@1 = share of tasks with speedup > 1;
* Correct = share of tasks where >= 1 proposed candidate was valid;
* simple regret = T(best) / T(oracle) - 1, the oracle an exhaustive search of
  the task's grid (`space.config_grid`).
"""

import numpy as np

from jaxlab.autotune import baselines, kernelband, proposers, space, timing
from jaxlab.autotune.cost_model import CostModelEvaluator, get_device
from pallas_kernels import tuning

METHODS = ("kernelband", "bon", "greedy", "egreedy", "no_mask", "k1", "heuristic_strategy")
BASELINES = ("bon", "greedy", "egreedy")
ABLATIONS = ("no_mask", "k1", "heuristic_strategy")


def default_tasks(devices=("tpu_v5e", "h100", "h200")) -> list[space.Task]:
  """12 (op, shape) pairs x the devices: 36 tasks for the three default devices.

  Example:
    >>> tasks = default_tasks(("h100",))
    >>> len(tasks), tasks[0]
    (12, Task(op='matmul', shape=(1024, 1024, 1024), dtype='bfloat16', device='h100'))
  """
  shapes = [("matmul", (1024, 1024, 1024)), ("matmul", (64, 4096, 4096)),
            ("matmul", (4096, 512, 2048)), ("gmm", (1024, 512, 1024, 8)),
            ("gmm", (2048, 1024, 512, 32)), ("fp4_dequant_matmul", (256, 2048, 2048)),
            ("fp4_dequant_matmul", (16, 4096, 4096)), ("attention", (16, 1024, 128)),
            ("attention", (64, 512, 64)), ("rmsnorm", (8192, 1024)), ("softmax", (4096, 1024)),
            ("softmax", (1024, 512))]
  return [space.Task(op, shape, "bfloat16", dev) for dev in devices for op, shape in shapes]


def make_policy(method: str, kb: dict) -> kernelband.Policy:
  """The policy of a method name in `METHODS` (kb: `KernelBandPolicy` kwargs + "epsilon").

  Example:
    >>> type(make_policy("kernelband", {})).__name__, type(make_policy("bon", {})).__name__
    ('KernelBandPolicy', 'BestOfN')
  """
  kb = dict(kb)
  epsilon = kb.pop("epsilon", 0.1)
  if method == "kernelband":
    return kernelband.KernelBandPolicy(**kb)
  if method == "no_mask":
    return kernelband.KernelBandPolicy(**{**kb, "mask": False})
  if method == "k1":
    return kernelband.KernelBandPolicy(**{**kb, "num_clusters": 1})
  if method == "bon":
    return baselines.BestOfN()
  if method == "greedy":
    return baselines.Greedy()
  if method == "egreedy":
    return baselines.EpsilonGreedy(epsilon)
  if method == "heuristic_strategy":
    return baselines.HeuristicStrategy()
  raise ValueError(f"Unknown method {method!r}; expected one of {METHODS}")


def run_method(method: str, tasks: list[space.Task], seeds, budgets, *, noise: float = 0.03,
               kb: dict | None = None, oracle: dict | None = None) -> dict:
  """Runs one method on every task and seed with budget max(budgets).

  Returns:
    {"speedup" | "regret" | "correct": [seeds, tasks, len(budgets)] lists}.

  Example:
    >>> out = run_method("kernelband", default_tasks(("h100",))[:2], seeds=(0, 1), budgets=(5, 10))
    >>> sorted(out), np.shape(out["speedup"])  # [seeds, tasks, budgets]
    (['correct', 'regret', 'speedup'], (2, 2, 2))
  """
  if not tasks:
    raise ValueError("tasks must be non-empty")
  budgets = [int(b) for b in budgets]
  if not budgets or min(budgets) < 1:
    raise ValueError(f"budgets must be positive ints, got {budgets}")
  kb = dict(kb or {})
  make_policy(method, kb)  # a clear error for an unknown method, before any work
  ev, prop = CostModelEvaluator(noise), proposers.LocalProposer()
  oracle = oracle or {t.name: ev.oracle(t)[1] for t in tasks}
  out = {k: np.zeros((len(seeds), len(tasks), len(budgets))) for k in ("speedup", "regret",
                                                                        "correct")}
  for si, seed in enumerate(seeds):
    for ti, task in enumerate(tasks):
      pol = make_policy(method, kb)
      # Each (task, seed) has its own stream, shared by all methods (paired comparisons).
      res = kernelband.run_search(task, pol, ev, prop, budget=max(budgets),
                                  seed=int(seed) * 1000 + ti)
      t_def = ev.true_time(task, res.default.config)
      for bi, b in enumerate(budgets):
        t_best = ev.true_time(task, res.best_after(b))
        out["speedup"][si, ti, bi] = t_def / t_best
        out["regret"][si, ti, bi] = t_best / oracle[task.name] - 1.0
        out["correct"][si, ti, bi] = float(res.any_valid_after(b))
  return {k: v.tolist() for k, v in out.items()}


def summarize(arr) -> dict:
  """[seeds, tasks, budgets] -> per-seed geo-mean speedup, Fast@1, Correct, mean regret.

  Example:
    >>> out = run_method("kernelband", default_tasks(("h100",))[:2], seeds=(0, 1), budgets=(5, 10))
    >>> summary = summarize(out)
    >>> sorted(summary), np.shape(summary["geomean_speedup"])  # [seeds, budgets]
    (['correct', 'fast1', 'geomean_speedup', 'regret'], (2, 2))
  """
  a = np.asarray(arr["speedup"])
  return dict(
      geomean_speedup=np.exp(np.log(a).mean(1)).tolist(),          # [seeds, budgets]
      fast1=(a > 1.0).mean(1).tolist(),
      correct=np.asarray(arr["correct"]).mean(1).tolist(),
      regret=np.asarray(arr["regret"]).mean(1).tolist())


def tuning_table(tasks: list[space.Task], kb: dict, ops: dict[str, str], *, budget: int,
                 seed: int, noise: float = 0.03) -> tuning.TuningTable:
  """KernelBand's best config after `budget` proposals for each task of a tuned kernel.

  Args:
    tasks: the tasks; those whose `op` is a key of `ops` are tuned, in order.
    kb: KernelBand's knobs (`make_policy`).
    ops: task op -> the kernel's name in the tuning table (its `TUNING_OP`).
    budget: proposals per task.
    seed: the search seed of task i is `seed * 1000 + i` (as in `run_method`).
    noise: the cost model's timing noise.

  Returns:
    The `pallas_kernels.tuning.TuningTable` the kernels read (keyed by device kind).
  """
  ev, prop = CostModelEvaluator(noise), proposers.LocalProposer()
  table = tuning.TuningTable()
  for ti, task in enumerate(tasks):
    if task.op in ops:
      res = kernelband.run_search(task, make_policy("kernelband", kb), ev, prop,
                                  budget=budget, seed=seed * 1000 + ti)
      table.add(ops[task.op], task.shape, task.dtype, get_device(task.device).device_kind,
                res.best_after(budget))
  return table


def timing_run(task: space.Task, kb: dict, *, budget: int, repeats: int) -> dict:
  """KernelBand on measured CPU times of `task` (`timing.TimingEvaluator`), seed 0.

  Returns:
    {"task", "default", "default_seconds", "best", "best_seconds", "speedup", "valid",
    "trials"}: the default and the best config found, their measured times, the
    speedup, and how many of the trials were valid.
  """
  ev = timing.TimingEvaluator(repeats=repeats)
  res = kernelband.run_search(task, make_policy("kernelband", kb), ev,
                              proposers.LocalProposer(), budget=budget, seed=0)
  best = res.best_after(budget)
  best_time = min([res.default.time] + [t.time for t in res.trials if t.ok])
  return dict(task=task.name, default=res.default.config.to_dict(),
              default_seconds=res.default.time, best=best.to_dict(), best_seconds=best_time,
              speedup=res.default.time / best_time,
              valid=int(sum(t.ok for t in res.trials)), trials=len(res.trials))
