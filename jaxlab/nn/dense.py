"""A bias-free linen Dense whose weight gradient is laid out for the CPU.

`nn.Dense` and this `Dense` compute the same `x @ kernel` with the same
parameter (`kernel`, [in, out], lecun-normal init). They differ only in how
the backward pass asks for the weight gradient. JAX's transpose rule of
`dot_general` builds `dW` as `(dy^T x)^T`, so XLA's CPU backend materialises
`dy^T` ([out, tokens], the large operand, usually fused with the elementwise
backward of the layer after it, e.g. SwiGLU's) in a column-strided copy.
`matmul` asks for `dW = x^T dy` directly as a dot contracting the token axis
of both operands: XLA then transposes only `x` ([in, tokens]), which is
smaller for every FFN-up, attention and LM-head projection and is shared by
all projections of the same input (q/k/v, gate/up). The results are
bit-identical; `launch/bench.py` measures the saving against `nn.Dense`.
"""

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax import Array
from jaxtyping import Float


@jax.custom_vjp
def matmul(x: Float[Array, "*b i"], kernel: Float[Array, "i o"]) -> Float[Array, "*b o"]:
  """`x @ kernel` over the last axis of `x`, with a token-major weight gradient.

  Example:
    >>> y = matmul(jnp.ones((2, 3, 4)), jnp.ones((4, 5)))
    >>> y.shape
    (2, 3, 5)
  """
  return _forward(x, kernel)


def _forward(x, kernel):
  return jax.lax.dot_general(x, kernel, (((x.ndim - 1,), (0,)), ((), ())))


def _matmul_fwd(x, kernel):
  return _forward(x, kernel), (x, kernel)


def _matmul_bwd(res, dy):
  x, kernel = res
  dx = jax.lax.dot_general(dy, kernel, (((dy.ndim - 1,), (1,)), ((), ())))
  x2 = x.reshape(-1, x.shape[-1])
  dy2 = dy.reshape(-1, dy.shape[-1])
  # Contract the token axis of both operands: [i, tokens] x [tokens, o] -> [i, o].
  dkernel = jax.lax.dot_general(x2, dy2, (((0,), (0,)), ((), ())))
  return dx.astype(x.dtype), dkernel.astype(kernel.dtype)


matmul.defvjp(_matmul_fwd, _matmul_bwd)


class Dense(nn.Module):
  """Bias-free dense layer, a drop-in for `nn.Dense(features, use_bias=False)`.

  Same parameter name, shape and initialisation as `nn.Dense` (so checkpoints
  and init values are interchangeable); inputs and kernel are promoted to
  `dtype` like `nn.Dense` does.

  Attributes:
    features: output width.
    dtype: computation dtype (None: promote the input and kernel dtypes).
    param_dtype: parameter dtype.
    kernel_init: initializer of the [in, features] kernel.

  Example:
    >>> layer = Dense(8)
    >>> params = layer.init(jax.random.key(0), jnp.ones((2, 4)))
    >>> layer.apply(params, jnp.ones((2, 4))).shape
    (2, 8)
  """
  features: int
  dtype: Any = None
  param_dtype: Any = jnp.float32
  kernel_init: Any = nn.initializers.lecun_normal()

  @nn.compact
  def __call__(self, x: Float[Array, "*b i"]) -> Float[Array, "*b o"]:
    kernel = self.param("kernel", self.kernel_init, (jnp.shape(x)[-1], self.features),
                        self.param_dtype)
    x, kernel = nn.dtypes.promote_dtype(x, kernel, dtype=self.dtype)
    return matmul(x, kernel)
