"""ECO: error-compensating optimizers for training without master weights.

Nikdan, Zandieh, Alistarh, Mirrokni, "Quantized Training without
Full-Precision Master Weights" (arXiv 2601.22101). Parameters are kept only in
a low-precision format (`jaxlab.optim.quantizers`); each step forms the FP32
iterate W~ from the dequantized weights, requantizes it, and folds the residual
e = W~ - Q(W~) into the first moment instead of storing it:

  SGDM:  M <- M~ + ((1 - lr*wd) / lr) * (1 - 1/beta) * e
  AdamW: m <- m~ + ((1 - lr*wd) * (1 - b1**t) / lr) * (1 - 1/b1) * (sqrt(v_hat) + eps) * e

(the (1 - lr*wd) factor is the weight-decay fix of the spec; v is untouched).
The state holds (count, mu[, nu], key[, err], skipped, landed) and no float
copy of the parameters.

How ECO composes with optax (a jaxlab interpretation; the paper does not say):
  * `init(params)` takes the `QParam` tree or its float view
    (`dequantize_params(params)`; only shapes are read), so wrappers that build
    gradient-shaped buffers from the params (`optax.MultiSteps`) work.
  * `update(grads, state, params)` takes gradients w.r.t. the dequantized
    weights and the `QParam` tree as `params`, and returns updates in the
    gradient (float32) structure: per leaf, the float delta from W to the
    requantized weights. Wrappers that zero, select or mask updates
    (`optax.apply_if_finite`, `optax.masked`, `optax.MultiSteps`,
    `optax.inject_hyperparams`) therefore work unchanged.
  * `apply_eco(params, updates)` replaces `optax.apply_updates` for QParam
    trees: it lands each leaf on Q_RTN(W + u) (a leaf whose update is all zero
    keeps its bits). ECO computes its residual e against exactly that landing
    (the same function): the element codes agree bit-for-bit; a scale or an
    F32 value may differ by an ulp where XLA contracts a multiply-add (FMA)
    differently in the two programs.
  * ECO must be the last transform: it stores a fingerprint of the codes it
    landed on. When the params' codes differ at its next update (e.g.
    `optax.scale(0.5)` placed after ECO once a weight moves a grid step), that
    update is not applied (zero updates; moments, count and key unchanged;
    `state.misplaced` += 1) and `check_eco_state(opt_state)` raises a clear
    error; `jaxlab.train.train_loop` calls it wherever it checks the loss. A
    transform that leaves the updates bit-identical (`optax.scale(1.0)`)
    changes nothing and is accepted. The step raises no error itself: a host
    callback in it would keep the program out of JAX's persistent compilation
    cache, and every run would compile it again.

Non-finite rule: an update whose gradients, learning rate, FP32 iterate W~,
moments or landed weights are not all finite is skipped as a whole: params,
moments, count and key are unchanged, `state.skipped` counts it, and the
updates are zero, so a NaN never becomes a zero weight (FP8/INT4 encode NaN as
0). `raise_on_nonfinite=True` raises instead (a debug flag). Static
hyperparameters out of range raise a `ValueError` at construction.

`injection` selects the variant (one module, the same update otherwise)::

  "eco"   the paper's memory-free pullback (default);
  "none"  naive master-weight removal: W <- Q(W~), the residual is dropped;
  "exact" exact error feedback (stores e; an upper bound): W~ is formed from
          Q-weights + the stored e, i.e. exactly the master-weight iterate.
          For a constant lr this equals the spec's momentum form
          M <- M~ + E_t/lr - E_{t+1}/(beta lr); under a schedule it stays exact
          (jaxlab interpretation of the exact variant).
"""

import inspect
import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import Array

from jaxlab import validation
from jaxlab.optim.quantizers import QParam, Quantizer, check_qparams, is_qparam

ScalarOrSchedule = float | Array | Callable[[Array], Array]
Num = float | Array  # a python number, or an array under optax.inject_hyperparams
INJECTIONS = ("eco", "none", "exact")
# Arguments of the ECO factories that `injectable` keeps static (never hyperparameter arrays).
STATIC_ARGS = ("quantizer", "stochastic_rounding", "key", "injection", "dampening",
               "raise_on_nonfinite")


class EcoAdamWState(NamedTuple):
  """State of `eco_adamw` (and its naive / exact-EF variants)."""
  count: Array    # shape=(), dtype=jnp.int32: accepted updates.
  mu: Any         # float32, structure of the float params (b1 = 0: the carried injection).
  nu: Any         # float32, structure of the float params.
  key: Array      # raw PRNG key uint32[2] for stochastic rounding.
  err: Any        # exact variant: the stored residual e; otherwise None.
  skipped: Array  # shape=(), dtype=jnp.int32: updates skipped by the non-finite rule.
  landed: Array   # shape=(), dtype=jnp.uint32: fingerprint of the bits of the last landing.
  misplaced: Array  # shape=(), dtype=jnp.int32: updates not applied: params not where ECO landed.


class EcoSgdmState(NamedTuple):
  """State of `eco_sgdm` (and its naive / exact-EF variants)."""
  count: Array    # shape=(), dtype=jnp.int32: accepted updates.
  mu: Any         # float32 momentum (momentum = 0: the carried injection).
  key: Array      # raw PRNG key uint32[2] for stochastic rounding.
  err: Any        # exact variant: the stored residual e; otherwise None.
  skipped: Array  # shape=(), dtype=jnp.int32: updates skipped by the non-finite rule.
  landed: Array   # shape=(), dtype=jnp.uint32: fingerprint of the bits of the last landing.
  misplaced: Array  # shape=(), dtype=jnp.int32: updates not applied: params not where ECO landed.


# ----------------------------------------------------------------------------- helpers


def _zeros(params: Any) -> Any:
  return jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.float32), params, is_leaf=is_qparam)


def _is_static_number(x: Any) -> bool:
  return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool)


def _concrete_values(value: Any) -> np.ndarray | None:
  """The values of a number or a concrete array as float64; None for a traced value."""
  if _is_static_number(value):
    return np.asarray(float(value))
  v = validation.concrete(value)
  return v.astype(np.float64) if v is not None and np.issubdtype(v.dtype, np.number) else None


def _check_range(name: str, value: Any, lo: float, hi: float, *, lo_open: bool = False,
                 hi_open: bool = False, where: str) -> None:
  """ValueError unless every value of a number or concrete array lies in the interval.

  A traced value (inject_hyperparams under jit) is covered by the non-finite rule."""
  v = _concrete_values(value)
  if v is None:
    return
  # Finite in float32 too: the step computes in float32 (1e39 would be inf there).
  ok = (np.isfinite(v) & (np.abs(v) <= float(np.finfo(np.float32).max))
        & ((v > lo) if lo_open else (v >= lo)) & ((v < hi) if hi_open else (v <= hi)))
  if not np.all(ok):
    lb, rb = "(" if lo_open else "[", ")" if hi_open else "]"
    raise ValueError(f"{where}: {name} must be a finite number in {lb}{lo:g}, {hi:g}{rb}, "
                     f"got {value!r}")


def _zero_flag(beta: Any) -> bool | Array:
  """beta == 0: a Python bool for a number, a traced bool for an injected hyperparameter."""
  if _is_static_number(beta):
    return bool(beta == 0)
  return jnp.asarray(beta) == 0


def _where0(zero: bool | Array, if_zero: Callable[[], Any], otherwise: Callable[[], Any]) -> Any:
  """`if_zero()` where beta == 0 (see `_zero_flag`), else `otherwise()`; one branch traced when
  beta is a number."""
  if isinstance(zero, bool):
    return if_zero() if zero else otherwise()
  return jnp.where(zero, if_zero(), otherwise())


def _check_learning_rate(learning_rate: Any, where: str) -> None:
  if callable(learning_rate):
    return  # a schedule: its values are covered by the non-finite rule
  _check_range("learning_rate", learning_rate, 0.0, math.inf, hi_open=True, where=where)


def _lr_value(learning_rate: ScalarOrSchedule, count: Array) -> Array:
  lr = learning_rate(count) if callable(learning_rate) else learning_rate
  lr = jnp.asarray(lr)
  if not jnp.issubdtype(lr.dtype, jnp.floating):
    raise ValueError(
        f"learning_rate must be a float, got dtype {lr.dtype}. Under optax.inject_hyperparams "
        "use jaxlab.optim.injectable(eco_adamw) (or pass hyperparam_dtype=jnp.float32): QParam "
        "trees hold integer bits, and the default (the params' highest dtype) would cast the "
        "learning rate to an integer.")
  return lr.astype(jnp.float32)


def _check_args(injection: str, key: Any, where: str) -> Array:
  if injection not in INJECTIONS:
    raise ValueError(f"{where}: injection must be one of {INJECTIONS}, got {injection!r}")
  if key is None:
    key = 0
  if _is_static_number(key):
    return jax.random.PRNGKey(int(key))  # raw uint32[2]: orbax stores it as plain data
  key = jnp.asarray(key) if not isinstance(key, jax.Array) else key
  if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
    return jax.random.key_data(key)
  if key.dtype != jnp.uint32 or key.shape != (2,):
    raise ValueError(
        f"{where}: key must be an int seed or a raw uint32[2] PRNG key, got dtype {key.dtype} "
        f"shape {key.shape} (under optax.inject_hyperparams keep it static: "
        "jaxlab.optim.injectable(...) does)")
  return key


def _leaf_keys(key: Array, n: int, stochastic: bool) -> tuple[Array, list]:
  if not stochastic:
    return key, [None] * n
  key, sub = jax.random.split(key)
  return key, list(jax.random.split(sub, n))


def _groups(p_leaves: Sequence[QParam]) -> dict[tuple, list[int]]:
  # Leaves of one format and shape are processed together (vmap): one op per group
  # instead of per leaf keeps compile time low for deep models.
  groups: dict[tuple, list[int]] = {}
  for i, p in enumerate(p_leaves):
    groups.setdefault((p.quantizer, p.shape), []).append(i)
  return groups


def _stack(trees: list) -> Any:
  return jax.tree.map(lambda *xs: jnp.stack(xs), *trees)


def _land_one(p: QParam, u: Array) -> QParam:
  """Q_RTN(W + u), or `p` itself (bitwise) when `u` is all zero."""
  q = p.quantizer
  new = q.quantize(q.dequantize(p) + u)
  moved = jnp.any(u != 0)
  return jax.tree.map(lambda a, b: jnp.where(moved, a, b), new, p)


def _land_leaves(p_leaves: Sequence[QParam], u_leaves: Sequence[Array]) -> list[QParam]:
  out: list[Any] = [None] * len(p_leaves)
  for idx in _groups(p_leaves).values():
    new = jax.vmap(_land_one)(_stack([p_leaves[i] for i in idx]),
                              jnp.stack([u_leaves[i] for i in idx]))
    for j, i in enumerate(idx):
      out[i] = jax.tree.map(lambda a, j=j: a[j], new)
  return out


def _fingerprint(p_leaves: Sequence[QParam]) -> Array:
  """A position-weighted uint32 checksum of the element codes of the quantized leaves.

  Codes only, and no F32 leaves: XLA may contract a multiply into an add (FMA)
  differently in two programs, so W + u can differ by an ulp between ECO's own
  landing and `apply_eco`'s. An ulp never moves an RTN code (W + u sits on a
  grid point, far from a rounding tie) but can move a scale or an F32 value.
  """
  total = jnp.zeros([], jnp.uint32)
  for p in p_leaves:
    if p.quantizer.name == "f32":
      continue
    x = p.codes.reshape(-1).astype(jnp.uint32)
    w = jnp.arange(x.size, dtype=jnp.uint32) * jnp.uint32(2) + jnp.uint32(1)
    total = total * jnp.uint32(0x9E3779B1) + jnp.sum(x * w, dtype=jnp.uint32)
  return total


def _all_finite(leaves: Sequence[Array]) -> Array:
  """Whether every element of `leaves` is finite: one reduction over all of them (a
  check per leaf added two kernels per leaf to the step, ~20% of its compile time)."""
  flat = [jnp.ravel(x) for x in leaves]
  if not flat:
    return jnp.ones([], bool)
  return jnp.all(jnp.isfinite(jnp.concatenate(flat)))


def _raise_nonfinite(where: str) -> Callable[[Array], None]:
  def fn(bad):
    if bad:
      raise FloatingPointError(
          f"{where}: non-finite gradients, learning rate, iterate or moments; the update was "
          "skipped (raise_on_nonfinite=True)")
  return fn


def _debug_raise(cond: Array, fn: Callable[[Array], None]) -> None:
  # The host callback runs only on the failing branch: no per-step host round trip.
  jax.lax.cond(cond, lambda: jax.debug.callback(fn, cond), lambda: None)


def _eco_step(grads: Any, state: Any, params: Any, *, where: str, quantizer: Quantizer,
              direction: Callable, injection: str, stochastic: bool, lr: Array):
  """The shared part of an ECO step: W~, requantization, the landing and its residual.

  `direction(i, w) -> s_i` is the FP32 step of leaf i at weights w (W~ = w + s).

  Returns (float updates in the grads structure, landed QParam leaves, residual
  leaves e = W~ - landed, a finiteness flag for grads/lr/W~/landing, a flag for
  params that are not where ECO last landed, the grads treedef, the advanced key).
  """
  if params is None:
    raise ValueError(f"{where} needs params (the QParam tree)")
  check_qparams(params, quantizer, where=where)
  g_leaves, treedef = jax.tree.flatten(grads)
  try:
    p_leaves = treedef.flatten_up_to(params)
  except ValueError as e:
    raise ValueError(f"{where}: grads and params have different structures (grads must be "
                     f"w.r.t. dequantize_params(params)): {e}") from None
  for i, (g, p) in enumerate(zip(g_leaves, p_leaves, strict=True)):
    if tuple(g.shape) != tuple(p.shape):
      raise ValueError(f"{where}: gradient leaf {i} has shape {tuple(g.shape)}, expected the "
                       f"dequantized param shape {p.shape}")
  # ECO must be last: the params are where its previous update landed (else `_finish`
  # does not apply this update and counts it in `misplaced`).
  moved = (state.count > 0) & (_fingerprint(p_leaves) != state.landed)

  n = len(g_leaves)
  err_l = jax.tree.leaves(state.err) if injection == "exact" else None
  w_deq = [p.dequantize() for p in p_leaves]
  w_base = [w + err_l[i] for i, w in enumerate(w_deq)] if err_l is not None else w_deq
  steps = [direction(i, w_base[i]) for i in range(n)]
  w_tilde = [w + s for w, s in zip(w_base, steps, strict=True)]

  new_key, keys = _leaf_keys(state.key, n, stochastic)
  updates: list[Any] = [None] * n
  for (q, _), idx in _groups(p_leaves).items():
    if q.name == "f32" and err_l is None:
      for i in idx:  # the identity format: the raw step, exactly as optax would apply it
        updates[i] = steps[i]
      continue
    x = jnp.stack([w_tilde[i] for i in idx])
    if stochastic and q.name != "f32":
      qp = jax.vmap(q.quantize)(x, jnp.stack([keys[i] for i in idx]))
    else:
      qp = jax.vmap(q.quantize)(x)
    w1 = jax.vmap(q.dequantize)(qp)
    for j, i in enumerate(idx):
      updates[i] = w1[j] - w_deq[i]
  # The landing runs in a cond (always taken: count >= 0) so that XLA computes it from
  # materialized updates; fused with their producers it re-derived W~ and the SR bits
  # per consumer and cost several times the rest of the step.
  landed = jax.lax.cond(state.count >= 0, lambda p, u: _land_leaves(p, u), lambda p, u: list(p),
                        list(p_leaves), updates)
  landed_w = [p.dequantize() for p in landed]
  errs = [wt - wl for wt, wl in zip(w_tilde, landed_w, strict=True)]
  if err_l is None:  # the identity format has no residual (W~ vs its landing differ by FMA ulps)
    errs = [jnp.zeros_like(e) if p.quantizer.name == "f32" else e
            for p, e in zip(p_leaves, errs, strict=True)]
  ok = _all_finite([lr, *g_leaves, *w_tilde, *landed_w])
  return updates, landed, errs, ok, moved, treedef, new_key


def _finish(ok: Array, moved: Array, updates: list, landed: list, treedef: Any, state: Any,
            new_state: Any, *, where: str, raise_on_nonfinite: bool):
  """Applies the update only if finite (`ok`) and not `moved`: the new state, else the old
  one, with the skip counted (`skipped`: non-finite; `misplaced`: moved params)."""
  if raise_on_nonfinite:
    _debug_raise(~ok, _raise_nonfinite(where))
  accept = ok & ~moved
  updates = treedef.unflatten([jnp.where(accept, u, jnp.zeros_like(u)) for u in updates])
  kept = jax.tree.map(lambda a, b: jnp.where(accept, a, b), new_state, state)
  kept = kept._replace(skipped=state.skipped + (~ok).astype(jnp.int32),
                       misplaced=state.misplaced + moved.astype(jnp.int32),
                       landed=jnp.where(accept, _fingerprint(landed), state.landed))
  return updates, kept


def check_eco_state(opt_state: Any) -> None:
  """Raises if an ECO state in `opt_state` did not apply an update because the params had
  moved away from where ECO landed (a transform after ECO in the chain).

  Reads one counter per ECO state (a host sync): call it where the training loop
  looks at the host anyway, e.g. when it logs.

  Args:
    opt_state: any optax state (chains, `inject_hyperparams`, `MultiSteps`, ...).

  Raises:
    ValueError: an ECO state's `misplaced` counter is nonzero.

  Example:
    >>> import jax.numpy as jnp, optax
    >>> from jaxlab.optim import Quantizer, eco_sgdm, quantize_params
    >>> q = Quantizer("grid", step=0.125)
    >>> tx = optax.chain(eco_sgdm(0.1, 0.9, quantizer=q), optax.scale(0.5))
    >>> check_eco_state(tx.init(quantize_params({"w": jnp.zeros((4, 4))}, q)))  # nothing yet
  """
  is_eco = lambda x: isinstance(x, (EcoAdamWState, EcoSgdmState))
  for s in jax.tree.leaves(opt_state, is_leaf=is_eco):
    # np.sum: a vmapped (per-seed) state holds one counter per seed.
    if is_eco(s) and (n := int(np.sum(jax.device_get(s.misplaced)))):
      raise ValueError(
          f"ECO did not apply {n} update(s): the params were not the ones it "
          "landed on at its previous update. ECO must be the last transform of the chain (a "
          "transform after it, e.g. optax.scale, changes where the weights land but not the "
          "residual ECO injected), and its updates must be applied with "
          "jaxlab.optim.apply_eco(params, updates).")


def _init_state(params: Any, quantizer: Quantizer, injection: str, where: str) -> dict:
  """Shared init fields; `params` is the QParam tree or its float view (shapes only)."""
  leaves = jax.tree.leaves(params, is_leaf=is_qparam)
  if any(is_qparam(p) for p in leaves):
    check_qparams(params, quantizer, where=where)
  for p in leaves:
    if not is_qparam(p) and not jnp.issubdtype(jnp.asarray(p).dtype, jnp.floating):
      raise ValueError(f"{where}: params must be a QParam tree or its float view "
                       f"(dequantize_params), got a leaf of dtype {jnp.asarray(p).dtype}")
  return dict(count=jnp.zeros([], jnp.int32), err=_zeros(params) if injection == "exact" else None,
              skipped=jnp.zeros([], jnp.int32), landed=jnp.zeros([], jnp.uint32),
              misplaced=jnp.zeros([], jnp.int32))


def _coef(lr: Array, weight_decay: Num) -> Array:
  """(1 - lr wd) / lr, and 0 when lr <= 0 (1/lr is undefined: nothing is injected)."""
  return jnp.where(lr > 0, (1.0 - lr * weight_decay) / jnp.where(lr > 0, lr, 1.0), 0.0)


# ----------------------------------------------------------------------------- optimizers


def eco_adamw(learning_rate: ScalarOrSchedule, b1: Num = 0.9, b2: Num = 0.999,
              eps: Num = 1e-8, weight_decay: Num = 1e-4, *, quantizer: Quantizer,
              stochastic_rounding: bool = True, eps_root: Num = 0.0, key: int | Array | None = None,
              injection: str = "eco", raise_on_nonfinite: bool = False
              ) -> optax.GradientTransformationExtraArgs:
  """AdamW on low-precision parameters with ECO error injection.

  Per leaf, with t = count + 1 and lr = learning_rate(count)::

    m~ = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;  d = sqrt(v/(1-b2^t) + eps_root) + eps
    W~ = W - lr (m~/(1-b1^t) / d + wd W)          (W = dequantized params, FP32)
    W' = Q(W~) (SR with the state key when `stochastic_rounding`), landed as
         Q_RTN(W + (W' - W)) by `apply_eco`;  e = W~ - W'
    m  = m~ + ((1 - lr wd)(1-b1^t)/lr)(1 - 1/b1) d e      ("eco"; 0 when lr = 0)

  With the identity quantizer (e = 0) this is `optax.adamw` exactly.
  At lr = 0 (e.g. the first warmup step) nothing is injected, since 1/lr is
  undefined (jaxlab interpretation). b1 = 0 is defined as the limit b1 -> 0:
  `mu` then holds the carried injection -((1 - lr wd)/lr) d e, so the residual
  is fed back whole at the next step (error feedback through the free momentum
  slot; jaxlab interpretation).

  Non-finite rule: when the gradients, lr, W~, the moments or the landed
  weights are not all finite, the update is skipped (zero updates; params,
  moments, count and key unchanged; `state.skipped` += 1), or raises a
  FloatingPointError with `raise_on_nonfinite=True`.

  Args:
    learning_rate: a float >= 0 or a schedule `count -> lr` (under
      `optax.inject_hyperparams` use `jaxlab.optim.injectable(eco_adamw)`).
    b1, b2: in [0, 1). eps, eps_root: >= 0, not both 0 (0/0 at a zero
      gradient). weight_decay: >= 0, decoupled, scaled by lr, every leaf.
    quantizer: the storage format of the >= 2-D leaves (1-D leaves may be F32).
    stochastic_rounding: round Q stochastically with the key carried in state.
    key: int seed (None = 0) or raw uint32[2] PRNG key for the SR stream.
    injection: "eco" (default), "none" (naive removal) or "exact" (stores e).
    raise_on_nonfinite: raise instead of skipping a non-finite update (debug).

  Returns:
    An `optax.GradientTransformationExtraArgs`. `init` takes the QParam tree or
    its float view; `update(grads, state, params)` needs `params` (the QParam
    tree), takes grads w.r.t. the dequantized weights, ignores extra keyword
    args, and returns float32 updates in the grads structure, to be applied
    with `jaxlab.optim.apply_eco`. ECO must be the last transform of a chain
    (otherwise its updates stop: `state.misplaced` counts them and
    `check_eco_state` raises).

  Example:
    >>> import jax, jax.numpy as jnp, optax
    >>> from jaxlab.optim import Quantizer, apply_eco, quantize_params, dequantize_params
    >>> q = Quantizer("fp8_e4m3", granularity="row")
    >>> params = quantize_params({"w": jnp.ones((32, 8))}, q)
    >>> tx = optax.chain(optax.clip_by_global_norm(1.0), eco_adamw(1e-2, quantizer=q))
    >>> state = tx.init(params)
    >>> grads = {"w": jnp.full((32, 8), 0.1)}
    >>> updates, state = tx.update(grads, state, params)
    >>> params = apply_eco(params, updates)
    >>> dequantize_params(params)["w"].shape
    (32, 8)
  """
  where = "eco_adamw"
  key = _check_args(injection, key, where)
  _check_learning_rate(learning_rate, where)
  _check_range("b1", b1, 0.0, 1.0, hi_open=True, where=where)
  _check_range("b2", b2, 0.0, 1.0, hi_open=True, where=where)
  _check_range("eps", eps, 0.0, math.inf, hi_open=True, where=where)
  _check_range("eps_root", eps_root, 0.0, math.inf, hi_open=True, where=where)
  _check_range("weight_decay", weight_decay, 0.0, math.inf, hi_open=True, where=where)
  if _is_static_number(eps) and _is_static_number(eps_root) and eps == 0 and eps_root == 0:
    raise ValueError(f"{where}: eps and eps_root are both 0: m/sqrt(v) is 0/0 at a zero gradient")
  # b1 = 0: mu holds the carried injection. An injected b1 may be 0 only at run time, so
  # the choice is then made per step (`_where0`), which never selects 1/b1 (inf) at 0.
  carry = _zero_flag(b1)

  def init_fn(params):
    f = _init_state(params, quantizer, injection, where + ".init")
    return EcoAdamWState(f["count"], _zeros(params), _zeros(params), key, f["err"],
                         f["skipped"], f["landed"], f["misplaced"])

  def update_fn(updates, state, params=None, **extra_args):
    del extra_args
    lr = _lr_value(learning_rate, state.count)
    count = optax.safe_int32_increment(state.count)
    t = count.astype(jnp.float32)
    bc1 = 1.0 - jnp.float32(b1) ** t
    bc2 = 1.0 - jnp.float32(b2) ** t
    g32 = jax.tree.map(lambda g: g.astype(jnp.float32), updates)
    mu = jax.tree.map(lambda m, g: _where0(carry, lambda: g + m,
                                           lambda: b1 * m + (1.0 - b1) * g), state.mu, g32)
    nu = jax.tree.map(lambda v, g: b2 * v + (1.0 - b2) * jnp.square(g), state.nu, g32)
    mu_l, nu_l = jax.tree.leaves(mu), jax.tree.leaves(nu)
    denom = [jnp.sqrt(v / bc2 + eps_root) + eps for v in nu_l]

    def direction(i, w):
      return (-lr) * ((mu_l[i] / bc1) / denom[i] + weight_decay * w)

    out, landed, errs, ok, moved, treedef, new_key = _eco_step(
        updates, state, params, where=where + ".update", quantizer=quantizer,
        direction=direction, injection=injection, stochastic=stochastic_rounding, lr=lr)
    if injection == "eco":
      k = _coef(lr, weight_decay) * bc1
      inv_b1 = _where0(carry, lambda: 1.0, lambda: 1.0 / b1)
      # b1 = 0, the limit b1 -> 0 of b1 * m: the residual is carried whole to the next step.
      mu_l = [_where0(carry, lambda d=d, e=e: -k * d * e,
                      lambda m=m, d=d, e=e: m + k * (1.0 - inv_b1) * d * e)
              for m, d, e in zip(mu_l, denom, errs, strict=True)]
    else:
      mu_l = [_where0(carry, lambda m=m: jnp.zeros_like(m), lambda m=m: m) for m in mu_l]
    ok = ok & _all_finite([*mu_l, *nu_l])
    err = treedef.unflatten(errs) if injection == "exact" else None
    new = EcoAdamWState(count, treedef.unflatten(mu_l), nu, new_key, err, state.skipped,
                        state.landed, state.misplaced)
    return _finish(ok, moved, out, landed, treedef, state, new, where=where + ".update",
                   raise_on_nonfinite=raise_on_nonfinite)

  return optax.GradientTransformationExtraArgs(init_fn, update_fn)


def eco_sgdm(learning_rate: ScalarOrSchedule, momentum: Num = 0.9, *, quantizer: Quantizer,
             stochastic_rounding: bool = True, weight_decay: Num = 0.0, dampening: bool = False,
             key: int | Array | None = None, injection: str = "eco",
             raise_on_nonfinite: bool = False) -> optax.GradientTransformationExtraArgs:
  """SGD with momentum on low-precision parameters with ECO error injection.

  Per leaf, with lr = learning_rate(count)::

    M~ = beta M + c g   (c = 1, optax.sgd's trace; c = 1-beta with `dampening`,
                         the paper's Alg. 2 -- the injection is the same)
    W~ = W - lr (M~ + wd W);  W' = Q(W~), landed by `apply_eco`;  e = W~ - W'
    M  = M~ + ((1 - lr wd)/lr)(1 - 1/beta) e              ("eco"; 0 when lr = 0)

  With the identity quantizer this is `optax.sgd(lr, momentum)` (plus decay).
  momentum = 0 is plain SGD, defined as the limit beta -> 0: `mu` holds the
  carried residual -((1 - lr wd)/lr) e, so M~ = g + mu and the residual is fed
  back whole at the next step, i.e. exact error feedback through the otherwise
  unused momentum slot (jaxlab interpretation).
  The non-finite rule of `eco_adamw` applies.

  Args:
    learning_rate: a float >= 0 or a schedule (injectable, see `eco_adamw`).
    momentum: beta in [0, 1).
    quantizer: storage format of the >= 2-D leaves.
    stochastic_rounding: SR with the state key.
    weight_decay: decoupled decay scaled by lr (>= 0).
    dampening: use (1-beta) g in the momentum (the paper's Alg. 2 form).
    key: int seed (None = 0) or raw PRNG key.
    injection: "eco", "none" (naive removal) or "exact" (stores e).
    raise_on_nonfinite: raise instead of skipping a non-finite update (debug).

  Returns:
    An `optax.GradientTransformationExtraArgs` (see `eco_adamw`).

  Example:
    >>> import jax.numpy as jnp, optax
    >>> from jaxlab.optim import Quantizer, apply_eco, quantize_params
    >>> q = Quantizer("grid", step=0.125)
    >>> params = quantize_params({"w": jnp.zeros((4, 4))}, q)
    >>> tx = eco_sgdm(0.01, 0.9, quantizer=q, stochastic_rounding=False)
    >>> state = tx.init(params)
    >>> updates, state = tx.update({"w": jnp.ones((4, 4))}, state, params)
    >>> int(apply_eco(params, updates)["w"].codes.sum())  # 0.01 < half a step: carried
    0
  """
  where = "eco_sgdm"
  key = _check_args(injection, key, where)
  _check_learning_rate(learning_rate, where)
  _check_range("momentum", momentum, 0.0, 1.0, hi_open=True, where=where)
  _check_range("weight_decay", weight_decay, 0.0, math.inf, hi_open=True, where=where)
  carry = _zero_flag(momentum)  # as in `eco_adamw`

  def init_fn(params):
    f = _init_state(params, quantizer, injection, where + ".init")
    return EcoSgdmState(f["count"], _zeros(params), key, f["err"], f["skipped"], f["landed"],
                        f["misplaced"])

  def update_fn(updates, state, params=None, **extra_args):
    del extra_args
    lr = _lr_value(learning_rate, state.count)
    c = (1.0 - momentum) if dampening else 1.0
    mu = jax.tree.map(
        lambda m, g: _where0(carry, lambda: g.astype(jnp.float32) + m,
                             lambda: momentum * m + c * g.astype(jnp.float32)),
        state.mu, updates)
    mu_l = jax.tree.leaves(mu)

    def direction(i, w):
      return (-lr) * (mu_l[i] + weight_decay * w)

    out, landed, errs, ok, moved, treedef, new_key = _eco_step(
        updates, state, params, where=where + ".update", quantizer=quantizer,
        direction=direction, injection=injection, stochastic=stochastic_rounding, lr=lr)
    if injection == "eco":
      k = _coef(lr, weight_decay)
      inv_beta = _where0(carry, lambda: 1.0, lambda: 1.0 / momentum)
      # momentum = 0, the limit beta -> 0 of beta * M.
      mu_l = [_where0(carry, lambda e=e: -k * e,
                      lambda m=m, e=e: m + k * (1.0 - inv_beta) * e)
              for m, e in zip(mu_l, errs, strict=True)]
    else:
      mu_l = [_where0(carry, lambda m=m: jnp.zeros_like(m), lambda m=m: m) for m in mu_l]
    ok = ok & _all_finite(mu_l)
    err = treedef.unflatten(errs) if injection == "exact" else None
    new = EcoSgdmState(optax.safe_int32_increment(state.count), treedef.unflatten(mu_l), new_key,
                       err, state.skipped, state.landed, state.misplaced)
    return _finish(ok, moved, out, landed, treedef, state, new, where=where + ".update",
                   raise_on_nonfinite=raise_on_nonfinite)

  return optax.GradientTransformationExtraArgs(init_fn, update_fn)


# ----------------------------------------------------------------------------- composition


def apply_eco(params: Any, updates: Any) -> Any:
  """Applies updates to a tree of `QParam` (and float) leaves: ECO's `apply_updates`.

  A `QParam` leaf lands on Q_RTN(W + u), W its dequantized value and u its
  float update (a leaf whose update is all zero keeps its bits exactly): the
  landing ECO computed its residual against. A plain float leaf gets
  `optax.apply_updates`'s `p + u`, so trees that mix ECO leaves with leaves
  of another optimizer (`optax.masked`, `optax.partition`) work.

  Args:
    params: a pytree of `QParam` and float array leaves.
    updates: the updates in the float structure of `dequantize_params(params)`.

  Returns:
    The new params, same structure and dtypes as `params`.

  Example:
    >>> import jax.numpy as jnp
    >>> from jaxlab.optim import Quantizer, quantize_params, dequantize_params
    >>> p = quantize_params({"w": jnp.zeros((4, 4))}, Quantizer("grid", step=0.5))
    >>> float(dequantize_params(apply_eco(p, {"w": jnp.full((4, 4), 0.5)}))["w"][0, 0])
    0.5
  """
  p_leaves, treedef = jax.tree.flatten(params, is_leaf=lambda x: x is None or is_qparam(x))
  try:
    u_leaves = treedef.flatten_up_to(updates)
  except ValueError as e:
    raise ValueError("apply_eco: updates must have the float structure of "
                     f"dequantize_params(params) (ECO's updates): {e}") from None
  out: list[Any] = list(p_leaves)
  q_idx = []
  for i, (p, u) in enumerate(zip(p_leaves, u_leaves, strict=True)):
    if p is None:
      continue
    if is_qparam(p):
      is_float = (not is_qparam(u) and hasattr(u, "dtype")
                  and jnp.issubdtype(u.dtype, jnp.floating))
      if not is_float or tuple(u.shape) != tuple(p.shape):
        got = ("a QParam (bit deltas?)" if is_qparam(u)
               else f"{getattr(u, 'dtype', type(u).__name__)} {tuple(getattr(u, 'shape', ()))}")
        raise ValueError(f"apply_eco: the update of QParam leaf {i} must be a float array of "
                         f"shape {p.shape} (ECO's float delta), got {got}")
      q_idx.append(i)
    else:
      out[i] = jnp.asarray(p + u).astype(jnp.asarray(p).dtype)
  landed = _land_leaves([p_leaves[i] for i in q_idx],
                        [u_leaves[i].astype(jnp.float32) for i in q_idx])
  for i, p in zip(q_idx, landed, strict=True):
    out[i] = p
  return treedef.unflatten(out)


def injectable(optimizer: Callable[..., optax.GradientTransformation], *,
               static_args: Sequence[str] = ()) -> Callable[..., optax.GradientTransformation]:
  """`optax.inject_hyperparams` for an ECO factory, with float32 hyperparameters.

  QParam trees hold integer bits, so inject_hyperparams' default hyperparameter
  dtype (the params' highest dtype) would cast the learning rate to an integer;
  the format, rounding, seed and injection arguments stay static.

  Args:
    optimizer: `eco_adamw`, `eco_sgdm` or a baseline built on them.
    static_args: further arguments to keep static.

  Returns:
    A factory taking the optimizer's arguments (numbers or schedules).

  Example:
    >>> import optax
    >>> from jaxlab.optim import Quantizer
    >>> sched = optax.linear_schedule(1e-2, 1e-3, 100)
    >>> tx = injectable(eco_adamw)(learning_rate=sched, quantizer=Quantizer("fp8_e4m3"))
  """
  names = set(inspect.signature(optimizer).parameters)
  static = tuple(a for a in (*STATIC_ARGS, *static_args) if a in names)
  return optax.inject_hyperparams(optimizer, static_args=static, hyperparam_dtype=jnp.float32)


__all__ = ["EcoAdamWState", "EcoSgdmState", "INJECTIONS", "STATIC_ARGS", "apply_eco", "eco_adamw",
           "eco_sgdm", "injectable"]
