"""AES: adaptive entropy scheduling from an online drift proxy.

AES (Wang, Xia, Chen, Liu, ICML 2026, arXiv 2601.19624) casts entropy
scheduling in non-stationary maximum-entropy RL as a dynamic-regret trade-off
between tracking a drifting comparator and stabilising updates. Per round the
bound behaves like `c1 * lambda + c2 * d_t / lambda`, minimised by
`lambda_t ~ sqrt(d_t)`: the entropy weight scales with the square root of a
(possibly conservative) drift proxy `d_t`.

The tracker here is a pure functional object with the same small interface
wherever it is used (SAC temperature, SAC target-entropy schedule, PPO entropy
coefficient)::

  sched = aes_scheduler(lambda_0=0.1)
  state = sched.init()
  lam, state = sched.update(state, td_errors)

One update takes the TD errors of the current minibatch and does::

  q_t      = Quantile_q(|td_errors|)                     # robust TD-error scale
  fast_t   = fast_decay * fast_{t-1} + (1 - fast_decay) * q_t
  slow_t   = slow_decay * slow_{t-1} + (1 - slow_decay) * q_t
  d_t      = max(fast_t / (slow_t + eps) - 1, 0)          # drift proxy
  lambda_t = rule(d_t), clipped to [lambda_min, lambda_max]

Two square-root rules (`RULES`, the `rule` knob):

  * "offset": `lambda_0 * sqrt(1 + kappa * d_t)`. `lambda_0` is the stationary
    value and entropy only ever rises above it (never below, even in long
    stable periods).
  * "sqrt":   `lambda_0 * sqrt(d_t / d_ref)`, the paper's plain `lambda_t ~
    sqrt(d_t)`: `lambda_0` at the reference drift `d_ref`, lower than that in
    stable periods (down to `lambda_min`, default `lambda_0 / 10`). The default
    `d_ref = 1 / kappa` makes both rules agree once `kappa * d_t >> 1`.

The square-root scaling and the use of a TD-error quantile with clipping are the
paper's ingredients; the exact proxy (the fast/slow EMA ratio), the `1 + ...`
offset, `d_ref` and all default constants are a jaxlab interpretation (the
paper's constants were not available). Each is a keyword argument.
"""

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import Array
from jaxtyping import ArrayLike, Float

RULES = ("offset", "sqrt")


class AESState(NamedTuple):
  """State of the AES tracker (all scalars)."""
  count: Array  # int32: number of updates that saw finite TD errors.
  fast: Array   # float32: fast EMA of the TD-error quantile.
  slow: Array   # float32: slow EMA of the TD-error quantile.
  proxy: Array  # float32: drift proxy d_t of the last update.
  lam: Array    # float32: lambda_t of the last update.


class AESScheduler(NamedTuple):
  """`init() -> state` and `update(state, td_errors) -> (lambda_t, state)`."""
  init: Callable[[], AESState]
  update: Callable[[AESState, Array], tuple[Array, AESState]]


def _check_positive(name: str, value: float) -> None:
  """ValueError unless `value` is a finite number > 0 (NaN and inf are rejected)."""
  if not (value > 0.0 and math.isfinite(value)):
    raise ValueError(f"{name} must be a finite positive number, got {value!r}")


def lambda_from_proxy(proxy: Float[ArrayLike, "*b"], lambda_0: float, *,
                      kappa: float = 4.0, lambda_min: float | None = None,
                      lambda_max: float | None = None, rule: str = "offset",
                      d_ref: float | None = None) -> Float[Array, "*b"]:
  """The square-root scaling rule with clips (`rule`: see the module doc).

  "offset": `lambda = clip(lambda_0 * sqrt(1 + kappa * max(d, 0)), lambda_min,
  lambda_max)`: equal to `lambda_0` at `d = 0` and growing like
  `lambda_0 * sqrt(kappa * d)` once `kappa * d >> 1`.
  "sqrt": `lambda = clip(lambda_0 * sqrt(max(d, 0) / d_ref), lambda_min,
  lambda_max)`: `lambda_0` at `d = d_ref`, `lambda_min` at `d = 0`.
  Both are monotone non-decreasing in `d` (jaxlab interpretations of the
  paper's `lambda_t ~ sqrt(d_t)`).

  Args:
    proxy: drift proxy values `d`, any shape; negative values count as 0.
    lambda_0: the reference entropy weight, finite and > 0.
    kappa: sensitivity of the "offset" rule to the proxy, finite and >= 0.
    lambda_min: lower clip, finite, <= lambda_0 for "sqrt" (default `lambda_0` for
      "offset", where only a value above `lambda_0` is ever active, and
      `lambda_0 / 10` for "sqrt").
    lambda_max: upper clip, >= lambda_0 (default `10 * lambda_0`; inf: none).
    rule: "offset" or "sqrt" (`RULES`).
    d_ref: the drift at which the "sqrt" rule gives `lambda_0`, finite, > 0 (default
      `1 / kappa`, which needs kappa > 0); unused by "offset".

  Returns:
    lambda, same shape as `proxy`, float32.

  Example:
    >>> import jax.numpy as jnp
    >>> lambda_from_proxy(jnp.array([0.0, 2.0]), 0.1, kappa=4.0)
    Array([0.1, 0.3], dtype=float32)
    >>> lambda_from_proxy(jnp.array([0.0, 1.0]), 0.1, rule="sqrt", d_ref=0.25)
    Array([0.01, 0.2 ], dtype=float32)
  """
  lambda_min, lambda_max, d_ref = _check_lambda_args(lambda_0, kappa, lambda_min,
                                                     lambda_max, rule, d_ref)
  d = jnp.maximum(jnp.asarray(proxy, jnp.float32), 0.0)
  if rule == "offset":
    lam = lambda_0 * jnp.sqrt(1.0 + kappa * d)
  else:
    lam = lambda_0 * jnp.sqrt(d / d_ref)
  return jnp.clip(lam, lambda_min, lambda_max)


def _check_lambda_args(lambda_0, kappa, lambda_min, lambda_max, rule="offset", d_ref=None):
  _check_positive("lambda_0", lambda_0)
  if rule not in RULES:
    raise ValueError(f"rule must be one of {RULES}, got {rule!r}")
  if not (kappa >= 0.0 and math.isfinite(kappa)):
    raise ValueError(f"kappa must be a finite number >= 0, got {kappa!r}")
  if rule == "sqrt":
    if d_ref is None:
      if not kappa > 0.0:
        raise ValueError("the 'sqrt' rule needs d_ref > 0 (or kappa > 0 for its default "
                         f"1 / kappa), got d_ref=None, kappa={kappa!r}")
      d_ref = 1.0 / kappa
    _check_positive("d_ref", d_ref)
  default_min = lambda_0 if rule == "offset" else 0.1 * lambda_0
  lambda_min = default_min if lambda_min is None else lambda_min
  lambda_max = 10.0 * lambda_0 if lambda_max is None else lambda_max
  if not (lambda_min >= 0.0 and math.isfinite(lambda_min)):
    raise ValueError(f"lambda_min must be a finite number >= 0, got {lambda_min!r}")
  if not lambda_min <= lambda_max:
    raise ValueError(f"need lambda_min <= lambda_max, got lambda_min="
                     f"{lambda_min!r}, lambda_max={lambda_max!r}")
  if not lambda_0 <= lambda_max:
    raise ValueError(f"need lambda_0 <= lambda_max, got lambda_0={lambda_0!r}"
                     f", lambda_max={lambda_max!r}")
  if rule == "sqrt" and not lambda_min <= lambda_0:
    # Otherwise the clip would hide the rule's one difference: going below lambda_0.
    raise ValueError(f"the 'sqrt' rule needs lambda_min <= lambda_0, got lambda_min="
                     f"{lambda_min!r}, lambda_0={lambda_0!r}")
  return float(lambda_min), float(lambda_max), (None if d_ref is None else float(d_ref))


def aes_scheduler(lambda_0: float, *, kappa: float = 4.0,
                  quantile: float = 0.9, fast_decay: float = 0.99,
                  slow_decay: float = 0.999, lambda_min: float | None = None,
                  lambda_max: float | None = None,
                  eps: float = 1e-6, rule: str = "offset",
                  d_ref: float | None = None) -> AESScheduler:
  """Builds the AES tracker: TD-error quantile -> drift proxy -> lambda_t.

  Both EMAs start at the first finite quantile they see (no zero-bias), so
  `d_0 = 0`: the "offset" rule uses `lambda_0` until the TD-error scale moves,
  the "sqrt" rule `lambda_min`. Non-finite
  TD errors are ignored; a batch with none finite leaves the state unchanged
  (and returns the previous lambda).

  Args:
    lambda_0: reference entropy weight (temperature / entropy coefficient),
      finite and > 0.
    kappa: proxy sensitivity of the "offset" rule, finite and >= 0 (jaxlab
      interpretation, default 4).
    quantile: level q of the ``|TD error|`` quantile, in (0, 1] (default 0.9).
    fast_decay: decay of the fast EMA, in [0, slow_decay).
    slow_decay: decay of the slow EMA, in (fast_decay, 1).
    lambda_min: lower clip, default `lambda_0` ("offset") or `lambda_0 / 10`
      ("sqrt").
    lambda_max: upper clip, default `10 * lambda_0`.
    eps: added to the slow EMA in the ratio, finite and > 0.
    rule: "offset" (`lambda_0 sqrt(1 + kappa d)`) or "sqrt"
      (`lambda_0 sqrt(d / d_ref)`); see the module doc.
    d_ref: reference drift of the "sqrt" rule, finite and > 0 (default
      `1 / kappa`).

  Returns:
    An `AESScheduler(init, update)`; `update(state, td_errors)` takes TD errors
    of any non-empty shape and returns `(lambda_t, new_state)`, jit/vmap-safe.

  Raises:
    ValueError: for out-of-range settings, naming the argument.

  Example:
    >>> import jax.numpy as jnp
    >>> sched = aes_scheduler(0.1)
    >>> state = sched.init()
    >>> lam, state = sched.update(state, jnp.ones(32))
    >>> lam, state = sched.update(state, 5.0 * jnp.ones(32))  # TD errors jump
    >>> bool(lam > 0.1)
    True
  """
  lambda_min, lambda_max, d_ref = _check_lambda_args(lambda_0, kappa, lambda_min,
                                                     lambda_max, rule, d_ref)
  if not 0.0 < quantile <= 1.0:
    raise ValueError(f"quantile must be in (0, 1], got {quantile!r}")
  if not 0.0 <= fast_decay < 1.0:
    raise ValueError(f"fast_decay must be in [0, 1), got {fast_decay!r}")
  if not 0.0 < slow_decay < 1.0:
    raise ValueError(f"slow_decay must be in (0, 1), got {slow_decay!r}")
  if not fast_decay < slow_decay:
    raise ValueError(
        "fast_decay must be smaller than slow_decay (the fast EMA must react "
        f"faster), got fast_decay={fast_decay!r}, slow_decay={slow_decay!r}")
  _check_positive("eps", eps)

  def init() -> AESState:
    zero = jnp.zeros((), jnp.float32)
    lam = lambda_from_proxy(zero, lambda_0, kappa=kappa, lambda_min=lambda_min,
                            lambda_max=lambda_max, rule=rule, d_ref=d_ref)
    return AESState(count=jnp.zeros((), jnp.int32), fast=zero, slow=zero,
                    proxy=zero, lam=lam)

  def update(state: AESState, td_errors: Array) -> tuple[Array, AESState]:
    td = jnp.abs(jnp.asarray(td_errors, jnp.float32)).reshape(-1)
    if td.size == 0:
      raise ValueError("td_errors must be non-empty")
    finite = jnp.isfinite(td)
    q = jnp.nanquantile(jnp.where(finite, td, jnp.nan), quantile)
    ok = jnp.any(finite)
    q = jnp.where(ok, q, 0.0)
    first = state.count == 0
    fast = jnp.where(first, q, fast_decay * state.fast + (1 - fast_decay) * q)
    slow = jnp.where(first, q, slow_decay * state.slow + (1 - slow_decay) * q)
    proxy = jnp.maximum(fast / (slow + eps) - 1.0, 0.0)
    lam = lambda_from_proxy(proxy, lambda_0, kappa=kappa, lambda_min=lambda_min,
                            lambda_max=lambda_max, rule=rule, d_ref=d_ref)
    new = AESState(count=state.count + 1, fast=fast, slow=slow, proxy=proxy,
                   lam=lam)
    new = jax.tree.map(lambda n, o: jnp.where(ok, n, o), new, state)
    return new.lam, new

  return AESScheduler(init=init, update=update)


def scheduler_from(lambda_0: float, settings: Any, rule: str = "offset") -> AESScheduler:
  """`aes_scheduler(lambda_0, ..., rule=rule)` from the `aes_*` fields of an RL config.

  Reads `aes_kappa`, `aes_d_ref`, `aes_quantile`, `aes_fast_decay`,
  `aes_slow_decay`, `aes_lambda_min` and `aes_lambda_max`
  (`jaxlab.rl.aes_plumbing.AESKnobs`, which SACConfig and PPOConfig extend).
  """
  return aes_scheduler(
      lambda_0, kappa=settings.aes_kappa, quantile=settings.aes_quantile,
      fast_decay=settings.aes_fast_decay, slow_decay=settings.aes_slow_decay,
      lambda_min=settings.aes_lambda_min, lambda_max=settings.aes_lambda_max,
      rule=rule, d_ref=settings.aes_d_ref)
