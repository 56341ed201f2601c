"""E-SCOT: span-constrained OT distillation across tokenizers with Renyi-entropy weighting.

Command:
  python -m launch.main --config=configs/escot.py:quick --workdir=runs/escot

What runs (`jaxlab.experiments.escot`): tokenizers trained offline on the stdlib corpus
(teacher BPE 4k; students: the same BPE, BPE 1k, a SentencePiece-style Unigram 2k, the
teacher's BPE with the "▁" marker instead of "Ġ", char-level), a 4-layer teacher trained once
on the teacher tokenization and cached in the workdir, then 2-layer students on a small text
subset for the same number of steps under SFT, ULD, MinED and E-SCOT, 3 paired seeds (same
init and batches across methods), held-out bits per byte; and the time of span-sparse vs
dense (Sinkhorn) coupling as the sequence grows.

Mechanism ablations (the criteria marked mechanism): on the low-overlap students, E-SCOT
without its Renyi reweighting (uniform span weights) and E-SCOT without its span constraint
(the same cost, weights and marginals, coupled over all token pairs by Sinkhorn), at the
same steps, seeds, inits and batches. The abstract names these two components; it gives no
size for either, so each must only be better than its ablation (threshold 0).

Floor: every bits/byte comparison whose baseline should be a working student counts only if
that baseline beats a unigram model of its own tokenizer (fit on the students' training
subset, add-one smoothed) by 0.1 bits/byte: a student closer than that to the unigram code
length has learned next to nothing beyond token frequencies, and the method gaps judged here
are a few hundredths of a bit.

Low-overlap students (declared before any run of these criteria): the two students with the
lowest exact-string overlap (Jaccard) among those with their own token boundaries, the
SentencePiece-style Unigram ("▁" marker, as in LLaMA-family tokenizers facing a GPT-2-style
"Ġ" teacher) and the char-level one. The "marker" student is kept in the table but not in
this set: it keeps the teacher's token boundaries, so every span is one teacher and one
student token and E-SCOT's cost is exactly the same-vocabulary student's (its arm is reused),
while MinED's string mapping is broken by the marker alone. Both hold by construction, so
that student tests neither side of the low-overlap claim (nor is its exact-string overlap
low: mid-word pieces and punctuation keep their strings). The Unigram student gets
the "▁" marker because SentencePiece's Unigram uses it; with "Ġ" it would segment the text
the same way (the marker is one more symbol) and only its strings would differ.

Presets:
  smoke  tiny vocabularies, a 2-layer teacher, 2 students, a few steps (pipeline check).
  quick  the five students at half the full preset's vocabularies (teacher BPE 2k; BPE 512,
         Unigram 1k), 64-char chunks, a 4-layer d=64 teacher (300 steps), 2-layer d=48
         students (130 steps): sized for a loaded 2-core machine.
  full   teacher BPE 4k, BPE 1k and Unigram 2k students; a d=256 teacher on 4 MB, d=128
         students on 200k chars.

Every E-SCOT constant is a jaxlab interpretation of an unpublished formula (the paper's
abstract names the components, not their equations) and lives under `config.distill`.
"""

import ml_collections

import jaxlab.presets


def get_config(arg=None):
  preset = jaxlab.presets.parse_preset(arg)
  config = ml_collections.ConfigDict()
  config.experiment = "escot"
  config.preset = preset
  config.seeds = (0, 1, 2)

  # Text: the stdlib byte corpus as ASCII, cut into chunks every tokenizer encodes alone.
  config.data = ml_collections.ConfigDict(dict(
      max_bytes=1_000_000, val_fraction=0.1, chunk_chars=64,
      student_chars=100_000,  # the students' small training subset (jaxlab interpretation)
      val_chunks=256))
  # Tokenizers: "<kind>:<vocab>[:sp]" with kind bpe/unigram (":sp": the "▁" word-boundary
  # marker instead of "Ġ"), "char", "teacher" (the teacher's own tokenizer) or "marker" (the
  # teacher's BPE with the "▁" marker, the same token boundaries).
  config.tokenizers = ml_collections.ConfigDict(dict(
      teacher="bpe:2048",
      students="same=teacher,bpe512=bpe:512,spm1k=unigram:1024:sp,marker=marker,char=char",
      # jaxlab interpretation: which students form the low-overlap regime (declared a priori;
      # see the module docstring for why "marker" is not one of them).
      low_overlap="spm1k,char"))

  config.teacher = ml_collections.ConfigDict(dict(
      model=dict(d_model=64, num_layers=4, num_heads=4, num_kv_heads=2, d_ff=192),
      num_steps=300, batch_size=32))
  config.model = ml_collections.ConfigDict(dict(
      d_model=48, num_layers=2, num_heads=4, num_kv_heads=2, d_ff=128))
  # Quick's teacher and student steps are sized to the quick preset's 3-minute budget.
  config.train = ml_collections.ConfigDict(dict(num_steps=130, batch_size=16))
  # optimizer.* is the students'; optimizer.teacher the teacher's stage.
  config.optimizer = ml_collections.ConfigDict(dict(
      name="adamw", learning_rate=3e-3, schedule="warmup_cosine", warmup_steps=20, b1=0.9,
      b2=0.95, weight_decay=0.1, grad_clip=1.0,
      teacher=dict(learning_rate=3e-3, warmup_steps=50)))

  # Distillation (every entry a jaxlab interpretation of the abstract).
  config.distill = ml_collections.ConfigDict(dict(
      # escot_uniform / escot_dense: E-SCOT without Renyi weights / without the span constraint.
      methods="sft,uld,mined,escot,escot_uniform,escot_dense",
      ablation_students="spm1k,char",  # the students that run the two ablations (budget)
      lam=0.5,              # KD weight, the same for every KD method (ours, in [0.1, 1])
      temperature=1.0,      # teacher softmax temperature
      top_k=16,             # ranks compared by ULD and E-SCOT's rank cost; MinED's teacher top-k
      alpha=2.0,            # Renyi order (collision entropy)
      tau=1.0,              # softmax temperature of the span weights
      weighting="softmax",  # softmax | ratio | none
      entropy_on="char",    # Renyi entropy of next-char ("char") or token ("token") distributions
      char_weight=1.0,      # cost (iii): KL of next-character distributions
      rank_weight=1.0,      # cost (i): sorted top-k L1 (ULD-style, vocabulary-free)
      coupling="overlap",   # overlap (pi ~ shared characters) | start (first pair of each span)
      mined_max_len=12,     # characters compared by MinED's edit distance
      dense_epsilon=0.1,    # Sinkhorn regularisation (nats of the cost) of escot_dense
      dense_iters=50))      # its Sinkhorn iterations
  # Cost of the coupling as the sequence grows (teacher tokens n, student tokens 2n).
  config.bench = ml_collections.ConfigDict(dict(
      lengths=(64, 128, 256, 512, 1024), repeats=5, epsilon=0.1, sinkhorn_iters=50))

  # Declared before the run; judged on paired seeds by jaxlab.report.judge_all.
  # "low overlap" = the mean held-out bits/byte over the `tokenizers.low_overlap` students.
  # Floor "unigram": the baseline beats the unigram code length of its own students'
  # tokenizers (the same mean) by `floor_margin` bits/byte (see the module docstring).
  unigram = dict(floor="unigram", floor_margin=0.1)
  config.criteria = ml_collections.ConfigDict(dict(
      escot_renyi_mechanism=dict(
          claim="Renyi-entropy adaptive reweighting concentrates the distillation budget on "
                "positions with uncertainty-profile gaps (abstract; it gives no size: "
                "threshold 0, better at all)",
          metric="held-out bits/byte, low-overlap students, E-SCOT minus E-SCOT with uniform "
                 "span weights (same students, steps, seeds)",
          direction="lower", threshold=0.0, unit="bits/byte", mechanism=True, **unigram),
      escot_span_mechanism=dict(
          claim="span-anchored lexical alignment (a deterministic, locality-preserving "
                "support) instead of dense sequence-level OT (abstract; it gives no size of "
                "a quality gain: threshold 0, better at all)",
          metric="held-out bits/byte, low-overlap students, E-SCOT minus E-SCOT coupled over "
                 "all token pairs by Sinkhorn (same cost, weights and marginals)",
          direction="lower", threshold=0.0, unit="bits/byte", mechanism=True, **unigram),
      escot_not_below_sft=dict(
          claim="E-SCOT removes negative transfer: at low vocabulary overlap it stays at or "
                "above SFT (no worse than 0.01 bits/byte)",
          metric="held-out bits/byte, low-overlap students, E-SCOT minus SFT",
          direction="lower", threshold=-0.01, unit="bits/byte", **unigram),
      escot_beats_ctkd=dict(
          claim="at low overlap E-SCOT beats the earlier cross-tokenizer KD methods",
          metric="held-out bits/byte, low-overlap students, E-SCOT minus the better of "
                 "ULD and MinED",
          direction="lower", threshold=0.0, unit="bits/byte", **unigram),
      # The claim is that ULD / MinED sit above SFT, but SFT must still sit below unigram.
      uld_below_sft=dict(
          claim="at low overlap ULD falls below SFT (negative transfer)",
          metric="held-out bits/byte, low-overlap students, ULD minus SFT",
          direction="higher", threshold=0.0, unit="bits/byte", primary=False,
          floor_direction="lower", **unigram),
      mined_below_sft=dict(
          claim="at low overlap MinED falls below SFT (negative transfer)",
          metric="held-out bits/byte, low-overlap students, MinED minus SFT",
          direction="higher", threshold=0.0, unit="bits/byte", primary=False,
          floor_direction="lower", **unigram),
      escot_gain_same_vocab=dict(
          claim="with the teacher's own tokenizer, distillation helps (E-SCOT below SFT)",
          metric="held-out bits/byte, the student with the teacher's tokenizer (spec "
                 "'teacher'), E-SCOT minus SFT",
          direction="lower", threshold=0.0, unit="bits/byte", primary=False, **unigram)))

  if preset == "smoke":
    config.data.update(max_bytes=120_000, student_chars=20_000, chunk_chars=64, val_chunks=16)
    config.tokenizers.update(teacher="bpe:300", students="bpe=bpe:200,char=char",
                             low_overlap="char")
    config.distill.ablation_students = "char"
    config.teacher.update(model=dict(d_model=32, num_layers=2, num_heads=2, num_kv_heads=1,
                                     d_ff=64), num_steps=10, batch_size=8)
    config.model.update(d_model=16, num_heads=2, num_kv_heads=1, d_ff=32)
    config.train.update(num_steps=8, batch_size=4)
    config.optimizer.warmup_steps = 2
    config.optimizer.teacher.warmup_steps = 2
    config.distill.update(top_k=4, mined_max_len=6)
    config.bench.update(lengths=(8, 16), repeats=1, sinkhorn_iters=5)
    config.criteria.escot_gain_same_vocab.metric = "unused in smoke (no 'teacher' student)"
  elif preset == "full":
    config.data.update(max_bytes=4_000_000, chunk_chars=128, student_chars=200_000,
                       val_chunks=512)
    config.tokenizers.update(
        teacher="bpe:4096",
        students="same=teacher,bpe1k=bpe:1024,spm2k=unigram:2048:sp,marker=marker,char=char",
        low_overlap="spm2k,char")
    config.distill.ablation_students = "spm2k,char"
    config.teacher.update(model=dict(d_model=256, num_layers=4, num_heads=4, num_kv_heads=2,
                                     d_ff=768), num_steps=4000)
    config.model.update(d_model=128, d_ff=384)
    config.train.update(num_steps=1000, batch_size=32)
    config.bench.lengths = (64, 128, 256, 512, 1024, 2048)
  return config
