"""A toy "knowledge boundary" task for abstention-aware RL (UCPO).

A CPU stand-in (jaxlab's) for the paper's math and QA benchmarks, whose models
know some answers, half-know others and cannot know the rest.

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
answered questions) and F1 = harmonic mean of PAQ and accuracy (our reading
of the paper's F1, jaxlab interpretation).

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
from jaxlab.report import seed_summary
from jaxlab.rl import grpo, ucpo
from jaxlab.train.optimizers import optimizer as build_optimizer

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
  """Supervised warm start on the known and partial prompts (cross-entropy; the optimizer
  is `sft_train`'s `tx`)."""
  num_steps: int = 400
  batch_size: int = 64


# The optimizers `sft_train` and `make_rl_step` build (`jaxlab.train.optimizer`) without a `tx`.
SFT_OPTIMIZER = {"learning_rate": 3e-3, "schedule": "constant"}
RL_OPTIMIZER = {"learning_rate": 1e-3, "schedule": "constant", "grad_clip": 1.0}


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
              cfg: SFTConfig, tx: optax.GradientTransformation | None = None
              ) -> tuple[Any, Float[Array, "s"]]:
  """SFT on the known and partial prompts; returns (params, loss per step). Jittable.

  `tx` is the optimizer (`jaxlab.train.optimizer` over `cfg.num_steps`); None builds
  `SFT_OPTIMIZER`.
  """
  if tx is None:
    tx = build_optimizer(SFT_OPTIMIZER, cfg.num_steps)
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


UNCERTAIN_NORMS = ("batch", "direct")
# The knobs of `named_arm`, and the arms (by name) each changes: an interpretation reading
# of a knob re-runs only those.
ARM_KNOBS = ("uncertain_norm", "tad_uncertain_reward", "dura_scale", "dura_k", "dura_b")
KNOB_ARMS = {"uncertain_norm": ("tad", "ucpo"), "dura_b": ("ucpo",)}


def named_arm(name: str, *, uncertain_norm: str = "batch", tad_uncertain_reward: float = 0.0,
              dura_scale: float = 1.0, dura_k: float = 2.0, dura_b: float = 2.0) -> Arm:
  """The `Arm` of an arm name: "grpo", "fixed_<r_u>", "tad" or "ucpo".

  Args:
    name: "grpo" (binary GRPO), "fixed_<r_u>" (GRPO with abstention reward r_u),
      "tad" (TAD only, constant uncertain reward) or "ucpo" (TAD + DURA).
    uncertain_norm: "batch" (z-score TAD's uncertain channel over the batch) or
      "direct" (use it as the advantage); see `make_arm`'s `normalize_uncertain`.
    tad_uncertain_reward: the constant uncertain-channel value of "tad".
    dura_scale, dura_k, dura_b: DURA's s, k, b.

  Returns:
    The arm.

  Raises:
    ValueError: an unknown name or `uncertain_norm`.

  Example:
    >>> float(named_arm("fixed_0.5").reward_uncertain), bool(named_arm("tad").dura)
    (0.5, False)
  """
  if uncertain_norm not in UNCERTAIN_NORMS:
    raise ValueError(f"ucpo.uncertain_norm must be one of {UNCERTAIN_NORMS}, "
                     f"got {uncertain_norm!r}")
  if name == "grpo":
    return make_arm("grpo")
  if name.startswith("fixed_"):
    try:
      r_u = float(name[len("fixed_"):])
    except ValueError as e:
      raise ValueError(f"arm {name!r}: expected fixed_<r_u>, e.g. fixed_0.5") from e
    return make_arm("grpo", reward_uncertain=r_u)
  if name in ("tad", "ucpo"):
    return make_arm(name, uncertain_reward=tad_uncertain_reward,
                    normalize_uncertain=uncertain_norm == "batch", dura_scale=dura_scale,
                    dura_k=dura_k, dura_b=dura_b)
  raise ValueError(f"Unknown arm {name!r}; expected grpo, fixed_<r_u>, tad or ucpo")


def reading_runs(readings: Any, arms: list[str]) -> dict[str, tuple[str, Any, str]]:
  """The runs of alternative readings of `named_arm`'s knobs.

  Args:
    readings: {knob of `KNOB_ARMS`: its other values} (a mapping or ConfigDict).
    arms: the configured arms (a reading re-runs only those of them its knob changes).

  Returns:
    {run name "<arm>@<knob>=<value>": (knob, value, arm)}.

  Example:
    >>> sorted(reading_runs(dict(uncertain_norm=("direct",), dura_b=(0.0,)),
    ...                     ["fixed_0.5", "ucpo"]))
    ['ucpo@dura_b=0.0', 'ucpo@uncertain_norm=direct']
  """
  runs = {}
  for knob, values in readings.items():
    if knob not in KNOB_ARMS:
      raise ValueError(f"config.readings: unknown knob {knob!r}; expected one of "
                       f"{sorted(KNOB_ARMS)}")
    for value in values:
      for arm in KNOB_ARMS[knob]:
        if arm in arms:
          runs[f"{arm}@{knob}={value}"] = (knob, value, arm)
  return runs


def reading_source(knob: str, value) -> str:
  """Where a reading of an interpretation knob comes from (shown in the report).

  Args:
    knob: a knob of `named_arm` (`KNOB_ARMS`).
    value: its reading.

  Returns:
    The source: the paper where it says, else "jaxlab interpretation" and why.

  Example:
    >>> reading_source("dura_b", 0.0)
    'jaxlab interpretation: the model-evolution term off (b = 0)'
  """
  if knob == "uncertain_norm":
    return ("the paper, abstract ('independently normalize deterministic and uncertain "
            "rollouts'); pooling the batch's uncertain rollouts is jaxlab interpretation"
            if value == "batch" else
            "jaxlab interpretation: DURA's value is the uncertain rollouts' advantage")
  if knob == "dura_b":
    return ("jaxlab interpretation: the model-evolution term off (b = 0)"
            if float(value) == 0 else
            "jaxlab interpretation: the abstract's model-evolution term on, gain b = k")
  return "jaxlab interpretation"


@dataclasses.dataclass(frozen=True)
class RLConfig:
  """RL with G samples per prompt (the advantage rule and its constants are the `Arm`'s).

  Attributes:
    num_steps: RL steps (one batch of `batch_prompts` x `group_size` rollouts each).
    batch_prompts: prompts per step, drawn uniformly from every bucket.
    group_size: G, rollouts per prompt.
    updates_per_batch: gradient steps on each batch (> 1 makes the clip bind).
    eps_low, eps_high: the surrogate's clip range.
    adv_eps: epsilon of the advantage standardisation.
    ema_decay: decay of DURA's batch-accuracy EMA g_t.
    num_evals: evaluations along training (`num_steps` must be a multiple).
  """
  num_steps: int = 300
  batch_prompts: int = 32
  group_size: int = 8
  updates_per_batch: int = 1
  eps_low: float = 0.2
  eps_high: float = 0.28
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

  @property
  def num_gradient_steps(self) -> int:
    """Optimizer updates in a run: `updates_per_batch` per RL step."""
    return self.num_steps * self.updates_per_batch


def rollout_outcomes(answers: Int[Array, "b g"], targets: Int[Array, "b"],
                     idk: int) -> Int[Array, "b g"]:
  """Outcome codes of sampled answers against each prompt's target."""
  return jnp.where(answers == idk, grpo.UNCERTAIN,
                   jnp.where(answers == targets[:, None], grpo.CORRECT, grpo.WRONG)
                   ).astype(jnp.int32)


def sample_answers(key: Array, logits: Float[Array, "b k1"], num_samples: int) -> Int[Array, "b g"]:
  """`num_samples` draws per row from softmax(logits), by inverting the CDF.

  Same distribution as `jax.random.categorical`, whose Gumbel draw is far slower to
  compile on XLA:CPU, the bulk of the smoke budget.
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


def make_rl_step(model: KnowledgePolicy, task_cfg: TaskConfig, cfg: RLConfig,
                 tx: optax.GradientTransformation | None = None):
  """`(step, tx)`: `step(state, task, arm) -> (state, metrics)`, one RL step (pure, jittable).

  `tx` is the optimizer (`jaxlab.train.optimizer` over `cfg.num_gradient_steps`); None
  builds `RL_OPTIMIZER`.
  """
  if tx is None:
    tx = build_optimizer(RL_OPTIMIZER, cfg.num_gradient_steps)
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
             task_cfg: TaskConfig, cfg: RLConfig, tx: optax.GradientTransformation | None = None
             ) -> tuple[Any, dict[str, Array]]:
  """RL from `params` under `arm`; jittable and vmappable over (params, task, arm, key).

  `tx` is the optimizer, as in `make_rl_step`.

  Returns:
    (final params, curves): `curves["eval"]` is `evaluate`'s table after every
    `num_steps / num_evals` steps, shape [num_evals, 4, 5]; `curves[m]` for the
    step metrics (loss, kept, correct, uncertain) are chunk means, [num_evals].
  """
  step, tx = make_rl_step(model, task_cfg, cfg, tx)
  state = RLState(params, tx.init(params), jnp.float32(0.5), key)
  chunk = cfg.num_steps // cfg.num_evals

  def run_chunk(state, _):
    state, metrics = jax.lax.scan(lambda s, _: step(s, task, arm), state, None, length=chunk)
    out = {m: v.mean() for m, v in metrics.items()}
    out["eval"] = evaluate(model, state.params, task, task_cfg)
    return state, out

  state, curves = jax.lax.scan(run_chunk, state, None, length=cfg.num_evals)
  return state.params, curves


# ----------------------------------------------------------------------------- paired seeds


def seed_keys(seeds: list[int]) -> Array:
  """[s] key triples, one per seed: (init, SFT, RL); arms share a seed's RL key (paired).

  Example:
    >>> seed_keys([0, 1]).shape
    (2, 3)
  """
  return jax.vmap(lambda s: jax.random.split(jax.random.key(s), 3))(np.asarray(seeds))


def make_seed_runs(model: KnowledgePolicy, tasks: Task, keys: Array, task_cfg: TaskConfig,
                   sft_cfg: SFTConfig, rl_cfg: RLConfig,
                   sft_tx: optax.GradientTransformation | None = None,
                   rl_tx: optax.GradientTransformation | None = None):
  """The SFT warm start and the RL runs of paired seeds, vmapped over the seeds, jitted once.

  Args:
    model: the policy.
    tasks: one task per seed (`stack_tasks`).
    keys: `seed_keys` of the seeds.
    task_cfg, sft_cfg, rl_cfg: the task, SFT and RL settings.
    sft_tx, rl_tx: the stages' optimizers (`sft_train`, `rl_train`).

  Returns:
    (sft, rl): `sft() -> (params, losses [s, sft steps], eval [s, 4, 5])` from fresh
    params; `rl(params, arm) -> (params, curves)`, `rl_train` per seed from `params`
    (SFT's), one compiled program for every arm.

  Example:
    >>> task_cfg = TaskConfig(num_values=6)
    >>> tasks = stack_tasks([make_task(task_cfg, s) for s in (0, 1)])
    >>> model = make_policy(PolicyConfig(kind="mlp", d_model=8, d_ff=16), task_cfg)
    >>> sft, rl = make_seed_runs(model, tasks, seed_keys([0, 1]), task_cfg,
    ...                          SFTConfig(num_steps=2, batch_size=4),
    ...                          RLConfig(num_steps=2, batch_prompts=4, num_evals=1))
    >>> params, losses, table = sft()
    >>> rl(params, make_arm("ucpo"))[1]["eval"].shape
    (2, 1, 4, 5)
  """
  @jax.jit
  @jax.vmap
  def sft(task, k):
    params = init_params(model, k[0])
    params, losses = sft_train(model, params, task, k[1], task_cfg, sft_cfg, sft_tx)
    return params, losses, evaluate(model, params, task, task_cfg)

  @jax.jit
  def rl(params, arm):
    return jax.vmap(lambda p, t, k: rl_train(model, p, t, arm, k[2], task_cfg, rl_cfg, rl_tx))(
        params, tasks, keys)

  return lambda: sft(tasks, keys), rl


def seed_table(tables: Any) -> dict[str, dict[str, dict]]:
  """Per-seed `evaluate` tables as {group: {metric: `jaxlab.report.seed_summary`}}.

  `tables` is array-like, [seeds, 4, 5] (e.g. a cached arm's nested lists).

  Example:
    >>> t = seed_table(np.full((3, 4, 5), 0.5))
    >>> t["known"]["paq"]["mean"], len(t["all"]["f1"]["per_seed"])
    (0.5, 3)
  """
  t = np.asarray(tables)
  return {g: {m: seed_summary(t[:, i, j]) for j, m in enumerate(METRICS)}
          for i, g in enumerate(GROUPS)}


def draw_abstention(ax: Any, table: dict, arms: list[str]) -> None:
  """Bars of each arm's abstention per bucket (mean ± std over seeds) on a matplotlib `ax`.

  Args:
    ax: the axes.
    table: {arm: `seed_table`}.
    arms: the arms to draw, in order.

  Example:
    >>> import matplotlib; matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt
    >>> draw_abstention(plt.figure().gca(), {"ucpo": seed_table(np.zeros((2, 4, 5)))}, ["ucpo"])
  """
  width = 0.8 / len(arms)
  x = np.arange(len(BUCKETS))
  for i, arm in enumerate(arms):
    means = [table[arm][b]["abstention"]["mean"] for b in BUCKETS]
    stds = [table[arm][b]["abstention"]["std"] for b in BUCKETS]
    ax.bar(x + i * width, means, width, yerr=stds, label=arm)
  ax.set_xticks(x + 0.4 - width / 2, BUCKETS)
  ax.set_ylabel("abstention rate (P(IDK))")
  ax.set_title("Where each arm says 'I don't know'")
  ax.legend(fontsize=7)


def draw_paq(ax: Any, curves: dict, eval_steps: list[int]) -> None:
  """Each arm's PAQ over all prompts during RL (mean over seeds) on a matplotlib `ax`.

  Args:
    ax: the axes.
    curves: {arm: [seeds, evals, 4, 5] evaluation tables (`rl_train`'s "eval")}.
    eval_steps: the RL step of each evaluation.

  Example:
    >>> import matplotlib; matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt
    >>> draw_paq(plt.figure().gca(), {"ucpo": np.zeros((2, 3, 4, 5))}, [1, 2, 3])
  """
  for arm, c in curves.items():
    paq = np.asarray(c)[:, :, GROUPS.index("all"), METRICS.index("paq")]
    ax.plot(eval_steps, paq.mean(0), label=arm)
  ax.set_xlabel("RL step")
  ax.set_ylabel("PAQ (all prompts)")
  ax.set_title("PAQ during RL (mean over seeds)")
  ax.legend(fontsize=7)
