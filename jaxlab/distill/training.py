"""Teacher and student language models of cross-tokenizer distillation, and their scores.

The teacher is trained once with `jaxlab.train` (orbax checkpoints, so it resumes); its
per-token statistics on the students' text (`teacher_stats`) are all a student step
reads of it. Students train with every seed vmapped and every step in one `lax.scan`
(`make_student_trainer`); the distillation method is a traced switch over the losses of
`METHODS` (`make_student_loss`), so one compiled program serves a student vocabulary's
every arm, and arms of one seed share their init and batches. Scores are held-out bits
per byte (`make_bits_per_byte`): every token is predicted from a BOS token, so the sum
of a chunk's token losses is its code length.

The knobs of E-SCOT and its baselines are a `distill` section (a ConfigDict or any
object with these attributes; every one a jaxlab interpretation, since the paper gives
only its abstract): `lam` (KD weight), `temperature` (teacher softmax), `top_k` (ranks
of ULD and of E-SCOT's rank cost; MinED's teacher top-k), `alpha` (Renyi order), `tau`
(span-weight temperature), `weighting`, `entropy_on` ("char" or "token"), `char_weight`
and `rank_weight` (the two costs), `coupling` (the in-span coupling of
`jaxlab.distill.spans.overlap_coupling`), `mined_max_len` (characters MinED's edit
distance compares), `dense_epsilon` and `dense_iters` (the span-free ablation's
Sinkhorn); `check_distill` refuses bad values before any work.

Example:
  >>> import ml_collections, optax
  >>> from jaxlab.distill import data, tokenize
  >>> d = ml_collections.ConfigDict(dict(lam=0.5, temperature=1.0, top_k=4, alpha=2.0,
  ...     tau=1.0, weighting="softmax", entropy_on="char", char_weight=1.0, rank_weight=1.0,
  ...     coupling="overlap", mined_max_len=6, dense_epsilon=0.1, dense_iters=5))
  >>> toks = data.encode_chunks(tokenize.train_tokenizer("char", "", 0), ["ab cd"] * 4)
  >>> model = make_lm(dict(d_model=8, num_layers=1, num_heads=1, num_kv_heads=1, d_ff=8),
  ...                 toks.vocab)
  >>> params = model.init(jax.random.key(0), jnp.asarray(toks.inputs[:1]))["params"]
  >>> first = tokenize.first_char_matrix(tokenize.vocab_strings(
  ...     tokenize.train_tokenizer("char", "", 0)))
  >>> st = teacher_stats(model, params, toks, first, d)
  >>> arrays, k_max = data.alignment_arrays(toks, toks, st, np.arange(toks.vocab), "overlap")
  >>> loss = make_student_loss(d, model, toks.vocab, first, k_max, ("sft", "escot"))
  >>> train = make_student_trainer(model, loss, optax.adam(1e-2), num_steps=2, batch_size=2)
  >>> params, (ce, kd) = train(jax.vmap(jax.random.key)(jnp.arange(2)), 1,
  ...                          jax.tree.map(jnp.asarray, arrays))
  >>> ce.shape, make_bits_per_byte(model, toks.vocab)(params, toks, 20).shape
  ((2, 2), (2,))
"""

import functools
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import Array
from jaxtyping import Float, Int

from jaxlab import train as train_lib
from jaxlab.distill import losses
from jaxlab.distill.data import Tokens
from jaxlab.nn import Transformer, TransformerConfig
from jaxlab.train.lm import bits_per_byte

METHODS = ("sft", "uld", "mined", "escot", "escot_uniform", "escot_dense")
# E-SCOT without one of its two components each: no Renyi reweighting, no span constraint.
ABLATIONS = ("escot_uniform", "escot_dense")


def make_lm(model_config: dict[str, Any], vocab: int) -> Transformer:
  """A decoder over `vocab` tokens + a BOS id (= vocab), never predicted.

  Example:
    >>> cfg = dict(d_model=8, num_layers=1, num_heads=1, num_kv_heads=1, d_ff=8)
    >>> make_lm(cfg, 10).config.vocab_size
    11
  """
  return Transformer(TransformerConfig(vocab_size=vocab + 1, **model_config))


def token_log_probs(model: Transformer, params: Any, inputs: Int[Array, "b t"],
                    vocab: int) -> Float[Array, "b t v"]:
  """Next-token log-probabilities over the `vocab` real tokens (the BOS id left out).

  Example:
    >>> m = make_lm(dict(d_model=8, num_layers=1, num_heads=1, num_kv_heads=1, d_ff=8), 5)
    >>> x = jnp.zeros((1, 3), jnp.int32)
    >>> token_log_probs(m, m.init(jax.random.key(0), x)["params"], x, 5).shape
    (1, 3, 5)
  """
  logits = model.apply({"params": params}, inputs)[..., :vocab]
  return jax.nn.log_softmax(logits.astype(jnp.float32))


def masked_ce(logp: Float[Array, "b t v"], targets: Int[Array, "b t"],
              mask: Float[Array, "b t"]) -> Float[Array, ""]:
  """Mean cross-entropy (nats) of `targets` over the positions where `mask` is 1.

  Example:
    >>> logp = jnp.log(jnp.full((1, 2, 4), 0.25))
    >>> float(masked_ce(logp, jnp.zeros((1, 2), int), jnp.array([[1.0, 0.0]])))  # log 4
    1.386...
  """
  nll = -jnp.take_along_axis(logp, targets[..., None], -1)[..., 0]
  return jnp.sum(nll * mask) / jnp.maximum(jnp.sum(mask), 1.0)


def check_distill(distill: Any) -> None:
  """Refuses a `distill` value that would surface late or as a NaN, naming its key.

  A temperature <= 0 gives a NaN (0) or an inverted (< 0) teacher distribution, and
  a bad `entropy_on` / `weighting` would only fail once the student trainer is traced,
  after the teacher's whole training.

  Raises:
    ValueError: e.g. "distill.temperature must be finite and > 0, got 0.0".

  Example:
    >>> import types
    >>> check_distill(types.SimpleNamespace(coupling="overlap", entropy_on="Char"))
    Traceback (most recent call last):
    ...
    ValueError: distill.entropy_on must be 'char' or 'token', got 'Char'
  """
  d = distill
  if d.coupling not in ("overlap", "start"):
    raise ValueError(f"distill.coupling must be 'overlap' or 'start', got {d.coupling!r}")
  if d.entropy_on not in ("char", "token"):
    raise ValueError(f"distill.entropy_on must be 'char' or 'token', got {d.entropy_on!r}")
  if d.weighting not in losses.WEIGHTINGS:
    raise ValueError(f"distill.weighting must be one of {losses.WEIGHTINGS}, got "
                     f"{d.weighting!r}")
  for name in ("temperature", "tau", "top_k", "mined_max_len", "dense_epsilon", "dense_iters"):
    v = getattr(d, name)
    if not (math.isfinite(v) and v > 0):
      raise ValueError(f"distill.{name} must be finite and > 0, got {v}")
  for name in ("lam", "alpha", "char_weight", "rank_weight"):
    if not getattr(d, name) >= 0:  # math.inf is allowed for alpha (min-entropy)
      raise ValueError(f"distill.{name} must be >= 0, got {getattr(d, name)}")


def train_teacher(model: Transformer, toks: Tokens, tx: optax.GradientTransformation, *,
                  num_steps: int, batch_size: int, workdir: str, seed: int = 0) -> Any:
  """The teacher's params, trained with `jaxlab.train` (resumes from its orbax checkpoints).

  Args:
    model: the teacher (`make_lm`).
    toks: its training chunks.
    tx: the optimizer (`jaxlab.train.optimizer`).
    num_steps, batch_size: the run; batches are drawn from `seed` and the step alone.
    workdir: where the checkpoints and metrics go (a finished run trains no step again).
    seed: the init and batch seed.

  Returns:
    The trained params.

  Example:
    >>> params = train_teacher(model, toks, tx, num_steps=300,  # doctest: +SKIP
    ...                        batch_size=32, workdir="runs/escot/teacher")
  """
  params = model.init(jax.random.key(seed), jnp.asarray(toks.inputs[:1]))["params"]
  state = train_lib.create_train_state(params, tx, seed=seed)

  def loss_fn(params, batch, rng):
    del rng
    inputs, targets, mask = batch
    return masked_ce(token_log_probs(model, params, inputs, toks.vocab), targets, mask), {}

  lengths = toks.mask.sum(1).astype(np.int64)

  def batch_fn(i):
    idx = np.random.default_rng([seed, i]).integers(0, len(toks.inputs), batch_size)
    # Trailing padding changes nothing for a causal model under a masked loss, so each batch
    # is cut to its longest chunk, rounded up to 16 (a few compiled widths): most chunks hold
    # half the padded width. A short run keeps one width, where an extra compile would cost
    # more than it saves.
    width = toks.inputs.shape[1]
    if num_steps >= 100:
      width = min(width, -(-int(lengths[idx].max()) // 16) * 16)
    return toks.inputs[idx, :width], toks.targets[idx, :width], toks.mask[idx, :width]

  step = train_lib.make_train_step(loss_fn, tx)
  # A few saves only: each orbax save costs more than a short run's steps.
  state = train_lib.train_loop(state, step, batch_fn, num_steps=num_steps, workdir=workdir,
                               checkpoint_every=max(100, num_steps // 4),
                               log_every=max(1, num_steps // 10), desc="teacher")
  return state.params


def teacher_stats(model: Transformer, params: Any, toks: Tokens,
                  first_char: Float[np.ndarray, "v c"], distill: Any,
                  batch: int = 64) -> dict[str, np.ndarray]:
  """The teacher's per-token statistics on `toks`, all a student step reads of it.

  Args:
    model, params: the teacher.
    toks: the students' chunks under the teacher's tokenizer.
    first_char: [vocab, chars] one-hot first character of each teacher token.
    distill: the `distill` section (reads temperature, top_k, alpha, entropy_on).
    batch: rows per compiled call.

  Returns:
    char_t (next-character distribution [N, T, chars]), top_t and top_ids (the sorted
    top-k probabilities and their ids [N, T, k]), ent_t (Renyi entropy [N, T]).

  Example::

    stats = teacher_stats(teacher, params, t_toks, first_char, config.distill)
  """
  fc = jnp.asarray(first_char)

  @jax.jit
  def stats(inputs):
    p = jnp.exp(token_log_probs(model, params, inputs, toks.vocab) / distill.temperature)
    p = p / p.sum(-1, keepdims=True)
    char = p @ fc
    top, ids = jax.lax.top_k(p, distill.top_k)
    ent = losses.renyi_entropy(char if distill.entropy_on == "char" else p, distill.alpha)
    return char, top, ids, ent
  outs = [stats(toks.inputs[lo:lo + batch]) for lo in range(0, len(toks.inputs), batch)]
  names = ("char_t", "top_t", "top_ids", "ent_t")
  return {n: np.concatenate([np.asarray(o[i]) for o in outs]) for i, n in enumerate(names)}


def make_student_loss(distill: Any, model: Transformer, vocab: int,
                      first_char: Float[np.ndarray, "v c"], num_spans: int,
                      methods: tuple[str, ...] = METHODS) -> Callable:
  """`loss(params, batch, method_id) -> (CE + lam KD, (CE, KD))` of a student batch.

  `method_id` indexes `methods` (a traced switch; only their losses are compiled). The
  two E-SCOT ablations differ from "escot" in one component each: "escot_uniform" takes
  uniform span weights (no Renyi reweighting), "escot_dense" couples all token pairs by
  Sinkhorn with the span coupling's marginals (no span constraint); cost, weights and
  everything else are shared.

  Args:
    distill: the `distill` section (module docstring).
    model, vocab: the student and its vocabulary size.
    first_char: [vocab, chars] one-hot first character of each student token.
    num_spans: the span slots of the batch arrays (`alignment_arrays`' k_max).
    methods: the methods `method_id` selects from (a subset of `METHODS`).

  Returns:
    The loss function; `batch` holds rows of `jaxlab.distill.data.alignment_arrays`.

  Example::

    loss_fn = make_student_loss(config.distill, model, vocab, first_char, k_max)
  """
  d = distill
  fc = jnp.asarray(first_char)
  shared = dict(num_spans=num_spans, alpha=d.alpha, tau=d.tau, char_weight=d.char_weight,
                rank_weight=d.rank_weight, entropy_on=d.entropy_on)
  escot = functools.partial(losses.escot_loss, weighting=d.weighting, **shared)
  uniform = functools.partial(losses.escot_loss, weighting="none", **shared)
  dense = functools.partial(losses.escot_dense_loss, weighting=d.weighting,
                            epsilon=d.dense_epsilon, num_iters=d.dense_iters, **shared)
  sparse_axes = (0, 0, 0, 0, 0, None, 0, 0, 0, 0, 0)

  def loss_fn(params, b, method):
    logp = token_log_probs(model, params, b["inputs"], vocab)
    ce = masked_ce(logp, b["targets"], b["mask"])
    width = b["uld_valid"].shape[1]
    teacher = (b["char_t"], b["top_t"], b["ent_t"], b["span_t"])
    sparse = (b["span_s"], b["pt"], b["ps"], b["pspan"], b["pmass"])
    branches = dict(
        sft=lambda: jnp.zeros(logp.shape[0]),
        uld=lambda: jax.vmap(losses.uld_loss)(b["top_t"], logp, b["uld_valid"][:, :width]),
        mined=lambda: jax.vmap(losses.mined_loss)(b["top_t"], b["mapped"], logp,
                                                  b["t_index"], b["mask"]),
        escot=lambda: jax.vmap(escot, in_axes=sparse_axes)(*teacher, logp, fc, *sparse),
        escot_uniform=lambda: jax.vmap(uniform, in_axes=sparse_axes)(*teacher, logp, fc,
                                                                     *sparse),
        escot_dense=lambda: jax.vmap(dense, in_axes=(0, 0, 0, 0, 0, None, 0, 0, 0))(
            *teacher, logp, fc, b["span_s"], b["mass_t"], b["mass_s"]),
    )
    kd = jnp.mean(jax.lax.switch(method, [branches[m] for m in methods]))
    return ce + d.lam * kd, (ce, kd)
  return loss_fn


def make_student_trainer(model: Transformer, loss_fn: Callable, tx: optax.GradientTransformation,
                         *, num_steps: int, batch_size: int) -> Callable:
  """`train(keys [S], method_id, arrays) -> (params [S, ...], (CE, KD) [S, steps])`, jitted.

  Seeds are vmapped and the steps run in one `lax.scan`. Every method starts from the
  same init and sees the same batches (both drawn from the seed's key alone): arms of
  one seed are paired.

  Args:
    model: the student.
    loss_fn: `make_student_loss`'s loss.
    tx: the optimizer (`jaxlab.train.optimizer`).
    num_steps, batch_size: the run (batches of rows drawn with replacement).

  Returns:
    The jitted trainer.

  Example::

    train = make_student_trainer(model, loss_fn, tx, num_steps=100, batch_size=16)
    params, (ce, kd) = train(jax.vmap(jax.random.key)(np.arange(3)), method_id, arrays)
  """
  def train_one(key, method, arrays):
    init_key, data_key = jax.random.split(key)
    params = model.init(init_key, arrays["inputs"][:1])["params"]
    opt_state = tx.init(params)
    rows = arrays["inputs"].shape[0]

    def step(carry, i):
      params, opt_state = carry
      idx = jax.random.randint(jax.random.fold_in(data_key, i), (batch_size,), 0, rows)
      batch = jax.tree.map(lambda x: x[idx], arrays)
      (_, (ce, kd)), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, batch, method)
      updates, opt_state = tx.update(grads, opt_state, params)
      return (optax.apply_updates(params, updates), opt_state), (ce, kd)

    (params, _), curves = jax.lax.scan(step, (params, opt_state), jnp.arange(num_steps))
    return params, curves

  return jax.jit(jax.vmap(train_one, in_axes=(0, None, None)))


def make_bits_per_byte(model: Transformer, vocab: int, batch: int = 64) -> Callable:
  """`bpb(params, toks, num_chars) -> [S]`: held-out bits/byte of `params` on `toks`.

  Args:
    model, vocab: the language model and its vocabulary size.
    batch: rows per compiled call.

  Returns:
    The scorer; `params` has a leading seed axis, compiled once per model.

  Example::

    bits = make_bits_per_byte(model, val.vocab)(params, val, num_chars)  # [seeds]
  """
  @jax.jit
  @functools.partial(jax.vmap, in_axes=(0, None, None, None))
  def nll(p, inputs, targets, mask):
    return masked_ce(token_log_probs(model, p, inputs, vocab), targets, mask) * jnp.sum(mask)

  def bpb(params, toks: Tokens, num_chars: int) -> np.ndarray:
    # Total nats of a token model over the text's characters: the library's one evaluator.
    rows = [slice(lo, lo + batch) for lo in range(0, len(toks.inputs), batch)]
    return bits_per_byte(lambda p, sl: nll(p, toks.inputs[sl], toks.targets[sl], toks.mask[sl]),
                         params, rows, num_bytes=num_chars)
  return bpb


def student_program(model_config: dict[str, Any], distill: Any, tx: optax.GradientTransformation,
                    vocab: int, first_char: Float[np.ndarray, "v c"], num_spans: int,
                    methods: tuple[str, ...], *, num_steps: int, batch_size: int
                    ) -> tuple[Callable, Callable]:
  """The compiled pair of one student vocabulary: (trainer, bits/byte scorer).

  One program serves every method of `methods` (a traced switch), so a student's arms
  compile once; two students of equal vocabulary size, span slots and first characters
  can share it.

  Args:
    model_config: the student's `TransformerConfig` fields but the vocabulary.
    distill: the `distill` section (module docstring).
    tx: the optimizer (`jaxlab.train.optimizer`).
    vocab, first_char, num_spans, methods: as `make_student_loss`.
    num_steps, batch_size: the run, as `make_student_trainer`.

  Returns:
    (`make_student_trainer`'s trainer, `make_bits_per_byte`'s scorer).

  Example::

    program = student_program(config.model.to_dict(), config.distill, tx, vocab,
                              first_char, k_max, METHODS, num_steps=100, batch_size=16)
  """
  model = make_lm(model_config, vocab)
  loss_fn = make_student_loss(distill, model, vocab, first_char, num_spans, methods)
  return (make_student_trainer(model, loss_fn, tx, num_steps=num_steps, batch_size=batch_size),
          make_bits_per_byte(model, vocab))


def train_and_score(program: tuple[Callable, Callable], keys: Array, method_id: int,
                    arrays: dict[str, Array], val: Tokens, num_chars: int) -> dict[str, Any]:
  """Trains one method on every seed of `keys` and scores it on held-out text.

  Args:
    program: `student_program`'s (trainer, scorer).
    keys: [S] PRNG keys, one per seed (init and batches).
    method_id: the method's index in the program's `methods`.
    arrays: the batch arrays (`jaxlab.distill.data.alignment_arrays`, as jnp).
    val: the held-out chunks under the student's tokenizer.
    num_chars: characters of the held-out text.

  Returns:
    {"bpb": held-out bits/byte [S], "first_ce": the first step's cross-entropy [S]
    (equal across a student's methods: paired seeds), "final_ce", "final_kd": the mean
    of the last 10 steps' terms [S]}.

  Example::

    out = train_and_score(program, jax.vmap(jax.random.key)(np.arange(3)), 0, arrays,
                          val, num_chars)
  """
  train, bpb = program
  params, (ce, kd) = jax.block_until_ready(train(keys, jnp.asarray(method_id, jnp.int32),
                                                 arrays))
  return dict(bpb=bpb(params, val, num_chars), first_ce=np.asarray(ce[:, 0]),
              final_ce=np.asarray(ce[:, -10:].mean(1)), final_kd=np.asarray(kd[:, -10:].mean(1)))
