"""OEA (Opportunistic Expert Activation): batch-aware MoE routing at decode.

  python -m launch.main --config=configs/oea.py:quick --workdir=runs/oea

Trains a tiny byte-level MoE LM (softmax top-k, load-balance loss) on the
stdlib corpus, then evaluates val cross-entropy and the mean number of
activated experts T per layer and decode step for vanilla top-k, pruned
top-k0 and OEA (k0 in {1, 2, 3}) at decode batch B in {1, 4, 8, 16, 32}
(teacher-forced: the B rows at one position form one decode batch).

Presets: smoke (~20 s, used by tests), quick (~3 min on 2 CPU cores; the
report row), full. Quick is shrunk from the spec's 4 layers x 32 experts x
top-4 at d=256 to d=64 and 32 experts of width 32, 300 steps of 8 x 64 bytes,
so it trains in the CPU budget.

Criteria (declared below, judged by `jaxlab.report.judge_all`) at decode batch
B = `eval.verdict_batch` (16, the paper's serving batch) and OEA's k0 =
`eval.criteria_k0`, fixed before the run at k/2 (the paper's OEA keeps accuracy
at k0 = 3-5 of k = 8, i.e. 3/8-5/8 of k): T cut >= 30% (`min_t_cut`), val CE
within +2% of vanilla (`max_ce_increase`), and a lower CE than pruned top-k0.

Seeds (`seeds`) are evaluation seeds: one MoE LM is trained (with `seed`;
three would triple the training budget), and seed s draws its own held-out
val windows (window seed `eval.seed + 1000 * s`), which every routing
decodes in the same batches (paired). The seed noise is that of the held-out
sample and of which sequences share a decode batch, not of training.
"""

import ml_collections

from jaxlab.presets import parse_preset


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  preset = parse_preset(arg)
  c = ml_collections.ConfigDict()
  c.experiment = "oea"
  c.preset = preset
  c.seed = 0
  c.seeds = (0, 1, 2)  # evaluation seeds (val windows), see the module docstring

  c.data = ml_collections.ConfigDict(dict(max_bytes=4_000_000, val_fraction=0.1))
  c.model = ml_collections.ConfigDict(dict(
      d_model=128, num_layers=4, num_heads=4, num_kv_heads=2, max_len=256))
  # impl "dense" computes every expert (exact, fastest on CPU at this size);
  # "ragged_dot"/"pallas" are the sorted grouped-matmul paths.
  c.moe = ml_collections.ConfigDict(dict(num_experts=32, k=4, d_ff=128, impl="dense",
                                         aux_weight=0.01))
  c.train = ml_collections.ConfigDict(dict(
      batch_size=32, seq_len=128, num_steps=2000, checkpoint_every=500, log_every=50))
  c.optimizer = ml_collections.ConfigDict(dict(
      name="adamw", learning_rate=3e-3, schedule="warmup_cosine", warmup_steps=100, b1=0.9,
      b2=0.95, weight_decay=0.1, grad_clip=1.0))
  # Val windows: num_seqs sequences of seq_len bytes, evaluated in decode
  # batches of each size B (num_seqs must be divisible by every B).
  c.eval = ml_collections.ConfigDict(dict(
      num_seqs=64, seq_len=128, seed=12345, batch_sizes=(1, 4, 8, 16, 32), k0s=(1, 2, 3),
      verdict_batch=16, min_t_cut=0.30, max_ce_increase=0.02))
  c.eval.criteria_k0 = 2   # k / 2 for the quick/full k = 4
  # The thresholds below are lazy references to eval.min_t_cut / eval.max_ce_increase, so
  # overriding those keys (--config.eval.min_t_cut=0.5) moves the judged thresholds too.
  min_t_cut, max_ce_increase = c.eval.get_ref("min_t_cut"), c.eval.get_ref("max_ce_increase")
  # Declared before any run; per seed, T and CE of each routing at B = verdict_batch.
  claim = ("OEA cuts activated experts T at decode batch 16 (Qwen3-30B: T ~48 -> ~25 at k0=3, "
           "MoE latency -39%) at vanilla accuracy, where pruned top-k0 degrades")
  c.criteria = ml_collections.ConfigDict(dict(
      t_cut=dict(
          claim=claim, metric="mean activated experts T per layer and step, vanilla / OEA "
          "(threshold: T cut >= min_t_cut)", direction="lower", kind="ratio",
          threshold=1.0 / (1.0 - min_t_cut), primary=True),
      ce_at_vanilla=dict(
          claim=claim, metric="val cross-entropy, OEA vs vanilla top-k (non-inferiority: at "
          "most max_ce_increase relative)", direction="lower", kind="ratio",
          threshold=1.0 / (1.0 + max_ce_increase), primary=True),
      beats_pruned=dict(
          mechanism=True,  # OEA is pruned top-k0 plus piggybacking on experts the batch already activates
          claim="pruned top-k0 degrades where OEA does not (Tables 1-2: pruned / OEA at k0=3, "
          "AIME24 51.2 / 80.0)", metric="val cross-entropy, OEA vs pruned top-k0 (same k0)",
          direction="lower", kind="difference", threshold=0.0, primary=True,
          unit="nats/byte")))
  c.mesh = ml_collections.ConfigDict(dict(data=-1, fsdp=1, expert=1, fsdp_params=False))

  if preset == "smoke":
    c.data.max_bytes = 300_000
    c.model.update(d_model=32, num_layers=2, num_heads=4, num_kv_heads=2, max_len=32)
    c.moe.update(num_experts=8, k=2, d_ff=16)
    c.train.update(batch_size=8, seq_len=32, num_steps=10, checkpoint_every=10, log_every=5)
    c.optimizer.warmup_steps = 5
    c.eval.update(num_seqs=8, seq_len=8, batch_sizes=(1, 8), k0s=(1,), verdict_batch=8,
                  criteria_k0=1)
    c.seeds = (0, 1)
  elif preset == "quick":
    c.model.update(d_model=64, num_layers=4, num_heads=4, num_kv_heads=2, max_len=128)
    c.moe.update(num_experts=32, k=4, d_ff=32)
    c.train.update(batch_size=8, seq_len=64, num_steps=300, checkpoint_every=150)
    c.optimizer.warmup_steps = 40
    c.eval.update(num_seqs=32, seq_len=64)
  return c
