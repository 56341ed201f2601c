"""Config values are finite and in their declared ranges before any compute (`jaxlab.config_checks`).

Before, `--config.noise=nan` ran the kernelband row to "1.00x +- 0.00" for every
method with exit 0, and eco's `toy.lrs=(-0.1,)` ran its toy to distances of 2e9.
"""

import fnmatch

import ml_collections
import pytest

from jaxlab import config_checks
from jaxlab.presets import PRESETS
from launch import configs


def _shipped():
  """(name, preset, config) of every config file's every accepted preset."""
  out = []
  for name in configs.config_names():
    for preset in PRESETS:
      try:
        out.append((name, preset, configs.load_config(name, preset)))
      except ValueError:  # a preset this config does not offer
        continue
  return out


SHIPPED = _shipped()


def test_every_shipped_config_and_preset_passes():
  assert len(SHIPPED) >= 3 * 20
  for *_, config in SHIPPED:
    config_checks.check_config(config)  # raises, naming the field, if a range is wrong


def test_every_range_pattern_matches_a_shipped_field():
  # A misspelt pattern would check nothing; each one names a field some config has.
  fields = set()
  for _, _, config in SHIPPED:
    name = config_checks._name(config)
    fields |= {(name, "." + path.split("[")[0]) for path, _ in config_checks._leaves(config, "")}
  for pattern, _ in config_checks.RANGES:
    scope, colon, glob = pattern.rpartition(":")
    assert any((not colon or n == scope) and fnmatch.fnmatchcase(f, glob)
               for n, f in fields), pattern


@pytest.mark.parametrize("name, preset, path, value, message", [
    ("kernelband", "quick", "noise", float("nan"), "config.noise must be finite, got nan"),
    ("kernelband", "quick", "kernelband.theta_sat", float("nan"),
     "config.kernelband.theta_sat must be finite, got nan"),
    ("kernelband", "quick", "kernelband.theta_sat", 150.0,
     "config.kernelband.theta_sat must be in (0, 100], got 150.0"),
    ("eco", "quick", "toy.lrs", (-0.1,), "config.toy.lrs[0] must be > 0, got -0.1"),
    ("eco", "quick", "toy.lrs", (0.1, float("inf")), "config.toy.lrs[1] must be finite, got inf"),
    ("lm", "smoke", "optimizer.learning_rate", 0.0,
     "config.optimizer.learning_rate must be > 0, got 0.0"),
    ("lm", "smoke", "train.num_steps", 0, "config.train.num_steps must be an integer >= 1, got 0"),
    ("lm", "smoke", "data.val_fraction", 1.5, "config.data.val_fraction must be in [0, 1], got 1.5"),
    ("ucpo", "smoke", "ucpo.ema_decay", 1.0, "config.ucpo.ema_decay must be in [0, 1), got 1.0"),
    ("aes", "smoke", "seeds", (0, -1), "config.seeds[1] must be an integer >= 0, got -1"),
])
def test_a_bad_value_is_one_line_naming_the_field(name, preset, path, value, message):
  config = configs.load_config(name, preset)
  *parents, leaf = path.split(".")
  node = config
  for p in parents:
    node = node[p]
  with node.ignore_type():  # as `--config.<path>=<value>` would set it
    node[leaf] = value
  with pytest.raises(ValueError) as info:
    config_checks.check_config(config)
  assert str(info.value) == message


def test_nan_inside_nested_tuples_and_criteria_is_refused():
  config = ml_collections.ConfigDict(dict(grid=dict(sizes=((32, 96), (64, float("nan"))))))
  with pytest.raises(ValueError, match=r"config\.grid\.sizes\[1\]\[1\] must be finite"):
    config_checks.check_config(config)
  config = ml_collections.ConfigDict(dict(criteria=dict(a=dict(threshold=float("-inf")))))
  with pytest.raises(ValueError, match=r"config\.criteria\.a\.threshold must be finite"):
    config_checks.check_config(config)


def test_a_scoped_range_applies_to_its_experiment_only():
  config_checks.check_config({"experiment": "other", "kernelband": {"theta_sat": 150.0}})
  with pytest.raises(ValueError, match="theta_sat"):
    config_checks.check_config({"experiment": "kernelband", "kernelband": {"theta_sat": 150.0}})


def test_options_that_are_not_numbers_are_left_alone():
  config_checks.check_config({"train": {"num_steps": 3, "xla_opt_level": None},
                              "optimizer": {"schedule": "constant", "learning_rate": 1e-3}})
  with pytest.raises(ValueError, match="an integer >= 1, got True"):
    config_checks.check_config({"train": {"num_steps": True}})


def test_range_text():
  assert str(config_checks.COUNT) == "an integer >= 1"
  assert str(config_checks.Range(0, 1, high_open=True)) == "in [0, 1)"
  assert str(config_checks.POSITIVE) == "> 0"
  assert config_checks.PROBABILITY.contains(1) and not config_checks.PROBABILITY.contains(1.01)
