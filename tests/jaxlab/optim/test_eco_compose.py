"""ECO inside the optax ecosystem, and its non-finite rule (issues 16 and 17).

Each test here failed on the ECO before these issues: its updates had the QParam
structure (MultiSteps, apply_if_finite, masked broke; a transform after it gave
NaN weights), `make_train_step` could not differentiate QParam params, and a NaN
gradient or an invalid hyperparameter silently zeroed the FP8 weights.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxlab import optim, train
from jaxlab.optim import Quantizer

FP8 = Quantizer("fp8_e4m3", granularity="row")
GRID = Quantizer("grid", step=0.125)


def _params():
  k1, k2 = jax.random.split(jax.random.key(0))
  return {"w": 0.1 * jax.random.normal(k1, (16, 8)), "b": 0.1 * jax.random.normal(k2, (8,))}


def _grads(i):
  k1, k2 = jax.random.split(jax.random.key(100 + i))
  return {"w": jax.random.normal(k1, (16, 8)), "b": jax.random.normal(k2, (8,))}


def _bits_equal(a, b):
  jax.tree.map(np.testing.assert_array_equal, a, b)


def _same_landing(a, b):
  """Two programs' landings: equal element codes; a scale or F32 value within an ulp (XLA
  may contract a multiply-add into an FMA differently in two programs)."""
  for x, y in zip(jax.tree.leaves(a, is_leaf=optim.is_qparam),
                  jax.tree.leaves(b, is_leaf=optim.is_qparam), strict=True):
    if x.quantizer.name != "f32":
      np.testing.assert_array_equal(x.codes, y.codes)
    np.testing.assert_allclose(x.dequantize(), y.dequantize(), rtol=3e-7, atol=0)


def _run(tx, params, grads_seq, init_on=None):
  """Jitted update + apply_eco over `grads_seq`; returns (params, state)."""
  state = tx.init(params if init_on is None else init_on)

  @jax.jit
  def step(p, s, g):
    u, s = tx.update(g, s, p)
    return optim.apply_eco(p, u), s

  for g in grads_seq:
    params, state = step(params, state, g)
  return params, state


def test_updates_have_the_gradient_structure_and_land_where_eco_computed():
  p = optim.quantize_params(_params(), FP8)
  tx = optim.eco_adamw(1e-2, quantizer=FP8, stochastic_rounding=True, key=1,
                       injection="exact")
  s = tx.init(p)
  u, s = jax.jit(tx.update)(_grads(0), s, p)
  assert jax.tree.structure(u) == jax.tree.structure(_grads(0))
  assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(u))
  new = optim.apply_eco(p, u)
  assert new["w"].codes.dtype == jnp.uint8 and new["w"].quantizer == FP8
  # The exact variant stores e = W~ - landing: landing + e is the FP32 AdamW iterate.
  ref = optax.adamw(1e-2, weight_decay=1e-4)
  w0 = optim.dequantize_params(p)
  ur, _ = ref.update(_grads(0), ref.init(w0), w0)
  want = optax.apply_updates(w0, ur)
  got = jax.tree.map(jnp.add, optim.dequantize_params(new), s.err)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7), got, want)
  # The old bit-delta updates are refused by apply_eco with a clear message.
  bits = {"w": optim.bits_delta(new["w"], p["w"]), "b": u["b"]}
  with pytest.raises(ValueError, match="must be a float array of shape"):
    optim.apply_eco(p, bits)


def test_multisteps_equals_one_step_on_the_mean_gradient():
  p0 = optim.quantize_params(_params(), FP8)
  inner = optim.eco_adamw(1e-2, quantizer=FP8, stochastic_rounding=False)
  ms = optax.MultiSteps(inner, every_k_schedule=2)
  g = [_grads(0), _grads(1)]
  mean = jax.tree.map(lambda a, b: a + (b - a) / 2, *g)  # MultiSteps' running mean, same rounding
  # MultiSteps builds gradient-shaped buffers from the params: init on the float view.
  p_ms, s_ms = _run(ms, p0, g, init_on=optim.dequantize_params(p0))
  p_one, s_one = _run(inner, p0, [mean])
  _same_landing(p_ms, p_one)
  np.testing.assert_allclose(s_ms.inner_opt_state.mu["w"], s_one.mu["w"], rtol=1e-6)
  assert not np.array_equal(p_one["w"].codes, p0["w"].codes)  # it did move


def test_apply_if_finite_skips_a_nan_step_and_trains_on():
  p0 = optim.quantize_params(_params(), FP8)
  tx = optax.apply_if_finite(optim.eco_adamw(1e-2, quantizer=FP8, key=3), 5)
  bad = dict(_grads(1), w=_grads(1)["w"].at[0, 0].set(jnp.nan))
  p_a, s_a = _run(tx, p0, [_grads(0), bad, _grads(2)])
  p_b, _ = _run(tx, p0, [_grads(0), _grads(2)])
  _bits_equal(p_a, p_b)  # the NaN step changed nothing (params, moments, SR key)
  assert int(s_a.total_notfinite) == 1


def test_masked_eco_beside_a_float_optimizer():
  w0 = _params()
  params = {"w": optim.quantize_params({"w": w0["w"]}, FP8)["w"], "b": w0["b"]}  # mixed tree
  mask = {"w": True, "b": False}
  eco = optim.eco_adamw(1e-2, quantizer=FP8, key=2)
  tx = optax.chain(optax.masked(eco, mask),
                   optax.masked(optax.adam(1e-2), {"w": False, "b": True}))
  g = [_grads(0), _grads(1)]
  got, _ = _run(tx, params, g)
  want_w, _ = _run(eco, {"w": params["w"]}, [{"w": x["w"]} for x in g])
  want_b, _ = _run(optax.adam(1e-2), {"b": w0["b"]}, [{"b": x["b"]} for x in g])
  _same_landing(got["w"], want_w["w"])
  np.testing.assert_array_equal(got["b"], want_b["b"])


def test_a_transform_after_eco_is_not_applied_and_check_eco_state_raises():
  p0 = optim.quantize_params(_params(), FP8)
  eco = optim.eco_adamw(1e-2, quantizer=FP8, key=4)
  g = [_grads(0), _grads(1), _grads(2)]
  # A bit-identical transform (scale by 1) changes nothing and is accepted...
  got, s = _run(optax.chain(eco, optax.scale(1.0)), p0, g)
  want, _ = _run(eco, p0, g)
  _same_landing(got, want)
  optim.check_eco_state(s)
  assert int(s[0].misplaced) == 0
  # ...one that moves the landing is caught at ECO's next update: that update and every
  # later one are not applied (the weights stay where the halved step put them, the
  # moments stay), they are counted, and check_eco_state raises.
  tx = optax.chain(eco, optax.scale(0.5))
  p1, s1 = _run(tx, p0, g[:1])
  p3, s3 = _run(tx, p0, g)
  assert bool(jnp.any(p1["w"].codes != p0["w"].codes))  # the first, halved step moved a code
  jax.tree.map(np.testing.assert_array_equal, p3, p1)
  jax.tree.map(np.testing.assert_array_equal, s3[0].mu, s1[0].mu)
  assert int(s3[0].misplaced) == 2 and int(s3[0].count) == 1 and int(s3[0].skipped) == 0
  optim.check_eco_state(s1)  # nothing was misplaced yet
  with pytest.raises(ValueError, match="ECO did not apply 2 update.*must be the last transform"):
    optim.check_eco_state(s3)
  # Nested states (inject_hyperparams) are found too.
  inj = optax.chain(optim.injectable(optim.eco_adamw)(learning_rate=1e-2, quantizer=FP8, key=4),
                    optax.scale(0.5))
  with pytest.raises(ValueError, match="must be the last transform"):
    optim.check_eco_state(_run(inj, p0, g)[1])


def test_make_train_step_trains_qparam_models():
  k1, k2 = jax.random.split(jax.random.key(5))
  x = jax.random.normal(k1, (64, 16))
  w_true = jax.random.normal(k2, (16, 8))
  batch = (x, x @ w_true)

  def loss_fn(params, batch, rng):
    del rng
    xb, yb = batch
    return jnp.mean((xb @ params["w"] + params["b"] - yb) ** 2), {}

  params = optim.quantize_params({"w": jnp.zeros((16, 8)), "b": jnp.zeros(8)}, FP8)
  tx = optax.MultiSteps(optax.chain(optax.clip_by_global_norm(10.0),
                                    optim.eco_adamw(0.1, quantizer=FP8, weight_decay=0.0)),
                        every_k_schedule=2)
  state = train.create_train_state(params, tx, seed=0)
  step = train.make_train_step(loss_fn, tx)
  losses = []
  for _ in range(80):  # 40 optimizer updates
    state, metrics = step(state, batch)
    losses.append(float(metrics["loss"]))
  assert state.params["w"].codes.dtype == jnp.uint8  # still FP8 storage
  assert losses[-1] < 0.1 * losses[0]


def test_train_loop_raises_when_eco_is_not_the_last_transform(tmp_path):
  x = jax.random.normal(jax.random.key(6), (32, 16))
  batch = (x, x @ jnp.ones((16, 8)))

  def loss_fn(params, batch, rng):
    del rng
    return jnp.mean((batch[0] @ params["w"] - batch[1]) ** 2), {}

  def run(tx, workdir):
    state = train.create_train_state(optim.quantize_params({"w": jnp.zeros((16, 8))}, FP8), tx,
                                     seed=0)  # fresh params: the step donates its state
    return train.train_loop(state, train.make_train_step(loss_fn, tx), lambda i: batch,
                            num_steps=4, workdir=str(workdir), checkpoint_every=100, log_every=2)

  assert int(run(optim.eco_adamw(0.1, quantizer=FP8), tmp_path / "last").step) == 4
  with pytest.raises(ValueError, match="must be the last transform"):
    run(optax.chain(optim.eco_adamw(0.1, quantizer=FP8), optax.scale(0.5)), tmp_path / "scaled")


def test_injectable_is_a_one_liner_and_plain_inject_hyperparams_works():
  p0 = optim.quantize_params(_params(), FP8)
  sched = optax.linear_schedule(1e-2, 1e-3, 10)
  tx = optim.injectable(optim.eco_adamw)(learning_rate=sched, quantizer=FP8, key=7)
  p, s = _run(tx, p0, [_grads(0), _grads(1)])
  assert s.hyperparams["learning_rate"].dtype == jnp.float32
  np.testing.assert_allclose(s.hyperparams["learning_rate"], sched(1), rtol=1e-6)  # last used
  assert "key" not in s.hyperparams and "b1" in s.hyperparams
  want, _ = _run(optim.eco_adamw(sched, quantizer=FP8, key=7), p0, [_grads(0), _grads(1)])
  np.testing.assert_allclose(optim.dequantize_params(p)["w"], optim.dequantize_params(want)["w"],
                             rtol=0.07, atol=1e-6)  # f32 hyperparameter arrays: an ulp may flip
  # The default key no longer turns into a float hyperparameter.
  plain = optax.inject_hyperparams(optim.eco_adamw, hyperparam_dtype=jnp.float32)(
      learning_rate=1e-3, quantizer=FP8)
  _run(plain, p0, [_grads(0)])


# ----------------------------------------------------------------------------- non-finite rule


@pytest.mark.parametrize("clip", [False, True])
def test_a_nan_gradient_never_becomes_a_zero_weight(clip):
  p0 = optim.quantize_params(_params(), FP8)
  eco = optim.eco_adamw(1e-2, quantizer=FP8, key=1)
  tx = optax.chain(optax.clip_by_global_norm(1.0), eco) if clip else eco
  bad = dict(_grads(1), w=_grads(1)["w"].at[3, 2].set(jnp.nan))
  p1, s1 = _run(tx, p0, [_grads(0)])
  p2, s2 = _run(tx, p0, [_grads(0), bad])
  _bits_equal(p2, p1)
  s1e, s2e = (s[-1] if clip else s for s in (s1, s2))
  _bits_equal(s2e._replace(skipped=0), s1e._replace(skipped=0))  # moments, count, key
  assert int(s2e.skipped) == 1 and int(s1e.skipped) == 0
  assert float(jnp.abs(optim.dequantize_params(p2)["w"]).min()) > 0  # nothing zeroed


def test_raise_on_nonfinite_debug_flag():
  p0 = optim.quantize_params(_params(), FP8)
  tx = optim.eco_sgdm(1e-2, quantizer=FP8, raise_on_nonfinite=True)
  bad = dict(_grads(0), b=_grads(0)["b"].at[0].set(jnp.inf))
  with pytest.raises(Exception, match="non-finite gradients"):
    p, _ = _run(tx, p0, [bad])
    jax.block_until_ready(p)


@pytest.mark.parametrize("make,match", [
    (lambda: optim.eco_sgdm(float("nan"), quantizer=GRID), "learning_rate"),
    (lambda: optim.eco_sgdm(1e39, quantizer=GRID), "learning_rate"),  # inf in float32
    (lambda: optim.eco_sgdm(-0.1, quantizer=GRID), "learning_rate"),
    (lambda: optim.eco_sgdm(0.1, 1.0, quantizer=GRID), "momentum"),
    (lambda: optim.eco_sgdm(0.1, -0.5, quantizer=GRID), "momentum"),
    (lambda: optim.eco_adamw(0.1, b1=1.0, quantizer=GRID), "b1"),
    (lambda: optim.eco_adamw(0.1, b2=1.0, quantizer=GRID), "b2"),
    (lambda: optim.eco_adamw(0.1, eps=0.0, quantizer=GRID), "eps and eps_root"),
    (lambda: optim.eco_adamw(0.1, weight_decay=float("inf"), quantizer=GRID), "weight_decay"),
    (lambda: optim.eco_adamw(0.1, quantizer=GRID, key=jnp.float32(3.0)), "key must be"),
])
def test_invalid_static_hyperparameters_raise(make, match):
  with pytest.raises(ValueError, match=match):
    make()


@pytest.mark.parametrize("lr", [float("nan"), 1e38])
def test_traced_nan_or_overflowing_lr_is_skipped(lr):
  """lr = 1e38 makes W~ overflow to inf; lr = NaN makes it NaN: both skipped."""
  p0 = optim.quantize_params(_params(), FP8)
  tx = optim.injectable(optim.eco_sgdm)(learning_rate=1e-2, quantizer=FP8)
  s = tx.init(p0)
  s.hyperparams["learning_rate"] = jnp.float32(lr)
  u, s = jax.jit(tx.update)({"w": 100.0 * jnp.ones((16, 8)), "b": jnp.ones(8)}, s, p0)
  _bits_equal(optim.apply_eco(p0, u), p0)
  assert int(s.inner_state.skipped) == 1 and int(s.inner_state.count) == 0


def test_momentum_zero_is_sgd_with_exact_error_feedback():
  """beta = 0 (a ZeroDivisionError before): the carried residual -e/lr in `mu` makes
  landing + residual follow FP32 SGD exactly."""
  w0 = {"w": jnp.linspace(-1.0, 1.0, 32).reshape(4, 8)}
  lr = 0.01
  tx = optim.eco_sgdm(lr, 0.0, quantizer=GRID, stochastic_rounding=False)
  p = optim.quantize_params(w0, GRID)
  s = tx.init(p)
  master = p["w"].dequantize()  # both start on the grid
  step = jax.jit(lambda p, s, g: tx.update(g, s, p))
  for i in range(20):
    g = {"w": 1.0 + 0.5 * jnp.sin(3.0 * master + i)}  # at the master point, for both
    u, s = step(p, s, g)
    p = optim.apply_eco(p, u)
    master = master - lr * g["w"]
    residual = -lr * s.mu["w"]  # mu = -e / lr
    np.testing.assert_allclose(p["w"].dequantize() + residual, master, rtol=1e-5, atol=1e-6)
  assert np.any(p["w"].codes != optim.quantize_params(w0, GRID)["w"].codes)  # whole steps moved
  # AdamW with b1 = 0 is defined the same way: finite, and it trains.
  tx = optim.eco_adamw(lr, b1=0.0, quantizer=GRID, stochastic_rounding=False)
  p, s = _run(tx, optim.quantize_params(w0, GRID), [{"w": jnp.ones((4, 8))}] * 30)
  assert bool(jnp.all(jnp.isfinite(s.mu["w"]))) and int(s.skipped) == 0
  assert float(jnp.mean(p["w"].dequantize() - w0["w"])) < -0.2


@pytest.mark.parametrize("make,name", [
    (lambda b: optim.eco_adamw(0.01, b1=b, quantizer=GRID, stochastic_rounding=False), "b1"),
    (lambda b: optim.eco_sgdm(0.01, b, quantizer=GRID, stochastic_rounding=False), "momentum"),
])
def test_an_injected_zero_momentum_is_the_static_zero_momentum(make, name):
  """b1 = 0 (momentum = 0) under inject_hyperparams is an array, so the carried-residual
  case must be chosen at run time: before, 1 - 1/b1 = -inf times a zero residual gave NaN
  and every update was skipped."""
  p0 = optim.quantize_params({"w": jnp.linspace(-1.0, 1.0, 32).reshape(4, 8)}, GRID)
  grads = [{"w": 1.0 + 0.5 * jnp.sin(jnp.arange(32.0).reshape(4, 8) + i)} for i in range(4)]
  p_static, s_static = _run(make(0.0), p0, grads)
  kw = {"learning_rate": 0.01, name: 0.0, "quantizer": GRID, "stochastic_rounding": False}
  factory = optim.eco_adamw if name == "b1" else optim.eco_sgdm
  # b2 stays a Python float, as in the static optimizer (1 - b2 rounds differently in float32).
  injectable = optim.injectable(factory, static_args=("b2",))
  p_inj, s_inj = _run(injectable(**kw), p0, grads)
  assert int(s_inj.inner_state.skipped) == 0 and int(s_inj.inner_state.count) == 4
  _bits_equal(p_inj, p_static)
  np.testing.assert_allclose(s_inj.inner_state.mu["w"], s_static.mu["w"], rtol=1e-6)
  # A nonzero injected momentum still follows the static one.
  kw[name] = 0.5
  p_half, _ = _run(injectable(**kw), p0, grads)
  _bits_equal(p_half, _run(make(0.5), p0, grads)[0])


@pytest.mark.parametrize("lr", [jnp.float32(-0.5), jnp.array([0.1, float("nan")])])
def test_concrete_array_hyperparameters_are_range_checked(lr):
  """A concrete array learning rate was taken for a traced one and never checked: -0.5
  stepped uphill."""
  with pytest.raises(ValueError, match="learning_rate"):
    optim.eco_sgdm(lr, 0.9, quantizer=GRID)


def test_check_eco_state_reads_a_vmapped_state():
  """One misplaced counter per seed (a vmapped state): summed, not int() of an array."""
  p0 = optim.quantize_params(_params(), FP8)
  tx = optim.eco_sgdm(1e-2, 0.9, quantizer=FP8)
  states = jax.vmap(lambda _: tx.init(p0))(jnp.arange(3))
  optim.check_eco_state(states)  # nothing misplaced
  states = states._replace(misplaced=jnp.array([0, 2, 0], jnp.int32))
  with pytest.raises(ValueError, match="did not apply 2 update"):
    optim.check_eco_state(states)
