"""Training and evaluation loops: the SASRec backbone, then each arm on the frozen backbone.

All three are pure functions of arrays (configs static), written with `lax.scan`, so an
experiment can `jax.vmap` them over seeds and `jax.jit` one program per arm structure.

Example:
  >>> import jax, jax.numpy as jnp
  >>> from jaxlab.recsys import sasrec, training
  >>> cfg = sasrec.SASRecConfig(num_items=20, max_len=6, d_model=8, num_heads=2, d_ff=16)
  >>> hist = jax.random.randint(jax.random.key(0), (32, 6), 1, 21)
  >>> tc = training.TrainConfig(num_steps=5, batch_size=8,
  ...                            optimizer={"learning_rate": 1e-3, "schedule": "constant"})
  >>> params, losses = training.train_backbone(cfg, tc, hist, jax.random.key(1))
  >>> losses.shape
  (5,)
"""

import dataclasses
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import optax
from jaxtyping import Array, Float, Int

from jaxlab.recsys import arms as arms_lib
from jaxlab.recsys import metrics, sasrec
from jaxlab.train.optimizers import optimizer


@dataclasses.dataclass(frozen=True)
class TrainConfig:
  """Steps, minibatch size and the optimizer.

  Attributes:
    num_steps: optimisation steps (the optimizer's schedule spans them).
    batch_size: rows per minibatch.
    optimizer: the optimizer's fields (`jaxlab.train.optimizer` keys, e.g. the resolved
      `config.optimizer` or one of its stages).
  """
  num_steps: int
  batch_size: int
  optimizer: Mapping[str, Any] = dataclasses.field(hash=False)

  def __post_init__(self):
    if self.num_steps < 1 or self.batch_size < 1:
      raise ValueError(f"num_steps and batch_size must be >= 1, got {self.num_steps}, "
                       f"{self.batch_size}")


def _scan_train(loss_fn, params, train: TrainConfig, num_rows: int, key):
  tx = optimizer(train.optimizer, train.num_steps)

  def step(carry, inputs):
    p, opt = carry
    i, k = inputs
    k_idx, k_loss = jax.random.split(k)
    idx = jax.random.randint(k_idx, (train.batch_size,), 0, num_rows)
    loss, grads = jax.value_and_grad(loss_fn)(p, idx, k_loss, i)
    updates, opt = tx.update(grads, opt, p)
    return (optax.apply_updates(p, updates), opt), loss

  keys = jax.random.split(key, train.num_steps)
  (params, _), losses = jax.lax.scan(step, (params, tx.init(params)),
                                     (jnp.arange(train.num_steps), keys))
  return params, losses


def train_backbone(cfg: sasrec.SASRecConfig, train: TrainConfig,
                   histories: Int[Array, "u t"], key: Array) -> tuple[Any, Float[Array, "s"]]:
  """SASRec trained on request-free histories: next-item CE at every position, dropout on.

  Args:
    cfg: backbone sizes (t == cfg.max_len).
    train: steps, batch size, optimizer.
    histories: left-padded item ids; position j predicts item j (inputs shifted by one).
    key: PRNG key (init, minibatches, dropout).

  Returns:
    (params, per-step losses).
  """
  if histories.shape[1] != cfg.max_len:
    raise ValueError(f"histories must be [users, {cfg.max_len}], got {histories.shape}")
  model = sasrec.SASRec(cfg)
  k_init, k_train = jax.random.split(key)
  params = model.init(k_init, histories[:1])["params"]
  inputs = jnp.concatenate([jnp.zeros_like(histories[:, :1]), histories[:, :-1]], 1)

  def loss_fn(p, idx, k, _):
    x, y = inputs[idx], histories[idx]
    h = model.apply({"params": p}, x, deterministic=False, rngs={"dropout": k})
    logits = model.apply({"params": p}, h, method=model.scores)
    return sasrec.next_item_loss(logits, jnp.where(x > 0, y, 0))

  return _scan_train(loss_fn, params, train, histories.shape[0], k_train)


def train_arm(arm: arms_lib.ArmConfig, cfg: sasrec.SASRecConfig, train: TrainConfig,
              backbone: Any, data: dict, item_text: Float[Array, "n e"], key: Array,
              hyper: arms_lib.ArmHyper = arms_lib.DEFAULT_HYPER) -> tuple[Any, Float[Array, "s"]]:
  """Trains an arm's own parameters on request steps; the backbone stays frozen.

  Args:
    arm, cfg, train: the arm, backbone sizes, optimisation.
    backbone: frozen backbone params.
    data: "history" [u, t], "request" [u, e], "target" [u] of the training users.
    item_text: item-text embeddings [num_items + 1, e].
    key: PRNG key (init, minibatches, Gumbel noise).
    hyper: CRAMER's traced hyper-parameters.

  Returns:
    (arm params, per-step losses; zeros for the "frozen" arm, which trains nothing).
  """
  k_init, k_train = jax.random.split(key)
  params = arms_lib.init_arm(arm, cfg, backbone, k_init, data["request"].shape[-1])
  if arm.kind == "frozen":
    return params, jnp.zeros((train.num_steps,), jnp.float32)

  def loss_fn(p, idx, k, i):
    batch = {name: data[name][idx] for name in ("history", "request")}
    logits, aux = arms_lib.arm_logits(arm, cfg, p, backbone, batch, item_text, key=k,
                                      step=i, num_steps=train.num_steps, hyper=hyper)
    return sasrec.next_item_loss(logits, data["target"][idx]) + aux

  return _scan_train(loss_fn, params, train, data["target"].shape[0], k_train)


def evaluate_arm(arm: arms_lib.ArmConfig, cfg: sasrec.SASRecConfig, params: Any,
                 backbone: Any, data: dict, item_text: Float[Array, "n e"],
                 item_genres: Float[Array, "n g"], neutral: Float[Array, "e"], *,
                 k: int = 10, hyper: arms_lib.ArmHyper = arms_lib.DEFAULT_HYPER) -> dict:
  """Per-row test metrics of an arm (inference: deterministic gates, no noise).

  Args:
    arm, cfg, params, backbone: as in `train_arm`.
    data: "history", "request", "target", "negatives" [u, m], "genre" [u] (-1 = none).
    item_text, item_genres: item-text embeddings and genre membership [num_items + 1, .].
    neutral: the embedding of a neutral request, substituted for every row to measure
      the genre share "without a request".
    k: list length of the metrics.
    hyper: CRAMER's ρ (others ignore it).

  Returns:
    Per-row arrays [u]: hr/ndcg/mrr sampled (prefix "s") and full (prefix "f"), the requested genre's
    share in the top k under the request ("share") and under the neutral request
    ("share_neutral"; 0 where there is no genre).
  """
  batch = {"history": data["history"], "request": data["request"]}
  logits, _ = arms_lib.arm_logits(arm, cfg, params, backbone, batch, item_text, hyper=hyper)
  neutral_batch = dict(batch, request=jnp.broadcast_to(neutral, data["request"].shape))
  logits_n, _ = arms_lib.arm_logits(arm, cfg, params, backbone, neutral_batch, item_text,
                                    hyper=hyper)
  out = {}
  for prefix, ranks in (("s_", metrics.sampled_ranks(logits, data["target"],
                                                     data["negatives"])),
                        ("f_", metrics.full_ranks(logits, data["target"]))):
    out.update({prefix + m: v for m, v in metrics.ranking_metrics(ranks, k).items()})
  g = jnp.maximum(data["genre"], 0)
  has = data["genre"] >= 0
  out["share"] = jnp.where(has, metrics.top_k_genre_share(logits, item_genres, g, k), 0.0)
  out["share_neutral"] = jnp.where(
      has, metrics.top_k_genre_share(logits_n, item_genres, g, k), 0.0)
  return out
