"""A tiny JAX inference engine driven by the serving schedulers.

The engine runs the `jaxlab.nn` decoder for real on a slot KV cache
(`KVCache` with one row per server slot) and executes the `StepPlan`s that
`MBScheduler`, `EBScheduler` and `EBPlusScheduler` produce, so the same
scheduler objects drive the simulator and the engine: `Engine` is a step-time
backend of `jaxlab.serving.simulator.simulate` (it implements
`execute(state, plan) -> seconds` and returns the measured time of the step).

One jitted step function serves prefill-chunk, decode and mixed steps alike
(`packed_step`): the step's tokens are packed into one ragged sequence, each
token tagged with its slot and absolute position. Projections and FFNs run
once over all packed tokens (a mixed step reads the weights once, which is
what makes mixed batching attractive); attention writes each token's
key/value into its slot row and attends that row under a causal mask in
absolute positions (a ragged causal mask: no token sees another request).
The packed length is bucketed (`token_buckets`: 1, 2, 4, 8, 12, 16, 24, ...),
so a run needs at most `len(engine.buckets)` programs; each is compiled ahead
of time outside the timed region (and shared by engines of the same shapes)
and counted in `Engine.compiles`, so no compile happens after warm-up
(`Engine.precompile`).

Token contents do not matter for throughput: prompts are a deterministic hash
of (request, position) and decode feeds back the greedy token.

Example:
  >>> import jax
  >>> from jaxlab.nn import TransformerConfig
  >>> from jaxlab.serving import engine, schedulers, simulator, workload
  >>> cfg = TransformerConfig(vocab_size=64, d_model=32, num_layers=1, num_heads=4, num_kv_heads=2, d_ff=64)
  >>> eng = engine.Engine.create(cfg, jax.random.key(0), num_slots=2, max_len=64, max_tokens=32)
  >>> r = simulator.simulate(schedulers.MBScheduler(2, 32), eng, workload.Workload(8.0, 4.0),
  ...                        concurrency=2, num_requests=3, capacity=eng.capacity)
  >>> r.completed
  3
"""

import dataclasses
import math
import statistics
import time
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array
from jaxtyping import Float, Int

from jaxlab.nn.transformer import (
  KVCache,
  RMSNorm,
  Transformer,
  TransformerConfig,
  apply_rope,
  init_cache,
)
from jaxlab.serving import cost, solver
from jaxlab.serving.schedulers import SlotState, StepPlan

IntSeq = Sequence[int | np.integer] | np.ndarray


def token_buckets(max_tokens: int, *, midpoints: bool = True) -> tuple[int, ...]:
  """Token-count buckets: 1, 2, 4, 8, then powers of two and (if `midpoints`) their midpoints
  (12, 16, 24, 32, ...), up to and including max_tokens.

  With midpoints a step above 8 tokens is padded by at most a third; without,
  by at most half, with fewer programs to compile.

  Example:
    >>> token_buckets(32)
    (1, 2, 4, 8, 12, 16, 24, 32)
    >>> token_buckets(32, midpoints=False)
    (1, 2, 4, 8, 16, 32)
  """
  if max_tokens < 1:
    raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
  out, b = [], 1
  while b < max_tokens:
    out.append(b)
    if midpoints and b >= 8 and b + b // 2 < max_tokens:
      out.append(b + b // 2)
    b *= 2
  out.append(max_tokens)
  return tuple(sorted(set(out)))


def bucket(n: int, buckets: Sequence[int]) -> int:
  """The smallest bucket >= n.

  Example:
    >>> bucket(5, token_buckets(32)), bucket(13, token_buckets(32))
    (8, 16)
  """
  for b in buckets:
    if b >= n:
      return b
  raise ValueError(f"a step of {n} tokens exceeds the largest bucket {buckets[-1]} (max_tokens)")


def packed_step(cfg: TransformerConfig, params: Any, cache_k: Float[Array, "l n s kh dh"],
                cache_v: Float[Array, "l n s kh dh"], slots: Int[Array, "t"], tokens: Int[Array, "t"],
                positions: Int[Array, "t"], out_index: Int[Array, "m"]):
  """One engine step over a packed, ragged set of tokens (prefill chunks and decodes alike).

  Token i belongs to slot `slots[i]` at absolute position `positions[i]`. All
  projections and FFNs run once over the packed tokens (so a mixed step reads
  the weights once). Attention first writes every token's key/value into its
  slot row of the cache, then each token attends its own slot row with the
  causal mask `key_position <= positions[i]` (the ragged causal mask: it
  sees its request's earlier context and the earlier tokens of its own chunk,
  never other requests' tokens). Padding tokens carry slot id `num_slots`:
  their writes are dropped and their outputs unused.

  Args:
    cfg: the decoder's config.
    params: `Transformer` parameters.
    cache_k, cache_v: slot KV cache, [layers, num_slots, max_len, kv_heads, head_dim].
    slots, tokens, positions: the packed tokens, int32 [T].
    out_index: packed indices whose logits are returned (each decode token,
      each prefill chunk's last token), int32 [M].

  Returns:
    (cache_k, cache_v, logits [M, vocab] float32).

  Example:
    >>> cfg = TransformerConfig(vocab_size=64, d_model=32, num_layers=1, num_heads=4,
    ...                         num_kv_heads=2, d_ff=64)
    >>> eng = Engine.create(cfg, jax.random.key(0), num_slots=2, max_len=16)  # params, empty cache
    >>> # A 3-token prefill chunk in slot 0 and one decode in slot 1 (at position 5).
    >>> slots, positions = jnp.array([0, 0, 0, 1]), jnp.array([0, 1, 2, 5])
    >>> tokens = jnp.array([5, 6, 7, 8])
    >>> step = jax.jit(packed_step, static_argnums=0)
    >>> k, v, logits = step(cfg, eng.params, eng.cache.k, eng.cache.v, slots, tokens, positions,
    ...                     jnp.array([2, 3]))  # logits of the chunk's last token and the decode
    >>> k.shape, logits.shape  # [layers, slots, max_len, kv_heads, head_dim], [rows, vocab]
    ((1, 2, 16, 2, 8), (2, 64))
  """
  h, hkv, dh = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
  n = tokens.shape[0]
  x = jnp.take(params["embed"]["embedding"], tokens, axis=0).astype(cfg.dtype)[None]  # [1, T, d]
  norm = lambda p, y: RMSNorm(cfg.norm_eps, cfg.dtype, cfg.param_dtype).apply({"params": p}, y)
  dense = lambda p, feats, name, y: cfg.dense_module(feats, name).apply({"params": p}, y)
  pos2 = positions[None]
  for i in range(cfg.num_layers):
    bpar = params[f"block_{i}"]
    ap = bpar["attn"]
    hx = norm(bpar["attn_norm"], x)
    q = apply_rope(dense(ap["q"], h * dh, "q", hx).reshape(1, n, h, dh), pos2, cfg.rope_base)[0]
    k = apply_rope(dense(ap["k"], hkv * dh, "k", hx).reshape(1, n, hkv, dh), pos2, cfg.rope_base)[0]
    v = dense(ap["v"], hkv * dh, "v", hx).reshape(n, hkv, dh)
    kc = cache_k[i].at[slots, positions].set(k.astype(cache_k.dtype), mode="drop")
    vc = cache_v[i].at[slots, positions].set(v.astype(cache_v.dtype), mode="drop")
    keys = jnp.take(kc, slots, axis=0, mode="clip")  # [T, S, hkv, dh]
    values = jnp.take(vc, slots, axis=0, mode="clip")
    mask = jnp.arange(keys.shape[1])[None, :] <= positions[:, None]  # [T, S]
    qg = q.reshape(n, hkv, h // hkv, dh)
    scores = jnp.einsum("nkgd,nskd->nkgs", qg, keys.astype(q.dtype)).astype(jnp.float32)
    scores = scores / jnp.sqrt(jnp.float32(dh))
    scores = jnp.where(mask[:, None, None], scores, jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(scores, axis=-1).astype(cfg.dtype)
    att = jnp.einsum("nkgs,nskd->nkgd", probs, values.astype(cfg.dtype)).reshape(1, n, h * dh)
    cache_k, cache_v = cache_k.at[i].set(kc), cache_v.at[i].set(vc)
    x = x + dense(ap["o"], cfg.d_model, "o", att)
    x = x + cfg.ffn(cfg, name="mlp").apply({"params": bpar["mlp"]}, norm(bpar["mlp_norm"], x))
  x = jnp.take(x[0], out_index, axis=0)[None]
  x = norm(params["final_norm"], x)
  logits = dense(params["lm_head"], cfg.vocab_size, "lm_head", x)[0].astype(jnp.float32)
  return cache_k, cache_v, logits


def _step_fn(cfg):
  def fn(params, ck, cv, slots, tokens, positions, out_index):
    return packed_step(cfg, params, ck, cv, slots, tokens, positions, out_index)
  return jax.jit(fn, donate_argnums=(1, 2))


# Compiled step programs, shared by engines of the same shapes:
# (config, num_slots, max_len, token bucket) -> executable.
_PROGRAMS: dict[tuple, Any] = {}


@dataclasses.dataclass
class Engine:
  """The tiny engine: decoder parameters, slot KV cache and compiled step programs.

  Build it with `Engine.create`.

  Attributes:
    config: decoder config.
    params: decoder parameters.
    num_slots: server slots (rows of the KV cache).
    max_len: tokens per slot (prompt + output must fit).
    max_tokens: most tokens in one step (>= the schedulers' token budget
      plus the decodes that share a step with it).
    midpoints: bucket spacing (see `token_buckets`).
    cache: the slot KV cache (`lengths` mirrors the tokens held per slot).
    compiles: programs compiled so far (never inside a timed step).
    step_log: (prefill_tokens, decode_tokens, seconds) of each executed step.
  """
  config: TransformerConfig
  params: Any
  num_slots: int
  max_len: int
  max_tokens: int = 256
  midpoints: bool = True
  cache: KVCache | None = None
  compiles: int = 0
  step_log: list = dataclasses.field(default_factory=list)

  def __post_init__(self):
    if self.num_slots < 1 or self.max_len < 2:
      raise ValueError(f"num_slots must be >= 1 and max_len >= 2, got {self.num_slots}, {self.max_len}")
    self.buckets = token_buckets(self.max_tokens, midpoints=self.midpoints)
    self._fn = _step_fn(self.config)
    self._last = np.zeros(self.num_slots, np.int32)
    if self.cache is None:
      self.reset()

  @classmethod
  def create(cls, config: TransformerConfig, key: Array, *, num_slots: int, max_len: int,
             max_tokens: int = 256, midpoints: bool = True) -> "Engine":
    """A randomly initialised decoder (throughput does not depend on training)."""
    params = jax.jit(Transformer(config).init)(key, jnp.zeros((1, 2), jnp.int32))["params"]
    return cls(config, params, num_slots, max_len, max_tokens, midpoints)

  @property
  def capacity(self) -> int:
    """KV capacity in tokens (for `SlotState` / the memory-safe N)."""
    return self.num_slots * self.max_len

  def reset(self) -> None:
    """Empties the KV cache and the step log (compiled programs are kept)."""
    self.cache = init_cache(self.config, self.num_slots, self.max_len)
    self.step_log = []
    self._last[:] = 0

  # -- programs ------------------------------------------------------------------
  def _args(self, b, slots, tokens, positions, out_index):
    m = min(b, self.num_slots)
    def fill(a, size, v):
      out = np.full(size, v, np.int32)
      out[:len(a)] = a
      return out
    return (self.params, self.cache.k, self.cache.v, fill(slots, b, self.num_slots), fill(tokens, b, 0),
            fill(positions, b, 0), fill(out_index, m, 0))

  def _program(self, b, args):
    key = (self.config, self.num_slots, self.max_len, b)
    prog = _PROGRAMS.get(key)
    if prog is None:
      prog = self._fn.lower(*args).compile()
      _PROGRAMS[key] = prog
      self.compiles += 1
    return prog

  def has_program(self, b: int) -> bool:
    return (self.config, self.num_slots, self.max_len, b) in _PROGRAMS

  def precompile(self, max_tokens: int | None = None) -> None:
    """Compiles the programs of every bucket up to `max_tokens` (default: all) ahead of time."""
    for b in self.buckets:
      if b <= (max_tokens or self.max_tokens) and not self.has_program(b):
        self._program(b, self._args(b, [], [], [], []))

  def run_raw(self, dec_slots: IntSeq, dec_pos: IntSeq, pre_slots: IntSeq, pre_pos: IntSeq, pre_lens: IntSeq, *,
              dec_tokens: IntSeq | None = None, pre_tokens: Sequence[IntSeq] | None = None,
              return_logits: bool = False) -> tuple[np.ndarray, float]:
    """Executes one step given explicit rows; returns (greedy next token per row, seconds).

    With `return_logits` the first result is the logits [rows, vocab] instead
    (decode rows first, then each prefill chunk's last token).

    Rows are decodes (one token at `dec_pos`) and prefill chunks (`pre_lens`
    tokens from `pre_pos`). The timed region is the compiled program's call
    until its results are ready; compiling a new bucket happens before it and
    is not timed.
    """
    dec_slots, dec_pos = np.asarray(dec_slots, np.int64), np.asarray(dec_pos, np.int64)
    pre_slots, pre_pos = np.asarray(pre_slots, np.int64), np.asarray(pre_pos, np.int64)
    lens = np.asarray(pre_lens, np.int64)
    nd, npf = dec_slots.size, pre_slots.size
    if nd + npf == 0:
      raise ValueError("a step needs at least one decode or prefill row")
    if npf and lens.min() < 1:
      raise ValueError(f"prefill chunk lengths must be >= 1, got {lens.tolist()}")
    rows = np.concatenate([dec_slots, pre_slots])
    if rows.min() < 0 or rows.max() >= self.num_slots or np.unique(rows).size != rows.size:
      raise ValueError(f"row slots must be distinct ids in [0, {self.num_slots}), got {rows.tolist()}")
    ends = np.concatenate([dec_pos + 1, pre_pos + lens])
    if ends.max() > self.max_len:
      raise ValueError(f"a row would hold {int(ends.max())} tokens; the slot KV cache holds max_len="
                       f"{self.max_len}")
    total = nd + int(lens.sum())
    b = bucket(total, self.buckets)
    if dec_tokens is None:
      dec_tokens = self._last[dec_slots]
    toks, poss, sl, outi = [np.asarray(dec_tokens, np.int64)], [dec_pos], [dec_slots], [np.arange(nd)]
    off = nd
    for i, (s, p0, n) in enumerate(zip(pre_slots, pre_pos, lens, strict=True)):
      ar = np.arange(p0, p0 + n)
      toks.append(np.asarray(pre_tokens[i]) if pre_tokens is not None else
                  (ar * 31 + int(s) * 7919 + 1) % self.config.vocab_size)
      poss.append(ar)
      sl.append(np.full(n, s))
      off += n
      outi.append(np.array([off - 1]))
    args = self._args(b, np.concatenate(sl), np.concatenate(toks), np.concatenate(poss), np.concatenate(outi))
    prog = self._program(b, args)
    start = time.perf_counter()
    ck, cv, logits = prog(*args)
    logits = np.asarray(jax.block_until_ready(logits))[:nd + npf]
    dt = time.perf_counter() - start
    self.cache = KVCache(ck, cv, self.cache.lengths)
    nxt = logits.argmax(-1).astype(np.int32)
    self._last[rows] = nxt
    return (logits if return_logits else nxt), dt

  # -- the simulator's backend interface ----------------------------------------------
  def execute(self, state: SlotState, plan: StepPlan) -> float:
    """Runs `plan` on the model (before `state.apply(plan)`); returns the measured seconds."""
    if state.num_slots > self.num_slots:
      raise ValueError(f"the server has {state.num_slots} slots but the engine's KV cache only "
                       f"{self.num_slots}")
    dec = plan.decode
    ps, pt = plan.prefill_slots, plan.prefill_tokens
    _, dt = self.run_raw(dec, state.kv[dec], ps, state.kv[ps], pt)
    self.step_log.append((int(pt.sum()), int(dec.size), dt))
    return dt


def calibrate(engine: Engine, *, prefill_sizes: Sequence[int] | None = None,
              decode_counts: Sequence[int] | None = None, context: int | None = None,
              mixed: Sequence[tuple[int, int]] | None = None,
              repeats: int = 5) -> tuple[cost.LinearStepModel, dict[str, float], list[cost.StepSample]]:
  """Fits the engine's own linear step-time model on this machine (the paper's sweep, scaled down).

  Times pure-prefill steps (one prompt of each size), pure-decode steps
  (k rows at `context` tokens) and mixed steps (k decodes + one chunk of n
  tokens), all interleaved round-robin `repeats` times after one untimed
  warm-up each, and fits `cost.fit_linear_model` to the per-shape medians.

  Defaults: the five largest powers of two up to max(max_tokens / 2, 2) as prefill sizes; decode counts
  1, 2, 4, ... up to num_slots; context max_len / 2; mixed steps pair every
  decode count below num_slots with the smallest, middle and largest prefill size
  (pairs over max_tokens left out).

  Returns:
    (model, fit R^2 dict, the median samples).

  Example:
    >>> cfg = TransformerConfig(vocab_size=64, d_model=32, num_layers=1, num_heads=4,
    ...                         num_kv_heads=2, d_ff=64)
    >>> eng = Engine.create(cfg, jax.random.key(0), num_slots=2, max_len=64, max_tokens=32)
    >>> model, r2, samples = calibrate(eng, prefill_sizes=(2, 4), decode_counts=(1, 2),
    ...                                mixed=[(1, 1), (1, 2), (1, 3)], repeats=1)
    >>> len(samples), model.name, model.alpha_p > 0
    (7, 'tiny engine (this machine)', True)
  """
  if prefill_sizes is None:
    prefill_sizes = [2 ** i for i in range(16) if 2 ** i <= max(engine.max_tokens // 2, 2)][-5:]
  if decode_counts is None:
    decode_counts = sorted({min(2 ** i, engine.num_slots) for i in range(12) if 2 ** (i - 1) < engine.num_slots})
  if context is None:
    context = engine.max_len // 2
  if mixed is None:
    ns = sorted({prefill_sizes[0], prefill_sizes[len(prefill_sizes) // 2], prefill_sizes[-1]})
    fits = lambda k, n: k < engine.num_slots and k + n <= engine.max_tokens
    mixed = [(k, n) for k in decode_counts for n in ns if fits(k, n)]
    if len(mixed) < 3:
      mixed = [(k, n) for k in decode_counts for n in range(1, engine.max_tokens) if fits(k, n)][:6]
  if repeats < 1:
    raise ValueError(f"repeats must be >= 1, got {repeats}")
  if max(decode_counts) > engine.num_slots or max(k for k, _ in mixed) >= engine.num_slots:
    raise ValueError(f"decode counts must be <= num_slots={engine.num_slots} (mixed: < num_slots, "
                     "one slot holds the prefill row)")
  if max(prefill_sizes) > engine.max_tokens or max(k + n for k, n in mixed) > engine.max_tokens \
      or context >= engine.max_len:
    raise ValueError(f"calibration steps must hold <= max_tokens={engine.max_tokens} tokens and "
                     f"context < max_len={engine.max_len}")
  slots = np.arange(engine.num_slots)
  specs = [(0, n) for n in prefill_sizes] + [(k, 0) for k in decode_counts] + list(mixed)

  def one(k, n):
    # Decodes in slots [0, k) at `context`; the prefill row in the last slot from 0.
    pre = [engine.num_slots - 1] if n else []
    dec = slots[:k]
    return engine.run_raw(dec, np.full(len(dec), context), pre, [0] * len(pre), [n] * len(pre))[1]

  for k, n in specs:
    one(k, n)
  times: dict[tuple[int, int], list[float]] = {s: [] for s in specs}
  for _ in range(repeats):
    for k, n in specs:
      times[(k, n)].append(one(k, n))
  samples = [cost.StepSample(n, k, statistics.median(times[(k, n)])) for k, n in specs]
  model, r2 = cost.fit_linear_model(samples, name="tiny engine (this machine)")
  engine.reset()
  return model, r2, samples


def crossover_prediction(model: cost.LinearStepModel, mu_l: float | int, mu_o: float | int,
                         n: float | int) -> bool:
  """True when the crossover condition (Prop. 4, CFR theta_0 at p = 1/mu_O) predicts EB > MB.

  Example:
    >>> crossover_prediction(cost.H200_QWEN3_8B, mu_l=512, mu_o=512, n=64)  # r-dagger 0.8
    False
    >>> crossover_prediction(cost.RTX_PRO_6000_QWEN3_8B, mu_l=512, mu_o=512, n=64)  # r-dagger 0.2
    True
  """
  theta0 = solver.theta_cfr(model, min(1.0 / mu_o, 0.999))
  return solver.crossover(model, mu_l, mu_o, n, theta0).eb_wins


def max_len_for(mu_l: float | int, mu_o: float | int, jitter: float | int = 0.5) -> int:
  """Slot length that holds the longest prompt + output of a jittered workload.

  Example:
    >>> max_len_for(16, 8)  # ceil(16 * 1.5) + ceil(8 * 1.5) + 2
    38
  """
  return int(math.ceil(mu_l * (1 + jitter)) + math.ceil(mu_o * (1 + jitter)) + 2)
