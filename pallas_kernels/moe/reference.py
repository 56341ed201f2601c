"""Pure-jnp references for the MoE kernels (the spec; also the XLA fallback).

Grouped matmul: `jax.lax.ragged_dot` (rows of `lhs` sorted by group; rows past
`sum(group_sizes)` give zeros). Routing: `jaxlab.moe.routing`.
"""

import jax
import jax.numpy as jnp
from jax import Array
from jaxtyping import Bool, Float, Int

from jaxlab.moe import routing


def gmm_reference(lhs: Float[Array, "m k"], rhs: Float[Array, "g k n"],
                  group_sizes: Int[Array, "g"]) -> Float[Array, "m n"]:
  """`ragged_dot(lhs, rhs, group_sizes)` in float32 at HIGHEST precision."""
  return jax.lax.ragged_dot(lhs, rhs, group_sizes.astype(jnp.int32),
                            precision=jax.lax.Precision.HIGHEST,
                            preferred_element_type=jnp.float32)


def route_reference(logits: Float[Array, "b n"], *, routing_name: str, k: int,
                    k0: int | None = None, p: float = 1.0, max_p: int | None = None
                    ) -> tuple[Bool[Array, "b n"], Float[Array, "b n"]]:
  """`jaxlab.moe.route` ("topk", "pruned" or "oea" over the whole batch)."""
  return routing.route(logits, routing=routing_name, k=k, k0=k0, p=p, max_p=max_p)
