"""The one optimizer builder: every key honoured, stages resolved, bad keys named, and no
trainer outside it building an optax optimizer from config values."""

import ast
import functools
import pathlib

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from jaxlab import optim, train
from jaxlab.train import optimizers
from launch.configs import config_names, load_config

ROOT = pathlib.Path(__file__).resolve().parents[3]


def _opt(**fields) -> ml_collections.ConfigDict:
  return ml_collections.ConfigDict(fields)


def _trajectory(tx, steps: int = 12) -> np.ndarray:
  """Params after each of `steps` updates on a fixed problem whose gradients span 1e-7 to 30
  (so eps, clipping and every moment show), stacked [steps, 6]."""
  params = {"w": jnp.asarray([1.0, -2.0, 0.5, 3.0, -0.1, 2.0])}
  scale = jnp.asarray([30.0, 1.0, 1e-7, 0.3, 5.0, 1e-3])
  state, out = tx.init(params), []
  for i in range(steps):
    grads = {"w": scale * jnp.sin(params["w"] + 0.3 * i)}
    updates, state = tx.update(grads, state, params)
    params = optax.apply_updates(params, updates)
    out.append(params["w"])
  return np.asarray(jnp.stack(out))


BASE = {
    "adamw": dict(name="adamw", learning_rate=0.1, schedule="warmup_cosine", warmup_steps=3,
                  end_frac=0.1, b1=0.9, b2=0.95, eps=1e-8, weight_decay=0.1, grad_clip=1.0),
    "adam": dict(name="adam", learning_rate=0.1, schedule="warmup_cosine", warmup_frac=0.25,
                 end_frac=0.1, b1=0.9, b2=0.95, eps=1e-8, grad_clip=1.0),
    "sgd": dict(name="sgd", learning_rate=0.1, schedule="warmup_cosine", warmup_steps=3,
                momentum=0.9, nesterov=False, grad_clip=1.0),
}
# One changed value per key, for the optimizer that reads it.
CHANGES = [
    ("adamw", "learning_rate", 0.05), ("adamw", "schedule", "constant"),
    ("adamw", "warmup_steps", 0), ("adamw", "end_frac", 0.5), ("adamw", "b1", 0.5),
    ("adamw", "b2", 0.5), ("adamw", "eps", 1e-3), ("adamw", "weight_decay", 0.5),
    ("adamw", "grad_clip", 100.0), ("adamw", "name", "adam"),
    ("adam", "warmup_frac", 0.5), ("sgd", "momentum", 0.5), ("sgd", "nesterov", True),
    ("sgd", "grad_clip", 0.1), ("sgd", "name", "adamw"),
]


@pytest.mark.parametrize("name,key,value", CHANGES, ids=[f"{n}.{k}" for n, k, _ in CHANGES])
def test_every_key_changes_the_updates(name, key, value):
  fields = dict(BASE[name])
  base = _trajectory(train.optimizer(_opt(**fields), num_steps=12))
  fields[key] = value
  if key == "name":  # the other optimizer's own keys are not read: drop them
    keep = optimizers._COMMON_KEYS + optimizers._NAME_KEYS[value]
    fields = {k: v for k, v in fields.items() if k in keep}
  changed = _trajectory(train.optimizer(_opt(**fields), num_steps=12))
  assert np.all(np.isfinite(changed))
  assert np.max(np.abs(changed - base)) > 1e-6, f"optimizer.{key} did not change the updates"


def test_lm_config_builds_the_clipped_adamw_it_always_did():
  # The byte-LM configs' optimizer before the builder: clip, then AdamW on the schedule.
  opt = load_config("lm", "smoke").optimizer
  old = optax.chain(optax.clip_by_global_norm(opt.grad_clip),
                    optax.adamw(train.make_schedule(opt, 40), b1=opt.b1, b2=opt.b2,
                                weight_decay=opt.weight_decay))
  np.testing.assert_array_equal(_trajectory(train.optimizer(opt, 40)), _trajectory(old))


def test_modex_config_builds_the_adamw_it_always_did():
  opt = load_config("modex", "smoke").optimizer
  old = optax.adamw(train.make_schedule(opt, 200), weight_decay=opt.weight_decay)
  np.testing.assert_array_equal(_trajectory(train.optimizer(opt, 200)), _trajectory(old))


def test_cvgl_config_builds_the_clipped_adamw_it_always_did():
  # Sample4Geo's optimizer: clip the global norm to 1, then AdamW (decay 1e-4) on the schedule.
  opt = load_config("cvgl", "smoke").optimizer
  old = optax.chain(optax.clip_by_global_norm(1.0),
                    optax.adamw(train.make_schedule(opt, 20), weight_decay=1e-4))
  np.testing.assert_array_equal(_trajectory(train.optimizer(opt, 20)), _trajectory(old))


def test_sata_config_builds_the_clipped_adam_it_always_did():
  opt = load_config("sata", "smoke").optimizer
  old = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(train.make_schedule(opt, 20)))
  np.testing.assert_array_equal(_trajectory(train.optimizer(opt, 20)), _trajectory(old))


@pytest.mark.parametrize("row,stage,lr", [("cramer", None, 1e-3), ("cramer", "backbone", 3e-3),
                                          ("zeroshot", None, 1e-3), ("zeroshot", "head", 0.05)])
def test_constant_adam_rows_build_the_adam_they_always_did(row, stage, lr):
  # cramer's arms and backbone, zeroshot's mapping and seen-class head: constant-rate Adam.
  opt = load_config(row, "smoke").optimizer
  np.testing.assert_array_equal(_trajectory(train.optimizer(opt, 20, stage=stage)),
                                _trajectory(optax.adam(lr)))


def test_qat_scaling_config_builds_the_update_it_always_did():
  # The QAT grid's trainer before the builder: clip, Adam's moments, decoupled decay, then
  # p - lr * u with lr on the schedule (num_steps traced: the grid's budget).
  opt = load_config("qat_scaling", "smoke").optimizer
  n = jnp.int32(24)
  old_tx = optax.chain(optax.clip_by_global_norm(opt.grad_clip),
                       optax.scale_by_adam(b1=opt.b1, b2=opt.b2),
                       optax.add_decayed_weights(opt.weight_decay))
  sched = train.make_schedule(opt, n)
  params = {"w": jnp.asarray([1.0, -2.0, 0.5, 3.0, -0.1, 2.0])}
  scale = jnp.asarray([30.0, 1.0, 1e-7, 0.3, 5.0, 1e-3])
  state, old = old_tx.init(params), []
  for i in range(12):
    grads = {"w": scale * jnp.sin(params["w"] + 0.3 * i)}
    updates, state = old_tx.update(grads, state, params)
    lr = sched(jnp.int32(i))
    params = jax.tree.map(lambda p, u, lr=lr: p - lr * u, params, updates)
    old.append(params["w"])
  np.testing.assert_array_equal(_trajectory(train.optimizer(opt, n)), np.stack(old))


def test_eco_config_builds_the_clipped_eco_adamw_it_always_did():
  # ECO's LM arms before the builder: clip, then ECO's AdamW (or master AdamW) on the schedule.
  config = load_config("eco", "smoke")
  opt, n = config.optimizer, config.train.num_steps
  q = optim.Quantizer("fp8_e4m3", granularity="row")
  kw = dict(b1=opt.b1, b2=opt.b2, eps=opt.eps, weight_decay=opt.weight_decay)
  eco = dict(quantizer=q, stochastic_rounding=True, key=3, injection="eco")
  clip = optax.clip_by_global_norm(opt.grad_clip)
  pairs = [
      (True, train.optimizer(opt, n, base=functools.partial(optim.eco_adamw, **eco)),
       optax.chain(clip, optim.eco_adamw(train.make_schedule(opt, n), **kw, **eco))),
      (False, train.optimizer(opt, n, base=optim.master_adamw),
       optax.chain(clip, optim.master_adamw(train.make_schedule(opt, n), **kw)))]
  for stored_quantized, new, old in pairs:
    runs = []
    for tx in (new, old):
      params = {"w": jnp.linspace(-1.0, 1.0, 32).reshape(4, 8)}
      if stored_quantized:
        params = optim.quantize_params(params, q)
      state, out = tx.init(params), []
      for i in range(5):  # warmup (3 steps) and into the cosine
        w = optim.dequantize_params(params)["w"] if stored_quantized else params["w"]
        updates, state = tx.update({"w": jnp.sin(w + 0.3 * i)}, state, params)
        params = optim.apply_eco(params, updates)
        out.append(optim.dequantize_params(params)["w"] if stored_quantized else params["w"])
      runs.append(np.stack(out))
    np.testing.assert_array_equal(*runs)


def _rl_optimizers():
  """(name, built by the builder as the trainer builds it, the optax chain it used to build)."""
  from jaxlab.rl import knowledge_task, ppo, sac
  aes, ucpo = load_config("aes", "quick").optimizer, load_config("ucpo", "quick").optimizer
  ppo_chain = optax.chain(optax.clip_by_global_norm(0.5), optax.adam(1e-3, eps=1e-5))
  cases = [("ppo default", train.optimizer(ppo.DEFAULT_OPTIMIZER, 40), ppo_chain),
           ("aes ppo", train.optimizer(aes, 40), ppo_chain),
           ("sft default", train.optimizer(knowledge_task.SFT_OPTIMIZER, 40), optax.adam(3e-3)),
           ("rl default", train.optimizer(knowledge_task.RL_OPTIMIZER, 40),
            optax.chain(optax.clip_by_global_norm(1.0), optax.adam(1e-3))),
           ("ucpo sft", train.optimizer(ucpo, 40, stage="sft"), optax.adam(ucpo.sft.learning_rate)),
           ("ucpo rl", train.optimizer(ucpo, 40),
            optax.chain(optax.clip_by_global_norm(1.0), optax.adam(ucpo.learning_rate)))]
  for net in sac.NETWORKS:
    for name, opt in (("default", sac.DEFAULT_OPTIMIZER), ("aes", aes)):
      cases.append((f"sac {name} {net}", train.optimizer(
          opt, 40, stage=net, inherit=optimizers.SCHEDULE_KEYS), optax.adam(1e-3)))
  return cases


def test_rl_trainers_build_the_optimizers_they_always_did():
  # SAC's Adams (no clip, optax's eps), PPO's clipped Adam with eps 1e-5, and the knowledge
  # task's SFT Adam and clipped RL Adam, as their trainers and configs build them now.
  for name, built, old in _rl_optimizers():
    np.testing.assert_array_equal(_trajectory(built), _trajectory(old), err_msg=name)


def test_apc_stages_build_the_optimizers_they_always_did():
  # The SFT stage was a clipped optax.adamw(1e-3) (its defaults: b2 0.999, weight decay 1e-4),
  # the RL stage a clipped optax.adam(2e-4); both now sections over the base LM's AdamW.
  from jaxlab.codecomp.pipeline import stage_optimizer
  config = load_config("apc", "quick")
  clip = optax.clip_by_global_norm(1.0)
  np.testing.assert_array_equal(_trajectory(stage_optimizer(config, "sft")),
                                _trajectory(optax.chain(clip, optax.adamw(1e-3))))
  np.testing.assert_array_equal(_trajectory(stage_optimizer(config, "rl")),
                                _trajectory(optax.chain(clip, optax.adam(2e-4))))


def test_defaults_are_adamw_without_decay_and_without_clipping():
  tx = train.optimizer(_opt(learning_rate=0.1, schedule="constant"), 10)
  np.testing.assert_array_equal(_trajectory(tx), _trajectory(optax.adam(0.1)))


def test_schedules_are_make_schedule():
  opt = _opt(learning_rate=0.5, schedule="warmup_cosine", warmup_steps=4, end_frac=0.2)
  tx = train.optimizer(opt, 20, inject_hyperparams=True)
  params = {"w": jnp.zeros(3)}
  state = tx.init(params)
  sched = train.warmup_cosine(0.5, num_steps=20, warmup_steps=4, end_frac=0.2)
  for step in range(21):  # the state keeps the rate its last update used
    _, state = tx.update({"w": jnp.ones(3)}, state, params)
    assert float(state.hyperparams["learning_rate"]) == pytest.approx(float(sched(step)))
  opt.schedule = "constant"  # the warmup keys stay in place, unread (make_schedule)
  np.testing.assert_array_equal(_trajectory(train.optimizer(opt, 20)),
                                _trajectory(optax.adam(0.5)))


def test_inject_hyperparams_gives_the_same_updates():
  opt = _opt(**BASE["adamw"])
  plain = _trajectory(train.optimizer(opt, 12))
  injected = train.optimizer(opt, 12, inject_hyperparams=True)
  np.testing.assert_allclose(_trajectory(injected), plain, rtol=1e-6, atol=1e-7)
  state = injected.init({"w": jnp.zeros(6)})
  assert float(state[1].hyperparams["weight_decay"]) == pytest.approx(0.1)  # after the clip


def test_traced_step_budget_compiles_once():
  opt = _opt(learning_rate=1.0, schedule="warmup_cosine", warmup_frac=0.5, end_frac=0.0)

  @jax.jit
  def first_update(num_steps):
    tx = train.optimizer(opt, num_steps, inject_hyperparams=True)
    state = tx.init({"w": jnp.zeros(1)})
    for _ in range(4):
      _, state = tx.update({"w": jnp.ones(1)}, state)
    return state.hyperparams["learning_rate"]  # the rate of the 4th update (step 3)

  assert float(first_update(jnp.int32(6))) == pytest.approx(1.0)    # warmup of 3 just ended
  assert float(first_update(jnp.int32(12))) == pytest.approx(0.5)   # halfway up a warmup of 6
  assert first_update._cache_size() == 1


def test_stage_resolves_over_the_top_level():
  opt = _opt(**BASE["adamw"], sft=dict(learning_rate=0.01, warmup_steps=0),
             rl=dict(name="sgd", learning_rate=0.2, momentum=0.5, b1=None))
  assert optimizers.resolve(opt, "sft") == {**BASE["adamw"], "learning_rate": 0.01,
                                            "warmup_steps": 0}
  same = _opt(**{**BASE["adamw"], "learning_rate": 0.01, "warmup_steps": 0})
  np.testing.assert_array_equal(_trajectory(train.optimizer(opt, 12, stage="sft")),
                                _trajectory(train.optimizer(same, 12)))
  # The top level ignores the stages; a stage's unread key is named with its stage.
  np.testing.assert_array_equal(_trajectory(train.optimizer(opt, 12)),
                                _trajectory(train.optimizer(_opt(**BASE["adamw"]), 12)))
  with pytest.raises(ValueError, match=r"optimizer\.rl\.b1 is not read by sgd"):
    train.optimizer(opt, 12, stage="rl")
  with pytest.raises(ValueError, match=r"optimizer\.critic is not a section.*\['rl', 'sft'\]"):
    train.optimizer(opt, 12, stage="critic")


def test_a_stage_changes_only_its_optimizer():
  # SAC-style: actor and critic differ only where their sections say so.
  opt = _opt(learning_rate=0.1, schedule="constant", actor=dict(learning_rate=0.3),
             critic=dict(learning_rate=0.1))
  actor = _trajectory(train.optimizer(opt, 5, stage="actor"), 5)
  critic = _trajectory(train.optimizer(opt, 5, stage="critic"), 5)
  np.testing.assert_array_equal(critic, _trajectory(optax.adam(0.1), 5))
  np.testing.assert_array_equal(actor, _trajectory(optax.adam(0.3), 5))


@pytest.mark.parametrize("fields,match", [
    (dict(lr=0.1), r"optimizer\.lr is not an optimizer key"),
    (dict(learning_rate=0.1, momentum=0.9), r"optimizer\.momentum is not read by adamw"),
    (dict(name="adam", learning_rate=0.1, weight_decay=0.1),
     r"optimizer\.weight_decay is not read by adam"),
    (dict(name="sgd", learning_rate=0.1, eps=1e-3), r"optimizer\.eps is not read by sgd"),
    (dict(name="lion", learning_rate=0.1), r"optimizer\.name must be one of"),
    (dict(schedule="constant"), r"optimizer\.learning_rate is required"),
    (dict(learning_rate=-1.0), r"optimizer\.learning_rate must be"),
    (dict(learning_rate=0.1, schedule="linear"), r"optimizer\.schedule must be"),
    (dict(learning_rate=0.1, warmup_steps=2, warmup_frac=0.1), r"optimizer\.warmup_steps and"),
    (dict(learning_rate=0.1, warmup_frac=1.5), r"optimizer\.warmup_frac must"),
    (dict(learning_rate=0.1, b1=1.0), r"optimizer\.b1 must be in \[0, 1\)"),
    (dict(learning_rate=0.1, b2=-0.1), r"optimizer\.b2 must be"),
    (dict(learning_rate=0.1, eps=0.0), r"optimizer\.eps must be > 0"),
    (dict(learning_rate=0.1, weight_decay=-0.1), r"optimizer\.weight_decay must be"),
    (dict(learning_rate=0.1, grad_clip=0.0), r"optimizer\.grad_clip must be"),
    (dict(name="sgd", learning_rate=0.1, momentum=1.0), r"optimizer\.momentum must be"),
    (dict(learning_rate=0.1, actor=dict(learning_rate=0.1, beta=1.0)), None),  # top level fine
])
def test_bad_keys_and_values_are_named(fields, match):
  if match is None:
    train.optimizer(_opt(**fields), 10)
    with pytest.raises(ValueError, match=r"optimizer\.actor\.beta is not an optimizer key"):
      train.optimizer(_opt(**fields), 10, stage="actor")
    return
  with pytest.raises(ValueError, match=match):
    train.optimizer(_opt(**fields), 10)


def test_a_stage_can_inherit_the_schedule_alone():
  # SAC's networks beside PPO's clipped Adam (eps 1e-5) at the top level: inherit=SCHEDULE_KEYS
  # gives them the schedule and learning rate, never the clip or the eps.
  opt = _opt(learning_rate=0.1, schedule="constant", eps=1e-5, grad_clip=0.5,
             actor=dict(learning_rate=0.2), alpha=dict())
  assert optimizers.resolve(opt, "actor", inherit=optimizers.SCHEDULE_KEYS) == dict(
      learning_rate=0.2, schedule="constant")
  tx = train.optimizer(opt, 12, stage="alpha", inherit=optimizers.SCHEDULE_KEYS)
  np.testing.assert_array_equal(_trajectory(tx), _trajectory(optax.adam(0.1)))
  # Without it, a stage takes every top-level key (the clip and the eps change the updates).
  assert np.max(np.abs(_trajectory(train.optimizer(opt, 12, stage="alpha"))
                       - _trajectory(tx))) > 1e-6
  with pytest.raises(ValueError, match="inherit names 'lr'"):
    train.optimizer(opt, 12, stage="actor", inherit=("lr",))


def test_a_stage_error_names_the_stage():
  opt = _opt(learning_rate=0.1, sft=dict(learning_rate=-0.5))
  with pytest.raises(ValueError, match=r"optimizer\.sft\.learning_rate must be"):
    train.optimizer(opt, 10, stage="sft")
  with pytest.raises(ValueError, match="cannot hold sections"):
    train.optimizer(_opt(learning_rate=0.1, sft=dict(inner=dict(learning_rate=0.1))), 10,
                    stage="sft")


def test_base_replaces_the_named_optimizer_only():
  seen = {}

  def base(learning_rate, **hyper):
    seen.update(hyper)
    return optax.adamw(learning_rate, **hyper)

  opt = _opt(**BASE["adamw"])
  tx = train.optimizer(opt, 12, base=base)
  assert seen == dict(b1=0.9, b2=0.95, eps=1e-8, weight_decay=0.1)
  np.testing.assert_array_equal(_trajectory(tx), _trajectory(train.optimizer(opt, 12)))


OPTIMIZER_CONFIGS = [(n, p) for n in config_names() for p in ("smoke", "quick", "full")
                     if "optimizer" in load_config(n, p)]


@pytest.mark.parametrize("name,preset", OPTIMIZER_CONFIGS,
                         ids=[f"{n}:{p}" for n, p in OPTIMIZER_CONFIGS])
def test_every_config_optimizer_section_builds(name, preset):
  # The existing configs' keys are the builder's vocabulary: each section and stage builds.
  opt = load_config(name, preset).optimizer
  stages = [k for k, v in opt.items() if isinstance(v, ml_collections.ConfigDict)]
  for stage in [None, *stages]:
    tx = train.optimizer(opt, 100, stage=stage)
    assert np.all(np.isfinite(_trajectory(tx, steps=2)))


# optax optimizers and the pieces of one (clipping, Adam's scaling, weight decay).
OPTAX_OPTIMIZERS = frozenset({
    "adam", "adamw", "sgd", "lion", "adafactor", "rmsprop", "adagrad", "lamb", "lars", "nadam",
    "nadamw", "radam", "adamax", "adamaxw", "novograd", "yogi", "adabelief", "amsgrad", "noisy_sgd",
    "fromage", "sm3", "clip_by_global_norm", "scale_by_adam", "add_decayed_weights"})
# Where optax optimizers are defined or wrapped as transforms of their own, not built from config.
DEFINES_OPTIMIZERS = {"jaxlab/train/optimizers.py", "jaxlab/optim/baselines.py"}
# Trainers that still build their own optimizer from config values. Porting one to
# `jaxlab.train.optimizer` removes it here; the list only shrinks.
NOT_YET_PORTED = {
    "jaxlab/experiments/bench_lm_train.py",
}


def optax_optimizers_used(source: str) -> list[str]:
  """The `optax.<optimizer>` names `source` calls or refers to (docstrings aside)."""
  return sorted({n.attr for n in ast.walk(ast.parse(source))
                 if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
                 and n.value.id == "optax" and n.attr in OPTAX_OPTIMIZERS})


def test_the_scan_finds_an_optimizer_built_from_config():
  src = ('"""optax.adam(1e-3) in a docstring is fine."""\nimport optax\n'
         'def f(cfg):\n  opt = optax.adamw if cfg.wd else optax.sgd\n'
         '  return optax.chain(optax.clip_by_global_norm(cfg.clip), opt(cfg.lr))\n')
  assert optax_optimizers_used(src) == ["adamw", "clip_by_global_norm", "sgd"]
  assert optax_optimizers_used("import optax\nx = optax.apply_updates\n") == []


def test_no_trainer_builds_its_own_optimizer():
  found = {}
  for path in sorted((ROOT / "jaxlab").rglob("*.py")):
    rel = str(path.relative_to(ROOT))
    if rel.startswith("jaxlab/optim/") and rel not in DEFINES_OPTIMIZERS:
      continue  # jaxlab.optim defines optax transforms (ECO, ...): they are the optimizers
    names = optax_optimizers_used(path.read_text())
    if names and rel not in DEFINES_OPTIMIZERS | NOT_YET_PORTED:
      found[rel] = names
  assert not found, (f"build the optimizer with jaxlab.train.optimizer(config.optimizer, "
                     f"num_steps), not optax directly: {found}")
  stale = sorted(p for p in NOT_YET_PORTED
                 if not optax_optimizers_used((ROOT / p).read_text()))
  assert not stale, f"ported: remove {stale} from NOT_YET_PORTED"
