"""Multi-axis rotary position embedding with continuous positions (FLUX-style axis splits).

The head dimension is split into one section per position axis (e.g. (8, 8, 8) for three
axes); inside each section, pairs (x_i, x_{i + half}) are rotated by `pos_axis * freq_i`
(rotate-half convention, as `jaxlab.nn.apply_rope`, whose single integer axis this
generalises to several real-valued ones, which SAPE's surface anchors need). Rotations
preserve norms, and the score <R(p) q, R(p') k> depends on p - p' only.

Example:
  >>> import jax
  >>> x = jax.random.normal(jax.random.key(0), (1, 5, 2, 12))
  >>> pos = jax.random.uniform(jax.random.key(1), (1, 5, 3))
  >>> apply_rope_nd(x, pos, (4, 4, 4)).shape
  (1, 5, 2, 12)
"""

from collections.abc import Sequence

import jax.numpy as jnp
from jax import Array
from jaxtyping import Float


def even_sections(head_dim: int, num_axes: int) -> tuple[int, ...]:
  """Splits `head_dim` into `num_axes` even sections as equal as possible (first ones larger).

  Example:
    >>> even_sections(16, 3)
    (6, 6, 4)
  """
  if head_dim % 2 or head_dim < 2 * num_axes or num_axes < 1:
    raise ValueError(f"head_dim must be even and >= 2 * num_axes, got {head_dim}, {num_axes}")
  pairs = head_dim // 2
  base, extra = divmod(pairs, num_axes)
  return tuple(2 * (base + (i < extra)) for i in range(num_axes))


def apply_rope_nd(x: Float[Array, "b t h d"], positions: Float[Array, "b t a"],
                  sections: Sequence[int], base: float = 100.0) -> Float[Array, "b t h d"]:
  """Rotates each head-dim section of `x` by the angles of its position axis.

  Args:
    x: queries or keys [b, t, heads, head_dim].
    positions: real-valued positions [b, t, num_axes].
    sections: even section sizes, one per axis, summing to head_dim.
    base: frequency base; section of size 2m uses frequencies base^(-i/m), i < m.

  Returns:
    The rotated `x` (float32 math, cast back to x's dtype).

  Example:
    >>> import jax
    >>> q = jax.random.normal(jax.random.key(0), (1, 4, 2, 8))
    >>> pos = jax.random.uniform(jax.random.key(1), (1, 4, 2))
    >>> out = apply_rope_nd(q, pos, (4, 4))
    >>> out.shape, bool(jnp.allclose(jnp.linalg.norm(out, axis=-1),
    ...                              jnp.linalg.norm(q, axis=-1), atol=1e-5))
    ((1, 4, 2, 8), True)
  """
  sections = tuple(int(s) for s in sections)
  if len(sections) != positions.shape[-1]:
    raise ValueError(f"sections {sections} must have one entry per position axis "
                     f"({positions.shape[-1]})")
  if sum(sections) != x.shape[-1] or any(s < 2 or s % 2 for s in sections):
    raise ValueError(f"sections {sections} must be even, >= 2, and sum to head_dim {x.shape[-1]}")
  if base <= 1:
    raise ValueError(f"base must be > 1, got {base}")
  out, start = [], 0
  pos = positions.astype(jnp.float32)
  for axis, size in enumerate(sections):
    half = size // 2
    freq = base ** (-jnp.arange(half, dtype=jnp.float32) / half)
    angle = pos[:, :, axis, None, None] * freq                        # [b, t, 1, half]
    cos, sin = jnp.cos(angle), jnp.sin(angle)
    part = x[..., start:start + size].astype(jnp.float32)
    x1, x2 = part[..., :half], part[..., half:]
    out += [x1 * cos - x2 * sin, x2 * cos + x1 * sin]
    start += size
  return jnp.concatenate(out, -1).astype(x.dtype)
