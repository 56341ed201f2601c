"""The reference experiment: train the tiny LM, report val bits/byte.

Every other experiment copies this pattern: read the config, compose library
pieces (here `jaxlab.train.lm.train_lm`, which resumes from `workdir`'s orbax
checkpoints), evaluate, and let `jaxlab.study.Study` judge the config's declared
criteria and write `results.json` with a `report` row.

Seeds are evaluation seeds: each draws its own held-out val windows, on which
both the LM and the unigram baseline (fitted on the train split) are scored,
so the comparison is paired by window set.
"""

import math
import os

import jax
import ml_collections
import numpy as np

from jaxlab import data, report, train
from jaxlab.study import Study
from jaxlab.train.lm import eval_bits_per_byte, train_lm

# Window seed of evaluation seed s: `eval.seed + EVAL_SEED_STRIDE * s` (far apart, so two
# evaluation seeds never share the `(seed, step)` generator of `data.lm_batch`).
EVAL_SEED_STRIDE = 1000


def eval_seed(config: ml_collections.ConfigDict, s: int) -> int:
  """The val-window seed of evaluation seed `s`."""
  return int(config.eval.seed) + EVAL_SEED_STRIDE * int(s)


def unigram_on_windows(train_tokens: np.ndarray, val_tokens: np.ndarray, *, batch_size: int,
                       seq_len: int, num_batches: int, seed: int) -> float:
  """Unigram bits/byte on the predicted bytes of the windows `eval_bits_per_byte` scores."""
  targets = [data.lm_batch(val_tokens, i, batch_size=batch_size, seq_len=seq_len,
                           seed=seed)[:, 1:].ravel() for i in range(num_batches)]
  return data.unigram_bits_per_byte(train_tokens, np.concatenate(targets))


def run(config: ml_collections.ConfigDict, workdir: str) -> dict:
  """Trains the tiny LM and judges val bits/byte against the unigram baseline per eval seed."""
  study = Study(config, workdir)  # seeds: distinct evaluation seeds
  model, state, corpus = train_lm(config, workdir)
  t, e = config.train, config.eval
  windows = dict(batch_size=e.batch_size, seq_len=t.seq_len, num_batches=e.num_batches)
  lm_bpb, uni_bpb = [], []
  for s in study.seeds:
    bpb_s = eval_bits_per_byte(model, state.params, corpus.val, seed=eval_seed(config, s),
                               **windows)
    # A diverged model is a missing seed (NaN), never a silently dropped one.
    lm_bpb.append(bpb_s if math.isfinite(bpb_s) else math.nan)
    uni_bpb.append(unigram_on_windows(corpus.train, corpus.val, seed=eval_seed(config, s),
                                      **windows))
  study.judge({"beats_unigram": (lm_bpb, uni_bpb)})
  bpb, unigram = float(np.nanmean(lm_bpb)), float(np.mean(uni_bpb))
  unigram_all = data.unigram_bits_per_byte(corpus.train, corpus.val)
  num_params = sum(x.size for x in jax.tree.leaves(state.params))
  rows = train.read_metrics(os.path.join(workdir, "metrics.jsonl"))
  curve = [(r["step"], r["loss"] / math.log(2)) for r in rows if r.get("loss") is not None]
  if curve:
    def draw(ax):
      ax.plot(*zip(*curve, strict=True), label="train (bits/byte)")
      ax.axhline(unigram, color="gray", ls="--", label=f"unigram {unigram:.2f}")
      ax.axhline(bpb, color="C1", ls=":", label=f"val {bpb:.2f}")
      ax.set_xlabel("step")
      ax.set_ylabel("bits / byte")
      ax.legend()
    study.plot("lm_loss.png", draw)
  seeds = study.seeds
  return study.finish(
      method="Tiny Llama-style byte LM (reference pipeline)",
      paper_claim=("sanity check: a trained LM beats the unigram byte model on held-out stdlib "
                   "files by >= 0.5 bits/byte"),
      baseline=f"unigram {unigram:.3f} bits/byte (same windows)",
      ours=f"{bpb:.3f} bits/byte",
      details=(f"preset={config.preset}; {num_params:,} params, {int(state.step)} steps of "
               f"batch {t.batch_size}x{t.seq_len} bytes; {len(corpus.train_files)} train / "
               f"{len(corpus.val_files)} val files. One trained model (seed {config.seed}); "
               f"{len(seeds)} evaluation seeds {seeds}, each {e.num_batches}x{e.batch_size} "
               f"held-out windows of {t.seq_len} bytes scored by the LM and the unigram alike. "
               "Per seed LM / unigram bits/byte: "
               + ", ".join(f"{a:.3f} / {b:.3f}" for a, b in zip(lm_bpb, uni_bpb, strict=True))
               + "."),
      facts=[report.Fact("unigram_whole_val", "unigram (train byte counts, add-one) on the "
                         "whole val split", round(unigram_all, 4), "bits/byte"),
             report.Fact("num_params", "parameters of the trained LM", int(num_params))],
      results={"val_bits_per_byte": bpb, "unigram_bits_per_byte": unigram,
               "unigram_bits_per_byte_whole_val": unigram_all, "seeds": seeds,
               "per_seed": {"lm": lm_bpb, "unigram": uni_bpb},
               "num_params": num_params, "steps": int(state.step)})
