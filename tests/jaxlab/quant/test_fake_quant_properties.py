"""Property tests (hypothesis): the parametric QAT grids and every jaxlab.formats preset.

Random shapes, float32/bfloat16, values with NaN, +-Inf, denormals, zeros and extreme
magnitudes. Properties: shape/dtype kept; non-finite elements pass through unchanged and do
not change any other element; finite elements give finite values within the family's bound.
"""

import jax.numpy as jnp
import ml_dtypes
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxlab import formats
from jaxlab.quant import fake_quant

_SPECIAL = [0.0, -0.0, np.nan, np.inf, -np.inf, 1e-40, -1e-45, 1.2e-38, 3e38, -3.3e38, 1e-30]


@st.composite
def _arrays(draw, k_choices):
  rows = draw(st.integers(1, 3))
  k = draw(st.sampled_from(k_choices))
  dtype = draw(st.sampled_from([np.float32, ml_dtypes.bfloat16]))
  scale = draw(st.sampled_from([1e-37, 1e-3, 1.0, 1e4, 1e36]))
  seed = draw(st.integers(0, 2**31 - 1))
  rng = np.random.default_rng(seed)
  x = (rng.standard_normal((rows, k)) * scale).astype(np.float32)
  n_special = draw(st.integers(0, 4))
  for _ in range(n_special):
    x[rng.integers(rows), rng.integers(k)] = _SPECIAL[rng.integers(len(_SPECIAL))]
  return x.astype(dtype)


def _check_rule(x, out, fq):
  x32 = np.asarray(x, np.float32)
  o32 = np.asarray(out, np.float32)
  assert out.shape == x.shape and out.dtype == x.dtype
  bad = ~np.isfinite(x32)
  # Non-finite elements pass through unchanged (NaN stays NaN: never a silent zero).
  np.testing.assert_array_equal(np.isnan(o32), np.isnan(x32))
  np.testing.assert_array_equal(o32[bad & ~np.isnan(x32)], x32[bad & ~np.isnan(x32)])
  assert np.isfinite(o32[~bad]).all()
  # ...and change nothing else: same as with those elements set to 0.
  if bad.any():
    clean = np.asarray(fq(jnp.asarray(np.where(bad, 0, x32).astype(x.dtype))), np.float32)
    np.testing.assert_array_equal(o32[~bad], clean[~bad])


@settings(max_examples=25, deadline=None)
@given(x=_arrays((8, 32, 64)), bits=st.sampled_from([2, 4, 8]),
       g=st.sampled_from([8, None]), fmt=st.sampled_from(["int", "fp4"]),
       absmax_m=st.sampled_from(["paper", "qmax"]))
def test_grid_families(x, bits, g, fmt, absmax_m):
  bits = 4 if fmt == "fp4" else bits
  fq = lambda v: fake_quant(v, bits=bits, group_size=g, fmt=fmt, absmax_m=absmax_m)
  out = fq(jnp.asarray(x))
  _check_rule(x, out, fq)
  # Error bound per group: one grid step of the scale s = max(finite amax / M, 2^-126)
  # (INT: rounding <= s/2, the paper's +M -> 2^(b-1)-1 clip = s; E2M1: half its widest
  # gap 2 = s), plus the output cast to x's dtype (half an ulp, relative).
  x32 = np.asarray(x, np.float32)
  k = x32.shape[-1]
  gs = k if g is None else g
  m = 6.0 if fmt == "fp4" else (2.0 ** (bits - 1) if absmax_m == "paper" else 2.0 ** (bits - 1) - 1)
  fin = np.where(np.isfinite(x32), x32, 0.0)
  amax = np.abs(fin).reshape(*x32.shape[:-1], k // gs, gs).max(-1, keepdims=True)
  s = np.maximum(amax / m, 2.0 ** -126)
  s = np.broadcast_to(s, (*x32.shape[:-1], k // gs, gs)).reshape(x32.shape)
  eps = 2.0 ** -8 if x.dtype == ml_dtypes.bfloat16 else 2.0 ** -23
  err = np.abs(np.asarray(out, np.float32) - fin)[np.isfinite(x32)]
  bound = (s * (1 + 1e-6) + np.abs(fin) * eps + 1e-45)[np.isfinite(x32)]
  assert (err <= bound).all(), (err - bound).max()


@settings(max_examples=25, deadline=None)
@given(x=_arrays((64, 128)), name=st.sampled_from(sorted(formats.PRESETS)))
def test_presets(x, name):
  fq = lambda v: fake_quant(v, fmt=name)
  out = fq(jnp.asarray(x))
  _check_rule(x, out, fq)
  # Finite elements: exactly jaxlab.formats' fake quantization of x with its non-finite
  # elements at 0 (formats turns a whole block holding one into NaN, the stored-weight
  # rule; QAT keeps it in its own element; formats' bounds are tested in tests/jaxlab/formats).
  fin = np.isfinite(np.asarray(x, np.float32))
  want = np.asarray(formats.fake_quant(jnp.where(fin, jnp.asarray(x), 0.0), name), np.float32)
  np.testing.assert_array_equal(np.asarray(out, np.float32)[fin], want[fin])
