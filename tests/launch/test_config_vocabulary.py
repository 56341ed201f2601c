"""One config vocabulary: every config file, every preset, names its knobs the same way.

`optimizer.learning_rate` (+ `.schedule`, and `.warmup_steps` or
`.warmup_frac` for a warmup-cosine schedule) is THE learning rate (SAC's
three optimizers: `optimizer.{actor,critic,alpha}.learning_rate`; a second
stage, e.g. SFT before RL: `optimizer.<stage>.learning_rate`);
`seed` or `seeds`; `train.num_steps` and `train.batch_size`; `mesh.*` with the
named axes. Where a path does not apply, the reason is stated below, and no
config may hide a learning rate under another name.
"""

import pytest

from jaxlab.report import criteria_from_config
from jaxlab.train import AXES
from launch.configs import config_names, load_config

PRESETS = ("smoke", "quick", "full")
# Configs that train nothing keep no optimizer/train section (and say why).
NO_TRAINING = {
    "ebplus": "simulator and a randomly initialised serving engine: nothing is trained",
    "bench_decode": "times decoding of an untrained model",
    "bench_fp4": "times quantize/dequantize kernels",
    "bench_oea": "times an MoE layer's decode step",
    "bench_text": "times a pretrained sentence encoder's inference",
    "bench_lm_train": "times train steps (its optimizer's learning_rate is still checked)",
    "bench_kernels": "times Pallas kernels against their XLA references",
    "bench_ucpo": "times RL steps (its optimizer's learning_rate is still checked)",
    "kernelband": "tunes kernel configurations against a cost model or timings",
}
# Paths that exist but are swept axes, not the run's knob (name -> reason).
SWEEP_AXES = {
    ("eco", "toy.lrs"): "the convex toy's swept constant learning rates",
    ("eco", "toy.decay"): "the convex toy's swept decaying schedule",
}
# train.* entries replaced by a per-arm budget (name -> reason).
NO_TRAIN_SECTION = {
    "aes": "each task's budget is its algorithm's (`<task>.sac.total_steps`, `.ppo.total_updates`)",
    "qat_scaling": "the step budget D is the swept axis `grid.steps`",
    "bench_eco": "times one step; its batch is `batch_size` x `seq_len`",
}
# train.batch_size absent: the run trains full-batch (name -> reason).
FULL_BATCH = {"zeroshot": "the mapping trains full-batch on every (source, class) pair"}
# No seed knob: the benchmark's result is a timing ratio on fixed inputs.
NO_SEED = {"bench_decode", "bench_lm_train"}
LR_NAMES = ("lr", "learning_rate", "actor_lr", "critic_lr", "alpha_lr", "base_lr", "peak_lr")


def _paths(node, prefix=""):
  for key, value in node.items():
    path = f"{prefix}{key}"
    yield path, value
    if hasattr(value, "items"):
      yield from _paths(value, path + ".")


def _get(config, path):
  node = config
  for part in path.split("."):
    if part not in node:
      return None
    node = node[part]
  return node


CASES = [(name, preset) for name in config_names() for preset in PRESETS]


@pytest.mark.parametrize("name,preset", CASES, ids=[f"{n}:{p}" for n, p in CASES])
def test_config_speaks_the_vocabulary(name, preset):
  config = load_config(name, preset)
  paths = dict(_paths(config))
  # No learning rate outside `optimizer` (other than named sweep axes).
  stray = [p for p in paths if p.split(".")[-1] in LR_NAMES and not p.startswith("optimizer.")
           and (name, p) not in SWEEP_AXES]
  assert not stray, f"{name}:{preset} keeps a learning rate outside optimizer: {stray}"
  assert "seed" in config or "seeds" in config or name in NO_SEED, (
      f"{name}:{preset} has neither seed nor seeds")
  if "seeds" in config:
    assert len(config.seeds) >= 1 and all(isinstance(s, int) for s in config.seeds)
  if "mesh" in config:
    assert set(AXES) <= set(config.mesh), f"{name}: mesh must name the axes {AXES}"
  if name in NO_TRAINING:  # a timing benchmark may still carry its step's optimizer
    if "optimizer" in config:
      assert isinstance(config.optimizer.learning_rate, float), name
    return
  opt = config.optimizer
  if "actor" in opt:  # SAC: one optimizer per network
    for net in ("actor", "critic"):
      assert isinstance(opt[net].learning_rate, float), (name, net)
  for part, sub in opt.items():  # a second stage or network: optimizer.<part>.learning_rate
    if hasattr(sub, "items"):
      assert isinstance(sub.get("learning_rate"), float) and sub.learning_rate > 0, (name, part)
  assert isinstance(opt.learning_rate, float) and opt.learning_rate > 0
  assert opt.get("schedule", None) in ("warmup_cosine", "constant"), (name, opt.get("schedule"))
  if opt.schedule == "warmup_cosine":
    assert "warmup_steps" in opt or "warmup_frac" in opt, name
  if name in NO_TRAIN_SECTION:
    assert _get(config, "train.num_steps") is None, f"{name}: stale train.num_steps"
  else:
    assert isinstance(_get(config, "train.num_steps"), int), name
    if name in FULL_BATCH:
      assert _get(config, "train.batch_size") is None, f"{name}: stale train.batch_size"
    else:
      assert isinstance(_get(config, "train.batch_size"), int), name


def test_every_experiment_config_is_checked():
  from jaxlab.experiments import REGISTRY
  assert set(REGISTRY) <= set(config_names())


@pytest.mark.parametrize("name", [n for n in config_names() if not n.startswith("bench_")])
@pytest.mark.parametrize("preset", PRESETS)
def test_every_row_tests_its_mechanism(name, preset):
  # A row is held only through a primary criterion that compares the method with the
  # same pipeline without the paper's distinctive component (jaxlab.report.verdict):
  # a config without one could never hold, whatever it measured.
  crits = criteria_from_config(load_config(name, preset).criteria)
  assert [c.name for c in crits if c.primary and c.mechanism], (
      f"configs/{name}.py:{preset} declares no primary criterion with mechanism=True")
