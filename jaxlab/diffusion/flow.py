"""Rectified flow: the straight-path interpolant, its velocity loss, an Euler sampler; patches.

Convention: t = 0 is data x0, t = 1 is noise e; x_t = (1 - t) x0 + t e, whose velocity is
dx_t/dt = e - x0. The model v(x_t, t) regresses it (mean squared error over the target's
elements); sampling integrates dx/dt = v from t = 1 down to t = 0 with Euler steps.

Example:
  >>> import jax, jax.numpy as jnp
  >>> x0 = jnp.ones((2, 4)); e = jnp.zeros((2, 4)); t = jnp.array([0.0, 1.0])
  >>> float(rectified_flow_loss(lambda x, t: e - x0, x0, e, t))
  0.0
"""

from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax import Array
from jaxtyping import Float


def interpolate(x0: Float[Array, "b *d"], noise: Float[Array, "b *d"], t: Float[Array, "b"]
                ) -> Float[Array, "b *d"]:
  """x_t = (1 - t) x0 + t e, t broadcast over each example's elements.

  Example:
    >>> x0, e = jnp.zeros((2, 3)), jnp.ones((2, 3))
    >>> interpolate(x0, e, jnp.array([0.25, 1.0])).tolist()
    [[0.25, 0.25, 0.25], [1.0, 1.0, 1.0]]
  """
  tt = t.reshape(t.shape + (1,) * (x0.ndim - 1))
  return (1 - tt) * x0 + tt * noise


def rectified_flow_loss(velocity_fn: Callable[[Array, Array], Array], x0: Float[Array, "b *d"],
                        noise: Float[Array, "b *d"], t: Float[Array, "b"]) -> Float[Array, ""]:
  """mean over (b, elements) of (v(x_t, t) - (e - x0))^2.

  Args:
    velocity_fn: `v(x_t, t) -> [b, *d]`.
    x0: data; noise: e ~ N(0, I) of the same shape; t: times in [0, 1], one per example.

  Returns:
    The scalar loss.

  Example:
    >>> x0, e = jnp.ones((2, 4)), jnp.zeros((2, 4))
    >>> t = jnp.array([0.3, 0.7])
    >>> float(rectified_flow_loss(lambda x, t: e - x0, x0, e, t))  # the exact velocity
    0.0
    >>> float(rectified_flow_loss(lambda x, t: jnp.zeros_like(x), x0, e, t))
    1.0
  """
  if x0.shape != noise.shape or t.shape != x0.shape[:1]:
    raise ValueError(f"x0 {x0.shape}, noise {noise.shape} must match and t {t.shape} be [b]")
  v = velocity_fn(interpolate(x0, noise, t), t)
  return jnp.mean(jnp.square(v - (noise - x0)))


def euler_sample(velocity_fn: Callable[[Array, Array], Array], noise: Float[Array, "b *d"],
                 num_steps: int) -> Float[Array, "b *d"]:
  """Integrates dx/dt = v(x, t) from t = 1 (noise) to t = 0 in `num_steps` Euler steps.

  Example:
    >>> x0 = jnp.full((1, 3), 2.0)
    >>> euler_sample(lambda x, t: jnp.zeros_like(x) - x0, jnp.zeros((1, 3)), 4).tolist()
    [[2.0, 2.0, 2.0]]
  """
  if num_steps < 1:
    raise ValueError(f"num_steps must be >= 1, got {num_steps}")
  dt = 1.0 / num_steps

  def step(x, i):
    t = jnp.full(x.shape[:1], 1.0 - i * dt, jnp.float32)
    return x - dt * velocity_fn(x, t), None

  x, _ = jax.lax.scan(step, noise, jnp.arange(num_steps, dtype=jnp.float32))
  return x


def patchify(images: Float[Array, "*b h w c"], patch: int) -> Float[Array, "*b n p"]:
  """[..., H, W, C] -> [..., (H/p)(W/p), p*p*C], row-major tokens.

  Example:
    >>> patchify(jnp.zeros((2, 8, 8, 3)), 4).shape
    (2, 4, 48)
  """
  *lead, h, w, c = images.shape
  if patch < 1 or h % patch or w % patch:
    raise ValueError(f"patch {patch} must divide the image size {h}x{w}")
  x = images.reshape(*lead, h // patch, patch, w // patch, patch, c)
  x = jnp.moveaxis(x, -4, -3)  # [..., H/p, W/p, p, p, c]
  return x.reshape(*lead, (h // patch) * (w // patch), patch * patch * c)


def unpatchify(tokens: Float[Array, "*b n p"], patch: int, channels: int = 3
               ) -> Float[Array, "*b h w c"]:
  """Inverse of `patchify` for square images.

  Example:
    >>> images = jnp.arange(2 * 8 * 8 * 3.0).reshape(2, 8, 8, 3)
    >>> tokens = patchify(images, 4)
    >>> unpatchify(tokens, 4).shape, bool((unpatchify(tokens, 4) == images).all())
    ((2, 8, 8, 3), True)
  """
  *lead, n, _ = tokens.shape
  g = int(round(n ** 0.5))
  if patch < 1 or g * g != n or tokens.shape[-1] != patch * patch * channels:
    raise ValueError(f"tokens {tokens.shape} are not a square grid of {patch}x{patch}x{channels}")
  x = tokens.reshape(*lead, g, g, patch, patch, channels)
  x = jnp.moveaxis(x, -3, -4)
  return x.reshape(*lead, g * patch, g * patch, channels)
