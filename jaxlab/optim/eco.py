"""ECO: error-compensating optimizers for training without master weights.

Nikdan, Zandieh, Alistarh, Mirrokni, "Quantized Training without
Full-Precision Master Weights" (arXiv 2601.22101). Parameters are kept only in
a low-precision format (`jaxlab.optim.quantizers`); each step forms the FP32
iterate W~ from the dequantized weights, requantizes it, and folds the residual
e = W~ - Q(W~) into the first moment instead of storing it:

  SGDM:  M <- M~ + ((1 - lr*wd) / lr) * (1 - 1/beta) * e
  AdamW: m <- m~ + ((1 - lr*wd) * (1 - b1**t) / lr) * (1 - 1/b1) * (sqrt(v_hat) + eps) * e

(the (1 - lr*wd) factor is the weight-decay fix of the spec; v is untouched).
The returned updates are modular bit differences, so `optax.apply_updates`
lands bit-exactly on Q(W~) (see `quantizers`). The state holds
(count, mu[, nu], key[, err]) and no float copy of the parameters.

Gradients are taken with respect to the *dequantized* weights: `grads` has the
float structure of `dequantize_params(params)`, `params` is the `QParam` tree,
and the updates have the `QParam` structure.

`injection` selects the variant (one module, the same update otherwise):
  "eco"   the paper's memory-free pullback (default);
  "none"  naive master-weight removal: W <- Q(W~), the residual is dropped;
  "exact" exact error feedback (stores e; an upper bound): W~ is formed from
          Q-weights + the stored e, i.e. exactly the master-weight iterate.
          For a constant lr this equals the spec's momentum form
          M <- M~ + E_t/lr - E_{t+1}/(beta lr); under a schedule it stays exact
          (jaxlab interpretation of the exact variant).
"""

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax import Array

from jaxlab.optim.quantizers import Quantizer, bits_delta, check_qparams, is_qparam

ScalarOrSchedule = float | Array | Callable[[Array], Array]
Num = float | Array  # a python number, or an array under optax.inject_hyperparams
INJECTIONS = ("eco", "none", "exact")


class EcoAdamWState(NamedTuple):
  """State of `eco_adamw` (and its naive / exact-EF variants)."""
  count: Array  # shape=(), dtype=jnp.int32.
  mu: Any       # float32, structure of the float params.
  nu: Any       # float32, structure of the float params.
  key: Array    # raw PRNG key uint32[2] for stochastic rounding.
  err: Any      # exact variant: the stored residual e; otherwise None.


class EcoSgdmState(NamedTuple):
  """State of `eco_sgdm` (and its naive / exact-EF variants)."""
  count: Array  # shape=(), dtype=jnp.int32.
  mu: Any       # float32 momentum, structure of the float params.
  key: Array    # raw PRNG key uint32[2] for stochastic rounding.
  err: Any      # exact variant: the stored residual e; otherwise None.


def _zeros(params: Any) -> Any:
  return jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.float32), params, is_leaf=is_qparam)


def _lr_value(learning_rate: ScalarOrSchedule, count: Array) -> Array:
  lr = learning_rate(count) if callable(learning_rate) else learning_rate
  lr = jnp.asarray(lr)
  if not jnp.issubdtype(lr.dtype, jnp.floating):
    raise ValueError(
        f"learning_rate must be a float, got dtype {lr.dtype}. Under optax.inject_hyperparams "
        "pass hyperparam_dtype=jnp.float32: QParam trees hold integer bits, and the default "
        "(the params' highest dtype) would cast the learning rate to an integer.")
  return lr.astype(jnp.float32)


def _check_args(injection: str, key: Any) -> Array:
  if injection not in INJECTIONS:
    raise ValueError(f"injection must be one of {INJECTIONS}, got {injection!r}")
  if isinstance(key, int):
    return jax.random.PRNGKey(key)  # raw uint32[2]: orbax stores it as plain data
  return key


def _leaf_keys(key: Array, n: int, stochastic: bool) -> tuple[Array, list]:
  if not stochastic:
    return key, [None] * n
  key, sub = jax.random.split(key)
  return key, list(jax.random.split(sub, n))


def _requantize(grads: Any, params: Any, new_float: Callable, quantizer: Quantizer,
                key: Array, stochastic: bool):
  """Forms W~ = new_float(i, g, W) per leaf and requantizes it.

  Returns (QParam-structured bit-delta updates, list of residuals e = W~ - Q(W~),
  the grads treedef, the advanced key).
  """
  g_leaves, treedef = jax.tree.flatten(grads)
  p_leaves = treedef.flatten_up_to(params)
  n = len(g_leaves)
  key, keys = _leaf_keys(key, n, stochastic)
  w_tilde = [new_float(i, g.astype(jnp.float32), p.dequantize())
             for i, (g, p) in enumerate(zip(g_leaves, p_leaves, strict=True))]
  # Leaves of one format and shape are requantized together (vmap): one random-bits
  # op per group instead of per leaf keeps compile time low for deep models.
  groups: dict[tuple, list[int]] = {}
  for i, p in enumerate(p_leaves):
    groups.setdefault((p.quantizer, p.shape), []).append(i)
  new: list[Any] = [None] * n
  errs: list[Any] = [None] * n
  for (q, _), idx in groups.items():
    x = jnp.stack([w_tilde[i] for i in idx])
    if stochastic and q.name != "f32":
      qp = jax.vmap(q.quantize)(x, jnp.stack([keys[i] for i in idx]))
    else:
      qp = jax.vmap(q.quantize)(x)
    e = x - jax.vmap(q.dequantize)(qp)
    for j, i in enumerate(idx):
      new[i] = jax.tree.map(lambda a, j=j: a[j], qp)
      errs[i] = e[j]
  updates = [bits_delta(a, p) for a, p in zip(new, p_leaves, strict=True)]
  return treedef.unflatten(updates), errs, treedef, key


def eco_adamw(learning_rate: ScalarOrSchedule, b1: Num = 0.9, b2: Num = 0.999,
              eps: Num = 1e-8, weight_decay: Num = 1e-4, *, quantizer: Quantizer,
              stochastic_rounding: bool = True, eps_root: Num = 0.0, key: int | Array = 0,
              injection: str = "eco") -> optax.GradientTransformationExtraArgs:
  """AdamW on low-precision parameters with ECO error injection.

  Per leaf, with t = count + 1 and lr = learning_rate(count):
    m~ = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;  d = sqrt(v/(1-b2^t) + eps_root) + eps
    W~ = W - lr (m~/(1-b1^t) / d + wd W)          (W = dequantized params, FP32)
    W' = Q(W~) (SR with the state key when `stochastic_rounding`);  e = W~ - W'
    m  = m~ + ((1 - lr wd)(1-b1^t)/lr)(1 - 1/b1) d e      ("eco"; 0 when lr = 0)
  With the identity quantizer (e = 0) this is `optax.adamw` exactly.
  At lr = 0 (e.g. the first warmup step) nothing is injected, since 1/lr is
  undefined (jaxlab interpretation).

  Args:
    learning_rate: float or schedule `count -> lr` (injectable with
      `optax.inject_hyperparams(eco_adamw, hyperparam_dtype=jnp.float32,
      static_args=("stochastic_rounding", "key", "injection"))`).
    b1, b2, eps, weight_decay, eps_root: as in `optax.adamw` (decoupled decay
      scaled by lr, applied to every leaf).
    quantizer: the storage format of the >= 2-D leaves (1-D leaves may be F32).
    stochastic_rounding: round Q stochastically with the key carried in state.
    key: int seed or PRNG key for the SR stream.
    injection: "eco" (default), "none" (naive removal) or "exact" (stores e).

  Returns:
    An `optax.GradientTransformationExtraArgs`. `update(grads, state, params)`
    needs `params` (a QParam tree), takes grads w.r.t. the dequantized weights,
    ignores extra keyword args, and returns QParam-structured updates.

  Example:
    >>> import jax, jax.numpy as jnp, optax
    >>> from jaxlab.optim import Quantizer, quantize_params, dequantize_params
    >>> q = Quantizer("fp8_e4m3", granularity="row")
    >>> params = quantize_params({"w": jnp.ones((32, 8))}, q)
    >>> tx = optax.chain(optax.clip_by_global_norm(1.0), eco_adamw(1e-2, quantizer=q))
    >>> state = tx.init(params)
    >>> grads = {"w": jnp.full((32, 8), 0.1)}
    >>> updates, state = tx.update(grads, state, params)
    >>> params = optax.apply_updates(params, updates)
    >>> dequantize_params(params)["w"].shape
    (32, 8)
  """
  key = _check_args(injection, key)

  def init_fn(params):
    check_qparams(params, quantizer, where="eco_adamw.init")
    err = _zeros(params) if injection == "exact" else None
    return EcoAdamWState(jnp.zeros([], jnp.int32), _zeros(params), _zeros(params), key, err)

  def update_fn(updates, state, params=None, **extra_args):
    del extra_args
    if params is None:
      raise ValueError("eco_adamw.update needs params (the QParam tree)")
    check_qparams(params, quantizer, where="eco_adamw.update")
    lr = _lr_value(learning_rate, state.count)
    count = optax.safe_int32_increment(state.count)
    t = count.astype(jnp.float32)
    bc1 = 1.0 - jnp.float32(b1) ** t
    bc2 = 1.0 - jnp.float32(b2) ** t
    mu = jax.tree.map(lambda m, g: b1 * m + (1.0 - b1) * g.astype(jnp.float32), state.mu, updates)
    nu = jax.tree.map(lambda v, g: b2 * v + (1.0 - b2) * jnp.square(g.astype(jnp.float32)),
                      state.nu, updates)
    mu_l, nu_l = jax.tree.leaves(mu), jax.tree.leaves(nu)
    err_l = jax.tree.leaves(state.err) if injection == "exact" else None
    denom = [jnp.sqrt(v / bc2 + eps_root) + eps for v in nu_l]

    def new_float(i, g, w):
      del g
      if err_l is not None:
        w = w + err_l[i]
      return w + (-lr) * ((mu_l[i] / bc1) / denom[i] + weight_decay * w)

    out, errs, treedef, new_key = _requantize(updates, params, new_float, quantizer, state.key,
                                             stochastic_rounding)
    if injection == "eco":
      coef = jnp.where(lr > 0, (1.0 - lr * weight_decay) * bc1 * (1.0 - 1.0 / b1)
                       / jnp.where(lr > 0, lr, 1.0), 0.0)
      mu = treedef.unflatten([m + coef * d * e
                              for m, d, e in zip(mu_l, denom, errs, strict=True)])
    err = treedef.unflatten(errs) if injection == "exact" else None
    return out, EcoAdamWState(count, mu, nu, new_key, err)

  return optax.GradientTransformationExtraArgs(init_fn, update_fn)


def eco_sgdm(learning_rate: ScalarOrSchedule, momentum: Num = 0.9, *, quantizer: Quantizer,
             stochastic_rounding: bool = True, weight_decay: Num = 0.0, dampening: bool = False,
             key: int | Array = 0, injection: str = "eco") -> optax.GradientTransformationExtraArgs:
  """SGD with momentum on low-precision parameters with ECO error injection.

  Per leaf, with lr = learning_rate(count):
    M~ = beta M + c g   (c = 1, optax.sgd's trace; c = 1-beta with `dampening`,
                         the paper's Alg. 2 -- the injection is the same)
    W~ = W - lr (M~ + wd W);  W' = Q(W~);  e = W~ - W'
    M  = M~ + ((1 - lr wd)/lr)(1 - 1/beta) e              ("eco"; 0 when lr = 0)
  With the identity quantizer this is `optax.sgd(lr, momentum)` (plus decay).

  Args:
    learning_rate: float or schedule (injectable, see `eco_adamw`).
    momentum: beta in (0, 1).
    quantizer: storage format of the >= 2-D leaves.
    stochastic_rounding: SR with the state key.
    weight_decay: decoupled decay scaled by lr.
    dampening: use (1-beta) g in the momentum (the paper's Alg. 2 form).
    key: int seed or PRNG key.
    injection: "eco", "none" (naive removal) or "exact" (stores e).

  Returns:
    An `optax.GradientTransformationExtraArgs` (see `eco_adamw`).

  Example:
    >>> import jax.numpy as jnp, optax
    >>> from jaxlab.optim import Quantizer, quantize_params
    >>> q = Quantizer("grid", step=0.125)
    >>> params = quantize_params({"w": jnp.zeros((4, 4))}, q)
    >>> tx = eco_sgdm(0.01, 0.9, quantizer=q, stochastic_rounding=False)
    >>> state = tx.init(params)
    >>> updates, state = tx.update({"w": jnp.ones((4, 4))}, state, params)
    >>> int(optax.apply_updates(params, updates)["w"].codes.sum())  # 0.01 < half a step: carried
    0
  """
  key = _check_args(injection, key)
  if isinstance(momentum, (int, float)) and not 0.0 < momentum < 1.0:
    raise ValueError(f"momentum must be in (0, 1) for ECO's injection, got {momentum}")

  def init_fn(params):
    check_qparams(params, quantizer, where="eco_sgdm.init")
    err = _zeros(params) if injection == "exact" else None
    return EcoSgdmState(jnp.zeros([], jnp.int32), _zeros(params), key, err)

  def update_fn(updates, state, params=None, **extra_args):
    del extra_args
    if params is None:
      raise ValueError("eco_sgdm.update needs params (the QParam tree)")
    check_qparams(params, quantizer, where="eco_sgdm.update")
    lr = _lr_value(learning_rate, state.count)
    c = (1.0 - momentum) if dampening else 1.0
    mu = jax.tree.map(lambda m, g: momentum * m + c * g.astype(jnp.float32), state.mu, updates)
    mu_l = jax.tree.leaves(mu)
    err_l = jax.tree.leaves(state.err) if injection == "exact" else None

    def new_float(i, g, w):
      del g
      if err_l is not None:
        w = w + err_l[i]
      return w + (-lr) * (mu_l[i] + weight_decay * w)

    out, errs, treedef, new_key = _requantize(updates, params, new_float, quantizer, state.key,
                                             stochastic_rounding)
    if injection == "eco":
      coef = jnp.where(lr > 0, (1.0 - lr * weight_decay) * (1.0 - 1.0 / momentum)
                       / jnp.where(lr > 0, lr, 1.0), 0.0)
      mu = treedef.unflatten([m + coef * e for m, e in zip(mu_l, errs, strict=True)])
    err = treedef.unflatten(errs) if injection == "exact" else None
    return out, EcoSgdmState(optax.safe_int32_increment(state.count), mu, new_key, err)

  return optax.GradientTransformationExtraArgs(init_fn, update_fn)


__all__ = ["EcoAdamWState", "EcoSgdmState", "INJECTIONS", "eco_adamw", "eco_sgdm"]
