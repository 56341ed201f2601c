"""Stage 1 of the Spatial Deconfounder: a conditional VAE with a GMRF prior on patch latents.

For each site s the encoder q(Z_patch | A_patch, X_patch) sees the treatments and
covariates on the (2r+1)^2 patch around s (two 3x3 convolutions, "SAME" padding) and
returns a latent field over the patch (per-pixel mean and log-variance, `z_dim`
channels). The decoder p(A_s | X_patch, Z_patch) is one linear layer on the flattened
[X patch, Z patch] with a sigmoid. The prior on every latent channel is the patch GMRF
p(Z_d) ~ exp(-(tau/2) Z_d^T (L + eps I) Z_d) with L the patch's 8-connected Laplacian
(as in the authors' code). The substitute confounder handed to the outcome stage is the
encoder mean over the patch, flattened.
"""

import dataclasses
from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Array, Float

from jaxlab.causal import _grid


class PatchConv3x3(nn.Module):
  """A 3x3 "SAME" convolution written as one matmul over the 9 shifted views (im2col).

  The same function and parameter layout as `flax.linen.Conv(features, (3, 3),
  padding="SAME")` (kernel [3, 3, in, out], bias [out]); on tiny patches a matmul is much
  faster than XLA's CPU convolution, above all under `vmap` over seeds, where batched
  parameters turn a convolution into a slow grouped one.

  Attributes:
    features: output channels.
    dtype: computation dtype (params stay in `param_dtype`).
    param_dtype: parameter dtype.

  Example:
    >>> conv = PatchConv3x3(4)
    >>> v = conv.init(jax.random.key(0), jnp.ones((2, 3, 3, 5)))
    >>> conv.apply(v, jnp.ones((2, 3, 3, 5))).shape
    (2, 3, 3, 4)
  """
  features: int
  dtype: Any = None
  param_dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x: Float[Array, "b h w c"]) -> Float[Array, "b h w f"]:
    c = x.shape[-1]
    kernel = self.param("kernel", nn.initializers.lecun_normal(), (3, 3, c, self.features),
                        self.param_dtype)
    bias = self.param("bias", nn.initializers.zeros_init(), (self.features,), self.param_dtype)
    x, kernel, bias = nn.dtypes.promote_dtype(x, kernel, bias, dtype=self.dtype)
    h, w = x.shape[1:3]
    padded = jnp.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    cols = jnp.concatenate([padded[:, i:i + h, j:j + w] for i in range(3) for j in range(3)],
                           axis=-1)                                  # [b, h, w, 9 c]
    return cols @ kernel.reshape(9 * c, self.features) + bias


class SpatialCVAE(nn.Module):
  """Patch encoder (two 3x3 convs) and linear treatment decoder.

  jaxlab interpretation: the authors' encoder puts BatchNorm between the convolutions;
  here it is a plain ReLU (no batch statistics, so training vmaps over seeds as a pure
  function).

  Attributes:
    z_dim: latent channels per patch pixel.
    hidden: channels of the first convolution (the code's conv1 = 64).
    dtype: computation dtype (params stay in `param_dtype`).
    param_dtype: parameter dtype.

  Example:
    >>> m = SpatialCVAE(z_dim=2, hidden=8)
    >>> a, x = jnp.zeros((5, 3, 3)), jnp.zeros((5, 3, 3, 3))
    >>> v = m.init(jax.random.key(0), a, x, jax.random.key(1))
    >>> [t.shape for t in m.apply(v, a, x, jax.random.key(1))]
    [(5,), (5, 3, 3, 2), (5, 3, 3, 2)]
  """
  z_dim: int
  hidden: int = 64
  dtype: Any = None
  param_dtype: Any = jnp.float32

  def setup(self):
    kw = dict(dtype=self.dtype, param_dtype=self.param_dtype)
    self.conv1 = PatchConv3x3(self.hidden, name="conv1", **kw)
    self.conv2 = PatchConv3x3(2 * self.z_dim, name="conv2", **kw)
    self.decoder = nn.Dense(1, name="decoder", **kw)

  def encode(self, a_patch: Float[Array, "b p p"], x_patch: Float[Array, "b p p c"]
             ) -> tuple[Float[Array, "b p p z"], Float[Array, "b p p z"]]:
    """(mean, log-variance) of q(Z_patch | A_patch, X_patch)."""
    h = jnp.concatenate([a_patch[..., None], x_patch], axis=-1)
    h = self.conv2(nn.relu(self.conv1(h)))
    mean, logvar = jnp.split(h, 2, axis=-1)
    # Bounded log-variance: exp() of an untrained conv output must not overflow.
    return mean, jnp.clip(logvar, -10.0, 10.0)

  def decode(self, z: Float[Array, "b p p z"], x_patch: Float[Array, "b p p c"]
             ) -> Float[Array, "b"]:
    """Logit of A_s = 1 given the patch covariates and latents."""
    flat = jnp.concatenate([x_patch.reshape(x_patch.shape[0], -1), z.reshape(z.shape[0], -1)],
                           axis=-1)
    return self.decoder(flat)[:, 0]

  def __call__(self, a_patch: Float[Array, "b p p"], x_patch: Float[Array, "b p p c"],
               key: jax.Array) -> tuple[Float[Array, "b"], Float[Array, "b p p z"],
                                        Float[Array, "b p p z"]]:
    mean, logvar = self.encode(a_patch, x_patch)
    z = mean + jnp.exp(0.5 * logvar) * jax.random.normal(key, mean.shape, mean.dtype)
    return self.decode(z, x_patch), mean, logvar


def patch_prior_precision(radius: int, *, epsilon: float = 1e-5,
                          connectivity: int = 8) -> np.ndarray:
  """L + eps I of the (2r+1) x (2r+1) patch grid: the prior's precision without tau.

  Example:
    >>> patch_prior_precision(1).shape
    (9, 9)
  """
  if not epsilon > 0:
    raise ValueError(f"epsilon must be > 0, got {epsilon}")
  size = 2 * int(radius) + 1
  lap = _grid.grid_laplacian(size, size, connectivity=connectivity)
  return (lap + epsilon * np.eye(size * size)).astype(np.float32)


def gmrf_kl(mean: Float[Array, "b p p z"], logvar: Float[Array, "b p p z"],
            precision: Float[Array, "q q"], tau: float) -> Float[Array, "b"]:
  """KL(q || GMRF prior) up to constants, per example, divided by (#pixels * z_dim).

  (tau/2) sum_d [mu_d^T Q mu_d + sum_i Q_ii sigma^2_id] - 1/2 sum log sigma^2, with
  Q = L + eps I (`patch_prior_precision`), as in the authors' code.

  Args:
    mean: encoder means over the patch.
    logvar: encoder log-variances.
    precision: Q, [p*p, p*p].
    tau: the prior's precision scale (the code's 10).

  Returns:
    The KL term per example.

  Example:
    >>> q = jnp.asarray(patch_prior_precision(1))
    >>> gmrf_kl(jnp.zeros((2, 3, 3, 1)), jnp.zeros((2, 3, 3, 1)), q, 10.0).shape
    (2,)
  """
  b, p, _, z = mean.shape
  if precision.shape != (p * p, p * p):
    raise ValueError(f"precision must be [{p * p}, {p * p}] for a {p}x{p} patch, "
                     f"got {precision.shape}")
  mu = mean.reshape(b, p * p, z)
  var = jnp.exp(logvar).reshape(b, p * p, z)
  quad = jnp.einsum("bid,ij,bjd->b", mu, precision, mu)
  trace = jnp.einsum("bid,i->b", var, jnp.diagonal(precision))
  kl = 0.5 * tau * (quad + trace) - 0.5 * logvar.reshape(b, -1).sum(-1)
  return kl / (p * p * z)


@dataclasses.dataclass(frozen=True)
class CVAEConfig:
  """Stage-1 training (defaults: the authors' code).

  Attributes:
    z_dim: latent channels per patch pixel.
    hidden: first convolution's channels.
    radius: the patch radius r of the encoder/decoder.
    prior_tau: the GMRF prior's precision scale (code: 10).
    prior_epsilon: ridge of the prior's Laplacian (code: 1e-5).
    prior_connectivity: 8 (code) or 4.
    beta_max: final KL weight. jaxlab interpretation: the code tunes it log-uniformly in
      [1e-8, 1]; here it is one fixed knob.
    beta_warmup_steps: steps of the linear 0 -> beta_max ramp (code: 5 epochs).
    num_steps: optimisation steps. jaxlab interpretation: a fixed budget on every site,
      no spatial-block validation split or early stopping.
    batch_size: sites per step (sampled uniformly with replacement).
  """
  z_dim: int = 4
  hidden: int = 64
  radius: int = 1
  prior_tau: float = 10.0
  prior_epsilon: float = 1e-5
  prior_connectivity: int = 8
  beta_max: float = 0.1
  beta_warmup_steps: int = 45
  num_steps: int = 450
  batch_size: int = 256

  def __post_init__(self):
    for name in ("z_dim", "hidden", "num_steps", "batch_size"):
      if int(getattr(self, name)) < 1:
        raise ValueError(f"CVAEConfig.{name} must be >= 1, got {getattr(self, name)}")
    if self.radius < 1:
      raise ValueError(f"CVAEConfig.radius must be >= 1, got {self.radius}")
    if self.beta_max < 0 or self.beta_warmup_steps < 0:
      raise ValueError("CVAEConfig.beta_max and beta_warmup_steps must be >= 0")


def make_cvae_trainer(config: CVAEConfig, tx: optax.GradientTransformation,
                      *, dtype: Any = None
                      ) -> tuple[SpatialCVAE, Callable[..., tuple[dict, Array]]]:
  """The model and a pure `train(key, a, x) -> (params, losses)` (vmap it over seeds).

  `a` [h, w] is the binary treatment field and `x` [h, w, p] the covariates; every site's
  patch is a training example. `losses` [num_steps, 3] holds (total, BCE, KL) per step.

  Args:
    config: stage-1 settings.
    tx: the optimizer (`jaxlab.train.optimizer`; the authors' stage 1: the gradients'
      global norm clipped to 1, then AdamW with weight decay tuned in [1e-4, 1e-3]).
    dtype: computation dtype of the model.

  Returns:
    (model, train).

  Example:
    >>> cfg = CVAEConfig(z_dim=1, hidden=4, num_steps=3, batch_size=8)
    >>> import optax
    >>> model, train = make_cvae_trainer(cfg, optax.adam(1e-3))
    >>> params, losses = train(jax.random.key(0), jnp.zeros((5, 5)), jnp.zeros((5, 5, 3)))
    >>> losses.shape
    (3, 3)
  """
  c = config
  model = SpatialCVAE(z_dim=c.z_dim, hidden=c.hidden, dtype=dtype)
  precision = jnp.asarray(patch_prior_precision(c.radius, epsilon=c.prior_epsilon,
                                                connectivity=c.prior_connectivity))

  def train(key: jax.Array, a: Float[Array, "h w"], x: Float[Array, "h w p"]):
    a_patch = _grid.extract_patches(a, c.radius).reshape(-1, 2 * c.radius + 1,
                                                         2 * c.radius + 1)
    x_patch = _grid.extract_patches(x, c.radius)
    x_patch = x_patch.reshape(-1, *x_patch.shape[2:])
    target = a.reshape(-1)
    n = target.shape[0]
    k_init, k_loop = jax.random.split(key)
    params = model.init(k_init, a_patch[:1], x_patch[:1], k_init)["params"]

    def loss_fn(p, idx, k, beta):
      logits, mean, logvar = model.apply({"params": p}, a_patch[idx], x_patch[idx], k)
      bce = optax.sigmoid_binary_cross_entropy(logits, target[idx]).mean()
      kl = gmrf_kl(mean, logvar, precision, c.prior_tau).mean()
      return bce + beta * kl, (bce, kl)

    def step(carry, inputs):
      p, opt_state = carry
      i, k = inputs
      k_idx, k_z = jax.random.split(k)
      idx = jax.random.randint(k_idx, (c.batch_size,), 0, n)
      ramp = jnp.minimum(1.0, i / max(c.beta_warmup_steps, 1))
      (loss, (bce, kl)), grads = jax.value_and_grad(loss_fn, has_aux=True)(
          p, idx, k_z, c.beta_max * ramp)
      updates, opt_state = tx.update(grads, opt_state, p)
      return (optax.apply_updates(p, updates), opt_state), jnp.stack([loss, bce, kl])

    steps = (jnp.arange(c.num_steps), jax.random.split(k_loop, c.num_steps))
    (params, _), losses = jax.lax.scan(step, (params, tx.init(params)), steps)
    return params, losses

  return model, train


def latent_means(model: SpatialCVAE, params: dict, a: Float[Array, "h w"],
                 x: Float[Array, "h w p"], radius: int) -> Float[Array, "h w q"]:
  """The substitute confounder per site: the encoder's patch means, flattened.

  Args:
    model: the trained `SpatialCVAE`.
    params: its parameters.
    a: treatment field.
    x: covariates.
    radius: the patch radius the model was trained with.

  Returns:
    [h, w, (2r+1)^2 * z_dim] latent means.

  Example:
    >>> cfg = CVAEConfig(z_dim=1, hidden=4, num_steps=1, batch_size=4)
    >>> import optax
    >>> model, train = make_cvae_trainer(cfg, optax.adam(1e-3))
    >>> a, x = jnp.zeros((4, 4)), jnp.zeros((4, 4, 3))
    >>> latent_means(model, train(jax.random.key(0), a, x)[0], a, x, 1).shape
    (4, 4, 9)
  """
  h, w = a.shape
  size = 2 * radius + 1
  a_patch = _grid.extract_patches(a, radius).reshape(-1, size, size)
  x_patch = _grid.extract_patches(x, radius).reshape(-1, size, size, x.shape[-1])
  mean, _ = model.apply({"params": params}, a_patch, x_patch, method=SpatialCVAE.encode)
  return mean.reshape(h, w, -1)
