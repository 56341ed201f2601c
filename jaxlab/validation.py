"""Input validation shared across jaxlab.

Shape checks run at trace time (so also under `jit`/`vmap`). Value checks
(positivity, simplex, ranges) need concrete numbers: they run whenever the inputs
are concrete (eager calls, numpy inputs; `concrete`) and are skipped for traced
values, where no Python exception can be raised (the callers document what a bad
traced value gives: NaN, never a silent other value).
"""

import jax
import numpy as np

# `jax.core.Tracer` is public in jax 0.10 and 0.12; the fallback keeps the
# check working should it move (the try/except below still catches tracers).
_TRACER = getattr(jax.core, "Tracer", ())


def concrete(x) -> np.ndarray | None:
  """Returns `x` as a numpy array, or None when `x` is a tracer (or an array spanning other
  processes' devices, whose values this process cannot read).

  Example:
    >>> import jax, jax.numpy as jnp
    >>> concrete(jnp.ones(2))
    array([1., 1.], dtype=float32)
    >>> seen = []
    >>> _ = jax.jit(lambda x: seen.append(concrete(x)) or x)(jnp.ones(2))  # traced: no values
    >>> seen
    [None]
  """
  if isinstance(x, _TRACER):
    return None
  if isinstance(x, jax.Array) and not x.is_fully_addressable:
    return None
  try:
    return np.asarray(x)
  except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError):
    return None


def check_rank_and_classes(name: str, x, *, min_classes: int = 2) -> int:
  """Checks `x` has shape [..., k] with k >= min_classes; returns k.

  Example:
    >>> import numpy as np
    >>> check_rank_and_classes("logits", np.zeros((4, 3)))
    3
    >>> check_rank_and_classes("logits", np.zeros((4, 1)))
    Traceback (most recent call last):
    ValueError: logits must have shape [..., num_classes] with num_classes >= 2, got shape (4, 1)
  """
  shape = np.shape(x)
  if len(shape) < 1:
    raise ValueError(f"{name} must have shape [..., num_classes], got a scalar")
  if shape[-1] < min_classes:
    raise ValueError(
        f"{name} must have shape [..., num_classes] with num_classes >= {min_classes}, "
        f"got shape {tuple(shape)}")
  return shape[-1]


def check_same_shape(names: tuple[str, ...], *xs) -> None:
  """Raises ValueError unless the arrays `xs` (named `names`) share one shape.

  Example:
    >>> import numpy as np
    >>> check_same_shape(("p", "q"), np.zeros(3), np.zeros(4))
    Traceback (most recent call last):
    ValueError: p, q must have the same shape; got p(3,), q(4,)
  """
  shapes = [tuple(np.shape(x)) for x in xs]
  if len(set(shapes)) != 1:
    desc = ", ".join(f"{n}{s}" for n, s in zip(names, shapes, strict=True))
    raise ValueError(f"{', '.join(names)} must have the same shape; got {desc}")


def check_finite(name: str, x) -> None:
  """Raises ValueError if concrete `x` holds NaN or Inf (traced values are not checked).

  Example:
    >>> import numpy as np
    >>> check_finite("x", np.array([1.0, np.nan]))
    Traceback (most recent call last):
    ValueError: x must be finite; got 1 non-finite values
  """
  v = concrete(x)
  if v is not None and not np.all(np.isfinite(v)):
    raise ValueError(f"{name} must be finite; got {np.size(v) - np.isfinite(v).sum()} non-finite values")


def check_positive(name: str, x, *, strict: bool = True) -> None:
  """Raises ValueError unless concrete `x` is finite and > 0 (>= 0 with `strict=False`).

  Example:
    >>> check_positive("scale", 0.0, strict=False)
    >>> check_positive("scale", 0.0)
    Traceback (most recent call last):
    ValueError: scale must be > 0 everywhere; min value is 0.0
  """
  v = concrete(x)
  if v is None:
    return
  check_finite(name, v)
  bad = (v <= 0) if strict else (v < 0)
  if np.any(bad):
    rel = "> 0" if strict else ">= 0"
    raise ValueError(f"{name} must be {rel} everywhere; min value is {float(np.min(v))}")


def check_simplex(name: str, x, *, atol: float = 1e-3) -> None:
  """Checks that the last axis of `x` is a probability vector (within `atol`).

  Example:
    >>> import numpy as np
    >>> check_simplex("probs", np.array([[0.25, 0.75]]))
    >>> check_simplex("probs", np.array([[0.5, 0.6]]))
    Traceback (most recent call last):
    ValueError: probs must lie on the probability simplex (last axis sums to 1 within 0.001); worst |sum - 1| is 0.1
  """
  v = concrete(x)
  if v is None:
    return
  check_finite(name, v)
  if np.any(v < -atol):
    raise ValueError(f"{name} must lie on the probability simplex (non-negative entries); "
                     f"min value is {float(np.min(v))}")
  sums = np.sum(v, axis=-1)
  worst = float(np.max(np.abs(sums - 1.0))) if sums.size else 0.0
  if worst > atol:
    raise ValueError(f"{name} must lie on the probability simplex (last axis sums to 1 within "
                     f"{atol}); worst |sum - 1| is {worst:.3g}")
