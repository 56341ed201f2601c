"""The reference experiment: a tiny byte-level LM on the stdlib corpus.

  python -m launch.main --config=configs/lm.py:quick --workdir=runs/lm

Presets: smoke (~10 s on 2 CPU cores, used by tests), quick (~2 min; the
report row: val bits/byte well below the unigram baseline of ~4.7), full.
Every field can be overridden, e.g. `--config.train.num_steps=100`.

Seeds (`seeds`): the evaluation seeds. One model is trained (with `seed`; a
second model costs the whole training budget again), and each evaluation seed
draws its own held-out val windows (window seed `eval.seed + 1000 * s`); the
LM and the unigram baseline are scored on the same windows (paired). The seed
noise is therefore that of the held-out sample, not of training.
"""

import ml_collections

from jaxlab.presets import parse_preset


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  preset = parse_preset(arg)
  c = ml_collections.ConfigDict()
  c.experiment = "lm"
  c.preset = preset
  c.seed = 0
  c.seeds = (0, 1, 2)  # evaluation seeds (val windows), see the module docstring

  # Declared before any run: the sanity claim of the reference pipeline.
  c.criteria = ml_collections.ConfigDict(dict(
      beats_unigram=dict(
          mechanism=True,  # what the trained decoder's context adds over the same data's unigram
          claim="sanity check: a trained LM beats the unigram byte model on held-out stdlib "
                "files by at least 0.5 bits/byte",
          metric="val bits/byte on the seed's held-out windows (LM vs train-unigram)",
          direction="lower", threshold=0.5, kind="difference", primary=True,
          unit="bits/byte")))

  c.data = ml_collections.ConfigDict(dict(max_bytes=4_000_000, val_fraction=0.1))
  c.model = ml_collections.ConfigDict(dict(
      d_model=128, num_layers=4, num_heads=4, num_kv_heads=2, d_ff=384, max_len=256))
  c.train = ml_collections.ConfigDict(dict(
      batch_size=32, seq_len=128, num_steps=3000, checkpoint_every=500, log_every=50,
      eval_every=500))
  c.optimizer = ml_collections.ConfigDict(dict(
      name="adamw", learning_rate=3e-3, schedule="warmup_cosine", warmup_steps=100, b1=0.9,
      b2=0.95, weight_decay=0.1, grad_clip=1.0))
  c.eval = ml_collections.ConfigDict(dict(batch_size=32, num_batches=16, seed=12345))
  # Mesh axes (-1 = all remaining devices); fsdp_params shards params and
  # optimizer state over 'fsdp' instead of replicating them.
  c.mesh = ml_collections.ConfigDict(dict(data=-1, fsdp=1, expert=1, fsdp_params=False))

  if preset == "smoke":
    c.data.max_bytes = 400_000
    c.model.update(d_model=32, num_layers=2, num_heads=4, num_kv_heads=2, d_ff=64, max_len=64)
    c.train.update(batch_size=8, seq_len=32, num_steps=40, checkpoint_every=20, log_every=10,
                   eval_every=0)
    c.optimizer.warmup_steps = 5
    c.eval.update(batch_size=8, num_batches=2)
    c.seeds = (0, 1)
  elif preset == "quick":
    c.model.update(d_model=96, num_layers=3, num_heads=4, num_kv_heads=2, d_ff=256, max_len=128)
    c.train.update(batch_size=32, seq_len=96, num_steps=500, checkpoint_every=250,
                   eval_every=250)
    c.optimizer.warmup_steps = 50
  return c
