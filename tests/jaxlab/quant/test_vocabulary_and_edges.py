"""quant speaks jaxlab.formats' presets; NaN/Inf rule, tiny groups, bool and override-typo errors.

Each regression test names the finding it pins (issues 15 item 4 and 17 "Also"); each failed
on the code before: fake_quant had its own ("int", "fp4") table, one NaN made its whole group
NaN, a group of magnitude ~1e-38 gave NaN, `group_size=True` meant 1, and an override path
with a typo was silently ignored.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab import formats
from jaxlab.nn import Transformer, TransformerConfig
from jaxlab.quant import (
    QDense,
    QuantPolicy,
    QuantSpec,
    check_overrides,
    fake_quant,
    fake_quant_dynamic,
    qdense_factory,
    runtime_knobs,
)

CFG = dict(d_model=32, num_layers=1, num_heads=4, num_kv_heads=2, d_ff=64)


def test_preset_name_equals_formats_fake_quant():
  x = jax.random.normal(jax.random.key(0), (3, 64))
  for name in ("nvfp4", "int4_g32"):
    np.testing.assert_array_equal(fake_quant(x, fmt=name), formats.fake_quant(x, name))
  # The preset's own bits are accepted; >= 16 is full precision.
  np.testing.assert_array_equal(fake_quant(x, fmt="nvfp4", bits=4), formats.fake_quant(x, "nvfp4"))
  assert fake_quant(x, fmt="nvfp4", bits=16) is x
  # A Format object (a preset with other options) works too.
  f = formats.get_format("int4_g32", block_size=16)
  np.testing.assert_array_equal(fake_quant(x, fmt=f), formats.fake_quant(x, f))


def test_preset_misuse_is_a_clear_error():
  x = jnp.ones((2, 64))
  with pytest.raises(ValueError, match="group_size is fixed"):
    fake_quant(x, fmt="nvfp4", group_size=32)
  with pytest.raises(ValueError, match="bits=8 contradicts"):
    fake_quant(x, fmt="nvfp4", bits=8)
  with pytest.raises(ValueError, match="clip_logit"):
    fake_quant(x, fmt="nvfp4", clip_logit=jnp.zeros((4,)))
  with pytest.raises(ValueError, match="preset"):
    fake_quant(x, fmt="nvfp5", bits=4, group_size=16)
  with pytest.raises(ValueError, match="bits is required"):
    fake_quant(x, group_size=16)
  with pytest.raises(ValueError, match="group_size is required"):
    fake_quant(x, bits=4)


def test_policy_takes_preset_names():
  x = jax.random.normal(jax.random.key(1), (3, 32))
  policy = QuantPolicy(w_fmt="nvfp4", a_fmt="int4_g32")
  assert policy.name == "W[nvfp4]A[int4_g32]"
  layer = QDense(8, policy=policy)
  params = layer.init(jax.random.key(2), x)
  w = params["params"]["kernel"]
  want = formats.fake_quant(x, "int4_g32") @ formats.fake_quant(w.T, "nvfp4").T
  np.testing.assert_allclose(layer.apply(params, x), want, rtol=1e-6, atol=1e-6)
  # fmt sets both operands; an override switches one module to another preset by name.
  both = QuantPolicy(w_bits=8, a_bits=8, fmt="fp8_e4m3_row",
                     overrides={"mlp/down": {"a_fmt": "mxfp4", "a_bits": 4}})
  assert both.resolve("block_0/mlp/down").act_fmt == "mxfp4"
  assert both.resolve("block_0/mlp/up").act_fmt == "fp8_e4m3_row"
  # The parametric API is unchanged (README snippet).
  old = QuantPolicy(w_bits=4, a_bits=4, group_size=32, overrides={"mlp/down": {"a_bits": 8}})
  assert old.name == "W4A4 G32 +overrides"


def test_policy_preset_errors_name_the_argument():
  with pytest.raises(ValueError, match="w_bits=4 contradicts"):
    QuantPolicy(w_fmt="fp8_e4m3_row")
  with pytest.raises(ValueError, match="a_fmt"):
    QuantPolicy(a_fmt="int3")
  with pytest.raises(ValueError, match="lac"):
    QuantPolicy(a_fmt="nvfp4", act_quantizer="lac")
  with pytest.raises(ValueError, match="runtime_group_sizes"):
    QuantPolicy(w_fmt="nvfp4", runtime_group_sizes=(16,))
  with pytest.raises(ValueError, match=r"overrides\['mlp'\].*a_bits"):
    QuantPolicy(overrides={"mlp": {"a_bits": 5, "a_fmt": "nvfp4"}})
  # A preset block that does not divide K fails before any parameter exists.
  with pytest.raises(ValueError, match="block"):
    QDense(8, policy=QuantPolicy(group_size=8, a_fmt="nvfp4")).init(jax.random.key(0),
                                                                    jnp.ones((2, 24)))


def test_bools_are_refused_naming_the_argument():
  x = jnp.ones((2, 8))
  with pytest.raises(ValueError, match="group_size"):
    fake_quant(x, bits=4, group_size=True)
  with pytest.raises(ValueError, match="bits"):
    fake_quant(x, bits=True, group_size=4)
  with pytest.raises(ValueError, match="bits"):
    fake_quant(x, bits=4.0, group_size=4)
  for name in ("group_size", "w_group_size", "a_group_size"):
    with pytest.raises(ValueError, match=name):
      QuantSpec(**{name: True})
  for name in ("w_bits", "a_bits"):
    with pytest.raises(ValueError, match=name):
      QuantSpec(**{name: True})


def test_nan_stays_in_its_own_element():
  # Old code: the group's amax was NaN, so all four elements of group 0 became NaN.
  x = jnp.array([[0.8, jnp.nan, -0.31, 0.0, -4.0, 1.3, jnp.inf, 3.9]])
  got = fake_quant(x, bits=4, group_size=4)
  # Non-finite elements pass through; the others are quantized as if they were 0:
  # group 0 s = 0.8 / 8, group 1 s = 4 / 8 (the Inf does not set the scale).
  want = fake_quant(jnp.where(jnp.isfinite(x), x, 0.0), bits=4, group_size=4)
  np.testing.assert_array_equal(np.isnan(got), np.isnan(x))
  assert got[0, 6] == jnp.inf
  fin = np.isfinite(np.asarray(x))
  np.testing.assert_array_equal(np.asarray(got)[fin], np.asarray(want)[fin])
  np.testing.assert_allclose(got[0, [0, 2, 4, 5]], [0.7, -0.3, -4.0, 1.5], atol=1e-6)
  # The STE gradient stays finite for the finite elements and for a LAC clip.
  g = jax.grad(lambda v: jnp.nansum(jnp.where(jnp.isfinite(fake_quant(
      v, bits=4, group_size=4)), fake_quant(v, bits=4, group_size=4), 0.0)))(x)
  assert np.isfinite(np.asarray(g)).all()
  lg = jax.grad(lambda c: jnp.sum(jnp.where(fin, fake_quant(
      x, bits=4, group_size=4, clip_logit=c), 0.0)))(jnp.zeros((2,)))
  assert np.isfinite(np.asarray(lg)).all()
  # Same rule for the traced-G variant and for presets (formats stores NaN as 0; QAT must not).
  dyn = fake_quant_dynamic(x, bits=jnp.int32(4), group_size=jnp.int32(4), group_sizes=(4, 8))
  np.testing.assert_array_equal(dyn, got)
  xp = jnp.tile(x, (1, 4))
  gp = fake_quant(xp, fmt="nvfp4")
  np.testing.assert_array_equal(np.isnan(gp), np.isnan(xp))


def test_tiny_groups_have_no_nan_and_keep_precision_above_the_floor():
  # Old code: scale = 1e-38 / 8 is a denormal, flushed to 0 on CPU: x / 0 gave NaN.
  x = jnp.array([[1e-38, 5e-39, -1e-38, 2e-38]])
  got = fake_quant(x, bits=4, group_size=4)
  assert np.isfinite(np.asarray(got)).all()
  np.testing.assert_array_less(np.abs(np.asarray(got - x)), 2.0 ** -126 + 1e-45)
  # Just above the floor (amax >= 8 * 2^-126) relative precision is the usual INT4 one.
  y = jnp.array([[8e-37, -3e-37, 1e-37, 0.0]])
  np.testing.assert_allclose(fake_quant(y, bits=4, group_size=4),
                             fake_quant(y * 1e30, bits=4, group_size=4) / 1e30, rtol=1e-5)


def _model(policy, scan=False):
  return Transformer(TransformerConfig(**CFG, dense=qdense_factory(policy), scan_layers=scan))


def test_override_typo_is_an_error_at_apply():
  # Shapes only (jax.eval_shape): the check runs at trace time, no compile needed.
  tokens = jnp.zeros((2, 8), jnp.int32)
  init = lambda m: jax.eval_shape(m.init, jax.random.key(1), tokens)
  params = init(_model(QuantPolicy(group_size=16)))["params"]
  apply = lambda m: jax.eval_shape(m.apply, {"params": params}, tokens)
  typo = QuantPolicy(group_size=16, overrides={"mlp/donw": {"a_bits": 8}})
  with pytest.raises(ValueError, match=r"\['mlp/donw'\] match no Dense"):
    apply(_model(typo))
  with pytest.raises(ValueError, match="mlp/donw"):
    check_overrides(typo, params)
  good = QuantPolicy(group_size=16, overrides={"mlp/down": {"a_bits": 8}, "lm_head": {}})
  check_overrides(good, params)
  apply(_model(good))
  # Scanned blocks: the automatic check is skipped inside nn.scan; the explicit one works.
  sparams = init(_model(QuantPolicy(group_size=16), scan=True))
  check_overrides(good, sparams)
  with pytest.raises(ValueError, match="mlp/donw"):
    check_overrides(typo, sparams)


def test_runtime_knobs_rejects_override_typo():
  x = jnp.ones((3, 32))
  dyn = QDense(8, policy=QuantPolicy(group_size=8, runtime_group_sizes=(8, 32)),
               path_name="mlp/down")
  qat = dyn.init(jax.random.key(0), x)["qat"]
  runtime_knobs(QuantPolicy(group_size=8, overrides={"mlp/down": {"a_bits": 8}}), qat,
                prefix="mlp/down")
  with pytest.raises(ValueError, match="mlp/donw"):
    runtime_knobs(QuantPolicy(group_size=8, overrides={"mlp/donw": {"a_bits": 8}}), qat,
                  prefix="mlp/down")


def test_lac_init_is_checked_at_construction():
  # Old code: lac_init outside (0, 1) was accepted here and only failed at init/apply.
  for bad in (1.5, 0.0, 1.0, -0.2, float("nan")):
    with pytest.raises(ValueError, match="lac_init must be a float in"):
      QuantPolicy(act_quantizer="lac", lac_init=bad, group_size=None)
  with pytest.raises(ValueError, match=r"overrides\['mlp'\]: lac_init"):
    QuantPolicy(act_quantizer="lac", group_size=None, overrides={"mlp": {"lac_init": 1.5}})
  assert QuantPolicy(act_quantizer="lac", lac_init=0.5, group_size=None).lac_init == 0.5
