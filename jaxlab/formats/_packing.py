"""Two 4-bit codes per byte along the last axis.

Layout (as in ml_dtypes/torchao/TransformerEngine): element 2i goes to the low
nibble of byte i, element 2i+1 to the high nibble.
"""

from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax import Array
from jaxtyping import Float, UInt8


def pack_nibbles(codes: UInt8[Array, "*b n"]) -> UInt8[Array, "*b n//2"]:
  """Packs 4-bit codes (uint8, values < 16) two per byte along the last axis.

  Raises:
    ValueError: if the last axis has odd length.

  Example:
    >>> import jax.numpy as jnp
    >>> pack_nibbles(jnp.array([1, 2, 15, 0], jnp.uint8)).tolist()
    [33, 15]
  """
  if codes.shape[-1] % 2:
    raise ValueError(f"pack_nibbles: codes' last axis must be even, got shape {codes.shape}")
  c = codes.astype(jnp.uint8)
  pairs = c.reshape(*c.shape[:-1], c.shape[-1] // 2, 2)
  # One uint16 per pair (little-endian: element 2i is the low byte), then fold the
  # two nibbles together. Much faster under XLA than two strided slices, which
  # XLA fuses into (and recomputes) the producer of `codes`.
  v = jax.lax.bitcast_convert_type(pairs, jnp.uint16)
  return ((v & 0xF) | ((v >> 4) & 0xF0)).astype(jnp.uint8)


def unpack_nibbles(packed: UInt8[Array, "*b m"]) -> UInt8[Array, "*b 2*m"]:
  """Inverse of `pack_nibbles`: [..., m] bytes -> [..., 2m] codes.

  Example:
    >>> import jax.numpy as jnp
    >>> unpack_nibbles(jnp.array([33, 15], jnp.uint8)).tolist()
    [1, 2, 15, 0]
  """
  p = packed.astype(jnp.uint8)
  both = jnp.stack([p & 0xF, p >> 4], axis=-1)
  return both.reshape(*p.shape[:-1], p.shape[-1] * 2)


def pack_pairs(code_of: Callable[[Array], Array], xb: Float[Array, "*b n"]
               ) -> UInt8[Array, "*b n//2"]:
  """`pack_nibbles(code_of(xb))` without the codes tensor: `code_of` (elementwise, int
  codes < 16, broadcasting against [..., n // 2]) runs on the even and the odd elements
  of the last axis as two arrays, and their codes are or-ed into bytes.

  Under XLA this is one vectorised loop from x to bytes; the codes of one array
  (`pack_nibbles` of a fused producer) make a loop XLA:CPU does not vectorise.
  """
  pairs = xb.reshape(*xb.shape[:-1], xb.shape[-1] // 2, 2)
  return (code_of(pairs[..., 0]) | (code_of(pairs[..., 1]) << 4)).astype(jnp.uint8)
