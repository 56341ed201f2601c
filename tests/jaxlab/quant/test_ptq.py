"""`jaxlab.quant.ptq` (post-training quantization with format presets) and `QDense`'s
per-token activation scale."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab import formats
from jaxlab.quant import QDense, QuantSpec, ptq


def test_activation_policy_layer_is_the_fake_quantized_input_times_the_kernel():
  # W16A[fmt]: the input quantize-dequantized in fmt's blocks along K, the kernel as given.
  x = jax.random.normal(jax.random.key(0), (2, 4, 32))
  kernel = jax.random.normal(jax.random.key(1), (32, 8))
  for fmt in ("nvfp4", "mixfp4"):
    for scale in ("tensor", "token"):
      layer = QDense(8, policy=ptq.activation_policy(fmt, act_scale=scale))
      y = jax.jit(layer.apply)({"params": {"kernel": kernel}}, x)
      if scale == "tensor":
        xq = formats.fake_quant(x, fmt, axis=-1)
      else:
        xq = jnp.stack([formats.fake_quant(r[None], fmt, axis=-1)[0]
                        for r in x.reshape(-1, 32)]).reshape(x.shape)
      np.testing.assert_array_equal(y, jax.jit(jnp.dot)(xq, kernel))


def test_token_scale_makes_a_row_independent_of_its_batch():
  # act_scale="token": a token's quantized input (hence its output) does not depend on the
  # other rows of the batch; "tensor" (the default) shares one NVFP4 tensor scale across them.
  x = jax.random.normal(jax.random.key(0), (2, 4, 32))
  loud = x.at[1].multiply(1e5)  # row 1's amax drives row 0's block scales into E4M3 subnormals
  params = {"params": {"kernel": jax.random.normal(jax.random.key(1), (32, 8))}}
  for scale, same in (("token", True), ("tensor", False)):
    apply = jax.jit(QDense(8, policy=ptq.activation_policy("nvfp4", act_scale=scale)).apply)
    y0, y1 = apply(params, x)[0], apply(params, loud)[0]
    assert bool(jnp.array_equal(y0, y1)) == same, scale
  with pytest.raises(ValueError, match="act_scale"):
    QuantSpec(a_fmt="nvfp4", act_scale="row")


def test_fake_quant_kernels_and_bad_names():
  params = {"q": {"kernel": jnp.linspace(-1.0, 1.0, 64).reshape(16, 4)},
            "norm": {"scale": jnp.linspace(0.1, 1.0, 16)},
            "lm_head": {"kernel": jnp.linspace(-0.7, 0.9, 64).reshape(16, 4)}}
  out = ptq.fake_quant_kernels(params, "nvfp4")
  np.testing.assert_array_equal(out["q"]["kernel"],
                                formats.fake_quant(params["q"]["kernel"], "nvfp4", axis=0))
  np.testing.assert_array_equal(out["norm"]["scale"], params["norm"]["scale"])
  np.testing.assert_array_equal(out["lm_head"]["kernel"], params["lm_head"]["kernel"])
  head = ptq.fake_quant_kernels(params, "nvfp4", quantize_lm_head=True)["lm_head"]["kernel"]
  assert not np.array_equal(head, params["lm_head"]["kernel"])
  with pytest.raises(ValueError, match="fmt"):
    ptq.fake_quant_kernels(params, "nvfp5")
  with pytest.raises(ValueError, match="dist"):
    ptq.synthetic_tensor("cauchy", jax.random.key(0), (2, 2))


def test_error_table_totals_match_format_error_per_tensor():
  xs = [ptq.synthetic_tensor(d, jax.random.key(i), (8, 64))
        for i, d in enumerate(ptq.DISTRIBUTIONS)] + [jnp.ones((4, 32))]
  table = ptq.error_table(xs, ("nvfp4", "mixfp4"))
  for name in ("nvfp4", "mixfp4"):
    each = [ptq.format_error(x, name) for x in xs]
    err, sig = sum(e["sum_sq_err"] for e in each), sum(e["sum_sq"] for e in each)
    assert table[name]["sqnr_db"] == pytest.approx(10 * np.log10(sig / err), rel=1e-5)
    assert table[name]["mse"] == pytest.approx(err / sum(x.size for x in xs), rel=1e-5)
  assert table["mixfp4"]["sqnr_db"] >= table["nvfp4"]["sqnr_db"]
  assert 0.0 < table["mixfp4"]["e1m2_share"] < 1.0 and table["nvfp4"]["e1m2_share"] == 0.0
