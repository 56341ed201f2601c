"""Public FP4 kernel API: fused NVFP4/MixFP4 quantize and dequant-matmul.

Dispatch is `pallas_kernels._common.resolve` (tokamax style):
`implementation=None` runs Mosaic TPU on TPU, the Mosaic GPU kernel on GPU
where it takes the input (else the XLA reference) and the XLA reference on
CPU; "pallas" (or a variant by name) runs the kernel, interpreted on CPU;
"xla" the reference. `interpret=True` asks for the kernel in interpret mode.
`platform` picks the variant and compiler params when lowering for another
platform than the default backend (e.g. "tpu" or "cuda" from a CPU machine);
it never turns interpret mode on.

Variants: quantize has Mosaic TPU and Triton (Mosaic GPU's lane lowering has
no `floor`, which exact rounding needs), so on GPU its default is the XLA
reference, which XLA fuses into one elementwise pass; Triton runs only when
named. dequant-matmul has Mosaic TPU (grid (m, n, K) with an f32 VMEM
accumulator, K "arbitrary"), Mosaic GPU (`mgpu.py`: Hopper wgmma, K pipelined
through SMEM by TMA, weights decoded in registers, f32 wgmma accumulator),
Triton (K looped in the program; by name only) and "scaled_matmul"
(`jax.nn.scaled_matmul`: the weight's E2M1 codes and E4M3/E8M0 scale bytes
handed to XLA's block-scaled dot as `float4_e2m1fn` / `float8_*` arrays, for
NVFP4 and MXFP4 weights, where the installed jax lowers it for the platform).
On GPU the default (`implementation=None`) is Mosaic GPU for bfloat16/float16
activations whose tiles it takes (`mgpu.check_tiles`), else the XLA reference
(float32 activations, K < 256, ...).
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jaxtyping import Float

from jaxlab import formats
from pallas_kernels import _common, tuning
from pallas_kernels.fp4 import kernel, mgpu, reference

_FMTS = ("nvfp4", "mixfp4")  # the Pallas kernels' formats: 16-blocks, E4M3 scale bytes
# Weights `jax.nn.scaled_matmul` takes: E2M1 elements with E4M3 (NVFP4, 16-blocks) or E8M0
# (MXFP4, 32-blocks) scale bytes. MixFP4's E1M2 blocks have no block-scaled dtype.
_SCALED_FMTS = {"nvfp4": jnp.float8_e4m3fn, "mxfp4": jnp.float8_e8m0fnu}


@dataclasses.dataclass(frozen=True)
class QuantizeBlockSizes:
  """Tile of the quantize kernel: `rows` x `cols` input elements per program.

  cols must be a multiple of 16 (a scale block never straddles tiles); None
  means the whole row. On TPU a tile's last dims must be multiples of (8, 128)
  or the full array dims: the scale output is cols/16 wide, so use the full row
  or cols a multiple of 2048.
  """
  rows: int = 16
  cols: int | None = None


@dataclasses.dataclass(frozen=True)
class MatmulBlockSizes:
  """Tile of the dequant-matmul: out block m x n, K consumed in chunks of k.

  Blocks clip to the dims, and x is zero-padded to a multiple of m. On TPU, n must be a multiple of 128 or the full N,
  and k a multiple of 256 or the full K (a k chunk is k/2 packed bytes wide).
  Mosaic GPU (m is wgmma's N: the kernel computes out^T): m a multiple of 8 and
  <= 256 (x is zero-padded to it), n a multiple of 64, m * n <= 16384, k a
  multiple of 256; n and k must divide N and K.
  """
  m: int = 16
  n: int = 128
  k: int = 512


def _tile(name: str, size: int, block: int, multiple: int = 1) -> int:
  b = min(block, size)
  if b < 1 or size % b or b % multiple:
    raise ValueError(f"{name}: block {b} must divide the dimension {size} and be a positive "
                     f"multiple of {multiple}")
  return b


# The op name of the dequant-matmul in tuning tables; its shape key is (m, k, n).
TUNING_OP = "fp4_dequant_matmul"
QUANTIZE_VARIANTS = (_common.MOSAIC_TPU, _common.TRITON)
# Preference order within a platform. Mosaic GPU (Hopper wgmma) is the GPU default when x is
# 16-bit and the tiles fit it (`mgpu.check_tiles`); otherwise (float32 x, or tiles Mosaic GPU
# cannot take) the default is the XLA reference, and asking for "pallas" or "mosaic_gpu"
# raises the constraint. Triton and `jax.nn.scaled_matmul` run only when named.
MATMUL_VARIANTS = (_common.MOSAIC_TPU, _common.MOSAIC_GPU, _common.TRITON,
                   _common.SCALED_MATMUL)


@functools.partial(jax.jit, static_argnames=("fmt", "select_p", "block", "backend"))
def _quantize_pallas(x, sc, *, fmt, select_p, block, backend):
  m, k = x.shape
  bm = _tile("quantize rows", m, block.rows)
  bk = _tile("quantize cols", k, block.cols or k, kernel.BLOCK)
  return pl.pallas_call(
      functools.partial(kernel.quantize_kernel, mix=fmt == "mixfp4", select_p=select_p),
      out_shape=(jax.ShapeDtypeStruct((m, k // 2), jnp.uint8),
                 jax.ShapeDtypeStruct((m, k // kernel.BLOCK), jnp.uint8)),
      grid=(m // bm, k // bk),
      in_specs=[pl.BlockSpec((bm, bk), lambda i, j: (i, j)),
                pl.BlockSpec((1, 2), lambda i, j: (0, 0))],
      out_specs=(pl.BlockSpec((bm, bk // 2), lambda i, j: (i, j)),
                 pl.BlockSpec((bm, bk // kernel.BLOCK), lambda i, j: (i, j))),
      compiler_params=_common.compiler_params(backend, ("parallel", "parallel")),
      interpret=backend.interpret, name=f"jaxlab_{fmt}_quantize")(x, sc)


def quantize(x: Float[Array, "m k"], fmt: str = "nvfp4", *, select_p: float = 2.0,
             block: QuantizeBlockSizes = QuantizeBlockSizes(), implementation: str | None = None,
             interpret: bool | None = None, platform: str | None = None) -> formats.QArray:
  """Fused NVFP4/MixFP4 quantize of a 2-D array, 16-blocks along the last axis.

  One pass per tile: block amax, E4M3 scale(s), both MixFP4 candidates and the
  selection, packed nibbles and the (flagged) scale byte. Bit-identical to
  `jaxlab.formats.quantize(x, fmt)`; the tensor amax is one XLA reduction.

  Args:
    x: [m, k] float array, k a multiple of 16.
    fmt: "nvfp4" or "mixfp4".
    select_p: MixFP4 selector norm (see `jaxlab.formats.make_format`).
    block: tile sizes.
    implementation: None (best backend: Mosaic TPU on TPU, else XLA), "pallas",
      "mosaic_tpu", "triton" (deprecated; by name only) or "xla"
      (`pallas_kernels._common`).
    interpret: True runs the kernel in interpret mode; None = only when it runs
      on this host's CPU.
    platform: target for variant and compiler params (None = default backend);
      it never turns interpret mode on.

  Returns:
    A `jaxlab.formats.QArray` (codes [m, k/2], scales [m, k/16], axis=1).

  Example:
    >>> import jax
    >>> x = jax.random.normal(jax.random.key(0), (16, 64))
    >>> quantize(x, "mixfp4").codes.shape
    (16, 32)
  """
  if fmt not in _FMTS:
    raise ValueError(f"fmt must be one of {_FMTS}, got {fmt!r}")
  if x.ndim != 2 or not jnp.issubdtype(x.dtype, jnp.floating):
    raise ValueError(f"x must be a 2-D float array, got shape {x.shape} dtype {x.dtype}")
  if x.shape[1] % kernel.BLOCK:
    raise ValueError(f"x's last axis ({x.shape[1]}) must be a multiple of {kernel.BLOCK}")
  opts = {"select_p": select_p} if fmt == "mixfp4" else {}
  backend = _common.resolve("quantize", implementation, interpret=interpret, platform=platform,
                            variants=QUANTIZE_VARIANTS)
  if backend.is_xla:
    return formats.quantize(x, fmt, **opts)
  xf = jnp.where(jnp.abs(x) <= np.finfo(np.float32).max, x.astype(jnp.float32), 0.0)
  s_enc = formats.tensor_encode_scale(jnp.max(jnp.abs(xf)), 6.0)
  s_dec = 1.0 / s_enc
  sc = jnp.stack([s_enc, s_dec]).reshape(1, 2)
  codes, scales = _quantize_pallas(x, sc, fmt=fmt, select_p=float(select_p), block=block,
                                   backend=backend)
  return formats.QArray(codes, scales, s_dec, formats.make_format(fmt, **opts), tuple(x.shape), 1)


def _mgpu_tiles(m: int, k: int, n: int, block: MatmulBlockSizes, dtype) -> tuple[int, int, int]:
  """(tm, tk, tn) of the Mosaic GPU variant; m is padded to tm, n and k must divide."""
  tm = min(block.m, -(-m // 8) * 8)
  tk, tn = min(block.k, k), min(block.n, n)
  mgpu.check_tiles(tm, tk, tn, dtype)
  if k % tk or n % tn:
    raise ValueError(f"dequant_matmul (mosaic_gpu): block k={tk} and n={tn} must divide K={k} "
                     f"and N={n}")
  return tm, tk, tn


def _mgpu_fits(m: int, k: int, n: int, block: MatmulBlockSizes, dtype) -> bool:
  try:
    _mgpu_tiles(m, k, n, block, dtype)
  except ValueError:
    return False
  return True


@functools.partial(jax.jit, static_argnames=("block", "backend"))
def _dequant_matmul_pallas(x, codes, scales, s_dec, *, block, backend):
  m, k = x.shape
  n = codes.shape[0]
  if backend.kind == _common.MOSAIC_GPU:
    tm, tk, tn = _mgpu_tiles(m, k, n, block, x.dtype)
    xp = jnp.pad(x, ((0, -m % tm), (0, 0)))
    out_t = mgpu.dequant_matmul_t(mgpu.pair_major(xp), codes, scales, tm=tm, tk=tk, tn=tn,
                                  compiler_params=_common.compiler_params(backend),
                                  interpret=backend.interpret)
    return out_t[:, :m].T * s_dec
  # m is padded with zero rows (sliced off below), as on Mosaic GPU and in `gmm`; n and k
  # are the weight's, whose packed codes and scales the tiles must divide.
  if not (isinstance(block.m, int) and block.m > 0):
    raise ValueError(f"matmul m: block must be a positive int, got {block.m!r}")
  bm = min(block.m, m)
  x = jnp.pad(x, ((0, -m % bm), (0, 0)))
  bn = _tile("matmul n", n, block.n)
  bk = _tile("matmul k", k, block.k, kernel.BLOCK)
  return _dequant_matmul_tiles(x, codes, scales, s_dec, bm, bn, bk, backend)[:m]


def _dequant_matmul_tiles(x, codes, scales, s_dec, bm, bn, bk, backend):
  """The TPU / Triton dequant-matmul on tiles that divide x's rows and the weight."""
  m, k = x.shape
  n = codes.shape[0]
  xe, xo = x[:, 0::2], x[:, 1::2]
  sdec = s_dec.reshape(1, 1)
  out_shape = jax.ShapeDtypeStruct((m, n), jnp.float32)
  if backend.kind == _common.TRITON:
    return pl.pallas_call(
        functools.partial(kernel.dequant_matmul_gpu_kernel, bk=bk),
        out_shape=out_shape,
        grid=(m // bm, n // bn),
        in_specs=[pl.BlockSpec((bm, k // 2), lambda i, j: (i, 0)),
                  pl.BlockSpec((bm, k // 2), lambda i, j: (i, 0)),
                  pl.BlockSpec((bn, k // 2), lambda i, j: (j, 0)),
                  pl.BlockSpec((bn, k // kernel.BLOCK), lambda i, j: (j, 0)),
                  pl.BlockSpec((1, 1), lambda i, j: (0, 0))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j: (i, j)),
        compiler_params=_common.compiler_params(backend),
        interpret=backend.interpret, name="jaxlab_fp4_dequant_matmul_triton")(
            xe, xo, codes, scales, sdec)
  if not backend.interpret and bk != k and (bk // 2) % 128:
    raise ValueError(f"matmul k: on TPU the K chunk ({bk}) must be the full K ({k}) or a "
                     "multiple of 256 (its packed bytes fill 128 lanes)")
  return pl.pallas_call(
      functools.partial(kernel.dequant_matmul_kernel, bk=bk),
      out_shape=out_shape,
      grid=(m // bm, n // bn, k // bk),
      in_specs=[pl.BlockSpec((bm, bk // 2), lambda i, j, kk: (i, kk)),
                pl.BlockSpec((bm, bk // 2), lambda i, j, kk: (i, kk)),
                pl.BlockSpec((bn, bk // 2), lambda i, j, kk: (j, kk)),
                pl.BlockSpec((bn, k // kernel.BLOCK), lambda i, j, kk: (j, 0)),
                pl.BlockSpec((1, 1), lambda i, j, kk: (0, 0))],
      out_specs=pl.BlockSpec((bm, bn), lambda i, j, kk: (i, j)),
      scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
      compiler_params=_common.compiler_params(backend, ("parallel", "parallel", "arbitrary")),
      interpret=backend.interpret, name="jaxlab_fp4_dequant_matmul")(xe, xo, codes, scales, sdec)


# One jitted XLA program (as the reference under a user's jit), so eager
# callers of `implementation=None` on CPU pay no per-op dispatch.
_dequant_matmul_xla = jax.jit(reference.dequant_matmul_reference)


def _scaled_matmul_operands(x, wq):
  """`jax.nn.scaled_matmul`'s operands for x @ dequantize(wq) / S_dec.

  The weight [n, k] as `float4_e2m1fn` elements (jaxlab's E2M1 nibbles have the
  same bits) with its scale bytes as `float8_e4m3fn` (NVFP4) or
  `float8_e8m0fnu` (MXFP4); x keeps its dtype and gets unit block scales, so
  the product is W4A16 like every other implementation of `dequant_matmul`.
  """
  k, n = wq.shape
  scale_dtype = _SCALED_FMTS[wq.fmt.name]
  nibbles = formats.unpack_nibbles(wq.codes).reshape(n, k)
  w = jax.lax.bitcast_convert_type(nibbles.astype(jnp.uint4), jnp.float4_e2m1fn)
  w_scales = jax.lax.bitcast_convert_type(wq.scales, scale_dtype)
  x_scales = jnp.ones((x.shape[0], w_scales.shape[1]), scale_dtype)
  return x[None], w[None], x_scales[None], w_scales[None]


@jax.jit
def _dequant_matmul_scaled(x, wq):
  out = jax.nn.scaled_matmul(*_scaled_matmul_operands(x, wq), preferred_element_type=jnp.float32)
  return out[0] * wq.tensor_scale  # S_dec (1 for MXFP4), once per output as in the kernels


def _lowering_platform(platform: str | None) -> str | None:
  if platform in (None, "cpu", "tpu", "cuda", "rocm"):
    return platform
  return "cuda"  # "gpu"


@functools.cache
def scaled_matmul_available(platform: str | None = None) -> bool:
  """Whether the installed jax lowers `jax.nn.scaled_matmul` for `platform`.

  jax 0.10 lowers it for CUDA and ROCm only; 0.12 adds a CPU lowering (a
  dequantize and a dot). The answer comes from lowering a tiny NVFP4 product.

  Args:
    platform: "cpu", "tpu", "cuda", "rocm", "gpu" (= "cuda"), or None (the
      default backend).

  Returns:
    True when `dequant_matmul(..., implementation="scaled_matmul")` can be
    lowered for `platform`.

  Example:
    >>> scaled_matmul_available("cuda")
    True
  """
  _common.platform_kind(platform)  # validates the name
  if not hasattr(jax.nn, "scaled_matmul"):
    return False
  wq = jax.eval_shape(lambda: formats.quantize(jnp.ones((32, 16)), "nvfp4", axis=0))
  x = jax.ShapeDtypeStruct((8, 32), jnp.float32)
  target = _lowering_platform(platform)
  try:
    jax.jit(_dequant_matmul_scaled).trace(x, wq).lower(
        **({} if target is None else {"lowering_platforms": (target,)}))
  except NotImplementedError:  # no lowering rule of the primitive for this platform
    return False
  return True


def _zero_cotangent(a):
  if jnp.issubdtype(a.dtype, jnp.floating):
    return jnp.zeros_like(a)
  return np.zeros(a.shape, jax.dtypes.float0)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def _dequant_matmul(x, wq, block, backend):
  if backend.kind == _common.SCALED_MATMUL:
    return _dequant_matmul_scaled(x, wq)
  return _dequant_matmul_pallas(x, wq.codes, wq.scales, wq.tensor_scale, block=block,
                                backend=backend)


def _dm_fwd(x, wq, block, backend):
  return _dequant_matmul(x, wq, block, backend), (x, wq)


def _dm_bwd(block, backend, res, g):
  del block, backend
  x, wq = res
  _, vjp = jax.vjp(lambda v: reference.dequant_matmul_reference(v, wq), x)
  (gx,) = vjp(g)
  return gx.astype(x.dtype), jax.tree.map(_zero_cotangent, wq)


_dequant_matmul.defvjp(_dm_fwd, _dm_bwd)


def dequant_matmul(x: Float[Array, "m k"], wq: formats.QArray, *,
                   block: MatmulBlockSizes | None = None, implementation: str | None = None,
                   interpret: bool | None = None, platform: str | None = None
                   ) -> Float[Array, "m n"]:
  """x @ dequantize(wq) with f32 accumulation; W decoded in-kernel through E2M2.

  Args:
    x: [m, k] activations.
    wq: an NVFP4 or MixFP4 `QArray` of a [k, n] weight quantized along axis 0
      (`jaxlab.formats.quantize(w, fmt, axis=0)`): codes [n, k/2], scales [n, k/16].
      An MXFP4 weight (32-blocks, E8M0 scales) is taken by "xla" and
      "scaled_matmul" (and `implementation=None`, which is XLA for it).
    block: tile sizes (m is clipped to the rows and x zero-padded to a multiple of it;
      n divides N; k a multiple of 16 dividing K). None: the
      active tuning table's entry for ("fp4_dequant_matmul", (m, k, n), x.dtype, device)
      (`pallas_kernels.tuning`), else `MatmulBlockSizes()`.
    implementation: None (best backend: Mosaic TPU on TPU; on GPU Mosaic GPU
      where it fits, else XLA; XLA on CPU), "pallas", "mosaic_tpu",
      "mosaic_gpu", "triton" (deprecated; by name only), "scaled_matmul"
      (`jax.nn.scaled_matmul`, NVFP4/MXFP4, where `scaled_matmul_available`)
      or "xla" (`reference.dequant_matmul_reference`).
    interpret: True runs the kernel in interpret mode (Mosaic GPU: the GPU
      interpreter, `InterpretGPUParams`); None = only when it runs on this
      host's CPU.
    platform: target for variant and compiler params; it never turns
      interpret mode on.

  Returns:
    [m, n] float32. Gradient w.r.t. x through the reference (custom_vjp).

  Raises:
    ValueError: bad shapes or formats; with implementation="pallas" on GPU or
      "mosaic_gpu", x not bfloat16/float16 or tiles it cannot take
      (`MatmulBlockSizes`); "scaled_matmul" for a MixFP4 weight or a platform
      the installed jax does not lower it for.

  Example:
    >>> import jax
    >>> from jaxlab import formats
    >>> w = jax.random.normal(jax.random.key(0), (64, 32))
    >>> x = jax.random.normal(jax.random.key(1), (16, 64))
    >>> dequant_matmul(x, formats.quantize(w, "nvfp4", axis=0)).shape
    (16, 32)
  """
  if not isinstance(wq, formats.QArray) or wq.fmt.name not in (*_FMTS, *_SCALED_FMTS):
    raise ValueError("wq must be an nvfp4, mixfp4 or mxfp4 QArray")
  if len(wq.shape) != 2 or wq.axis != 0 or wq.shape[0] % wq.block_size:
    raise ValueError(f"wq must be a [k, n] weight quantized along axis 0 in whole blocks; got "
                     f"shape {wq.shape}, axis {wq.axis}, block {wq.block_size}")
  if x.ndim != 2 or x.shape[1] != wq.shape[0]:
    raise ValueError(f"x must be [m, {wq.shape[0]}], got {x.shape}")
  if wq.fmt.name in _FMTS and wq.block_size != kernel.BLOCK:
    raise ValueError(f"wq must have {kernel.BLOCK}-blocks, got {wq.block_size}")
  if implementation is None and wq.fmt.name not in _FMTS:
    return _dequant_matmul_xla(x, wq)  # no Pallas kernel takes MXFP4: the reference
  backend = _common.resolve("dequant_matmul", implementation, interpret=interpret,
                            platform=platform, variants=MATMUL_VARIANTS)
  if backend.is_xla:
    return _dequant_matmul_xla(x, wq)
  if backend.kind == _common.SCALED_MATMUL:
    if wq.fmt.name not in _SCALED_FMTS:
      raise ValueError(f"dequant_matmul: implementation 'scaled_matmul' takes nvfp4 or mxfp4 "
                       f"weights (E2M1 blocks), got {wq.fmt.name}")
    if not scaled_matmul_available(platform):
      raise ValueError(f"dequant_matmul: jax {jax.__version__} does not lower "
                       f"jax.nn.scaled_matmul for platform "
                       f"{platform or jax.default_backend()!r}")
    return _dequant_matmul(x, wq, None, backend)
  if wq.fmt.name not in _FMTS:
    raise ValueError(f"dequant_matmul: the Pallas kernels take nvfp4 or mixfp4 weights, got "
                     f"{wq.fmt.name}; use 'xla' or 'scaled_matmul'")
  if block is None:
    tuned = tuning.lookup(TUNING_OP, (x.shape[0], x.shape[1], wq.shape[1]), x.dtype, platform)
    block = MatmulBlockSizes() if tuned is None else MatmulBlockSizes(
        tuned.block_m, tuned.block_n, tuned.block_k)
  if (backend.kind == _common.MOSAIC_GPU and implementation is None
      and not _mgpu_fits(x.shape[0], x.shape[1], wq.shape[1], block, x.dtype)):
    return _dequant_matmul_xla(x, wq)  # the GPU default's fallback: never Triton
  return _dequant_matmul(x, wq, block, backend)
