"""Training and evaluation of one CVGL arm on the synthetic world (seeds vmapped, steps scanned).

The arms of the reproduction differ only in numbers (`ArmParams`), so they share one
compiled program:

* "infonce":    Sample4Geo's symmetric InfoNCE with label smoothing;
* "fixed_soft": Soft InfoNCE with a constant eps (no uncertainty, no DER head);
* "soft_u":     the full method: Soft InfoNCE with eps_i = eps_max * u~_i, plus w_DER L_DER;
* "soft_mean":  the full method without its per-example adaptivity: the same DER head and
                loss, the same hard negatives, but every row of a batch gets the batch mean
                of eps_max * u~_i. Each batch gives its hard negatives the same total label
                mass as u-adaptive softening on the same u would; only which rows get it
                differs. The mechanism ablation at equal budget;
* "der_only":   InfoNCE (label smoothing) plus w_DER L_DER (the head trains, u is unused).

jaxlab interpretations: the DER regression target y (`TrainConfig.target`,
"positive_similarity": y_i = stop_gradient(s_ii); "margin": s_ii minus the hardest
negative's similarity), which uncertainty sets eps (`make_arm(uncertainty=...)`, an arm
number so every reading shares the compiled program), its squashing u / (u + median_batch
u), the hard-negative count and temperature.

Example:
  >>> from jaxlab.retrieval import training
  >>> arm = training.make_arm("soft_u", eps_max=0.3, der_weight=0.1)
  >>> float(arm.adaptive)
  1.0
"""

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from jaxtyping import Array, Float

from jaxlab.retrieval import losses, sampling
from jaxlab.retrieval import world as world_lib
from jaxlab.retrieval.model import CVGLModel
from jaxlab.retrieval.nig import der_loss, nig_uncertainty

ARMS = ("infonce", "fixed_soft", "soft_u", "soft_mean", "der_only")
TARGETS = ("positive_similarity", "margin")
# Which NIG uncertainty sets eps, as weights on (epistemic, aleatoric); "total" is their sum.
UNCERTAINTIES = {"epistemic": (1.0, 0.0), "aleatoric": (0.0, 1.0), "total": (1.0, 1.0)}


class ArmParams(NamedTuple):
  """The numbers that distinguish the arms (arrays: one compiled program serves all)."""
  label_smoothing: Array  # [] on the InfoNCE targets
  eps_fixed: Array        # [] constant softening (used when adaptive = 0)
  eps_max: Array          # [] eps_i = eps_max * u~_i (used when adaptive = 1)
  adaptive: Array         # [] 1.0: u-adaptive eps, 0.0: eps_fixed
  pooled: Array           # [] 1.0: every row gets the batch mean of the u-adaptive eps
  der_weight: Array       # [] w_DER (0: the NIG head is not trained)
  u_weights: Array        # [2] u = w . (epistemic, aleatoric)


def make_arm(name: str, *, label_smoothing: float = 0.1, eps_fixed: float = 0.15,
             eps_max: float = 0.3, der_weight: float = 0.1,
             uncertainty: str = "epistemic") -> ArmParams:
  """The `ArmParams` of an arm name.

  Args:
    name: one of `ARMS`.
    label_smoothing: Sample4Geo's label smoothing of the InfoNCE arms, in [0, 1).
    eps_fixed: the constant softening of "fixed_soft", in [0, 1).
    eps_max: eps_i = eps_max * u~_i of "soft_u" and "soft_mean", in [0, 1).
    der_weight: w_DER of the arms that train the NIG head (>= 0).
    uncertainty: which NIG uncertainty sets eps (jaxlab interpretation), a key of
      `UNCERTAINTIES`.

  Returns:
    The arm's numbers.

  Example:
    >>> arm = make_arm("soft_mean", eps_max=0.3, uncertainty="aleatoric")
    >>> float(arm.pooled), arm.u_weights.tolist()
    (1.0, [0.0, 1.0])
  """
  if name not in ARMS:
    raise ValueError(f"Unknown arm {name!r}; expected one of {ARMS}")
  if uncertainty not in UNCERTAINTIES:
    raise ValueError(f"uncertainty must be one of {tuple(UNCERTAINTIES)}, got {uncertainty!r}")
  if not 0 <= eps_fixed < 1 or not 0 <= eps_max < 1 or not 0 <= label_smoothing < 1:
    raise ValueError(f"label_smoothing, eps_fixed and eps_max must lie in [0, 1), got "
                     f"{label_smoothing}, {eps_fixed}, {eps_max}")
  if not der_weight >= 0:
    raise ValueError(f"der_weight must be >= 0, got {der_weight}")
  vals = {"infonce": (label_smoothing, 0.0, 0.0, 0.0, 0.0, 0.0),
          "fixed_soft": (0.0, eps_fixed, 0.0, 0.0, 0.0, 0.0),
          "soft_u": (0.0, 0.0, eps_max, 1.0, 0.0, der_weight),
          "soft_mean": (0.0, 0.0, eps_max, 1.0, 1.0, der_weight),
          "der_only": (label_smoothing, 0.0, 0.0, 0.0, 0.0, der_weight)}[name]
  return ArmParams(*(jnp.float32(v) for v in vals),
                   u_weights=jnp.asarray(UNCERTAINTIES[uncertainty], jnp.float32))


@dataclasses.dataclass(frozen=True)
class TrainConfig:
  """Static training settings (jaxlab interpretations are marked).

  Attributes:
    num_steps: optimizer steps.
    block: GPS-neighbour tile side (batch = num_blocks * block^2 pairs; 1 = random batches).
    num_blocks: tiles per batch.
    num_hard: K hard negatives per row of the soft targets (jaxlab interpretation).
    hard_temperature: tau_h of the softmax over hard negatives (jaxlab interpretation).
    der_reg: lambda_R of the DER regulariser.
    target: the DER regression target y (jaxlab interpretation), one of `TARGETS`.
    num_logs: per-step metrics are averaged into this many chunks.
  """
  num_steps: int = 600
  block: int = 2
  num_blocks: int = 64
  num_hard: int = 4
  hard_temperature: float = 0.1
  der_reg: float = 1e-2
  target: str = "positive_similarity"
  num_logs: int = 10

  def __post_init__(self):
    if self.target not in TARGETS:
      raise ValueError(f"target must be one of {TARGETS}, got {self.target!r}")
    if self.num_steps < 1 or self.num_logs < 1 or self.num_steps % self.num_logs:
      raise ValueError(f"num_steps ({self.num_steps}) must be a positive multiple of num_logs "
                       f"({self.num_logs})")


def regression_target(similarities: Float[Array, "b b"], target: str) -> Float[Array, " b"]:
  """The DER target y per pair (no gradient): s_ii, or s_ii - max_{j != i} s_ij ("margin")."""
  s = jax.lax.stop_gradient(similarities)
  pos = jnp.diagonal(s)
  if target == "positive_similarity":
    return pos
  if target == "margin":
    b = s.shape[0]
    return pos - jnp.max(jnp.where(jnp.eye(b, dtype=bool), -jnp.inf, s), axis=-1)
  raise ValueError(f"target must be one of {TARGETS}, got {target!r}")


def batch_loss(model: CVGLModel, params: Any, street: Array, sat: Array, arm: ArmParams,
               cfg: TrainConfig) -> tuple[Array, dict[str, Array]]:
  """The arm's loss on one batch of view pairs, and its diagnostics.

  Diagnostics: "loss", "infonce" (the contrastive term), "der", "eps" (batch mean of
  eps_i), "eps_spread" (its std over the batch: 0 for every arm but "soft_u") and
  "logit_scale".
  """
  out = model.apply(params, street, sat)
  sims = out.query @ out.reference.T
  b = sims.shape[0]
  nig = out.nig.nig
  kinds = nig_uncertainty(nig)
  u = arm.u_weights[0] * kinds["epistemic"] + arm.u_weights[1] * kinds["aleatoric"]
  eps_u = arm.eps_max * losses.squash_uncertainty(jax.lax.stop_gradient(u))
  eps_u = arm.pooled * jnp.mean(eps_u) + (1.0 - arm.pooled) * eps_u
  eps = arm.adaptive * eps_u + (1.0 - arm.adaptive) * arm.eps_fixed
  targets = losses.soft_targets(sims, eps, num_hard=cfg.num_hard,
                                temperature=cfg.hard_temperature)
  targets = (1.0 - arm.label_smoothing) * targets + arm.label_smoothing / b
  ce = jnp.mean(losses.soft_infonce(logits=out.logit_scale * sims, targets=targets))
  y = regression_target(sims, cfg.target)
  der = jnp.mean(der_loss(y, nig, reg_weight=cfg.der_reg))
  loss = ce + arm.der_weight * der
  return loss, {"loss": loss, "infonce": ce, "der": der, "eps": jnp.mean(eps),
                "eps_spread": jnp.std(eps), "logit_scale": out.logit_scale}


def make_train(model: CVGLModel, world_cfg: world_lib.WorldConfig, cfg: TrainConfig,
               tx: optax.GradientTransformation) -> Callable:
  """A jitted `train(cities, arm, seeds) -> (params, logs)`, vmapped over seeds.

  `cities` is a stacked `world.City` (one training city per seed), `seeds` [S] integers
  (each seeds the init, the batches and the view noise). Training runs on city 1's
  training area (x < split), with `tx` (`jaxlab.train.optimizer` of the experiment's
  `optimizer` section: AdamW with global-norm clipping, as Sample4Geo) over
  `cfg.num_steps`. `logs` maps each diagnostic of `batch_loss` to [S, num_logs] chunk means.
  """
  width, height = world_cfg.split, world_cfg.grid
  if cfg.num_blocks > sampling.num_tiles(width, height, cfg.block):
    raise ValueError(f"num_blocks={cfg.num_blocks} exceeds the {sampling.num_tiles(width, height, cfg.block)} "
                     f"tiles of block {cfg.block} in the {width} x {height} training area")

  def one_seed(city, arm, seed):
    k_init, k_run = jax.random.split(jax.random.key(seed))
    street, sat = world_lib.render_views(
        world_cfg, city, jnp.zeros((2, 2)), jax.random.key(0))
    params = model.init(k_init, street, sat)
    opt_state = tx.init(params)

    def step(carry, k):
      params, opt_state = carry
      k_batch, k_view = jax.random.split(k)
      x = sampling.neighbour_batch(k_batch, width=width, height=height, block=cfg.block,
                                   num_blocks=cfg.num_blocks)
      street, sat = world_lib.render_views(world_cfg, city, x, k_view)
      grads, logs = jax.grad(
          lambda p: batch_loss(model, p, street, sat, arm, cfg), has_aux=True)(params)
      updates, opt_state = tx.update(grads, opt_state, params)
      return (optax.apply_updates(params, updates), opt_state), logs

    (params, _), logs = jax.lax.scan(step, (params, opt_state),
                                     jax.random.split(k_run, cfg.num_steps))
    logs = jax.tree.map(lambda v: v.reshape(cfg.num_logs, -1).mean(-1), logs)
    return params, logs

  return jax.jit(jax.vmap(one_seed, in_axes=(0, None, 0)))


def make_evaluate(model: CVGLModel, world_cfg: world_lib.WorldConfig) -> Callable:
  """A jitted `evaluate(params, cities, seed) -> dict` on each city's held-out area, per seed.

  `seed` (an integer shared by every model seed) draws the test views' noise. Returns
  [S, ...] arrays: "similarities" [S, n, n] (street queries x satellite gallery), the NIG
  uncertainties "epistemic" / "aleatoric" [S, n] of the queries, the local field
  "roughness" [S, n] and the area's "density" of semi-positives [S].
  """
  x = world_lib.grid_locations(world_cfg, "test")

  def one_seed(params, city, seed):
    street, sat = world_lib.render_views(world_cfg, city, x, jax.random.key(seed))
    out = model.apply(params, street, sat)
    u = nig_uncertainty(out.nig.nig)
    return {"similarities": out.query @ out.reference.T, "epistemic": u["epistemic"],
            "aleatoric": u["aleatoric"], "roughness": world_lib.roughness(world_cfg, city, x),
            "density": world_lib.semi_positive_density(world_cfg, city, x)}

  return jax.jit(jax.vmap(one_seed, in_axes=(0, 0, None)))

