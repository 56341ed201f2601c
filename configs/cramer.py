"""CRAMER: request-aware masking of a frozen SASRec on a synthetic catalogue (`jaxlab.recsys`).

Command:
  python -m launch.main --config=configs/cramer.py:quick --workdir=runs/cramer

Presets:
  smoke  a 150-item, 4-genre world, a 1-layer d = 16 backbone, a few steps per arm, 3
         seeds, arms frozen / late_fusion / cramer / cramer_shared / cramer_oracle
         (pipeline check).
  quick  480 items / 12 genres, 3000 train + 600 test users, a 2-layer d = 64
         backbone, every arm incl. shared gates, oracle requests and ρ in {0.1, 0.25}, 3
         seeds vmapped (most of the time goes to compiling and back-propagating through the
         backbone for the CRAMER arms).
  full   the same world, 1000 steps per arm, ρ in {0.05, 0.1, 0.15, 0.25}, 5 seeds.

Arms (`config.arms`): "frozen" (backbone alone), "concat" (Query-SeqRec-like head on
[h; e_q]), "late_fusion" (BLaIR-like score + α cos(e_q, e_item)), "adapter" (LLM-ESR-like
item-text adapter), "finetune" (the whole backbone fine-tuned, request as a last token:
an upper bound), "cramer" (per-instance gates), "cramer_shared" (one Gumbel draw per
batch), "cramer_oracle" (CRAMER fed each request's true intent and genre instead of its
MiniLM embedding: the masks with perfect request understanding), "cramer_rho<ρ>" (the ρ
sweep). The baselines' forms, the world and the evaluation details are jaxlab
interpretations; CRAMER's knobs are under `config.cramer`.

Expected result: HR@10 / NDCG@10 / MRR@10 (1 + 100 sampled negatives, and full ranking)
on request-bearing test steps, genre share in the top 10 under want / avoid requests vs.
a neutral request, time per request (per seed, backbone and CRAMER interleaved); the
criteria below are judged on paired seeds.
"""

import ml_collections

import jaxlab.presets


def get_config(arg=None):
  preset = jaxlab.presets.parse_preset(arg)
  config = ml_collections.ConfigDict()
  config.experiment = "cramer"
  config.preset = preset
  config.seeds = (0, 1, 2)
  config.arms = ("frozen,concat,late_fusion,adapter,finetune,cramer,cramer_shared,"
                 "cramer_oracle,cramer_rho0.25")
  # jaxlab interpretation: a synthetic catalogue stands in for the paper's ReDial data.
  config.world = ml_collections.ConfigDict(dict(
      num_items=480, num_genres=12, num_train_users=3000, num_test_users=600, max_len=20,
      min_len=8, pref_alpha=0.3, num_successors=4, successor_weight=12.0,
      same_genre_successors=0.75, second_genre_prob=0.5, request_probs=(0.4, 0.3, 0.3),
      num_test_templates=3, num_negatives=100))
  # SASRec (RecBole-like: 2 layers, 2 heads, d = 64, FFN 256, dropout 0.2-0.5).
  config.model = ml_collections.ConfigDict(dict(
      d_model=64, num_heads=2, num_layers=2, d_ff=256, dropout=0.2))
  config.backbone = ml_collections.ConfigDict(dict(num_steps=400, batch_size=128))
  # Every arm: train.num_steps minibatches of train.batch_size request steps.
  config.train = ml_collections.ConfigDict(dict(num_steps=300, batch_size=64))
  # optimizer.learning_rate: the arms (Adam 1e-3); optimizer.backbone: the backbone.
  config.optimizer = ml_collections.ConfigDict(dict(
      learning_rate=1e-3, schedule="constant",
      backbone=dict(learning_rate=3e-3, schedule="constant")))
  config.cramer = ml_collections.ConfigDict(dict(
      rho=0.1,               # drop ratio
      lambda_kl=0.2,         # KL weight
      scope="ffn_wo",        # masked set: "wo", "ffn" or "ffn_wo"
      tau_start=0.7, tau_end=0.3, tau_schedule="cosine"))
  # jaxlab interpretations: width of the concat head's and the adapter's hidden layer;
  # late fusion's alpha = fusion_scale x a trained scalar (Adam moves it ~lr per step).
  config.baselines = ml_collections.ConfigDict(dict(hidden=128, fusion_scale=10.0))
  config.eval = ml_collections.ConfigDict(dict(k=10, timing_repeats=50))
  config.encoder_batch_size = 64

  # Declared before the run; judged on paired seeds by jaxlab.report.judge_all.
  # Floors: a ranking comparison counts only when its baseline beats a random ranking of
  # the 1 + num_negatives candidates (HR@k = k / (1 + m); NDCG@k likewise, measured per seed
  # by the experiment) by 0.05 HR@10 / 0.02 NDCG@10: else neither arm ranks anything.
  chance_hr = dict(floor="chance (random ranking of 1 + negatives)", floor_margin=0.05)
  chance_ndcg = dict(floor="chance (random ranking of 1 + negatives)", floor_margin=0.02)
  config.criteria = ml_collections.ConfigDict(dict(
      hr_over_frozen=dict(
          mechanism=True,  # the same frozen recommender without the request-aware masks
          claim="CRAMER beats the frozen backbone on request-bearing steps (paper +.15 HR@10)",
          metric="HR@10 (1 + 100 sampled), request-bearing test steps, CRAMER minus frozen",
          direction="higher", threshold=0.03, unit="HR@10", **chance_hr),
      ndcg_over_frozen=dict(
          claim="CRAMER beats the frozen backbone in NDCG@10 on request-bearing steps",
          metric="NDCG@10 (1 + 100 sampled), request-bearing test steps, CRAMER minus frozen",
          direction="higher", threshold=0.0, unit="NDCG@10", **chance_ndcg),
      vs_best_fusion=dict(
          claim="CRAMER is close to or above the fusion baselines (paper: above all of them)",
          metric="HR@10 request-bearing, CRAMER minus the best of concat / late fusion / "
                 "adapter of the same seed",
          direction="higher", threshold=-0.02, unit="HR@10", **chance_hr),
      want_shift=dict(
          claim="'want g' raises g's share in the top 10 (paper .286 -> .432)",
          metric="CRAMER top-10 share of g, 'want g' request minus a neutral request",
          direction="higher", threshold=0.05, unit="share"),
      avoid_shift=dict(
          claim="'avoid g' lowers g's share in the top 10 (paper .286 -> .135)",
          metric="CRAMER top-10 share of g, 'avoid g' request minus a neutral request",
          direction="lower", threshold=0.05, unit="share"),
      # The same masks fed the request's true attributes (intent x genre, one-hot) instead of
      # MiniLM's embedding: what the gates can do with perfect request understanding, so a
      # failure of CRAMER is told apart from a failure of the encoder. Same threshold as
      # hr_over_frozen.
      oracle_hr_over_frozen=dict(
          mechanism=True,
          claim="request-aware masks steer the frozen backbone (paper +.15 HR@10), given "
                "perfect request understanding",
          metric="HR@10 (1 + 100 sampled), request-bearing test steps, cramer_oracle (the "
                 "request's true intent and genre as its embedding) minus frozen",
          direction="higher", threshold=0.03, unit="HR@10", primary=False, **chance_hr),
      per_instance_over_shared=dict(
          claim="per-instance gates beat one gate sample shared by the batch",
          metric="HR@10 request-bearing, CRAMER minus cramer_shared",
          direction="higher", threshold=0.0, unit="HR@10", primary=False, **chance_hr),
      high_rho_hurts=dict(
          claim="a drop ratio too high (>= 0.25) hurts",
          metric="HR@10 request-bearing, CRAMER (rho 0.1) minus the sweep's highest rho",
          direction="higher", threshold=0.0, unit="HR@10", primary=False, **chance_hr),
      # The paper's overhead table (SASRec, GPU): backbone 0.033 s per request, CRAMER
      # +0.018 s, i.e. 1.55x; the threshold is the factor 0.033 / 0.051 the backbone's time
      # may fall to relative to CRAMER's.
      latency_vs_backbone=dict(
          claim="CRAMER adds minimal overhead: 0.033 + 0.018 s per request vs 0.033 s for "
                "the backbone alone (SASRec, GPU), 1.55x",
          metric="median time to score one request (batch 1, jitted, request embedding "
                 "precomputed), CRAMER (gates + masked backbone) vs the backbone alone",
          direction="lower", kind="ratio", threshold=0.033 / 0.051, unit="s",
          primary=False)))

  if preset == "smoke":
    config.world.update(num_items=150, num_genres=4, num_train_users=96, num_test_users=48,
                        max_len=8, min_len=4, num_negatives=20)
    config.model.update(d_model=16, num_layers=1, d_ff=32)
    config.backbone.update(num_steps=20, batch_size=16)
    config.train.update(num_steps=10, batch_size=16)
    config.baselines.hidden = 16
    config.eval.timing_repeats = 3
    config.arms = "frozen,late_fusion,cramer,cramer_shared,cramer_oracle"  # 3 programs
  elif preset == "full":
    config.seeds = (0, 1, 2, 3, 4)
    config.arms += ",cramer_rho0.05,cramer_rho0.15"
    config.backbone.num_steps = 1500
    config.train.num_steps = 1000
  return config
