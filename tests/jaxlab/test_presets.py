import pytest

from jaxlab import experiments
from jaxlab.presets import parse_preset
from launch.configs import load_config


def test_parse_preset():
  assert parse_preset(None) == "quick"
  assert parse_preset("smoke") == "smoke"
  with pytest.raises(ValueError, match="Unknown config preset 'fast'"):
    parse_preset("fast")


def test_registry_configs_load_every_preset():
  for name in experiments.REGISTRY:
    for preset in ("smoke", "quick", "full"):
      config = load_config(name, preset)
      assert config.experiment == name and config.preset == preset
    assert callable(experiments.get(name).run)


def test_unknown_experiment():
  with pytest.raises(ValueError, match="Unknown experiment"):
    experiments.get("no_such_experiment")
  with pytest.raises(ValueError, match="No config file"):
    load_config("no_such_experiment")
