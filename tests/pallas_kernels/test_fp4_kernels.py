"""FP4 Pallas kernels vs their jnp references (interpret mode), dispatch, and cross-lowering.

Every kernel test asks for the kernel by name (`implementation="pallas"`): on
CPU `implementation=None` is the XLA reference itself.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab import formats
from pallas_kernels import fp4
from pallas_kernels._common import interpret_default


def _special_input():
  x = np.array(jax.random.normal(jax.random.key(0), (32, 256)), np.float32)
  x[1, :16] = 0.0
  x[2, :16] = [.25, .75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0] * 2  # E2M1 ties (block amax 6)
  x[3, 5], x[3, 40], x[4, 0] = np.inf, -np.inf, np.nan
  x[5] *= 1e-4
  x[6, :16] = np.arange(-7, 9)  # an integer-friendly (E1M2) block
  return x


def _assert_qarray_equal(a, b):
  assert a.fmt == b.fmt and a.shape == b.shape and a.axis == b.axis
  for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
    np.testing.assert_array_equal(np.asarray(u), np.asarray(v))


def test_interpret_default_on_cpu():
  assert jax.default_backend() != "cpu" or interpret_default()


@pytest.mark.parametrize("fmt", ["nvfp4", "mixfp4"])
@pytest.mark.parametrize("block", [fp4.QuantizeBlockSizes(16, None),
                                   fp4.QuantizeBlockSizes(8, 64)], ids=["fullrow", "tiled"])
def test_quantize_kernel_bit_exact(fmt, block):
  x = jnp.asarray(_special_input())
  got = fp4.quantize(x, fmt, block=block, implementation="pallas")
  _assert_qarray_equal(got, fp4.quantize_reference(x, fmt))
  if fmt == "mixfp4":
    assert 0.1 < float(got.e1m2_fraction()) < 0.9
  np.testing.assert_array_equal(np.asarray(formats.dequantize(got)),
                                np.asarray(formats.dequantize(formats.quantize(x, fmt))))


@pytest.mark.slow
def test_quantize_kernel_bf16_and_xla_switch():
  x = jax.random.normal(jax.random.key(1), (16, 128)).astype(jnp.bfloat16)
  _assert_qarray_equal(fp4.quantize(x, "mixfp4", implementation="pallas"),
                       fp4.quantize(x, "mixfp4", implementation="xla"))


@pytest.mark.parametrize("fmt", ["nvfp4", "mixfp4"])
def test_dequant_matmul_matches_reference(fmt):
  x = jax.random.normal(jax.random.key(2), (32, 256))
  w = jax.random.normal(jax.random.key(3), (256, 64)) * 0.1
  wq = formats.quantize(w, fmt, axis=0)
  ref = fp4.dequant_matmul_reference(x, wq)
  # Tiles: (m 16, n 64 = full N, K in one chunk) for nvfp4; a 4 x 2 x 4 grid
  # (4 K steps through the VMEM accumulator) for mixfp4.
  block = fp4.MatmulBlockSizes() if fmt == "nvfp4" else fp4.MatmulBlockSizes(m=8, n=32, k=64)
  out = fp4.dequant_matmul(x, wq, block=block, implementation="pallas")
  assert out.shape == (32, 64) and out.dtype == jnp.float32
  np.testing.assert_allclose(np.asarray(out), np.asarray(ref), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("impl", ["pallas", "triton"])
def test_dequant_matmul_pads_rows_the_m_tile_does_not_divide(impl):
  """20 rows with the default m = 16 tile (before, a ValueError for any m not a multiple of 16)."""
  x = jax.random.normal(jax.random.key(2), (20, 64))
  wq = formats.quantize(jax.random.normal(jax.random.key(3), (64, 32)), "nvfp4", axis=0)
  out = fp4.dequant_matmul(x, wq, implementation=impl, interpret=True)
  assert out.shape == (20, 32)
  np.testing.assert_allclose(np.asarray(out), np.asarray(fp4.dequant_matmul_reference(x, wq)),
                             rtol=1e-5, atol=1e-5)


def test_dequant_matmul_triton_variant_interpreted():
  # The Triton body (K looped in the program) run by the interpreter.
  x = jax.random.normal(jax.random.key(2), (16, 256))
  wq = formats.quantize(jax.random.normal(jax.random.key(3), (256, 32)), "mixfp4", axis=0)
  out = fp4.dequant_matmul(x, wq, block=fp4.MatmulBlockSizes(m=8, n=32, k=64),
                           implementation="triton", interpret=True)
  np.testing.assert_allclose(np.asarray(out), np.asarray(fp4.dequant_matmul_reference(x, wq)),
                             rtol=1e-5, atol=1e-5)


def _has_pallas_call(f, *args):
  return "pallas_call" in str(jax.make_jaxpr(f)(*args))


def test_dispatch_none_is_xla_on_cpu_and_interpret_only_when_asked():
  if jax.default_backend() != "cpu":
    pytest.skip("CPU dispatch")
  x = jax.random.normal(jax.random.key(2), (16, 64))
  wq = formats.quantize(jax.random.normal(jax.random.key(3), (64, 32)), "nvfp4", axis=0)
  assert not _has_pallas_call(lambda v: fp4.dequant_matmul(v, wq), x)
  assert not _has_pallas_call(lambda v: fp4.quantize(v, "nvfp4").codes, x)
  for kw in (dict(implementation="pallas"), dict(interpret=True)):
    assert _has_pallas_call(lambda v, kw=kw: fp4.dequant_matmul(v, wq, **kw), x)
    assert _has_pallas_call(lambda v, kw=kw: fp4.quantize(v, "nvfp4", **kw).codes, x)
  # The XLA path is the (jitted) reference, bit for bit.
  np.testing.assert_array_equal(np.asarray(fp4.dequant_matmul(x, wq)),
                                np.asarray(jax.jit(fp4.dequant_matmul_reference)(x, wq)))


@pytest.mark.slow
def test_dequant_matmul_bf16_activations():
  x = jax.random.normal(jax.random.key(2), (32, 256)).astype(jnp.bfloat16)
  wq = formats.quantize(jax.random.normal(jax.random.key(3), (256, 64)), "mixfp4", axis=0)
  np.testing.assert_allclose(np.asarray(fp4.dequant_matmul(x, wq, implementation="pallas")),
                             np.asarray(fp4.dequant_matmul_reference(x, wq)), rtol=1e-5, atol=1e-5)


def test_dequant_matmul_grad_matches_reference():
  x = jax.random.normal(jax.random.key(4), (16, 128))
  wq = formats.quantize(jax.random.normal(jax.random.key(5), (128, 32)), "mixfp4", axis=0)
  g = jax.grad(lambda v: jnp.sum(fp4.dequant_matmul(v, wq, implementation="pallas") ** 2))(x)
  gr = jax.grad(lambda v: jnp.sum(fp4.dequant_matmul_reference(v, wq) ** 2))(x)
  np.testing.assert_allclose(np.asarray(g), np.asarray(gr), rtol=1e-4, atol=1e-4)


def test_kernel_errors():
  x = jnp.ones((16, 64))
  with pytest.raises(ValueError, match="fmt must be one of"):
    fp4.quantize(x, "mxfp4")
  with pytest.raises(ValueError, match="multiple of 16"):
    fp4.quantize(jnp.ones((16, 40)), "nvfp4")
  with pytest.raises(ValueError, match="must divide"):
    fp4.quantize(jnp.ones((12, 64)), "nvfp4", block=fp4.QuantizeBlockSizes(8, None),
                 implementation="pallas")
  with pytest.raises(ValueError, match="implementation must be one of"):
    fp4.quantize(x, "nvfp4", implementation="cuda")
  with pytest.raises(ValueError, match="not available"):
    fp4.quantize(x, "nvfp4", implementation="mosaic_gpu")
  wq_rows = formats.quantize(jnp.ones((64, 32)), "nvfp4", axis=1)
  with pytest.raises(ValueError, match="along axis 0"):
    fp4.dequant_matmul(x, wq_rows)
  with pytest.raises(ValueError, match="x must be"):
    fp4.dequant_matmul(jnp.ones((16, 32)), formats.quantize(jnp.ones((64, 32)), "nvfp4", axis=0))


@pytest.mark.parametrize("platform,impl,marker", [("tpu", None, "tpu_custom_call"),
                                                  ("cuda", "triton", "triton")])
def test_kernels_lower_for_tpu_and_gpu_from_cpu(platform, impl, marker, lowering_target):
  # implementation=None on a TPU target is the Mosaic TPU kernel (best backend).
  xs = jax.ShapeDtypeStruct((32, 512), jnp.float32)
  kw = dict(implementation=impl, interpret=False, platform=platform)
  for fmt in ("nvfp4", "mixfp4"):
    wq = formats.quantize(jnp.ones((512, 128)), fmt, axis=0)
    with lowering_target(platform):
      low = jax.jit(lambda x, f=fmt: fp4.quantize(x, f, **kw).codes
                    ).trace(xs).lower(lowering_platforms=(platform,))
      assert marker in low.as_text()
      # K = 512 in chunks of 256: the TPU kernel's K grid axis has 2 steps.
      low = jax.jit(lambda x, q: fp4.dequant_matmul(x, q, block=fp4.MatmulBlockSizes(k=256), **kw)
                    ).trace(xs, wq).lower(lowering_platforms=(platform,))
      assert marker in low.as_text()


def test_tpu_kernel_k_grid_axis_and_dimension_semantics():
  x = jax.ShapeDtypeStruct((32, 512), jnp.float32)
  wq = formats.quantize(jnp.ones((512, 128)), "nvfp4", axis=0)
  jaxpr = str(jax.make_jaxpr(lambda v: fp4.dequant_matmul(
      v, wq, block=fp4.MatmulBlockSizes(m=16, n=128, k=256), interpret=False,
      platform="tpu"))(x))
  assert "grid=(2, 1, 2)" in jaxpr  # (m tiles, n tiles, K steps)
  assert "('parallel', 'parallel', 'arbitrary')" in jaxpr
  with pytest.raises(ValueError, match="multiple of 256"):
    fp4.dequant_matmul(jnp.ones((32, 512)), wq, block=fp4.MatmulBlockSizes(k=64),
                       interpret=False, platform="tpu")


def _edge_weight(k, n):
  """A [k, n] weight with all-zero, tiny (subnormal E4M3 scale) and integer-like 16-blocks."""
  w = np.array(jax.random.normal(jax.random.key(7), (k, n)), np.float32) * 0.1
  w[:16, 0] = 0.0
  w[16:32, 1] *= 1e-4
  w[32:48, 2] = np.arange(-7, 9)
  return jnp.asarray(w)


@pytest.mark.parametrize("fmt,dtype", [
    ("mixfp4", jnp.bfloat16),
    pytest.param("nvfp4", jnp.float16, marks=pytest.mark.slow)])
def test_dequant_matmul_mosaic_gpu_variant_interpreted(fmt, dtype):
  # The plgpu kernel in the GPU interpreter (simulated SMEM, TMA, wgmma): m=12 pads to the
  # 16-row tile; 2 K steps of 256 through the emit_pipeline into the wgmma accumulator.
  x = jax.random.normal(jax.random.key(6), (12, 512)).astype(dtype)
  wq = formats.quantize(_edge_weight(512, 64), fmt, axis=0)
  if fmt == "mixfp4":
    assert 0.1 < float(wq.e1m2_fraction()) < 0.9  # both MixFP4 flags are exercised
  out = fp4.dequant_matmul(x, wq, block=fp4.MatmulBlockSizes(m=16, n=64, k=256),
                           implementation="mosaic_gpu", interpret=True)
  assert out.shape == (12, 64) and out.dtype == jnp.float32
  np.testing.assert_allclose(np.asarray(out), np.asarray(fp4.dequant_matmul_reference(x, wq)),
                             rtol=1e-5, atol=1e-5)


def test_dequant_matmul_mosaic_gpu_lowers_from_cpu(lowering_target):
  wq = formats.quantize(jnp.ones((512, 128)), "mixfp4", axis=0)
  with lowering_target("cuda"):  # implementation=None on a GPU, bf16 activations: Mosaic GPU
    text = jax.jit(lambda v: fp4.dequant_matmul(v, wq, interpret=False, platform="cuda")).trace(
        jax.ShapeDtypeStruct((32, 512), jnp.bfloat16)).lower(lowering_platforms=("cuda",)).as_text()
  assert "mosaic_gpu" in text and "triton" not in text
  # The serialized kernel issues Hopper wgmma: M 64 (weight rows), N 16 (tokens), bf16 -> f32.
  assert "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16" in text


@pytest.mark.parametrize("dtype,k,impl,kernel_name", [
    (jnp.bfloat16, 512, None, "jaxlab_fp4_dequant_matmul_mgpu"),
    (jnp.float16, 512, "pallas", "jaxlab_fp4_dequant_matmul_mgpu"),
    (jnp.float32, 512, None, None),  # wgmma: 16-bit only; the XLA reference, not Triton
    (jnp.bfloat16, 128, None, None),  # K below the 256 tile
    (jnp.bfloat16, 512, "triton", "jaxlab_fp4_dequant_matmul_triton"),  # only by name
])
def test_dequant_matmul_gpu_dispatch(dtype, k, impl, kernel_name):
  # The GPU default is Mosaic GPU where it fits (16-bit x, tiles), else XLA.
  wq = formats.quantize(jnp.ones((k, 128)), "nvfp4", axis=0)
  jaxpr = str(jax.make_jaxpr(lambda v: fp4.dequant_matmul(v, wq, implementation=impl,
                                                          platform="cuda"))(
          jax.ShapeDtypeStruct((32, k), dtype)))
  if kernel_name is None:
    assert "pallas_call" not in jaxpr and "mosaic_gpu" not in jaxpr
  else:
    assert kernel_name in jaxpr and jaxpr.count("_dequant_matmul_") == 2  # _pallas + the kernel


@pytest.mark.parametrize("dtype,k,match", [(jnp.float32, 512, "bfloat16 or float16"),
                                           (jnp.bfloat16, 128, "k % 256 == 0")])
def test_dequant_matmul_pallas_on_gpu_never_falls_back_to_triton(dtype, k, match):
  # "pallas" asks for a Pallas kernel: on GPU the Mosaic GPU one, whose constraint is raised.
  wq = formats.quantize(jnp.ones((k, 128)), "nvfp4", axis=0)
  with pytest.raises(ValueError, match=match):
    jax.eval_shape(lambda v: fp4.dequant_matmul(v, wq, implementation="pallas", platform="cuda"),
                   jax.ShapeDtypeStruct((32, k), dtype))


@pytest.mark.parametrize("dtype,block,match", [
    (jnp.float32, fp4.MatmulBlockSizes(), "bfloat16 or float16"),
    (jnp.bfloat16, fp4.MatmulBlockSizes(k=128), "k % 256 == 0"),
    (jnp.bfloat16, fp4.MatmulBlockSizes(n=32), "n % 64 == 0"),
    (jnp.bfloat16, fp4.MatmulBlockSizes(m=256, n=128), "m \\* n <="),
    (jnp.bfloat16, fp4.MatmulBlockSizes(n=128, k=512), "must divide"),  # N = 192
    (jnp.bfloat16, fp4.MatmulBlockSizes(m=128, n=64, k=1024), "bytes of SMEM"),
])
def test_dequant_matmul_mosaic_gpu_rejects_bad_tiles_and_dtypes(dtype, block, match):
  x = jnp.ones((256, 1024), dtype)
  wq = formats.quantize(jnp.ones((1024, 192)), "nvfp4", axis=0)
  with pytest.raises(ValueError, match=match):
    fp4.dequant_matmul(x, wq, block=block, implementation="mosaic_gpu", interpret=False,
                       platform="cuda")


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
def test_dequant_matmul_scaled_matmul_matches_reference(fmt):
  """`jax.nn.scaled_matmul` with the weight's own codes and scale bytes (no requantization).

  jax 0.12 lowers it on CPU (a dequantize and a dot), jax 0.10 only for GPUs: there the
  call must raise rather than run something else.
  """
  x = jax.random.normal(jax.random.key(2), (16, 128))
  wq = formats.quantize(jax.random.normal(jax.random.key(3), (128, 64)) * 0.1, fmt, axis=0)
  call = lambda v: fp4.dequant_matmul(v, wq, implementation="scaled_matmul")  # noqa: E731
  if not fp4.scaled_matmul_available():
    with pytest.raises(ValueError, match="does not lower jax.nn.scaled_matmul"):
      call(x)
    return
  ref = fp4.dequant_matmul_reference(x, wq)
  assert "scaled_matmul" in str(jax.make_jaxpr(call)(x))
  np.testing.assert_allclose(np.asarray(call(x)), np.asarray(ref), rtol=1e-5, atol=1e-5)
  g = jax.grad(lambda v: jnp.sum(call(v) ** 2))(x)
  gr = jax.grad(lambda v: jnp.sum(fp4.dequant_matmul_reference(v, wq) ** 2))(x)
  np.testing.assert_allclose(np.asarray(g), np.asarray(gr), rtol=1e-4, atol=1e-4)


def test_dequant_matmul_format_checks_per_implementation():
  x = jnp.ones((16, 64))
  mix = formats.quantize(jnp.ones((64, 32)), "mixfp4", axis=0)
  mx = formats.quantize(jax.random.normal(jax.random.key(0), (64, 32)), "mxfp4", axis=0)
  with pytest.raises(ValueError, match="takes nvfp4 or mxfp4"):  # E1M2 blocks: no dtype
    fp4.dequant_matmul(x, mix, implementation="scaled_matmul", platform="cuda")
  with pytest.raises(ValueError, match="Pallas kernels take nvfp4 or mixfp4"):
    fp4.dequant_matmul(x, mx, implementation="pallas")
  # MXFP4 by default: the reference on every platform (no Pallas kernel takes it).
  np.testing.assert_array_equal(np.asarray(fp4.dequant_matmul(x, mx, platform="tpu")),
                                np.asarray(fp4.dequant_matmul_reference(x, mx)))
