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
`ptq_study` scores a trained byte LM's held-out bits/byte in FP32, W4A16 and W4A4.

Example:
  >>> import dataclasses, jax, jax.numpy as jnp
  >>> from jaxlab.nn import Transformer, TransformerConfig
  >>> cfg = TransformerConfig(d_model=32, num_layers=1, num_heads=2, num_kv_heads=1, d_ff=64)
  >>> tokens = jnp.zeros((1, 8), jnp.int32)
  >>> params = Transformer(cfg).init(jax.random.key(0), tokens)["params"]
  >>> w4 = fake_quant_kernels(params, "nvfp4")                                  # W4A16
  >>> w4a4 = Transformer(dataclasses.replace(
  ...     cfg, dense=qdense_factory(activation_policy("nvfp4"))))               # W4A4
  >>> w4a4.apply({"params": w4}, tokens).shape
  (1, 8, 256)
"""

import dataclasses
import functools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import traverse_util
from jax import Array
from jaxtyping import Float

from jaxlab import data, formats
from jaxlab.nn import Transformer
from jaxlab.quant.fake_quant import FULL_PRECISION_BITS
from jaxlab.quant.qdense import QuantPolicy, qdense_factory
from jaxlab.train import lm as train_lm

DISTRIBUTIONS = ("gaussian", "laplace", "student_t3", "uniform")
EVAL_SEED_STRIDE = 1000  # window seed of evaluation seed s: lm.eval_seed + 1000 * s

__all__ = ["DISTRIBUTIONS", "EVAL_SEED_STRIDE", "activation_policy", "error_table",
           "fake_quant_kernels", "format_error", "kernel_errors", "ptq_study", "synthetic_tensor"]


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


def ptq_study(config: ml_collections.ConfigDict, cache_dir: str,
              seeds: Sequence[int]) -> dict[str, Any]:
  """PTQ of a base byte LM: held-out bits/byte in FP32, W4A16 and W4A4 per format and seed.

  Args:
    config: the base LM's sections (`jaxlab.train.lm.pretrained`), `formats` (the
      presets of the weight error study) and `lm`: ptq_formats, quantize_lm_head,
      act_scale, eval_batch_size, eval_num_batches, eval_seq_len, eval_seed.
    cache_dir: where the base LM is trained once and reloaded afterwards.
    seeds: evaluation seeds; seed s scores every regime on its own held-out windows
      (window seed `lm.eval_seed + EVAL_SEED_STRIDE * s`).

  Returns:
    Per-seed lists (in `seeds` order) of val bits/byte: "fp32" [seeds] and
    "w4a16" / "w4a4" {format: [seeds]}; "weights" (`kernel_errors` of the base LM's
    kernels for `config.formats`), "num_params" and "seeds".

  Example::

    from launch.configs import load_config
    res = ptq_study(load_config("fp4", "smoke"), "runs/base_lm", seeds=(0, 1))
    res["w4a4"]["mixfp4"]   # bits/byte per seed
  """
  c = config.lm
  model, params, corpus = train_lm.pretrained(config, cache_dir)
  arms = [("fp32", None, model, params)]
  for name in c.ptq_formats:
    qparams = fake_quant_kernels(params, name, quantize_lm_head=c.quantize_lm_head)
    policy = activation_policy(name, act_scale=c.act_scale, quantize_lm_head=c.quantize_lm_head)
    w4a4 = Transformer(dataclasses.replace(model.config, dense=qdense_factory(policy)))
    arms += [("w4a16", name, model, qparams), ("w4a4", name, w4a4, qparams)]
  losses = {m: jax.jit(train_lm.next_byte_loss(m)) for m in {a[2] for a in arms}}
  res: dict[str, Any] = {"fp32": [], "w4a16": {n: [] for n in c.ptq_formats},
                         "w4a4": {n: [] for n in c.ptq_formats}, "seeds": list(seeds)}
  for s in seeds:
    batches = [data.lm_batch(corpus.val, i, batch_size=c.eval_batch_size, seq_len=c.eval_seq_len,
                             seed=c.eval_seed + EVAL_SEED_STRIDE * s)
               for i in range(c.eval_num_batches)]
    for regime, name, m, p in arms:
      bpb = train_lm.bits_per_byte(lambda p, b, m=m: losses[m](p, b, None)[0], p, batches)
      (res["fp32"] if name is None else res[regime][name]).append(bpb)
  res["weights"] = kernel_errors(params, config.formats)
  res["num_params"] = int(sum(x.size for x in jax.tree.leaves(params)))
  return res
