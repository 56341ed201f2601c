"""The arms of the CRAMER study: how each one turns (history, request) into item scores.

Every arm steers one frozen SASRec backbone (`jaxlab.recsys.sasrec`) with a request
embedding e_q (MiniLM, precomputed) and trains only its own parameters:

* "frozen": the backbone alone (ignores the request; nothing trained).
* "concat" (Query-SeqRec-like): h' = h + MLP([h; e_q]), scores h'·E.
* "late_fusion" (BLaIR-like): scores + α·cos(e_q, e_text(item)), α trained.
* "adapter" (LLM-ESR-like): item-text embeddings fused by a small adapter,
  scores h·E_i + u(h, e_q)·A(e_text(i)).
* "finetune" (upper bound): the whole backbone trained, with the request as an extra
  last token (a trained projection of e_q), the oldest history item dropped.
* "cramer": gates m = GumbelTopK(W e_q + b) over W_O / FFN rows and columns of the
  frozen backbone, softmax straight-through, + λ_KL (1/d) KL(Q || Bernoulli(k/d)).

The baselines' exact forms are jaxlab interpretations of the spec's "-like" sketches (the
hidden width is `ArmConfig.hidden`; residual / zero-initialised outputs so each starts
at the backbone). The CRAMER drop ratio, noise sharing and λ_KL are traced (`ArmHyper`):
one compiled program serves a ρ sweep.

Example:
  >>> import jax, jax.numpy as jnp
  >>> from jaxlab.recsys import arms, sasrec
  >>> cfg = sasrec.SASRecConfig(num_items=20, max_len=6, d_model=8, num_heads=2, d_ff=16)
  >>> items = jnp.array([[0, 0, 3, 4, 5, 6]])
  >>> backbone = sasrec.SASRec(cfg).init(jax.random.key(0), items)["params"]
  >>> arm = arms.ArmConfig("cramer", scope="wo")
  >>> params = arms.init_arm(arm, cfg, backbone, jax.random.key(1), embed_dim=5)
  >>> batch = dict(history=items, request=jnp.ones((1, 5)))
  >>> logits, aux = arms.arm_logits(arm, cfg, params, backbone, batch, jnp.ones((21, 5)))
  >>> logits.shape
  (1, 21)
"""

import dataclasses
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from jaxlab.recsys import gates as gates_lib
from jaxlab.recsys import sasrec

ARM_KINDS = ("frozen", "concat", "late_fusion", "adapter", "finetune", "cramer")


@dataclasses.dataclass(frozen=True)
class ArmConfig:
  """The static part of an arm (its structure).

  Attributes:
    kind: one of ARM_KINDS.
    scope: CRAMER's masked set, "wo", "ffn" or "ffn_wo" (spec: FFN + W_O on large data).
    tau_start: STE temperature at the first step (spec 0.7).
    tau_end: STE temperature at the last step (spec 0.3).
    tau_schedule: "cosine" (spec's best), "linear" or "exponential".
    hidden: hidden width of the concat head and the adapter (jaxlab interpretation).
    fusion_scale: late fusion's α = fusion_scale x a trained scalar, so that Adam's
      per-step change (~ the learning rate) moves α on the scale of the scores
      (jaxlab interpretation).
  """
  kind: str
  scope: str = "ffn_wo"
  tau_start: float = 0.7
  tau_end: float = 0.3
  tau_schedule: str = "cosine"
  hidden: int = 128
  fusion_scale: float = 10.0

  def __post_init__(self):
    if self.kind not in ARM_KINDS:
      raise ValueError(f"ArmConfig.kind must be one of {ARM_KINDS}, got {self.kind!r}")
    if self.scope not in sasrec.GATE_SCOPES:
      raise ValueError(f"ArmConfig.scope must be one of {sasrec.GATE_SCOPES}, "
                       f"got {self.scope!r}")
    if self.tau_schedule not in gates_lib.TAU_SCHEDULES:
      raise ValueError(f"ArmConfig.tau_schedule must be one of {gates_lib.TAU_SCHEDULES}")


class ArmHyper(NamedTuple):
  """CRAMER's traced hyper-parameters (ignored by the other arms).

  rho: drop ratio ρ (k = ⌈(1−ρ)d⌉ gates kept); shared_noise: one Gumbel draw per batch
  instead of per instance; lambda_kl: weight of the KL term.
  """
  rho: Any = 0.1
  shared_noise: Any = False
  lambda_kl: Any = 0.2


DEFAULT_HYPER = ArmHyper()

class _ConcatHead(nn.Module):
  hidden: int
  d: int

  @nn.compact
  def __call__(self, h, q):
    x = jax.nn.gelu(nn.Dense(self.hidden)(jnp.concatenate([h, q], -1)))
    return h + nn.Dense(self.d, kernel_init=nn.initializers.zeros)(x)


class _Adapter(nn.Module):
  hidden: int
  d: int

  @nn.compact
  def __call__(self, h, q, item_text):
    z = nn.Dense(self.d)(jax.nn.gelu(nn.Dense(self.hidden)(item_text)))  # [n, d]
    u = nn.Dense(self.d, kernel_init=nn.initializers.zeros)(jnp.concatenate([h, q], -1))
    return jnp.einsum("bd,nd->bn", u, z)


def _normalize(x):
  return x / jnp.maximum(jnp.linalg.norm(x, axis=-1, keepdims=True), 1e-6)


def init_arm(arm: ArmConfig, cfg: sasrec.SASRecConfig, backbone: Any, key: Array,
             embed_dim: int) -> dict:
  """The trainable parameters of `arm` (a copy of the backbone for "finetune").

  Args:
    arm: the arm.
    cfg: the backbone's sizes.
    backbone: the frozen backbone's params.
    key: PRNG key.
    embed_dim: width of the request / item-text embeddings (384 for MiniLM).

  Returns:
    The arm's parameter dict ({} for "frozen").

  Example:
    >>> cfg = sasrec.SASRecConfig(num_items=20, max_len=6, d_model=8, num_heads=2, d_ff=16)
    >>> items = jnp.array([[0, 0, 3, 4, 5, 6]])
    >>> backbone = sasrec.SASRec(cfg).init(jax.random.key(0), items)["params"]
    >>> params = init_arm(ArmConfig("cramer", scope="wo"), cfg, backbone, jax.random.key(1),
    ...                   embed_dim=5)
    >>> params["gen"]["proj"]["kernel"].shape   # e_q -> one logit per W_O row and column
    (5, 32)
    >>> init_arm(ArmConfig("frozen"), cfg, backbone, jax.random.key(1), embed_dim=5)
    {}
  """
  d, q = cfg.d_model, jnp.zeros((1, embed_dim))
  h = jnp.zeros((1, d))
  if arm.kind == "frozen":
    return {}
  if arm.kind == "concat":
    return {"head": _ConcatHead(arm.hidden, d).init(key, h, q)["params"]}
  if arm.kind == "late_fusion":
    return {"alpha": jnp.zeros(())}
  if arm.kind == "adapter":
    return {"adapter": _Adapter(arm.hidden, d).init(key, h, q, q)["params"]}
  if arm.kind == "finetune":
    return {"backbone": backbone,
            "token": nn.Dense(d).init(key, q)["params"]}
  n = sasrec.num_gates(cfg, arm.scope)
  return {"gen": gates_lib.GateGenerator(n).init(key, q)["params"]}


def arm_logits(arm: ArmConfig, cfg: sasrec.SASRecConfig, params: dict, backbone: Any,
               batch: dict, item_text: Float[Array, "n e"], *, key: Array | None = None,
               step: Any = 0, num_steps: int = 1, hyper: ArmHyper = DEFAULT_HYPER
               ) -> tuple[Float[Array, "b n"], Float[Array, ""]]:
  """Scores over item ids 0..num_items for a batch, and the arm's extra loss.

  Args:
    arm, cfg, params, backbone: the arm, the backbone's sizes, the arm's and the
      frozen backbone's params.
    batch: "history" int [b, t] (left-padded) and "request" float [b, e].
    item_text: unit-norm item-text embeddings [num_items + 1, e] (late fusion, adapter).
    key: None at inference (CRAMER: deterministic top-k); a key in training
      (Gumbel noise).
    step, num_steps: training progress (the STE temperature schedule).
    hyper: CRAMER's ρ, noise sharing and λ_KL.

  Returns:
    (logits [b, num_items + 1], extra loss: λ_KL times the mean KL for CRAMER, else 0).

  Example:
    >>> cfg = sasrec.SASRecConfig(num_items=20, max_len=6, d_model=8, num_heads=2, d_ff=16)
    >>> items = jnp.array([[0, 0, 3, 4, 5, 6]])
    >>> backbone = sasrec.SASRec(cfg).init(jax.random.key(0), items)["params"]
    >>> batch = dict(history=items, request=jnp.ones((1, 5)))
    >>> frozen, _ = arm_logits(ArmConfig("frozen"), cfg, {}, backbone, batch,
    ...                        jnp.ones((21, 5)))
    >>> concat = ArmConfig("concat", hidden=4)
    >>> params = init_arm(concat, cfg, backbone, jax.random.key(1), embed_dim=5)
    >>> logits, extra = arm_logits(concat, cfg, params, backbone, batch, jnp.ones((21, 5)))
    >>> logits.shape, float(extra), bool(jnp.allclose(logits, frozen))   # starts at the backbone
    ((1, 21), 0.0, True)
  """
  model = sasrec.SASRec(cfg)
  hist, q = batch["history"], batch["request"]
  frozen = jax.lax.stop_gradient(backbone)
  zero = jnp.zeros((), jnp.float32)

  def scores(p, h):
    return model.apply({"params": p}, h, method=model.scores)

  if arm.kind == "finetune":
    tok = nn.Dense(cfg.d_model).apply({"params": params["token"]}, q)
    items = jnp.concatenate([hist[:, 1:], jnp.zeros_like(hist[:, :1])], 1)
    h = model.apply({"params": params["backbone"]}, items, last_token=tok)[:, -1]
    return scores(params["backbone"], h), zero
  if arm.kind == "cramer":
    layout = sasrec.gate_layout(cfg, arm.scope)
    n = sum(s for _, s in layout)
    z = gates_lib.GateGenerator(n).apply({"params": params["gen"]}, q)
    k = gates_lib.keep_count(n, hyper.rho)
    if key is None:
      m = gates_lib.top_k_mask(z, k)
      aux = zero
    else:
      tau = gates_lib.temperature(step, num_steps, arm.tau_start, arm.tau_end,
                                  arm.tau_schedule)
      m = gates_lib.straight_through(gates_lib.top_k_mask(z, k, key, hyper.shared_noise),
                                     z, tau)
      aux = hyper.lambda_kl * jnp.mean(gates_lib.bernoulli_kl(z, k / n))
    h = model.apply({"params": frozen}, hist, gates=sasrec.split_gates(m, layout))[:, -1]
    return scores(frozen, h), aux
  h = model.apply({"params": frozen}, hist)[:, -1]
  base = scores(frozen, h)
  if arm.kind == "frozen":
    return base, zero
  if arm.kind == "concat":
    h2 = _ConcatHead(arm.hidden, cfg.d_model).apply({"params": params["head"]}, h, q)
    return scores(frozen, h2), zero
  if arm.kind == "late_fusion":
    cos = jnp.einsum("be,ne->bn", _normalize(q), _normalize(item_text))
    return base + arm.fusion_scale * params["alpha"] * cos, zero
  extra = _Adapter(arm.hidden, cfg.d_model).apply({"params": params["adapter"]}, h, q,
                                                  item_text)
  return base + extra.at[:, 0].set(0.0), zero
