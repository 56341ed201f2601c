"""`config.optimizer.learning_rate` (the `--config.optimizer.learning_rate=...` key) is the
learning rate each experiment trains with: one cheap check per experiment, smoke preset.

Each check sets the key and observes the learning rate where the experiment builds its
optimizer (a spy stops the run there), or the optimizer's update size; a config key that
the experiment ignored would fail it.
"""

import pathlib

import jax.numpy as jnp
import numpy as np
import optax
import pytest

import jaxlab.train
from jaxlab.experiments import REGISTRY, aes, apc, ucpo, zeroshot
from jaxlab.experiments import modex as modex_exp
from jaxlab.optim import master_free
from jaxlab.quant import qat_grid
from jaxlab.rl import sac
from jaxlab.train import lm as train_lm
from jaxlab.train import optimizers
from jaxlab.uq import classifiers
from launch.configs import load_config


class _Stop(Exception):
  """Raised by a spy once it has seen what it needed."""


def _update_norm(tx, steps: int) -> float:
  params = {"w": jnp.zeros((8,))}
  grads = {"w": jnp.linspace(-1.0, 1.0, 8)}
  state = tx.init(params)
  for _ in range(steps):
    updates, state = tx.update(grads, state, params)
  return float(optax.tree.norm(updates))


@pytest.mark.parametrize("name", ["lm", "oea", "fp4"])
def test_lm_trainers_use_optimizer_learning_rate(name):
  # lm and oea train through train_lm's default optimizer; fp4's base model likewise.
  config = load_config(name, "smoke")
  n, warm = config.train.num_steps, config.optimizer.warmup_steps
  base = _update_norm(train_lm.make_optimizer(config, n), warm + 1)
  config.optimizer.learning_rate *= 2
  doubled = _update_norm(train_lm.make_optimizer(config, n), warm + 1)
  np.testing.assert_allclose(doubled, 2 * base, rtol=1e-5)
  assert base > 0


def test_fp4_base_model_follows_the_learning_rate(tmp_path):
  config = load_config("fp4", "smoke")
  before = train_lm.base_lm_config(config)
  config.optimizer.learning_rate = 1e-4
  assert train_lm.base_lm_config(config) != before
  # A cache trained at another learning rate is refused, never silently reused.
  (tmp_path / "base_lm.json").write_text('{"optimizer": {"learning_rate": 0.5}}')
  with pytest.raises(ValueError, match="different"):
    train_lm.pretrained(config, str(tmp_path))


def test_eco_lm_arms_use_optimizer_learning_rate(monkeypatch):
  # ECO's LM arms build their optimizer with `jaxlab.train.optimizer` (base= ECO's AdamW)
  # from config.optimizer (tests/jaxlab/train/test_optimizers.py checks every key of it).
  config = load_config("eco", "smoke")
  config.optimizer.learning_rate = 0.25
  seen = []

  def spy(opt, num_steps, **kwargs):
    seen.append((opt.learning_rate, num_steps, kwargs["base"].func.__name__))
    raise _Stop

  monkeypatch.setattr(master_free, "optimizer", spy)
  with pytest.raises(_Stop):
    master_free.lm_program(config, "eco_sr", "fp8_e4m3", model=None)
  assert seen == [(pytest.approx(0.25), config.train.num_steps, "eco_adamw")]


def test_modex_uses_optimizer_learning_rate(monkeypatch):
  # The classifiers build their optimizer with `jaxlab.train.optimizer` from config.optimizer
  # (tests/jaxlab/train/test_optimizers.py checks that every key of it is honoured).
  config = load_config("modex", "smoke")
  config.optimizer.learning_rate = 0.125
  config.train.num_steps = 2
  seen = []
  real = classifiers.optimizer

  def spy(opt, num_steps, **kwargs):
    seen.append(opt.learning_rate)
    return real(opt, num_steps, **kwargs)

  monkeypatch.setattr(classifiers, "optimizer", spy)
  classifiers._train_step.cache_clear()
  x = np.zeros((1, 4, 64), np.float32)
  y = np.tile(np.eye(6, dtype=np.float32)[:1], (1, 4, 1))
  modex_exp.train_classifier("softmax", config, x, y, np.array([4]), [0])
  assert seen == [pytest.approx(0.125)]
  classifiers._train_step.cache_clear()


def test_qat_scaling_uses_optimizer_learning_rate(monkeypatch):
  # The grid's trainer builds its optimizer with `jaxlab.train.optimizer` from
  # config.optimizer (tests/jaxlab/train/test_optimizers.py checks every key of it).
  config = load_config("qat_scaling", "smoke")
  config.optimizer.learning_rate = 0.5
  seen = []

  def spy(opt, num_steps, **kwargs):
    seen.append(opt.learning_rate)
    raise _Stop

  monkeypatch.setattr(qat_grid, "optimizer", spy)
  with pytest.raises(_Stop):
    qat_grid.train_cells(config, config.seeds)
  assert seen == [pytest.approx(0.5)]


def test_aes_sac_and_ppo_use_optimizer_learning_rates(monkeypatch):
  # SAC builds each network's optimizer from `optimizer.<network>`, PPO from the top level,
  # both with `jaxlab.train.optimizer` (whose keys tests/jaxlab/train/test_optimizers.py
  # checks): the spies see the learning rate each builder call resolves.
  from jaxlab.rl import ppo
  seen = []

  def spy_builder(real):
    def spy(opt, num_steps, **kwargs):
      seen.append(optimizers.resolve(opt, kwargs.get("stage"),
                                     inherit=kwargs.get("inherit"))["learning_rate"])
      return real(opt, num_steps, **kwargs)
    return spy

  def stop_after(real):
    def make(*args):
      real(*args)
      raise _Stop
    return make

  for module in (sac, ppo):
    monkeypatch.setattr(module, "build_optimizer", spy_builder(module.build_optimizer))
    monkeypatch.setattr(module, "make_train", stop_after(module.make_train))
  config = load_config("aes", "smoke")
  config.optimizer.actor.learning_rate = 0.1
  config.optimizer.critic.learning_rate = 0.2
  config.optimizer.alpha.learning_rate = 0.3
  with pytest.raises(_Stop):
    aes._run_task(config.pendulum, "abrupt", config, [0])
  assert seen == [0.1, 0.2, 0.3]
  full = load_config("aes", "full")  # PPO (cartpole) takes the top-level learning rate
  full.optimizer.learning_rate = 0.05
  with pytest.raises(_Stop):
    aes._run_task(full.cartpole, "abrupt", full, [0])
  assert seen[3:] == [0.05]


def test_ebplus_has_no_learning_rate():
  # EB / EB+ is a serving study: nothing is trained, so there is no optimizer to set.
  assert "optimizer" not in load_config("ebplus", "smoke")


def test_ucpo_stages_use_optimizer_learning_rates(monkeypatch):
  # The RL stage's optimizer is the top level of `optimizer`, the SFT stage's
  # `optimizer.sft`, both built by `jaxlab.train.optimizer`: the spy sees what each resolves.
  config = load_config("ucpo", "smoke")
  config.optimizer.learning_rate = 0.25       # the RL stage (constant schedule)
  config.optimizer.sft.learning_rate = 0.5    # the SFT stage
  seen, real = {}, jaxlab.train.optimizer

  def spy(opt, num_steps, *, stage=None, **kwargs):
    seen[stage] = optimizers.resolve(opt, stage)["learning_rate"]
    return real(opt, num_steps, stage=stage, **kwargs)

  monkeypatch.setattr(jaxlab.train, "optimizer", spy)
  ucpo._configs(config)
  assert seen == {None: pytest.approx(0.25), "sft": pytest.approx(0.5)}


@pytest.mark.parametrize("stage", ["sft", "rl"])
def test_apc_stages_use_optimizer_learning_rates(stage):
  # The base LM trains with `optimizer.learning_rate` through `jaxlab.train.lm` (checked
  # above); the SFT and RL stages with `optimizer.<stage>.learning_rate`.
  config = load_config("apc", "smoke")
  config.optimizer[stage].learning_rate = 1e-2
  small = _update_norm(apc.stage_optimizer(config, stage), steps=1)
  config.optimizer[stage].learning_rate = 2e-2
  assert _update_norm(apc.stage_optimizer(config, stage), steps=1) == pytest.approx(2 * small)


def test_zeroshot_uses_optimizer_learning_rate(monkeypatch, tmp_path):
  # The worlds' seen-class head trains with `optimizer.head`, the mapping with `optimizer`,
  # each built by `jaxlab.train.optimizer` (tests/jaxlab/train/test_optimizers.py checks
  # that every key of a section is honoured).
  config = load_config("zeroshot", "smoke")
  config.optimizer.learning_rate = 0.125
  config.optimizer.head.learning_rate = 0.375
  seen = []

  def spy(real):
    def build(opt, num_steps, **kwargs):
      seen.append(opt["learning_rate"])
      if len(seen) == 2:
        raise _Stop
      return real(opt, num_steps, **kwargs)
    return build

  monkeypatch.setattr(zeroshot.world, "build_optimizer", spy(zeroshot.world.build_optimizer))
  monkeypatch.setattr(zeroshot.expansion, "optimizer", spy(zeroshot.expansion.optimizer))
  with pytest.raises(_Stop):
    zeroshot.run(config, str(tmp_path))
  assert seen == [pytest.approx(0.375), pytest.approx(0.125)]


def test_kernelband_trains_nothing():
  assert "optimizer" not in load_config("kernelband", "smoke")


def test_every_registered_experiment_is_checked():
  # Checked in this file, or in the experiment's own test file by a test named
  # `test_<name>_uses_optimizer_learning_rate` (the newer experiments).
  here = {"lm", "oea", "fp4", "eco", "modex", "qat_scaling", "aes", "ebplus", "ucpo", "apc",
          "kernelband", "zeroshot"}
  tests_dir = pathlib.Path(__file__).parent
  missing = [name for name in REGISTRY if name not in here and
             f"def test_{name}_uses_optimizer_learning_rate(" not in
             (tests_dir / f"test_{name}.py").read_text()]
  assert not missing, missing
