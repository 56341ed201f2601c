"""optim.Quantizer: by-name construction from jaxlab.formats presets, edge rules."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.optim import Quantizer


def test_preset_names_equal_family_spelling():
  assert Quantizer("fp8_e4m3_row") == Quantizer("fp8_e4m3", granularity="row")
  assert Quantizer("int4_g32") == Quantizer("int4", block_size=32)
  assert Quantizer("fp8_e4m3") == Quantizer("fp8_e4m3", granularity="tensor")
  x = jax.random.normal(jax.random.key(0), (64, 8))
  a, b = Quantizer("fp8_e4m3_row"), Quantizer("fp8_e4m3", granularity="row")
  np.testing.assert_array_equal(a.dequantize(a.quantize(x)), b.dequantize(b.quantize(x)))
  with pytest.raises(ValueError, match="no float32-scale storage"):
    Quantizer("nvfp4")


def test_block_size_bool_rejected():
  with pytest.raises(ValueError, match="block_size"):
    Quantizer("int4", block_size=True)


@pytest.mark.parametrize("q", [Quantizer("fp8_e4m3_row"), Quantizer("int4_g32"),
                               Quantizer("grid", step=0.5)])
def test_nonfinite_rule_and_tiny(q):
  # The jaxlab.formats rule: NaN -> 0, ±Inf saturates, other entries unaffected.
  x = jnp.ones((32, 4)).at[0, 0].set(jnp.nan).at[1, 0].set(jnp.inf).at[2, 0].set(-jnp.inf)
  d = np.asarray(q.dequantize(q.quantize(x)))
  assert np.all(np.isfinite(d)) and d[0, 0] == 0.0
  assert d[1, 0] > 0 and d[2, 0] < 0 and d[1, 0] == -d[2, 0]
  np.testing.assert_allclose(d[3:, 1:], 1.0, rtol=0.07)
  if q.name != "grid":  # regression (issue 17): tiny tensors used to decode to zeros (fp8)
    t = jax.random.normal(jax.random.key(1), (32, 4)) * 1e-36
    dt = np.asarray(q.dequantize(q.quantize(t)), np.float64)
    ts = np.asarray(t, np.float64)
    assert np.linalg.norm(dt - ts) / np.linalg.norm(ts) < 0.2


def test_preset_name_refuses_conflicting_options():
  # Old code: the preset silently won (block_size 32, granularity "row").
  with pytest.raises(ValueError, match=r"block_size=128 contradicts the preset 'int4_g32'"):
    Quantizer("int4_g32", block_size=128)
  with pytest.raises(ValueError, match=r"granularity='tensor' contradicts the preset"):
    Quantizer("fp8_e4m3_row", granularity="tensor")
  # A value equal to the preset's is fine; family names keep their defaults.
  assert Quantizer("int4_g32", block_size=32) == Quantizer("int4_g32")
  assert Quantizer("fp8_e4m3_row", granularity="row") == Quantizer("fp8_e4m3_row")
  q = Quantizer("int4")
  assert (q.granularity, q.block_size) == ("tensor", 32)


@pytest.mark.parametrize("step", [float("inf"), float("nan"), 1e39, 1e-45, 1e-39, 2.0 ** 98,
                                  0.0, -1.0])
def test_grid_step_must_be_normal_in_float32(step):
  # Old code: inf / 1e39 dequantized to NaN, 1e-45 turned 1.0 into 0.
  with pytest.raises(ValueError, match="step must be a number in"):
    Quantizer("grid", step=step)


def test_grid_extreme_steps_round_trip():
  for step in (2.0 ** -126, 2.0 ** 97):
    q = Quantizer("grid", step=step)
    x = jnp.array([0.0, step, -3 * step, 3.4e38])
    d = np.asarray(q.dequantize(q.quantize(x)))
    assert np.isfinite(d).all()
    np.testing.assert_array_equal(d[:3], np.asarray(x[:3]))
