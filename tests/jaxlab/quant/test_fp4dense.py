"""FP4Dense: FP4 weights held as codes + scales, multiplied by the FP4 kernels.

The stated tolerance. The served model (FP4Dense, `fp4.dequant_matmul`) and the
fake-quant model (QDense with W = NVFP4/MixFP4 weights, 16-bit activations)
multiply the same activations by the same FP4 weights: both round a weight
exactly as `jaxlab.formats` does, and a dequantized weight is
(element x block scale) x S_dec, where element x block scale is exact in
float32 (at most 3 + 4 significant bits). The paths differ only in float32
rounding: fake quantization rounds each weight once after the x S_dec and
sums K products in XLA's order; the kernel sums the K exact products in its
own order (two half-dots per K chunk, chunks into an f32 accumulator) and
rounds once after x S_dec. With u = 2^-24 and the summation bound
|fl(sum) - sum| <= K u sum|terms| (to first order), one layer's two outputs
differ by at most 2 (K + 1) u (|x| @ |W|), elementwise: `layer_bound`, checked
as such for single layers. Through the LM we take that bound relative to the
output scale and add it over the quantized layers of the longest chain (per
block v -> o and gate/up -> down: 4), i.e. a propagation gain of one per layer:
  tol = 4 * num_layers * 2 (K_max + 1) u * max|logits|.
That is the tolerance of the logits test; it is stated, not fitted, and the
test also checks that it is far below what quantization itself changes.
"""

import dataclasses
import re

import flax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab import formats
from jaxlab.nn import Transformer, TransformerConfig, stack_block_params
from jaxlab.quant import (
    FP4Dense,
    QDense,
    QuantPolicy,
    fp4_dense_factory,
    fp4_weight_bytes,
    qdense_factory,
    quantize_dense_params,
    quantize_weight,
)
from pallas_kernels import fp4

U = 2.0 ** -24  # float32 unit roundoff
CFG = TransformerConfig(d_model=32, num_layers=2, num_heads=4, num_kv_heads=2, d_ff=64)
K_MAX = max(CFG.d_model, CFG.d_ff)
CHAIN = 4 * CFG.num_layers  # quantized layers on the longest chain: v, o, up (gate), down
LM_RTOL = CHAIN * 2 * (K_MAX + 1) * U
TOKENS = jax.random.randint(jax.random.key(1), (2, 8), 0, CFG.vocab_size)


def layer_bound(x, w_hat):
  """2 (K + 1) u (|x| @ |W|): the float32 rounding gap of two summation orders of x @ W."""
  k = x.shape[-1]
  return 2 * (k + 1) * U * (np.abs(np.asarray(x, np.float64)) @ np.abs(np.asarray(w_hat,
                                                                                   np.float64)))


@pytest.fixture(scope="module")
def float_params():
  return Transformer(CFG).init(jax.random.key(0), TOKENS)["params"]


@pytest.fixture(scope="module")
def fake_quant_logits(float_params):
  """fmt -> the fake-quant model's logits (QDense: W in `fmt`, activations unquantized)."""
  cache = {}

  def logits(fmt):
    if fmt not in cache:
      policy = QuantPolicy(w_bits=4, a_bits=16, fmt=fmt)
      model = Transformer(dataclasses.replace(CFG, dense=qdense_factory(policy)))
      cache[fmt] = model.apply({"params": float_params}, TOKENS)
    return cache[fmt]
  return logits


def _modules(tree, path=()):
  """(path, dict) of every module dict holding parameters directly."""
  leaves = {k: v for k, v in tree.items() if not isinstance(v, dict)}
  out = [("/".join(path), leaves)] if leaves else []
  for k, v in tree.items():
    if isinstance(v, dict):
      out += _modules(v, path + (k,))
  return out


@pytest.mark.parametrize("fmt", ["nvfp4", "mixfp4"])
def test_tiny_lm_served_through_the_kernel_equals_fake_quant(fmt, float_params,
                                                            fake_quant_logits):
  served = quantize_dense_params(float_params, fmt)
  # The parameters hold codes + scales, not floats: every projection of the blocks is
  # {codes uint8 [F, K/2], scales uint8 [F, K/16], tensor_scale float32 []}; only the
  # embedding, the norms and the (full-precision) LM head keep float leaves.
  fp4_bytes = expected_bytes = 0
  quantized = []
  for path, leaves in _modules(served):
    if path.split("/")[-1] in ("q", "k", "v", "o", "gate", "up", "down"):
      quantized.append(path)
      assert sorted(leaves) == ["codes", "scales", "tensor_scale"], path
      codes, scales, ts = leaves["codes"], leaves["scales"], leaves["tensor_scale"]
      f, k = codes.shape[0], 2 * codes.shape[1]
      assert codes.dtype == scales.dtype == jnp.uint8 and scales.shape == (f, k // 16)
      assert ts.dtype == jnp.float32 and ts.shape == ()
      fp4_bytes += codes.nbytes + scales.nbytes + ts.nbytes
      expected_bytes += fp4_weight_bytes(k, f, fmt)
    else:
      assert path in ("embed", "lm_head", "final_norm") or path.endswith("_norm"), path
      assert "codes" not in leaves
  assert len(quantized) == 7 * CFG.num_layers  # q, k, v, o, gate, up, down per block
  # The stated weight bytes: K F / 2 + K F / 16 + 4 per projection (4.5 bits per weight).
  n_weights = CFG.num_layers * (2 * CFG.d_model ** 2 + 2 * CFG.d_model * CFG.d_model // 2
                                + 3 * CFG.d_model * CFG.d_ff)
  assert fp4_bytes == expected_bytes == n_weights * 4.5 / 8 + 4 * len(quantized)

  # The logits through the Pallas kernel (asked for by name: on CPU the interpreter runs it).
  model = Transformer(dataclasses.replace(CFG, dense=fp4_dense_factory(fmt,
                                                                       implementation="pallas")))
  jaxpr = str(jax.make_jaxpr(lambda p: model.apply({"params": p}, TOKENS))(served))
  # One call of the jitted Pallas path per projection (its body, a pallas_call of the
  # kernel, is printed once per distinct shape).
  assert len(re.findall(r"name=_dequant_matmul_pallas\b", jaxpr)) == len(quantized)
  assert "name=jaxlab_fp4_dequant_matmul" in jaxpr
  logits = jax.jit(model.apply)({"params": served}, TOKENS)
  want = fake_quant_logits(fmt)
  tol = LM_RTOL * float(jnp.max(jnp.abs(want)))
  gap = float(jnp.max(jnp.abs(logits - want)))
  assert gap <= tol, f"max |served - fake quant| = {gap:.3g} > stated tolerance {tol:.3g}"
  # The tolerance is far below what FP4 rounding changes: it could not hide a float weight.
  full = Transformer(CFG).apply({"params": float_params}, TOKENS)
  assert float(jnp.max(jnp.abs(full - want))) > 100 * tol


def test_nvfp4_and_mixfp4_logits_differ_by_more_than_the_tolerance(fake_quant_logits):
  # MixFP4 rounds other blocks than NVFP4 (E1M2 where it fits better): a path that ignored the
  # format flag would not pass both logits tests.
  a, b = fake_quant_logits("nvfp4"), fake_quant_logits("mixfp4")
  assert float(jnp.max(jnp.abs(a - b))) > 100 * LM_RTOL * float(jnp.max(jnp.abs(a)))


@pytest.mark.parametrize("fmt,impl", [("nvfp4", "xla"), ("mixfp4", "pallas"), ("mxfp4", "xla"),
                                      ("nvfp4", "scaled_matmul"), ("mxfp4", "scaled_matmul")])
def test_fp4dense_layer_within_the_rounding_bound_of_qdense(fmt, impl):
  x = jax.random.normal(jax.random.key(2), (3, 5, 64))
  w = jax.random.normal(jax.random.key(3), (64, 48)) * 0.2
  layer = FP4Dense(48, fmt=fmt, implementation=impl)
  if impl == "scaled_matmul" and not fp4.scaled_matmul_available():
    with pytest.raises(ValueError, match="does not lower"):  # jax 0.10 on CPU
      layer.apply({"params": quantize_weight(w, fmt)}, x)
    return
  y = layer.apply({"params": quantize_weight(w, fmt)}, x)
  q = QDense(48, policy=QuantPolicy(w_bits=4, a_bits=16, fmt=fmt))
  want = q.apply({"params": {"kernel": w}}, x)
  w_hat = formats.dequantize(formats.quantize(w, fmt, axis=0))
  assert y.shape == want.shape == (3, 5, 48) and y.dtype == jnp.float32
  assert np.all(np.abs(np.asarray(y) - np.asarray(want)) <= layer_bound(x, w_hat))
  assert float(jnp.max(jnp.abs(y - x @ w))) > 1e-2  # the weights were quantized


def test_scan_layout_params_serve_the_same_logits(float_params, fake_quant_logits):
  # `scan_layers=True`: the stacked kernels are quantized layer by layer (default backend).
  scan_cfg = dataclasses.replace(CFG, scan_layers=True, dense=fp4_dense_factory("nvfp4"))
  scanned = quantize_dense_params(stack_block_params(float_params, CFG.num_layers), "nvfp4")
  assert scanned["blocks"]["mlp"]["up"]["codes"].shape == (CFG.num_layers, CFG.d_ff,
                                                           CFG.d_model // 2)
  out = Transformer(scan_cfg).apply({"params": scanned}, TOKENS)
  want = fake_quant_logits("nvfp4")
  np.testing.assert_allclose(np.asarray(out), np.asarray(want), rtol=0,
                             atol=LM_RTOL * float(jnp.max(jnp.abs(want))))


def test_fp4dense_init_and_errors():
  layer = FP4Dense(16, fmt="nvfp4")
  params = layer.init(jax.random.key(0), jnp.ones((2, 32)))["params"]
  assert {k: v.dtype for k, v in params.items()} == {
      "codes": jnp.uint8, "scales": jnp.uint8, "tensor_scale": jnp.float32}
  with pytest.raises(ValueError, match="fmt must be one of"):
    FP4Dense(16, fmt="int4_g16").init(jax.random.key(0), jnp.ones((2, 32)))
  with pytest.raises(ValueError, match="multiple of the block|divisible"):
    layer.init(jax.random.key(0), jnp.ones((2, 40)))  # K = 40: not whole 16-blocks
  with pytest.raises(flax.errors.ScopeParamShapeError):  # params of K = 32, an input of K = 64
    layer.apply({"params": params}, jnp.ones((2, 64)))
  with pytest.raises(ValueError, match="not a bias-free Dense"):
    quantize_dense_params({"up": {"kernel": jnp.ones((32, 8)), "bias": jnp.ones(8)}}, "nvfp4")


@pytest.mark.parametrize("platform,marker", [("tpu", "tpu_custom_call"), ("cuda", "mosaic_gpu")])
def test_served_lm_lowers_to_one_kernel_per_projection(platform, marker):
  # Lowered from this CPU host, never run: the model path reaches the compiled kernel on each
  # accelerator. bfloat16 activations and K, N multiples of 256 and 64, as Mosaic GPU needs.
  cfg = dataclasses.replace(CFG, d_model=256, d_ff=512, dtype=jnp.bfloat16,
                            dense=fp4_dense_factory("mixfp4", platform=platform))
  model = Transformer(cfg)
  params = jax.eval_shape(lambda: quantize_dense_params(
      Transformer(dataclasses.replace(CFG, d_model=256, d_ff=512)).init(
          jax.random.key(0), TOKENS)["params"], "mixfp4"))
  text = jax.jit(lambda p, t: model.apply({"params": p}, t)).trace(params, TOKENS).lower(
      lowering_platforms=(platform,)).as_text()
  assert "triton" not in text.lower() and marker in text
  # Each projection calls the kernel's function (one body per distinct shape, with its kernel).
  assert len(re.findall(r"call @_dequant_matmul_pallas", text)) == 7 * CFG.num_layers
  assert len(re.findall(rf"custom_call @{marker}", text)) == len(
      set(re.findall(r"func.func private @(_dequant_matmul_pallas\w*)", text)))
