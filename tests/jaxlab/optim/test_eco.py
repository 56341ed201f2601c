"""Tests of jaxlab.optim: ECO transforms, baselines and low-precision storage."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
import pytest

from jaxlab import optim
from jaxlab.optim import Quantizer

FP8_ROW = Quantizer("fp8_e4m3", granularity="row")
FP8_TENSOR = Quantizer("fp8_e4m3")
INT4 = Quantizer("int4", block_size=32)
IDENT = Quantizer("f32")


def _params(seed=0):
  k1, k2 = jax.random.split(jax.random.key(seed))
  return {"w": 0.05 * jax.random.normal(k1, (64, 48)), "v": 0.1 * jax.random.normal(k2, (96, 16)),
          "b": jnp.linspace(-1.0, 1.0, 48)}


def _grads(i, like):
  leaves, treedef = jax.tree.flatten(like)
  keys = jax.random.split(jax.random.key(1000 + i), len(leaves))
  return treedef.unflatten([jax.random.normal(k, x.shape)
                            for k, x in zip(keys, leaves, strict=True)])


def _step_fn(tx):
  @jax.jit
  def step(p, s, g):
    u, s = tx.update(g, s, p)
    return optim.apply_eco(p, u), s
  return step


def _train_identity_and_reference(tx, tx_ref, w0, num_steps=30):
  """Runs `tx` on IDENT-stored params and `tx_ref` on plain ones with the same grads."""
  p, p_ref = optim.quantize_params(w0, IDENT), w0
  s, s_ref = tx.init(p), tx_ref.init(w0)
  step, step_ref = _step_fn(tx), _step_fn(tx_ref)
  for i in range(num_steps):
    g = _grads(i, w0)
    p, s = step(p, s, g)
    p_ref, s_ref = step_ref(p_ref, s_ref, g)
  return optim.dequantize_params(p), p_ref


def test_identity_quantizer_equals_optax_adamw():
  w0 = _params()
  kw = dict(b1=0.9, b2=0.95, eps=1e-8, weight_decay=0.1)
  sched = optax.warmup_cosine_decay_schedule(0.0, 3e-3, 5, 30)
  got, want = _train_identity_and_reference(optim.eco_adamw(sched, quantizer=IDENT, **kw),
                                            optax.adamw(sched, **kw), w0)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7), got, want)
  assert not np.allclose(got["w"], w0["w"], atol=1e-4)  # it did train


def test_identity_quantizer_equals_optax_sgd_momentum():
  w0 = _params()
  got, want = _train_identity_and_reference(optim.eco_sgdm(0.02, 0.9, quantizer=IDENT),
                                            optax.sgd(0.02, momentum=0.9), w0)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7), got, want)
  assert not np.allclose(got["w"], w0["w"], atol=1e-4)  # it did train


@pytest.mark.parametrize("quant,sr", [(FP8_ROW, True), (INT4, True)])
def test_exact_error_feedback_tracks_master_weights(quant, sr):
  w0 = optim.dequantize_params(optim.quantize_params(_params(), quant))  # start on the grid
  sched = optax.cosine_decay_schedule(2e-3, 50)
  tx_ref = optax.adamw(sched, b2=0.95, weight_decay=0.1)
  tx = optim.exact_ef_adamw(sched, b2=0.95, weight_decay=0.1, quantizer=quant,
                            stochastic_rounding=sr, key=3)
  p_ref, s_ref = w0, tx_ref.init(w0)
  p = optim.quantize_params(w0, quant)
  s = tx.init(p)
  step, step_ref = _step_fn(tx), _step_fn(tx_ref)
  for i in range(50):
    g = _grads(i, w0)
    p, s = step(p, s, g)
    p_ref, s_ref = step_ref(p_ref, s_ref, g)
    w_tilde = jax.tree.map(jnp.add, optim.dequantize_params(p), s.err)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6),
                 w_tilde, p_ref)
  # The quantized weights themselves differ from the masters (the test is not vacuous).
  assert float(jnp.abs(optim.dequantize_params(p)["w"] - p_ref["w"]).max()) > 1e-4
  # Exact EF keeps the raw momentum: it equals optax's.
  np.testing.assert_allclose(s.mu["w"], s_ref[0].mu["w"], rtol=1e-5, atol=1e-6)


def test_sgdm_injection_sign_by_hand():
  q = Quantizer("grid", step=0.125)
  p = optim.quantize_params({"w": jnp.zeros((2, 2))}, q)
  tx = optim.eco_sgdm(0.01, 0.9, quantizer=q, stochastic_rounding=False)
  s = tx.init(p)
  u, s = tx.update({"w": jnp.ones((2, 2))}, s, p)
  p = optim.apply_eco(p, u)
  # M~ = 1, W~ = -0.01 -> Q = 0, e = -0.01; M = 1 + (1/0.01)(1 - 1/0.9)(-0.01) = 1/0.9.
  np.testing.assert_array_equal(p["w"].codes, 0)
  np.testing.assert_allclose(s.mu["w"], 1.0 / 0.9, rtol=1e-6)
  # The carried momentum keeps growing until the weight moves by one grid step (downhill).
  naive = optim.naive_sgdm(0.01, 0.9, quantizer=q, stochastic_rounding=False)
  pe = pn = optim.quantize_params({"w": jnp.zeros((2, 2))}, q)
  se, sn = tx.init(pe), naive.init(pn)
  step_e, step_n = _step_fn(tx), _step_fn(naive)
  g = {"w": jnp.full((2, 2), 0.05)}  # lr * (steady momentum 0.5) = 0.005 < half a step 0.0625
  for _ in range(150):
    pe, se = step_e(pe, se, g)
    pn, sn = step_n(pn, sn, g)
  assert int(pe["w"].codes[0, 0]) < 0 and int(pn["w"].codes[0, 0]) == 0


def test_adamw_injection_bias_correction_and_weight_decay_by_hand():
  q = Quantizer("grid", step=0.25)
  lr, b1, b2, eps, wd = 0.01, 0.8, 0.9, 1e-3, 0.5
  w0 = np.array([[1.0, -0.5], [0.25, 2.0]], np.float32)
  g = np.array([[0.3, -0.2], [0.1, 0.05]], np.float32)
  p = optim.quantize_params({"w": jnp.asarray(w0)}, q)
  tx = optim.eco_adamw(lr, b1, b2, eps, wd, quantizer=q, stochastic_rounding=False)
  s = tx.init(p)
  for _ in range(2):  # step 2 exercises t = 2 in the bias corrections
    u, s = tx.update({"w": jnp.asarray(g)}, s, p)
    p = optim.apply_eco(p, u)
  # Hand computation (float64).
  w, m, v = w0.astype(np.float64), np.zeros((2, 2)), np.zeros((2, 2))
  for t in (1, 2):
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    d = np.sqrt(v / (1 - b2 ** t)) + eps
    wt = w - lr * (m / (1 - b1 ** t) / d + wd * w)
    wq = np.round(wt / 0.25) * 0.25
    e = wt - wq
    m = m + (1 - lr * wd) * (1 - b1 ** t) / lr * (1 - 1 / b1) * d * e
    w = wq
  np.testing.assert_allclose(optim.dequantize_params(p)["w"], w, rtol=0, atol=0)
  np.testing.assert_allclose(s.mu["w"], m, rtol=2e-5)
  assert np.all(np.sign(s.mu["w"]) == np.sign(g))  # carried updates keep the descent direction


def test_no_recompilation_on_step_two_and_extra_args_ignored():
  traces = []
  q = FP8_ROW
  tx = optax.chain(optax.clip_by_global_norm(1.0), optim.eco_adamw(1e-3, quantizer=q))
  w0 = _params()

  @jax.jit
  def step(p, s, g):
    traces.append(1)
    u, s = tx.update(g, s, p, unexpected_extra_arg_the_optimizer_does_not_expect=1)
    return optim.apply_eco(p, u), s

  p = optim.quantize_params(w0, q)
  s = tx.init(p)
  for i in range(3):
    p, s = step(p, s, _grads(i, w0))
  assert len(traces) == 1


def test_on_grid_after_every_step_and_exact_apply_updates():
  """apply_updates lands bit-exactly on Q(W~), recomputed independently, every step."""
  w0 = _params()
  lr, wd = 3e-3, 0.1

  @jax.jit
  def ref_w_tilde(w, mu, nu, bc1, bc2):
    return jax.tree.map(
        lambda w, m, v: w + (-lr) * ((m / bc1) / (jnp.sqrt(v / bc2 + 0.0) + 1e-8) + wd * w),
        w, mu, nu)

  for quant in (FP8_ROW, FP8_TENSOR, INT4, Quantizer("bf16")):
    tx = optim.eco_adamw(lr, 0.9, 0.95, 1e-8, wd, quantizer=quant, stochastic_rounding=False)
    p = optim.quantize_params(w0, quant)
    s = tx.init(p)
    step = _step_fn(tx)
    for i in range(4):
      g = _grads(i, w0)
      t = jnp.float32(i + 1)
      bc1, bc2 = 1.0 - jnp.float32(0.9) ** t, 1.0 - jnp.float32(0.95) ** t
      mu = jax.tree.map(lambda m, gg: 0.9 * m + (1.0 - 0.9) * gg, s.mu, g)
      nu = jax.tree.map(lambda v, gg: 0.95 * v + (1.0 - 0.95) * jnp.square(gg), s.nu, g)
      wt = ref_w_tilde(optim.dequantize_params(p), mu, nu, bc1, bc2)
      p, s = step(p, s, g)
      # The independent W~ may differ from the optimizer's by an ulp (fusion), which can
      # flip a rounding tie or move a scale by an ulp; everything else must be identical.
      for name in w0:
        expect = p[name].quantizer.quantize(wt[name])
        if p[name].quantizer.name != "f32":
          assert np.mean(np.asarray(p[name].codes) == np.asarray(expect.codes)) >= 0.99
        err_got = jnp.abs(p[name].dequantize() - wt[name])
        err_rtn = jnp.abs(expect.dequantize() - wt[name])
        assert float(jnp.max(err_got - err_rtn)) <= 1e-6 * float(jnp.max(jnp.abs(wt[name])))
      if quant.name == "fp8_e4m3":
        c = np.asarray(p["w"].codes) & 0x7F
        assert c.max() <= 0x7E  # 448 max, no NaN code
      if quant.name == "int4":
        nib = np.stack([np.asarray(p["w"].codes) & 0xF, np.asarray(p["w"].codes) >> 4])
        assert not np.any(nib == 8)  # no -8: the grid is +-7
      assert all(bool(jnp.all(jnp.isfinite(x)))
                 for x in jax.tree.leaves(optim.dequantize_params(p)))


def test_bits_delta_apply_updates_is_exact_for_any_jump():
  x = jnp.linspace(-3.0, 3.0, 64 * 8).reshape(64, 8)
  for quant in (FP8_ROW, FP8_TENSOR, INT4, Quantizer("bf16"), IDENT, Quantizer("grid", step=0.1)):
    for factor in (1.0 + 2 ** -20, 2.0 ** -30, 2.0 ** 40):
      old = quant.quantize(x)
      new = quant.quantize(x * factor + 1e-3, jax.random.key(0))
      got = optax.apply_updates({"p": old}, {"p": optim.bits_delta(new, old)})["p"]
      jax.tree.map(np.testing.assert_array_equal, got, new)


def test_sr_steps_stay_in_format_and_consume_the_key():
  w0 = _params()
  tx = optim.eco_adamw(1e-3, quantizer=INT4, stochastic_rounding=True, key=7)
  p = optim.quantize_params(w0, INT4)
  s = tx.init(p)
  step = _step_fn(tx)
  keys = []
  for i in range(5):
    p, s = step(p, s, _grads(i, w0))
    keys.append(np.asarray(s.key))
    nib = np.stack([np.asarray(p["w"].codes) & 0xF, np.asarray(p["w"].codes) >> 4])
    assert not np.any(nib == 8)
    assert p["w"].codes.dtype == jnp.uint8 and p["w"].scales.dtype == jnp.uint32
  assert len({k.tobytes() for k in keys}) == 5


def test_dtype_mismatch_raises_clear_error():
  w0 = _params()
  tx = optim.eco_adamw(1e-3, quantizer=FP8_ROW)
  s0 = tx.init(w0)  # init reads shapes only: the float view is accepted (optax.MultiSteps)
  with pytest.raises(ValueError, match=r"params\['b'\] is a plain array of dtype float32"):
    tx.update(_grads(0, w0), s0, w0)  # the update lands on QParams: it needs them
  with pytest.raises(ValueError, match="QParam tree or its float view"):
    tx.init(jax.tree.map(lambda x: x.astype(jnp.int32), w0))
  p_int4 = optim.quantize_params(w0, INT4)
  with pytest.raises(ValueError, match="optimizer's quantizer"):
    tx.init(p_int4)
  p = optim.quantize_params(w0, FP8_ROW)
  s = tx.init(p)
  bad = dict(p, w=optim.QParam(p["w"].codes.astype(jnp.int32), p["w"].scales, FP8_ROW, (64, 48)))
  with pytest.raises(ValueError, match="code dtype int32"):
    tx.update(_grads(0, w0), s, bad)


def test_inject_hyperparams_in_chain_matches_direct_schedule():
  w0 = _params()
  sched = optax.linear_schedule(1e-2, 1e-3, 10)
  inj = optax.inject_hyperparams(optim.eco_adamw, hyperparam_dtype=jnp.float32,
                                 static_args=("stochastic_rounding", "key", "injection"))
  tx_a = optax.chain(optax.clip_by_global_norm(1.0),
                     inj(learning_rate=sched, quantizer=FP8_ROW, stochastic_rounding=True, key=1))
  f32 = jnp.float32  # inject_hyperparams hands the numbers over as float32 arrays
  tx_b = optax.chain(optax.clip_by_global_norm(1.0), optim.eco_adamw(
      sched, f32(0.9), f32(0.999), f32(1e-8), f32(1e-4), eps_root=f32(0.0), quantizer=FP8_ROW,
      stochastic_rounding=True, key=1))
  pa = pb = optim.quantize_params(w0, FP8_ROW)
  sa, sb = tx_a.init(pa), tx_b.init(pb)
  step_a, step_b = _step_fn(tx_a), _step_fn(tx_b)
  for i in range(6):
    g = jax.tree.map(lambda x: 10.0 * x, _grads(i, w0))  # large: clipping is active
    pa, sa = step_a(pa, sa, g)
    pb, sb = step_b(pb, sb, g)
  # Same math; float32 hyperparameter arrays may round an operation differently by an ulp,
  # and XLA may contract a multiply-add (FMA) differently in the two programs: an FP8 code
  # rarely moves, an F32 (identity-format) value may move by an ulp (the module's contract).
  for name in w0:
    a, b = pa[name].dequantize(), pb[name].dequantize()
    if pa[name].quantizer.name == "f32":
      np.testing.assert_array_max_ulp(np.asarray(a), np.asarray(b), maxulp=1)
    else:
      assert np.mean(np.asarray(pa[name].codes) == np.asarray(pb[name].codes)) >= 0.99
    np.testing.assert_allclose(a, b, rtol=0.07, atol=1e-6)
  np.testing.assert_allclose(sa[1].hyperparams["learning_rate"], sched(5), rtol=1e-6)
  # A constant learning rate injected by hand is the one the step (and the injection) uses.
  tx_c = inj(learning_rate=5e-3, quantizer=FP8_ROW, stochastic_rounding=False)
  sc = tx_c.init(pa)
  sc.hyperparams["learning_rate"] = jnp.asarray(0.0, jnp.float32)
  u, sc2 = tx_c.update(_grads(0, w0), sc, pa)
  # lr 0: W~ = W; only a recomputed scale may move by an ulp (amax * fl(1/448) rounding).
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6),
               optim.dequantize_params(optim.apply_eco(pa, u)), optim.dequantize_params(pa))
  assert bool(jnp.all(jnp.isfinite(sc2.inner_state.mu["w"])))
  # Without hyperparam_dtype the learning rate would become an integer: refused clearly.
  tx_bad = optax.inject_hyperparams(optim.eco_adamw, static_args=("stochastic_rounding",))(
      learning_rate=1e-3, quantizer=FP8_ROW)
  with pytest.raises(ValueError, match="hyperparam_dtype=jnp.float32"):
    tx_bad.update(_grads(0, w0), tx_bad.init(pa), pa)


def test_orbax_round_trip_params_and_state(tmp_path):
  w0 = _params()
  tx = optim.eco_adamw(1e-3, quantizer=INT4, key=5)
  p = optim.quantize_params(w0, INT4)
  s = tx.init(p)
  step = _step_fn(tx)
  for i in range(3):
    p, s = step(p, s, _grads(i, w0))
  tree = {"params": p, "opt_state": s}
  ckpt = ocp.StandardCheckpointer()
  path = tmp_path / "ckpt"
  ckpt.save(path, tree)
  ckpt.wait_until_finished()
  abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, tree)
  back = ckpt.restore(path, abstract)
  ckpt.close()
  assert isinstance(back["opt_state"], optim.EcoAdamWState)
  assert jax.tree.structure(back) == jax.tree.structure(tree)
  jax.tree.map(np.testing.assert_array_equal, back, tree)
  # Training continues identically from the restored copy.
  p1, _ = step(p, s, _grads(9, w0))
  p2, _ = step(back["params"], back["opt_state"], _grads(9, w0))
  jax.tree.map(np.testing.assert_array_equal, p1, p2)


def test_static_bytes_counts_real_storage():
  w = {"w": jnp.zeros((64, 48)), "b": jnp.zeros(48)}
  fp8 = optim.quantize_params(w, FP8_ROW)
  int4 = optim.quantize_params(w, INT4)
  assert optim.static_bytes(fp8) == 64 * 48 + 48 * 4 + 48 * 4   # codes + row scales + f32 bias
  assert optim.static_bytes(int4) == 64 * 48 // 2 + 48 * 2 * 4 + 48 * 4
  tx = optim.eco_adamw(1e-3, quantizer=FP8_ROW)
  st = tx.init(fp8)
  # count, mu, nu, raw key, skipped counter, landing fingerprint, misplaced counter
  assert optim.static_bytes(st) == 4 + 2 * 4 * (64 * 48 + 48) + 8 + 4 + 4 + 4
  assert optim.static_bytes(optim.exact_ef_adamw(1e-3, quantizer=FP8_ROW).init(fp8)) == (
      optim.static_bytes(st) + 4 * (64 * 48 + 48))


def test_fake_quant_params_straight_through():
  w = _params()
  f = lambda x: jnp.sum(optim.fake_quant_params(x, FP8_ROW)["w"] ** 2)
  g = jax.grad(f)(w)
  wq = optim.dequantize_params(optim.quantize_params(w, FP8_ROW))["w"]
  np.testing.assert_allclose(g["w"], 2 * wq, rtol=1e-6)
