"""`QDense`: a bias-free Dense with fake-quantized weight and input, and its policy.

The `jaxlab.nn` transformer builds every projection through
`TransformerConfig.dense`; `qdense_factory(policy)` returns such a factory, so

  model = jaxlab.train.lm.make_model(config, dense=qdense_factory(policy))

trains with W`w_bits`A`a_bits` fake quantization (QAT). Weights [K, F] are
grouped along K per output channel, inputs [..., K] along K per token.

Full precision is kept for the LM head (`lm_head`) and the token embedding
(not a Dense): the paper quantizes the linear layers of the blocks
(q, k, v, o, gate, up, down). `QuantPolicy.quantize_lm_head=True` changes that.

`QDense` sows the kurtosis of its input into the "kurtosis" collection under
the name "input" (a no-op unless the collection is mutable):

  _, state = model.apply(variables, tokens, mutable=["kurtosis"])

Example:
  >>> import jax, jax.numpy as jnp
  >>> policy = QuantPolicy(w_bits=4, a_bits=4, group_size=16,
  ...                      overrides={"mlp/down": {"a_bits": 8}})
  >>> policy.resolve("block_0/mlp/down").a_bits, policy.resolve("block_0/attn/q").a_bits
  (8, 4)
  >>> layer = QDense(8, policy=policy)
  >>> params = layer.init(jax.random.key(0), jnp.ones((2, 32)))
  >>> layer.apply(params, jnp.ones((2, 32))).shape
  (2, 8)
"""

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax import Array
from jaxtyping import Float

from jaxlab import formats
from jaxlab.nn import default_dense
from jaxlab.quant.fake_quant import (
  ABSMAX_M,
  FULL_PRECISION_BITS,
  check_bits,
  fake_quant,
  fake_quant_dynamic,
  grid_bounds,
  is_grid_family,
  kurtosis,
  lac_init_logit,
  resolve_format,
  resolve_group_size,
)

ACT_QUANTIZERS = ("absmax", "lac")
# Over what a named activation format's tensor scale is taken (see `QuantSpec.act_scale`).
ACT_SCALES = ("tensor", "token")
_OVERRIDABLE = ("w_bits", "a_bits", "group_size", "w_group_size", "a_group_size", "fmt",
                "w_fmt", "a_fmt", "act_quantizer", "absmax_m", "lac_init", "act_scale")


@dataclasses.dataclass(frozen=True)
class QuantSpec:
  """The quantization of one Dense (a policy resolved at a module path).

  Formats: `fmt` (both operands; `w_fmt` / `a_fmt` = "same" or per operand)
  is a parametric grid family ("int" with `*_bits` in 2..8, "fp4" with 4),
  whose group size is `group_size` / `w_group_size` / `a_group_size`; or a
  `jaxlab.formats` preset name ("nvfp4", "mxfp4", "int4_g32", "fp8_e4m3_row",
  ...), which fixes element bits and block size: then that operand's bits must
  be the format's element bits (or >= 16 = full precision) and its group size
  is not used. Example: `QuantSpec(w_fmt="nvfp4", a_fmt="int4_g32")`.

  `act_scale` says over what a named activation format with a tensor scale (NVFP4,
  MixFP4) takes it: "tensor" (default), the whole input of a call, so a row's
  quantization depends on the other rows of its batch; "token", each token's K values
  alone, so it does not. The grid families have group scales only: both readings agree.
  """
  w_bits: int = 4
  a_bits: int = 4
  group_size: int | None = 128
  w_group_size: int | None | str = "same"
  a_group_size: int | None | str = "same"
  fmt: Any = "int"
  w_fmt: Any = "same"
  a_fmt: Any = "same"
  act_quantizer: str = "absmax"
  absmax_m: str = "paper"
  lac_init: float = 0.98
  act_scale: str = "tensor"

  def __post_init__(self):
    resolve_format(self.fmt, "fmt")
    for name in ("w_fmt", "a_fmt"):
      if getattr(self, name) != "same":
        resolve_format(getattr(self, name), name)
    if self.absmax_m not in ABSMAX_M:
      raise ValueError(f"absmax_m must be one of {ABSMAX_M}, got {self.absmax_m!r}")
    for name, fmt in (("w_bits", self.weight_fmt), ("a_bits", self.act_fmt)):
      bits = getattr(self, name)
      check_bits(bits, name)
      if bits >= FULL_PRECISION_BITS:
        continue
      if is_grid_family(fmt):
        try:
          grid_bounds(bits, fmt, self.absmax_m)
        except ValueError as e:
          raise ValueError(f"{name}: {e}") from None
      elif bits != (f := resolve_format(fmt)).element_bits:
        raise ValueError(f"{name}={bits} contradicts format {fmt!r} ({f.element_bits}-bit "
                         f"elements); use {name}={f.element_bits} or >= {FULL_PRECISION_BITS}")
    if self.act_scale not in ACT_SCALES:
      raise ValueError(f"act_scale must be one of {ACT_SCALES}, got {self.act_scale!r}")
    if self.act_quantizer not in ACT_QUANTIZERS:
      raise ValueError(f"act_quantizer must be one of {ACT_QUANTIZERS}, got {self.act_quantizer!r}")
    if self.act_quantizer == "lac" and not is_grid_family(self.act_fmt):
      raise ValueError("act_quantizer='lac' needs a grid family activation format ('int', 'fp4'), "
                       f"got {self.act_fmt!r}")
    for name in ("group_size", "w_group_size", "a_group_size"):
      g = getattr(self, name)
      ok = (g is None or (isinstance(g, str) and g == "same" and name != "group_size")
            or isinstance(g, int) and not isinstance(g, bool) and g > 0)
      if not ok:
        raise ValueError(f"{name} must be a positive int or None (per-channel), got {g!r}")
    if (isinstance(self.lac_init, bool) or not isinstance(self.lac_init, (int, float))
        or not 0.0 < self.lac_init < 1.0):
      raise ValueError(f"lac_init must be a float in (0, 1), got {self.lac_init!r}")

  @property
  def weight_fmt(self) -> Any:
    return self.fmt if isinstance(self.w_fmt, str) and self.w_fmt == "same" else self.w_fmt

  @property
  def act_fmt(self) -> Any:
    return self.fmt if isinstance(self.a_fmt, str) and self.a_fmt == "same" else self.a_fmt

  @property
  def weight_group(self) -> int | None:
    return self.group_size if self.w_group_size == "same" else self.w_group_size

  @property
  def act_group(self) -> int | None:
    return self.group_size if self.a_group_size == "same" else self.a_group_size


def _check_runtime_groups(spec: QuantSpec, group_sizes: tuple, where: str = "") -> None:
  """Raises ValueError unless each quantized operand's G of `spec` is in `group_sizes`.

  An operand at >= 16 bits (full precision) has no G to check. Values are
  compared as given (None = per-channel), before K is known.
  """
  for label, bits, g in (("w", spec.w_bits, spec.weight_group),
                         ("a", spec.a_bits, spec.act_group)):
    if bits < FULL_PRECISION_BITS and g not in group_sizes:
      raise ValueError(f"{where}{label}_group_size/group_size={g!r} is not one of "
                       f"runtime_group_sizes {tuple(group_sizes)}: a run-time model only "
                       "switches between those (add it to them)")


@dataclasses.dataclass(frozen=True)
class QuantPolicy(QuantSpec):
  """A `QuantSpec` for every Dense plus per-module overrides by module path.

  Besides `QuantSpec`'s attributes (w_bits / a_bits (>= 16 = full
  precision), group_size (G along K; None = per-channel weights / per-token
  activations), w_group_size / a_group_size ("same" = group_size), fmt / w_fmt
  / a_fmt (grid family "int" or "fp4", or a `jaxlab.formats` preset such as
  "nvfp4"), act_quantizer ("absmax" or "lac"), absmax_m, lac_init, act_scale):

  Attributes:
    overrides: {regex: {field: value}}; a module whose "/"-joined path matches
      a regex (`re.search`) gets those fields; later entries win. Example:
      {"mlp/down": {"a_bits": 8}} keeps every FC2 input at 8 bits. A pattern
      that matches no Dense of the model is a ValueError (raised by the first
      `apply` of a model built with `QDense`, by `runtime_knobs`, or by
      `check_overrides(policy, params)`), so a typo is never silently ignored.
    quantize_lm_head: also quantize `lm_head` (default False: full precision).
    runtime_group_sizes: None (bits and G fixed at trace time), or a tuple of
      group sizes (None = per-channel) that the bits and G of every QDense may
      switch between at run time: they live in the "qat" variable collection
      (w_bits, a_bits, w_group, a_group; int32 scalars; bits >= 16 = off) and
      `runtime_knobs` fills them from any static policy. One compiled program
      then trains every precision and G of a grid (INT formats, AbsMax only).
      The policy's own G values (and its overrides', for operands below 16
      bits) are the initial knobs, so each must be one of these sizes
      (ValueError otherwise; a G is never silently replaced by another).
  """
  overrides: Any = ()
  quantize_lm_head: bool = False
  runtime_group_sizes: tuple | None = None

  def __post_init__(self):
    super().__post_init__()
    items = self.overrides.items() if isinstance(self.overrides, Mapping) else self.overrides
    frozen = []
    for pattern, fields in items:
      fields = dict(fields)
      bad = sorted(set(fields) - set(_OVERRIDABLE))
      if bad:
        raise ValueError(
            f"overrides[{pattern!r}] has unknown fields {bad}; allowed: {_OVERRIDABLE}")
      if not isinstance(pattern, str):
        raise ValueError(f"overrides keys must be regex strings, got {pattern!r}")
      try:
        re.compile(pattern)
      except re.error as e:
        raise ValueError(f"overrides[{pattern!r}] is not a valid regex: {e}") from None
      frozen.append((pattern, tuple(sorted(fields.items()))))
    # Hashable (a linen module field must be).
    object.__setattr__(self, "overrides", tuple(frozen))
    for pattern, over in frozen:  # bad override values fail here, not at trace time
      try:
        QuantSpec(**{**{f: getattr(self, f) for f in _OVERRIDABLE}, **dict(over)})
      except ValueError as e:
        raise ValueError(f"overrides[{pattern!r}]: {e}") from None
    if self.runtime_group_sizes is not None:
      sizes = self.runtime_group_sizes
      if isinstance(sizes, str) or not isinstance(sizes, (tuple, list)) or not sizes:
        raise ValueError("runtime_group_sizes must be None or a non-empty tuple of group sizes, "
                         f"got {sizes!r}")
      for g in sizes:
        if g is not None and (isinstance(g, bool) or not isinstance(g, int) or g < 1):
          raise ValueError("runtime_group_sizes entries must be positive ints or None "
                           f"(per-channel), got {g!r} in {sizes!r}")
      object.__setattr__(self, "runtime_group_sizes", tuple(sizes))
      # The policy's own G (and each override's) are the initial knobs of the model.
      for pattern, spec in [(None, self)] + [
          (p, QuantSpec(**{**{f: getattr(self, f) for f in _OVERRIDABLE}, **dict(over)}))
          for p, over in self.overrides]:
        where = "" if pattern is None else f"overrides[{pattern!r}]: "
        if (spec.weight_fmt != "int" or spec.act_fmt != "int"
            or spec.act_quantizer != "absmax"):
          raise ValueError(f"{where}runtime_group_sizes needs fmt='int' and "
                           f"act_quantizer='absmax', got fmt={spec.fmt!r} "
                           f"(w_fmt={spec.w_fmt!r}, a_fmt={spec.a_fmt!r}), "
                           f"act_quantizer={spec.act_quantizer!r}")
        _check_runtime_groups(spec, self.runtime_group_sizes, where)

  def resolve(self, path: str) -> QuantSpec:
    """The spec of the module at `path` (e.g. "block_0/mlp/down")."""
    fields = {f: getattr(self, f) for f in _OVERRIDABLE}
    for pattern, over in self.overrides:
      if re.search(pattern, path):
        fields.update(dict(over))
    return QuantSpec(**fields)

  @property
  def name(self) -> str:
    """Short label, e.g. "W4A4 G128", "W[nvfp4]A[int4_g32]" or "FP32"."""
    fp = FULL_PRECISION_BITS
    if self.w_bits >= fp and self.a_bits >= fp:
      return "FP32"
    def part(bits, fmt):
      if bits >= fp:
        return "16"
      if is_grid_family(fmt):
        return str(bits)
      return f"[{formats.format_name(resolve_format(fmt)) or fmt}]"
    w, a = part(self.w_bits, self.weight_fmt), part(self.a_bits, self.act_fmt)
    grid = any(b < fp and is_grid_family(f) for b, f in ((self.w_bits, self.weight_fmt),
                                                         (self.a_bits, self.act_fmt)))
    g = ("" if not grid else " Gch" if self.group_size is None else f" G{self.group_size}")
    return f"W{w}A{a}{g}" + (" +overrides" if self.overrides else "")


def _dense_paths(tree: Mapping, prefix: tuple[str, ...] = ()) -> list[str]:
  """"/"-joined paths of the modules in a params tree that hold a "kernel"."""
  out = []
  for key, v in tree.items():
    if isinstance(v, Mapping):
      path = prefix + (str(key),)
      if "kernel" in v:
        out.append("/".join(path))
      out += _dense_paths(v, path)
  return out


def check_overrides(policy: QuantPolicy, params: Mapping | list) -> None:
  """Raises ValueError naming every override pattern that matches no Dense of a model.

  Args:
    policy: a `QuantPolicy`.
    params: the model's params tree (or variables with a "params" entry), or
      a list of module paths ("block_0/mlp/down", ...).

  Raises:
    ValueError: some `policy.overrides` pattern matches none of the paths.

  Example:
    >>> policy = QuantPolicy(overrides={"mlp/donw": {"a_bits": 8}})
    >>> check_overrides(policy, ["block_0/mlp/down"])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: QuantPolicy overrides ['mlp/donw'] match no Dense module of this model ...
  """
  if isinstance(params, Mapping):
    tree = params.get("params", params)
    paths = _dense_paths(tree) if isinstance(tree, Mapping) else []
  else:
    paths = list(params)
  unknown = [p for p, _ in policy.overrides if not any(re.search(p, path) for path in paths)]
  if unknown:
    shown = ", ".join(paths[:12]) + (", ..." if len(paths) > 12 else "")
    raise ValueError(f"QuantPolicy overrides {unknown} match no Dense module of this model "
                     f"(a typo?); its module paths: [{shown}]")


def _has_path(tree: Mapping, path: tuple[str, ...]) -> bool:
  for key in path:
    if not isinstance(tree, Mapping) or key not in tree:
      return False
    tree = tree[key]
  return True


class QDense(nn.Module):
  """Bias-free Dense y = fq_a(x) @ fq_w(W); same parameter name ("kernel") as `nn.Dense`.

  Attributes:
    features: output width F.
    policy: a `QuantPolicy` (resolved at this module's path) or a `QuantSpec`.
    dtype / param_dtype: computation / parameter dtypes.
    path_name: path used to resolve the policy (default: this module's scope
      path joined with "/").
  """
  features: int
  policy: QuantSpec = QuantPolicy()
  dtype: Any = jnp.float32
  param_dtype: Any = jnp.float32
  path_name: str | None = None

  @nn.compact
  def __call__(self, x: Float[Array, "*b k"]) -> Float[Array, "*b f"]:
    path = self.path_name if self.path_name is not None else "/".join(self.scope.path)
    spec = self.policy.resolve(path) if isinstance(self.policy, QuantPolicy) else self.policy
    self._check_overrides()
    k = x.shape[-1]
    if getattr(self.policy, "runtime_group_sizes", None) is not None:
      return self._runtime(x, spec, self.policy.runtime_group_sizes, path)
    # Validate group sizes (or a named format's block) before any parameter is created.
    wfmt, afmt = resolve_format(spec.weight_fmt), resolve_format(spec.act_fmt)
    wg = ag = None
    if spec.w_bits < FULL_PRECISION_BITS:
      if is_grid_family(wfmt):
        wg = resolve_group_size(k, spec.weight_group, "w_group_size/group_size")
      else:
        formats.layout((self.features, k), -1, wfmt)
    if spec.a_bits < FULL_PRECISION_BITS:
      if is_grid_family(afmt):
        ag = resolve_group_size(k, spec.act_group, "a_group_size/group_size")
      else:
        formats.layout(x.shape, -1, afmt)
    kernel = self.param("kernel", nn.initializers.lecun_normal(), (k, self.features),
                        self.param_dtype)
    self.sow("kurtosis", "input", kurtosis(x))
    if spec.a_bits < FULL_PRECISION_BITS:
      logit = None
      if spec.act_quantizer == "lac":
        init = lac_init_logit(spec.lac_init)
        logit = self.param("act_clip_logit", nn.initializers.constant(init), (k // ag,),
                           jnp.float32)
      if is_grid_family(afmt):
        x = fake_quant(x, bits=spec.a_bits, group_size=ag, fmt=afmt, absmax_m=spec.absmax_m,
                       clip_logit=logit)
      elif spec.act_scale == "token":  # each token a [1, K] tensor of its own
        rows = x.reshape(-1, 1, k)
        x = jax.vmap(lambda r: fake_quant(r, bits=spec.a_bits, fmt=afmt))(rows).reshape(x.shape)
      else:
        x = fake_quant(x, bits=spec.a_bits, fmt=afmt)
    if spec.w_bits < FULL_PRECISION_BITS:
      # Groups along K per output channel: quantize W^T [F, K] along its last axis.
      if is_grid_family(wfmt):
        kernel = fake_quant(kernel.T, bits=spec.w_bits, group_size=wg, fmt=wfmt,
                            absmax_m=spec.absmax_m).T
      else:
        kernel = fake_quant(kernel.T, bits=spec.w_bits, fmt=wfmt).T
    x, kernel = x.astype(self.dtype), kernel.astype(self.dtype)
    return jnp.einsum("...k,kf->...f", x, kernel)

  def _check_overrides(self) -> None:
    """At apply time, a policy override that matches no Dense of the model is an error.

    The root's params hold every module path then (at init they are still
    being created). Inside a lifted transform (`nn.scan`) the root seen here is
    the transform's own, which lacks this module's path: the check is skipped
    there (`check_overrides` does it explicitly), as for a lone QDense given a
    `path_name` or used as the root module.
    """
    if (not isinstance(self.policy, QuantPolicy) or not self.policy.overrides
        or self.path_name is not None or not self.scope.path or self.is_initializing()):
      return
    root = self.scope.root.variables().get("params")
    if isinstance(root, Mapping) and _has_path(root, tuple(self.scope.path)):
      check_overrides(self.policy, root)

  def _runtime(self, x, spec, group_sizes, path):
    k = x.shape[-1]
    sizes = tuple(resolve_group_size(k, g, "runtime_group_sizes") for g in group_sizes)
    # The initial knobs (this path's spec, overrides combined) must be a listed G.
    for label, bits, g in (("w", spec.w_bits, spec.weight_group),
                           ("a", spec.a_bits, spec.act_group)):
      if bits < FULL_PRECISION_BITS and resolve_group_size(k, g) not in sizes:
        raise ValueError(f"{label}_group_size/group_size={g!r} of the module at {path!r} is "
                         f"not one of runtime_group_sizes {group_sizes} (K={k})")
    # Group -1 stands for per-channel/per-token (G = K).
    init = lambda bits, g: (jnp.int32(bits), jnp.int32(-1 if g is None else g))
    w_bits, w_group = init(spec.w_bits, spec.weight_group)
    a_bits, a_group = init(spec.a_bits, spec.act_group)
    knobs = {name: self.variable("qat", name, lambda v=v: v).value
             for name, v in (("w_bits", w_bits), ("a_bits", a_bits), ("w_group", w_group),
                             ("a_group", a_group))}
    kernel = self.param("kernel", nn.initializers.lecun_normal(), (k, self.features),
                        self.param_dtype)
    self.sow("kurtosis", "input", kurtosis(x))
    for name in ("w_group", "a_group"):
      knobs[name] = jnp.where(knobs[name] < 0, k, knobs[name])
    x = fake_quant_dynamic(x, bits=knobs["a_bits"], group_size=knobs["a_group"],
                          group_sizes=sizes, absmax_m=spec.absmax_m)
    kernel = fake_quant_dynamic(kernel.T, bits=knobs["w_bits"], group_size=knobs["w_group"],
                               group_sizes=sizes, absmax_m=spec.absmax_m).T
    return jnp.einsum("...k,kf->...f", x.astype(self.dtype), kernel.astype(self.dtype))


def runtime_knobs(policy: QuantPolicy, qat: Mapping, prefix: str = "",
                  group_sizes: tuple | None = None) -> dict:
  """The "qat" collection that makes a `runtime_group_sizes` model compute `policy`.

  Args:
    policy: a static `QuantPolicy` (its G values must be among the model's
      `runtime_group_sizes`).
    qat: the model's "qat" collection (from `model.init`), used for its paths.
    prefix: module path of `qat`'s root (e.g. the `path_name` of a lone QDense).
    group_sizes: the model's `runtime_group_sizes` (default:
      `policy.runtime_group_sizes`). When known, every G that `policy` gives a
      module (an operand below 16 bits) must be one of them; without it an
      unlisted G is caught by the model itself (ValueError for concrete knobs,
      NaN outputs under jit; never another G).

  Returns:
    A tree like `qat` with int32 scalars.

  Raises:
    ValueError: a `policy.overrides` pattern matches no module of `qat`, or a
      resolved G is not in `group_sizes`.

  Example:
    >>> import jax
    >>> policy = QuantPolicy(w_bits=4, a_bits=4, group_size=16, runtime_group_sizes=(16, 32))
    >>> layer = QDense(8, policy=policy)
    >>> variables = jax.eval_shape(layer.init, jax.random.key(0), jnp.ones((2, 32)))  # paths only
    >>> knobs = runtime_knobs(QuantPolicy(w_bits=8, a_bits=16, group_size=32), variables["qat"],
    ...                       group_sizes=(16, 32))  # W8A16 at G = 32: the same program
    >>> sorted((k, int(v)) for k, v in knobs.items())
    [('a_bits', 16), ('a_group', 32), ('w_bits', 8), ('w_group', 32)]
  """
  if group_sizes is None:
    group_sizes = policy.runtime_group_sizes
  knob_paths = []

  def paths(node, path):
    if "w_bits" in node:
      knob_paths.append("/".join(path))
    else:
      for key, v in node.items():
        paths(v, path + (key,))
  paths(qat, (prefix,) if prefix else ())
  check_overrides(policy, knob_paths)

  def walk(node, path):
    if "w_bits" in node:  # a QDense's knobs (the root itself for a lone QDense)
      spec = policy.resolve("/".join(path))
      if group_sizes is not None:
        _check_runtime_groups(spec, tuple(group_sizes), f"runtime_knobs at {'/'.join(path)!r}: ")
      out = {}
      for name, bits, g in (("w", spec.w_bits, spec.weight_group),
                            ("a", spec.a_bits, spec.act_group)):
        out[f"{name}_bits"] = jnp.int32(bits)
        out[f"{name}_group"] = jnp.int32(-1 if g is None else g)
      return out
    return {key: walk(v, path + (key,)) for key, v in node.items()}
  return walk(qat, (prefix,) if prefix else ())


def qdense_factory(policy: QuantPolicy):
  """A `TransformerConfig.dense` factory building `QDense` (lm_head stays `nn.Dense`
  unless `policy.quantize_lm_head`).

  Example:
    >>> dense = qdense_factory(QuantPolicy(w_bits=4, a_bits=4, group_size=16))
    >>> kw = dict(dtype=None, param_dtype=jnp.float32)
    >>> type(dense(8, name="q", **kw)).__name__, type(dense(8, name="lm_head", **kw)).__name__
    ('QDense', 'Dense')
  """
  if not isinstance(policy, QuantPolicy):
    raise ValueError(f"policy must be a QuantPolicy, got {type(policy).__name__}")

  def dense(features: int, *, name: str, dtype: Any, param_dtype: Any) -> nn.Module:
    if name == "lm_head" and not policy.quantize_lm_head:
      return default_dense(features, name=name, dtype=dtype, param_dtype=param_dtype)
    return QDense(features, policy=policy, dtype=dtype, param_dtype=param_dtype, name=name)
  return dense
