"""Post-training quantization (PTQ) with `jaxlab.formats` presets, and its tensor-level error.

A trained float model is quantized without retraining (round to nearest, no calibration):

  * `fake_quant_kernels(params, fmt)`: every projection kernel [K, F] fake-quantized in
    blocks along K (its input axis, so per output channel), the weights of W4A16;
  * `activation_policy(fmt)`: the `QuantPolicy` whose `QDense` fake-quantizes each
    projection's input with `fmt` and uses the kernel as given. A model built with
    `qdense_factory(activation_policy(fmt))` on `fake_quant_kernels(params, fmt)` is W4A4
    (for a 4-bit `fmt`).

The LM head stays in float unless `quantize_lm_head` (as in `QuantPolicy`). The error of a
format on a tensor: `format_error` (SQNR, MSE, bits/element, MixFP4's E1M2 share), over
several tensors and formats at once `error_table` (one compiled program per tensor shape),
on synthetic distributions `synthetic_tensor`, on a model's kernels `kernel_errors`.

Example:
  >>> import dataclasses, jax, jax.numpy as jnp
  >>> from jaxlab.nn import Transformer, TransformerConfig
  >>> from jaxlab.quant import qdense_factory
  >>> cfg = TransformerConfig(d_model=32, num_layers=1, num_heads=2, num_kv_heads=1, d_ff=64)
  >>> tokens = jnp.zeros((1, 8), jnp.int32)
  >>> params = Transformer(cfg).init(jax.random.key(0), tokens)["params"]
  >>> w4 = fake_quant_kernels(params, "nvfp4")                                  # W4A16
  >>> w4a4 = Transformer(dataclasses.replace(
  ...     cfg, dense=qdense_factory(activation_policy("nvfp4"))))               # W4A4
  >>> w4a4.apply({"params": w4}, tokens).shape
  (1, 8, 256)
"""

import functools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import traverse_util
from jax import Array
from jaxtyping import Float

from jaxlab import formats
from jaxlab.quant.fake_quant import FULL_PRECISION_BITS
from jaxlab.quant.qdense import QuantPolicy

DISTRIBUTIONS = ("gaussian", "laplace", "student_t3", "uniform")

__all__ = ["DISTRIBUTIONS", "activation_policy", "error_table", "fake_quant_kernels",
           "format_error", "kernel_errors", "synthetic_tensor"]


def _preset(fmt: str) -> formats.Format:
  """The `jaxlab.formats` preset `fmt` (ValueError naming it otherwise)."""
  if not isinstance(fmt, str) or fmt not in formats.PRESETS:
    raise ValueError(f"fmt must be a jaxlab.formats preset {sorted(formats.PRESETS)}, got "
                     f"{fmt!r}")
  return formats.get_format(fmt)


def activation_policy(fmt: str, *, act_scale: str = "tensor",
                      quantize_lm_head: bool = False) -> QuantPolicy:
  """The policy that fake-quantizes every projection input with preset `fmt`, kernels as given.

  Args:
    fmt: a `jaxlab.formats` preset ("nvfp4", "mixfp4", "mxfp4_floor", ...); the inputs
      are quantized in its blocks along K, per token.
    act_scale: "tensor" (a format's tensor scale over the whole input of a call) or
      "token" (over each token's K values); see `QuantSpec`.
    quantize_lm_head: quantize the LM head's input too (default: it stays float).

  Returns:
    A `QuantPolicy` (weights at full precision, activations at `fmt`'s element bits).

  Example:
    >>> activation_policy("nvfp4").name
    'W16A[nvfp4]'
  """
  bits = _preset(fmt).element_bits
  return QuantPolicy(w_bits=FULL_PRECISION_BITS, a_bits=bits, fmt=fmt, act_scale=act_scale,
                     quantize_lm_head=quantize_lm_head)


@functools.partial(jax.jit, static_argnames=("fmt", "quantize_lm_head"))
def fake_quant_kernels(params: Mapping, fmt: str, *, quantize_lm_head: bool = False) -> Any:
  """`params` with every 2-D projection kernel fake-quantized along its input axis.

  Args:
    params: a model's parameters; a leaf named "kernel" of shape [K, F] is a projection.
    fmt: a `jaxlab.formats` preset; blocks run along K for each output channel.
    quantize_lm_head: quantize the "lm_head" kernel too (default: kept float).

  Returns:
    The same tree, projection kernels replaced by their quantize-dequantize values.

  Example:
    >>> import jax.numpy as jnp
    >>> params = {"q": {"kernel": jnp.linspace(-1.0, 1.0, 64).reshape(16, 4)},
    ...           "lm_head": {"kernel": jnp.full((16, 4), 0.3)}}
    >>> out = fake_quant_kernels(params, "nvfp4")
    >>> bool((out["lm_head"]["kernel"] == params["lm_head"]["kernel"]).all())
    True
  """
  _preset(fmt)
  flat = traverse_util.flatten_dict(params, sep="/")
  new = {}
  for k, v in flat.items():
    is_proj = k.endswith("/kernel") and v.ndim == 2
    if is_proj and (quantize_lm_head or not k.startswith("lm_head")):
      v = formats.fake_quant(v, fmt, axis=0)
    new[k] = v
  return traverse_util.unflatten_dict(new, sep="/")


def synthetic_tensor(dist: str, key: Array, shape: tuple[int, ...]) -> Float[Array, "..."]:
  """A float32 tensor of i.i.d. samples from `dist` (one of `DISTRIBUTIONS`).

  Args:
    dist: "gaussian", "laplace", "student_t3" (Student-t, 3 degrees of freedom) or
      "uniform" (on [-1, 1]).
    key: a PRNG key.
    shape: the tensor's shape.

  Returns:
    The samples, float32 `shape`.

  Example:
    >>> synthetic_tensor("laplace", jax.random.key(0), (2, 3)).shape
    (2, 3)
  """
  if dist == "gaussian":
    return jax.random.normal(key, shape)
  if dist == "laplace":
    return jax.random.laplace(key, shape)
  if dist == "student_t3":
    return jax.random.t(key, 3.0, shape)
  if dist == "uniform":
    return jax.random.uniform(key, shape, minval=-1.0, maxval=1.0)
  raise ValueError(f"dist must be one of {DISTRIBUTIONS}, got {dist!r}")


@functools.partial(jax.jit, static_argnames=("name", "axis"))
def _qdq_stats(x: Array, name: str, axis: int) -> tuple[Array, Array, Array]:
  q = formats.quantize(x, name, axis=axis)
  xh = formats.dequantize(q)
  return jnp.sum((x - xh) ** 2), jnp.sum(x * x), q.e1m2_fraction()


def format_error(x: Float[Array, "..."], name: str, *, axis: int = -1) -> dict[str, float]:
  """The error of preset `name` on `x`, blocks along `axis`.

  Args:
    x: a float tensor.
    name: a `jaxlab.formats` preset.
    axis: the axis the blocks run along.

  Returns:
    {"sqnr_db", "mse", "sum_sq_err", "sum_sq", "e1m2_share" (MixFP4's share of E1M2
    blocks; 0 for other formats), "bits_per_element"}.

  Example:
    >>> x = synthetic_tensor("gaussian", jax.random.key(0), (8, 64))
    >>> format_error(x, "mixfp4")["sqnr_db"] >= format_error(x, "nvfp4")["sqnr_db"]
    True
  """
  _preset(name)
  err, sig, share = (float(v) for v in _qdq_stats(x, name, axis))
  return {"sqnr_db": 10 * math.log10(sig / max(err, 1e-30)), "mse": err / x.size,
          "sum_sq_err": err, "sum_sq": sig, "e1m2_share": share,
          "bits_per_element": formats.make_format(name).bits_per_element(x.shape[axis])}


@functools.partial(jax.jit, static_argnames=("names", "axis"))
def _multi_stats(xs: tuple[Array, ...], names: tuple[str, ...], axis: int):
  """Per format, per stacked group [g, ...]: (sum sq err, sum sq, E1M2 share) of shape [g].

  `jax.vmap` keeps every tensor-level scale per tensor of the group, and one
  compiled instance serves all tensors of a shape.
  """
  return {n: [jax.vmap(lambda x, n=n: _qdq_stats(x, n, axis))(g) for g in xs] for n in names}


def error_table(tensors: Sequence[Array], names: Sequence[str], *,
                axis: int = -1) -> dict[str, dict[str, float]]:
  """Each preset's error over a set of tensors, as totals over the set.

  Args:
    tensors: float tensors (any shapes; each keeps its own tensor-level scale).
    names: `jaxlab.formats` presets.
    axis: the axis the blocks run along, in every tensor.

  Returns:
    {name: {"sqnr_db": total signal / total error in dB, "mse": total error per element,
    "e1m2_share": the E1M2 share weighted by tensor size}}.

  Example:
    >>> xs = [synthetic_tensor("uniform", jax.random.key(i), (4, 32)) for i in range(3)]
    >>> sorted(error_table(xs, ("nvfp4", "mixfp4"))["nvfp4"])
    ['e1m2_share', 'mse', 'sqnr_db']
  """
  for n in names:
    _preset(n)
  groups: dict[tuple[int, ...], list[Array]] = {}
  for x in tensors:
    groups.setdefault(tuple(x.shape), []).append(x)
  order = [x for g in groups.values() for x in g]
  stats = _multi_stats(tuple(jnp.stack(g) for g in groups.values()), tuple(names), axis)
  sizes = [x.size for x in order]
  out = {}
  for n in names:
    err = float(sum(jnp.sum(st[0]) for st in stats[n]))
    sig = float(sum(jnp.sum(st[1]) for st in stats[n]))
    shares = np.concatenate([np.asarray(st[2]) for st in stats[n]])
    out[n] = {"sqnr_db": 10 * math.log10(sig / max(err, 1e-30)), "mse": err / sum(sizes),
              "e1m2_share": float(np.average(shares, weights=sizes))}
  return out


def kernel_errors(params: Mapping, names: Sequence[str]) -> dict[str, dict[str, float]]:
  """`error_table` over every 2-D projection kernel [K, F] of `params`, blocks along K.

  Args:
    params: a model's parameters (leaves named "kernel").
    names: `jaxlab.formats` presets.

  Returns:
    {name: {"sqnr_db", "mse", "e1m2_share"}}, totals over all kernels.

  Example:
    >>> params = {"a": {"kernel": synthetic_tensor("gaussian", jax.random.key(0), (32, 8))}}
    >>> kernel_errors(params, ("nvfp4",))["nvfp4"]["sqnr_db"] > 15
    True
  """
  flat = traverse_util.flatten_dict(params, sep="/")
  kernels = [v for k, v in flat.items() if k.endswith("/kernel") and v.ndim == 2]
  return error_table(kernels, names, axis=0)

