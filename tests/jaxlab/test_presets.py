import ml_collections
import pytest

from jaxlab import experiments, presets
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


def test_config_names_reads_a_name_list_and_rejects_empty_or_unknown():
  config = ml_collections.ConfigDict(dict(arms=" a, b,,", worlds=""))
  assert presets.config_names(config, "arms", choices=("a", "b", "c")) == ["a", "b"]
  with pytest.raises(ValueError, match="config.worlds must name at least one"):
    presets.config_names(config, "worlds")
  with pytest.raises(ValueError, match=r"config.arms must name some of \('a',\)"):
    presets.config_names(config, "arms", choices=("a",))


def test_config_seeds_rejects_empty_or_repeated_seeds():
  assert presets.config_seeds(ml_collections.ConfigDict(dict(seeds=(3, 1)))) == [3, 1]
  with pytest.raises(ValueError, match="config.seeds must be non-empty"):
    presets.config_seeds(ml_collections.ConfigDict(dict(seeds=())))
  # One seed twice would count its pair twice and halve the paired SE's spread.
  with pytest.raises(ValueError, match=r"config.seeds must be distinct, got \[0, 0, 1\]"):
    presets.config_seeds(ml_collections.ConfigDict(dict(seeds=(0, 0, 1))))


def test_every_registered_config_has_distinct_seeds():
  for name in experiments.REGISTRY:
    for preset in ("smoke", "quick", "full"):
      config = load_config(name, preset)
      if "seeds" in config:
        presets.config_seeds(config)
