"""`FP4Dense`: a bias-free Dense that serves FP4 weights through the FP4 kernels.

`QDense` trains with fake quantization: it keeps a float kernel and rounds it
on every call. `FP4Dense` holds the weight as the format stores it and never
materializes a float copy as a parameter:

  * "codes": uint8 [F, K/2], two 4-bit element codes per byte (E2M1, or for
    MixFP4 E2M1/E1M2 by block);
  * "scales": uint8 [F, K/B], one scale byte per B-block along K (E4M3 for
    NVFP4 and MixFP4, B = 16, MixFP4's E1M2 flag in bit 7; E8M0 for MXFP4,
    B = 32);
  * "tensor_scale": float32 [], the decode scale S_dec (1 for MXFP4).

That is `fp4_weight_bytes(K, F, fmt)` = K*F/2 + K*F/B + 4 bytes (4.5 bits per
weight for NVFP4 and MixFP4, 4.25 for MXFP4, against 32 for a float32
kernel). The product is `pallas_kernels.fp4.dequant_matmul`, which dispatches
as every kernel does (`implementation=`, `interpret=`, `platform=`): the XLA
reference on CPU, Mosaic TPU on TPU, Mosaic GPU on GPU where it takes the
input, `jax.nn.scaled_matmul` when asked for ("scaled_matmul", NVFP4/MXFP4).

Serving a float (or QAT-trained) LM with FP4 weights:

  params_fp4 = quantize_dense_params(params, "nvfp4")
  model = Transformer(dataclasses.replace(config, dense=fp4_dense_factory("nvfp4")))
  logits = model.apply({"params": params_fp4}, tokens)

The weight is quantized exactly as `QDense`'s fake quantization rounds it (16-
or 32-blocks along K per output channel, one tensor scale per matrix), so the
served logits equal the fake-quant model's up to float32 summation order.

Example:
  >>> import jax, jax.numpy as jnp
  >>> layer = FP4Dense(64, fmt="mixfp4")
  >>> params = layer.init(jax.random.key(0), jnp.ones((2, 32)))
  >>> {k: (v.shape, str(v.dtype)) for k, v in params["params"].items()}
  {'codes': ((64, 16), 'uint8'), 'scales': ((64, 2), 'uint8'), 'tensor_scale': ((), 'float32')}
  >>> layer.apply(params, jnp.ones((2, 32))).shape
  (2, 64)
"""

from collections.abc import Mapping
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax import Array
from jaxtyping import Float

from jaxlab import formats
from jaxlab.nn import default_dense
from pallas_kernels import fp4

FP4_FORMATS = ("nvfp4", "mixfp4", "mxfp4")
PARAM_NAMES = ("codes", "scales", "tensor_scale")


def _check_fmt(fmt: str) -> formats.Format:
  if fmt not in FP4_FORMATS:
    raise ValueError(f"fmt must be one of {FP4_FORMATS}, got {fmt!r}")
  return formats.get_format(fmt)


def fp4_weight_bytes(k: int, features: int, fmt: str) -> int:
  """Bytes `FP4Dense` stores for a [k, features] weight: codes, scale bytes, tensor scale.

  Args:
    k: input width K (a multiple of the format's block).
    features: output width F.
    fmt: "nvfp4", "mixfp4" or "mxfp4".

  Returns:
    k * features / 2 + k * features / block + 4.

  Example:
    >>> fp4_weight_bytes(64, 32, "nvfp4")  # 1024 code + 128 scale + 4 tensor-scale bytes
    1156
  """
  f = _check_fmt(fmt)
  formats.layout((features, k), -1, f)  # K must be whole blocks
  return k * features // 2 + k * features // f.block_size + 4


def quantize_weight(kernel: Float[Array, "k f"], fmt: str) -> dict[str, Array]:
  """The `FP4Dense` parameters of a float [K, F] kernel (blocks along K per output channel).

  Args:
    kernel: [K, F] float weight, as `nn.Dense` / `QDense` hold it.
    fmt: "nvfp4", "mixfp4" or "mxfp4".

  Returns:
    {"codes": uint8 [F, K/2], "scales": uint8 [F, K/B], "tensor_scale": float32 []}.

  Example:
    >>> import jax.numpy as jnp
    >>> quantize_weight(jnp.ones((64, 8)), "mxfp4")["scales"].shape
    (8, 2)
  """
  f = _check_fmt(fmt)
  if kernel.ndim != 2:
    raise ValueError(f"kernel must be [K, F], got shape {kernel.shape}")
  q = formats.quantize(kernel, f, axis=0)
  return {"codes": q.codes, "scales": q.scales, "tensor_scale": q.tensor_scale}


class FP4Dense(nn.Module):
  """Bias-free Dense y = x @ dequantize(W) with W stored as FP4 codes + scales.

  Attributes:
    features: output width F.
    fmt: "nvfp4", "mixfp4" or "mxfp4" (`jaxlab.formats` presets).
    dtype: the dtype x is cast to before the product, and of the output (the
      kernels accumulate in float32). Mosaic GPU takes bfloat16/float16.
    implementation: `pallas_kernels.fp4.dequant_matmul`'s (None: the best
      backend of the platform).
    interpret: the kernel's interpret mode (None: only on this host's CPU).
    platform: the kernel's target platform (None: the default backend).
    block: the kernel's tiles (None: the tuning table's, else the defaults).
    kernel_init: initializer of the float kernel quantized by `init` (a model
      to serve gets its parameters from `quantize_dense_params` instead).
  """
  features: int
  fmt: str = "nvfp4"
  dtype: Any = jnp.float32
  implementation: str | None = None
  interpret: bool | None = None
  platform: str | None = None
  block: fp4.MatmulBlockSizes | None = None
  kernel_init: Any = nn.initializers.lecun_normal()

  @nn.compact
  def __call__(self, x: Float[Array, "*b k"]) -> Float[Array, "*b f"]:
    f = _check_fmt(self.fmt)
    k = x.shape[-1]
    formats.layout((self.features, k), -1, f)  # K must be whole blocks: a ValueError naming it
    nb = k // f.block_size
    shapes = {"codes": ((self.features, k // 2), jnp.uint8),
              "scales": ((self.features, nb), jnp.uint8), "tensor_scale": ((), jnp.float32)}
    drawn = {}
    if self.is_initializing():  # one float kernel for all three parameters
      kernel = self.kernel_init(self.make_rng("params"), (k, self.features), jnp.float32)
      drawn = quantize_weight(kernel, self.fmt)

    def init(rng, name):
      # Flax also calls this outside `init`, to check a stored parameter's shape and dtype
      # (a mismatch with this input's width raises there): only the shape matters then.
      del rng
      return drawn[name] if name in drawn else jnp.zeros(*shapes[name])

    codes, scales, tensor_scale = (self.param(name, init, name) for name in PARAM_NAMES)
    wq = formats.QArray(codes, scales, tensor_scale, f, (k, self.features), 0)
    y = fp4.dequant_matmul(x.reshape(-1, k).astype(self.dtype), wq, block=self.block,
                           implementation=self.implementation, interpret=self.interpret,
                           platform=self.platform)
    return y.reshape(*x.shape[:-1], self.features).astype(self.dtype)


def fp4_dense_factory(fmt: str = "nvfp4", *, quantize_lm_head: bool = False,
                      implementation: str | None = None, interpret: bool | None = None,
                      platform: str | None = None, block: fp4.MatmulBlockSizes | None = None):
  """A `TransformerConfig.dense` factory building `FP4Dense` (lm_head stays a float Dense).

  The LM head stays in full precision unless `quantize_lm_head`, as with
  `qdense_factory`; `quantize_dense_params` must be given the same choice.

  Args:
    fmt: "nvfp4", "mixfp4" or "mxfp4".
    quantize_lm_head: serve `lm_head` in FP4 too.
    implementation, interpret, platform, block: the kernel's (see `FP4Dense`).

  Returns:
    `dense(features, *, name, dtype, param_dtype) -> nn.Module`.

  Example:
    >>> from jaxlab.nn import TransformerConfig
    >>> cfg = TransformerConfig(d_model=32, num_layers=1, num_heads=4, num_kv_heads=2, d_ff=64,
    ...                         dense=fp4_dense_factory("mixfp4"))
    >>> type(cfg.dense_module(64, "up")).__name__, type(cfg.dense_module(256, "lm_head")).__name__
    ('FP4Dense', 'Dense')
  """
  _check_fmt(fmt)

  def dense(features: int, *, name: str, dtype: Any, param_dtype: Any) -> nn.Module:
    if name == "lm_head" and not quantize_lm_head:
      return default_dense(features, name=name, dtype=dtype, param_dtype=param_dtype)
    return FP4Dense(features, fmt=fmt, dtype=dtype, implementation=implementation,
                    interpret=interpret, platform=platform, block=block, name=name)
  return dense


def quantize_dense_params(params: Mapping, fmt: str, *, quantize_lm_head: bool = False) -> dict:
  """Float Dense params -> the `FP4Dense` params `fp4_dense_factory(fmt)` builds a model for.

  Every module holding a "kernel" (q, k, v, o, gate, up, down; `lm_head` only
  with `quantize_lm_head`) gets "codes", "scales" and "tensor_scale" in its
  place (`quantize_weight`); every other leaf is kept. Scan-layout kernels
  ([L, K, F], `scan_layers=True`) are quantized layer by layer (one tensor
  scale each, as the loop layout's) and stacked.

  Args:
    params: the model's params tree (or variables with a "params" entry).
    fmt: "nvfp4", "mixfp4" or "mxfp4".
    quantize_lm_head: as `fp4_dense_factory`'s.

  Returns:
    A new params tree (the "params" entry's, when variables were given).

  Example:
    >>> import jax.numpy as jnp
    >>> tree = {"mlp": {"up": {"kernel": jnp.ones((32, 64))}}, "lm_head": {"kernel": jnp.ones((32, 8))}}
    >>> out = quantize_dense_params(tree, "nvfp4")
    >>> sorted(out["mlp"]["up"]), sorted(out["lm_head"])
    (['codes', 'scales', 'tensor_scale'], ['kernel'])
  """
  _check_fmt(fmt)
  tree = params.get("params", params) if isinstance(params, Mapping) else params
  if not isinstance(tree, Mapping):
    raise ValueError(f"params must be a mapping, got {type(params).__name__}")

  def convert(kernel):
    if kernel.ndim == 2:
      return quantize_weight(kernel, fmt)
    if kernel.ndim == 3:  # scan layout: one matrix per layer
      layers = [quantize_weight(kernel[i], fmt) for i in range(kernel.shape[0])]
      return jax.tree.map(lambda *xs: jnp.stack(xs), *layers)
    raise ValueError(f"a Dense kernel must be [K, F] or [L, K, F], got shape {kernel.shape}")

  def walk(node, name):
    if not isinstance(node, Mapping):
      return node
    if "kernel" in node and not isinstance(node["kernel"], Mapping) and (
        name != "lm_head" or quantize_lm_head):
      if set(node) != {"kernel"}:
        raise ValueError(f"module {name!r} holds {sorted(node)} besides its kernel: not a "
                         "bias-free Dense")
      return convert(jnp.asarray(node["kernel"]))
    return {key: walk(v, key) for key, v in node.items()}

  return walk(tree, "")
