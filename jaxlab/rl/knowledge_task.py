"""A toy "knowledge boundary" task for abstention-aware RL (UCPO, §3(d) of the spec).

Prompts are pairs (a, b) in [0, n)^2; each has a hidden answer in [0, K) from
a random lookup table (facts to memorise, no rule to generalise). The policy
answers with one token of an answer vocabulary of K answers plus `IDK` (= K,
"I don't know"). The prompt space is split at random into three buckets:

  * known: SFT on the true answer;
  * partial: SFT on noisy labels (the true answer with probability
    `partial_label_accuracy`, else a uniformly drawn wrong one) -- RL can still
    sharpen these;
  * unlearnable: never seen in SFT, and the answer is drawn afresh, uniformly,
    every time the question is asked, so no policy answers it better than 1/K.

SFT replaces a fraction `idk_label_rate` of its labels with `IDK` on every SFT
prompt, so the policy knows the token exists (jaxlab interpretation: without it
a G = 8 group practically never samples IDK and no RL method can learn to
abstain). RL (`rl_train`) then samples G answers per prompt and trains with one
of the advantage rules of `jaxlab.rl.grpo` / `jaxlab.rl.ucpo`, chosen by a
traced `Arm`, so every arm shares one compiled program and seeds vmap.

Metrics (`evaluate`) are exact expectations under the policy's sampling
distribution, per bucket: accuracy P(correct), abstention P(IDK),
hallucination P(wrong), PAQ = correct / (correct + wrong) (precision on
answered questions) and F1 = harmonic mean of PAQ and accuracy (the spec's
reading of the paper's F1, jaxlab interpretation).

Example:
  >>> import jax
  >>> from jaxlab.rl import knowledge_task as kt
  >>> task_cfg, policy_cfg = kt.TaskConfig(), kt.PolicyConfig()
  >>> task = kt.make_task(task_cfg, seed=0)
  >>> model = kt.make_policy(policy_cfg, task_cfg)
  >>> params = kt.init_params(model, jax.random.key(0))
  >>> kt.answer_logits(model, params, task.tokens).shape
  (100, 11)
"""

import dataclasses
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import Array
from jaxtyping import Bool, Float, Int

from jaxlab.nn import Transformer, TransformerConfig
from jaxlab.rl import grpo, ucpo

KNOWN, PARTIAL, UNLEARNABLE = 0, 1, 2
BUCKETS = ("known", "partial", "unlearnable")
# Rows of `evaluate`'s tables: the three buckets, then every prompt.
GROUPS = (*BUCKETS, "all")
METRICS = ("accuracy", "abstention", "hallucination", "paq", "f1")


@dataclasses.dataclass(frozen=True)
class TaskConfig:
  """The prompt space and its knowledge boundary.

  Attributes:
    num_values: n; prompts are (a, b) in [0, n)^2.
    num_answers: K; answers are 0..K-1 and `IDK` = K.
    fractions: shares of the prompts that are (known, partial, unlearnable).
    partial_label_accuracy: probability that a partial prompt's SFT label is right.
    idk_label_rate: fraction of SFT labels replaced by IDK (jaxlab interpretation).
  """
  num_values: int = 10
  num_answers: int = 10
  fractions: tuple[float, float, float] = (0.6, 0.2, 0.2)
  partial_label_accuracy: float = 0.4
  idk_label_rate: float = 0.1

  def __post_init__(self):
    if self.num_values < 2 or self.num_answers < 2:
      raise ValueError(f"num_values and num_answers must be >= 2, got {self.num_values}, "
                       f"{self.num_answers}")
    f = tuple(float(x) for x in self.fractions)
    if len(f) != 3 or min(f) < 0 or abs(sum(f) - 1.0) > 1e-6:
      raise ValueError(f"fractions must be 3 non-negative shares summing to 1, got {self.fractions}")
    object.__setattr__(self, "fractions", f)
    for name in ("partial_label_accuracy", "idk_label_rate"):
      if not 0.0 <= getattr(self, name) <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")

  @property
  def idk(self) -> int:
    return self.num_answers

  @property
  def num_prompts(self) -> int:
    return self.num_values ** 2


class Task(NamedTuple):
  """One draw of the task (a pytree: stack draws to vmap over seeds).

  tokens: int32 [P, 3], the prompt (a, n + b, 2n); answers: int32 [P] hidden
  answers (ignored for unlearnable prompts); buckets: int32 [P] in
  {KNOWN, PARTIAL, UNLEARNABLE}.
  """
  tokens: Array
  answers: Array
  buckets: Array


def make_task(cfg: TaskConfig, seed: int) -> Task:
  """The lookup table and bucket split drawn with `seed` (numpy, host side)."""
  rng = np.random.default_rng(seed)
  n, p = cfg.num_values, cfg.num_prompts
  a, b = np.divmod(np.arange(p), n)
  tokens = np.stack([a, n + b, np.full(p, 2 * n)], axis=1).astype(np.int32)
  answers = rng.integers(0, cfg.num_answers, p).astype(np.int32)
  counts = np.floor(np.asarray(cfg.fractions) * p + 0.5).astype(int)
  counts[0] = p - counts[1:].sum()
  buckets = np.repeat(np.arange(3), counts)[rng.permutation(p)].astype(np.int32)
  return Task(jnp.asarray(tokens), jnp.asarray(answers), jnp.asarray(buckets))


def stack_tasks(tasks: list[Task]) -> Task:
  """Stacks tasks along a new leading (seed) axis."""
  return jax.tree.map(lambda *xs: jnp.stack(xs), *tasks)


@dataclasses.dataclass(frozen=True)
class PolicyConfig:
  """The tiny policy: a `jaxlab.nn.Transformer` ("transformer") or an MLP ("mlp").

  Both read the prompt tokens (a, n + b, query) and emit K + 1 logits. The MLP
  (embeddings of the three tokens, concatenated, `num_layers` GELU layers of
  width `d_ff`) compiles several times faster, which keeps the smoke preset
  inside its budget; the transformer reads the query position's output.
  """
  kind: str = "transformer"
  d_model: int = 32
  num_layers: int = 1
  num_heads: int = 2
  num_kv_heads: int = 1
  d_ff: int = 64

  def __post_init__(self):
    if self.kind not in ("transformer", "mlp"):
      raise ValueError(f"PolicyConfig.kind must be 'transformer' or 'mlp', got {self.kind!r}")


class KnowledgePolicy(nn.Module):
  """Answer logits (answers 0..K-1, then IDK) of a prompt, shape [n, K + 1].

  Attributes:
    config: the decoder's config (its vocabulary covers prompt tokens and answers).
    num_outputs: K + 1.
    kind: "transformer" (the last position's first K + 1 logits) or "mlp".
  """
  config: TransformerConfig
  num_outputs: int
  kind: str = "transformer"

  @nn.compact
  def __call__(self, tokens: Int[Array, "n t"]) -> Float[Array, "n k1"]:
    cfg = self.config
    if self.kind == "transformer":
      logits = Transformer(cfg, name="decoder")(tokens)
      return logits[:, -1, :self.num_outputs]
    x = nn.Embed(cfg.vocab_size, cfg.d_model, name="embed")(tokens)
    x = x.reshape(x.shape[0], -1)
    for i in range(cfg.num_layers):
      x = nn.gelu(nn.Dense(cfg.d_ff, name=f"hidden_{i}")(x))
    return nn.Dense(self.num_outputs, name="head")(x).astype(jnp.float32)


def make_policy(cfg: PolicyConfig, task_cfg: TaskConfig) -> KnowledgePolicy:
  """The policy for `task_cfg`'s prompt and answer vocabularies."""
  vocab = max(2 * task_cfg.num_values + 1, task_cfg.num_answers + 1)
  return KnowledgePolicy(TransformerConfig(
      vocab_size=vocab, d_model=cfg.d_model, num_layers=cfg.num_layers, num_heads=cfg.num_heads,
      num_kv_heads=cfg.num_kv_heads, d_ff=cfg.d_ff, max_len=3), task_cfg.num_answers + 1,
      cfg.kind)


def init_params(model: KnowledgePolicy, key: Array) -> Any:
  """Fresh parameters of `model`."""
  return nn.meta.unbox(model.init(key, jnp.zeros((1, 3), jnp.int32))["params"])


def answer_logits(model: KnowledgePolicy, params: Any,
                  tokens: Int[Array, "n 3"]) -> Float[Array, "n k1"]:
  """Logits over the K answers and IDK, shape [prompts, K + 1]."""
  return model.apply({"params": params}, tokens)


# ----------------------------------------------------------------------------- evaluation


def evaluate(model: KnowledgePolicy, params: Any, task: Task,
             task_cfg: TaskConfig) -> Float[Array, "4 5"]:
  """Exact per-bucket metrics of the sampling policy: rows `GROUPS`, columns `METRICS`.

  An empty bucket's row is NaN. PAQ is NaN when the policy never answers (F1 is then
  0: recall is 0). NaN logits give NaN metrics, never an F1 of 0.
  """
  probs = jax.nn.softmax(answer_logits(model, params, task.tokens), axis=-1)
  k = task_cfg.num_answers
  p_u = probs[:, k]
  p_true = jnp.take_along_axis(probs, task.answers[:, None], axis=1)[:, 0]
  # An unlearnable answer is a fresh uniform draw: any answered token is right w.p. 1/K.
  p_c = jnp.where(task.buckets == UNLEARNABLE, (1.0 - p_u) / k, p_true)
  p_w = jnp.clip(1.0 - p_c - p_u, 0.0, 1.0)
  rows = []
  for g in range(len(GROUPS)):
    m = (task.buckets == g) if g < len(BUCKETS) else jnp.ones_like(task.buckets, bool)
    n = m.sum()
    c, u, w = (jnp.where(m, x, 0.0).sum() for x in (p_c, p_u, p_w))
    acc, abst, hall = c / n, u / n, w / n
    paq = jnp.where(c + w > 0, c / (c + w), jnp.nan)
    # paq + acc > 0 is False for NaN too: only a finite acc may take the 0 branch.
    f1 = jnp.where(paq + acc > 0, 2 * paq * acc / (paq + acc),
                   jnp.where(jnp.isnan(acc), jnp.nan, 0.0))
    row = jnp.stack([acc, abst, hall, paq, f1])
    rows.append(jnp.where(n > 0, row, jnp.nan))
  return jnp.stack(rows)


def metrics_table(table: np.ndarray | Array) -> dict[str, dict[str, float]]:
  """`evaluate`'s array as {group: {metric: value}} (plain floats)."""
  t = np.asarray(table, np.float64)
  return {g: {m: float(t[i, j]) for j, m in enumerate(METRICS)} for i, g in enumerate(GROUPS)}


# ----------------------------------------------------------------------------- SFT


@dataclasses.dataclass(frozen=True)
class SFTConfig:
  """Supervised warm start on the known and partial prompts (Adam, cross-entropy)."""
  num_steps: int = 400
  batch_size: int = 64
  learning_rate: float = 3e-3


def sft_labels(task: Task, idx: Int[Array, "n"], key: Array,
               task_cfg: TaskConfig) -> Int[Array, "n"]:
  """Labels for prompts `idx`: true (known), noisy (partial), IDK with `idk_label_rate`."""
  k_noise, k_wrong, k_idk = jax.random.split(key, 3)
  true = task.answers[idx]
  k = task_cfg.num_answers
  wrong = (true + jax.random.randint(k_wrong, true.shape, 1, k)) % k  # uniform over the others
  keep = jax.random.uniform(k_noise, true.shape) < task_cfg.partial_label_accuracy
  label = jnp.where((task.buckets[idx] == PARTIAL) & ~keep, wrong, true)
  idk = jax.random.uniform(k_idk, true.shape) < task_cfg.idk_label_rate
  return jnp.where(idk, k, label).astype(jnp.int32)


def sft_train(model: KnowledgePolicy, params: Any, task: Task, key: Array, task_cfg: TaskConfig,
              cfg: SFTConfig) -> tuple[Any, Float[Array, "s"]]:
  """SFT on the known and partial prompts; returns (params, loss per step). Jittable."""
  tx = optax.adam(cfg.learning_rate)
  seen = (task.buckets != UNLEARNABLE).astype(jnp.float32)

  def loss_fn(p, tokens, labels):
    logits = answer_logits(model, p, tokens)
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

  def step(carry, k):
    p, s = carry
    k_idx, k_lab = jax.random.split(k)
    idx = jax.random.choice(k_idx, seen.shape[0], (cfg.batch_size,), p=seen / seen.sum())
    loss, g = jax.value_and_grad(loss_fn)(p, task.tokens[idx], sft_labels(task, idx, k_lab,
                                                                          task_cfg))
    u, s = tx.update(g, s, p)
    return (optax.apply_updates(p, u), s), loss

  (params, _), losses = jax.lax.scan(step, (params, tx.init(params)),
                                     jax.random.split(key, cfg.num_steps))
  return params, losses


# ----------------------------------------------------------------------------- RL


class Arm(NamedTuple):
  """One advantage rule, as arrays (arms share one compiled program and can vmap).

  reward_uncertain: GRPO's fixed abstention reward r_u (0 = binary GRPO);
  tad: use TAD + NTF instead of GRPO + dynamic sampling; dura: TAD's uncertain
  channel from DURA (else the constant `uncertain_reward`); normalize_uncertain:
  z-score the uncertain channel over the batch's uncertain rollouts (else use it
  directly, see `ucpo.tad_advantages`); dura_scale, dura_k, dura_b: DURA's s, k, b.
  """
  reward_uncertain: Array
  tad: Array
  dura: Array
  uncertain_reward: Array
  normalize_uncertain: Array
  dura_scale: Array
  dura_k: Array
  dura_b: Array


def make_arm(kind: str, *, reward_uncertain: float = 0.0, uncertain_reward: float = 0.0,
             normalize_uncertain: bool = True, dura_scale: float = 1.0, dura_k: float = 2.0,
             dura_b: float = 2.0) -> Arm:
  """An `Arm`: kind "grpo" (with `reward_uncertain` = r_u), "tad" (TAD only) or "ucpo".

  Args:
    kind: "grpo", "tad" or "ucpo".
    reward_uncertain: GRPO's abstention reward r_u ("grpo" only; 0 = binary GRPO).
    uncertain_reward: the constant uncertain-channel value of "tad".
    normalize_uncertain: TAD's uncertain channel z-scored over the batch (the
      paper's "independently normalize") or used directly (jaxlab interpretation).
    dura_scale, dura_k, dura_b: DURA's s (finite, >= 0), k and b ("ucpo" only).

  Returns:
    The arm's arrays.

  Raises:
    ValueError: an unknown kind, or a DURA scale that is negative or not finite.

  Example:
    >>> arm = make_arm("ucpo", dura_b=0.0)
    >>> bool(arm.tad), bool(arm.dura), float(arm.dura_b)
    (True, True, 0.0)
  """
  if kind not in ("grpo", "tad", "ucpo"):
    raise ValueError(f"arm kind must be 'grpo', 'tad' or 'ucpo', got {kind!r}")
  if not (np.isfinite(dura_scale) and dura_scale >= 0):
    raise ValueError(f"dura_scale must be a finite number >= 0, got {dura_scale}")
  f32 = jnp.float32
  return Arm(f32(reward_uncertain), jnp.bool_(kind != "grpo"), jnp.bool_(kind == "ucpo"),
             f32(uncertain_reward), jnp.bool_(normalize_uncertain), f32(dura_scale), f32(dura_k),
             f32(dura_b))


@dataclasses.dataclass(frozen=True)
class RLConfig:
  """RL with G samples per prompt (the advantage rule and its constants are the `Arm`'s).

  Attributes:
    num_steps: RL steps (one batch of `batch_prompts` x `group_size` rollouts each).
    batch_prompts: prompts per step, drawn uniformly from every bucket.
    group_size: G, rollouts per prompt.
    learning_rate: Adam step size (a float or an optax schedule).
    updates_per_batch: gradient steps on each batch (> 1 makes the clip bind).
    eps_low, eps_high: the surrogate's clip range.
    max_grad_norm: global-norm gradient clip.
    adv_eps: epsilon of the advantage standardisation.
    ema_decay: decay of DURA's batch-accuracy EMA g_t.
    num_evals: evaluations along training (`num_steps` must be a multiple).
  """
  num_steps: int = 300
  batch_prompts: int = 32
  group_size: int = 8
  learning_rate: float | optax.Schedule = 1e-3
  updates_per_batch: int = 1
  eps_low: float = 0.2
  eps_high: float = 0.28
  max_grad_norm: float = 1.0
  adv_eps: float = 1e-6
  ema_decay: float = 0.9
  num_evals: int = 10

  def __post_init__(self):
    for name in ("num_steps", "batch_prompts", "updates_per_batch", "num_evals"):
      if getattr(self, name) < 1:
        raise ValueError(f"RLConfig.{name} must be >= 1, got {getattr(self, name)}")
    if self.group_size < 2:
      raise ValueError(f"RLConfig.group_size must be >= 2, got {self.group_size}")
    if self.num_steps % self.num_evals:
      raise ValueError(f"RLConfig.num_steps={self.num_steps} must be a multiple of "
                       f"num_evals={self.num_evals}")


def rollout_outcomes(answers: Int[Array, "b g"], targets: Int[Array, "b"],
                     idk: int) -> Int[Array, "b g"]:
  """Outcome codes of sampled answers against each prompt's target."""
  return jnp.where(answers == idk, grpo.UNCERTAIN,
                   jnp.where(answers == targets[:, None], grpo.CORRECT, grpo.WRONG)
                   ).astype(jnp.int32)


def sample_answers(key: Array, logits: Float[Array, "b k1"], num_samples: int) -> Int[Array, "b g"]:
  """`num_samples` draws per row from softmax(logits), by inverting the CDF.

  Same distribution as `jax.random.categorical`, whose Gumbel draw takes XLA:CPU
  seconds to compile (measured 3 s vs 0.3 s here), the bulk of the smoke budget.
  """
  cdf = jnp.cumsum(jax.nn.softmax(logits, axis=-1), axis=-1)
  u = jax.random.uniform(key, (logits.shape[0], num_samples))
  idx = (u[:, :, None] >= cdf[:, None, :-1]).sum(-1)  # last bin absorbs rounding of cdf[-1]
  return idx.astype(jnp.int32)


def arm_advantages(outcomes: Int[Array, "b g"], arm: Arm, accuracy_ema: Float[Array, ""],
                   cfg: RLConfig) -> tuple[Float[Array, "b g"], Bool[Array, "b"]]:
  """Advantages and kept groups under `arm` (both rules computed, one selected)."""
  rewards = grpo.outcome_rewards(outcomes, uncertain=arm.reward_uncertain)
  a_grpo = grpo.group_advantages(rewards, eps=cfg.adv_eps)
  keep_grpo = grpo.dynamic_sampling_mask(rewards)
  a_tad, keep_tad = ucpo.ucpo_advantages(
      outcomes, accuracy_ema, dura=arm.dura, uncertain_reward=arm.uncertain_reward,
      normalize_uncertain=arm.normalize_uncertain, scale=arm.dura_scale, k=arm.dura_k,
      b=arm.dura_b, eps=cfg.adv_eps)
  return jnp.where(arm.tad, a_tad, a_grpo), jnp.where(arm.tad, keep_tad, keep_grpo)


class RLState(NamedTuple):
  """Policy params, optimizer state, the EMA of the batch accuracy (a scalar) and the PRNG key."""
  params: Any
  opt_state: Any
  accuracy_ema: Array
  key: Array


def make_rl_step(model: KnowledgePolicy, task_cfg: TaskConfig, cfg: RLConfig):
  """`(step, tx)`: `step(state, task, arm) -> (state, metrics)`, one RL step (pure, jittable)."""
  tx = optax.chain(optax.clip_by_global_norm(cfg.max_grad_norm), optax.adam(cfg.learning_rate))
  b, g, k = cfg.batch_prompts, cfg.group_size, task_cfg.num_answers

  def loss_fn(params, tokens, answers, old_logp, adv, valid):
    logp_all = jax.nn.log_softmax(answer_logits(model, params, tokens), axis=-1)
    logp = jnp.take_along_axis(logp_all, answers, axis=1).reshape(b * g, 1)
    return grpo.clipped_surrogate_loss(logp, old_logp, adv.reshape(b * g), valid,
                                       eps_low=cfg.eps_low, eps_high=cfg.eps_high)

  def step(state: RLState, task: Task, arm: Arm):
    key, k_idx, k_sample, k_target = jax.random.split(state.key, 4)
    idx = jax.random.randint(k_idx, (b,), 0, task.tokens.shape[0])
    tokens = task.tokens[idx]
    logits = answer_logits(model, state.params, tokens)
    answers = sample_answers(k_sample, logits, g)
    fresh = jax.random.randint(k_target, (b,), 0, k)
    targets = jnp.where(task.buckets[idx] == UNLEARNABLE, fresh, task.answers[idx])
    outcomes = rollout_outcomes(answers, targets, k)
    adv, keep = arm_advantages(outcomes, arm, state.accuracy_ema, cfg)
    old_logp = jnp.take_along_axis(jax.nn.log_softmax(logits, -1), answers, axis=1)
    old_logp = jax.lax.stop_gradient(old_logp.reshape(b * g, 1))
    valid = jnp.repeat(keep, g).reshape(b * g, 1)

    params, opt_state = state.params, state.opt_state
    for _ in range(cfg.updates_per_batch):  # a few static passes; a scan here compiles slower
      loss, grads = jax.value_and_grad(loss_fn)(params, tokens, answers, old_logp, adv, valid)
      updates, opt_state = tx.update(grads, opt_state, params)
      params = optax.apply_updates(params, updates)
    ema = ucpo.update_accuracy_ema(state.accuracy_ema, outcomes, decay=cfg.ema_decay)
    metrics = dict(loss=loss, kept=keep.mean(),
                   correct=(outcomes == grpo.CORRECT).mean(),
                   uncertain=(outcomes == grpo.UNCERTAIN).mean())
    return RLState(params, opt_state, ema, key), metrics

  return step, tx


def rl_train(model: KnowledgePolicy, params: Any, task: Task, arm: Arm, key: Array,
             task_cfg: TaskConfig, cfg: RLConfig) -> tuple[Any, dict[str, Array]]:
  """RL from `params` under `arm`; jittable and vmappable over (params, task, arm, key).

  Returns:
    (final params, curves): `curves["eval"]` is `evaluate`'s table after every
    `num_steps / num_evals` steps, shape [num_evals, 4, 5]; `curves[m]` for the
    step metrics (loss, kept, correct, uncertain) are chunk means, [num_evals].
  """
  step, tx = make_rl_step(model, task_cfg, cfg)
  state = RLState(params, tx.init(params), jnp.float32(0.5), key)
  chunk = cfg.num_steps // cfg.num_evals

  def run_chunk(state, _):
    state, metrics = jax.lax.scan(lambda s, _: step(s, task, arm), state, None, length=chunk)
    out = {m: v.mean() for m, v in metrics.items()}
    out["eval"] = evaluate(model, state.params, task, task_cfg)
    return state, out

  state, curves = jax.lax.scan(run_chunk, state, None, length=cfg.num_evals)
  return state.params, curves
