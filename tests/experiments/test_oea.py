"""Smoke run of the `oea` experiment."""

import json
import os

from configs import oea as oea_config
from jaxlab.experiments import oea


def test_oea_smoke(tmp_path):
  cfg = oea_config.get_config("smoke")
  assert cfg.experiment == "oea" and cfg.preset == "smoke"
  res = oea.run(cfg, str(tmp_path))
  with open(os.path.join(tmp_path, "results.json")) as f:
    saved = json.load(f)
  assert saved["report"]["verdict"] == res["report"]["verdict"]
  table = res["table"]
  b = str(cfg.eval.verdict_batch)
  for k0 in cfg.eval.k0s:
    # At B = 1 the union is the token's own top-k0: OEA is pruned top-k0 exactly.
    # (At B > 1 deeper layers see different inputs, so their T may differ.)
    assert table[f"oea_k0={k0}"]["1"] == table[f"pruned_k0={k0}"]["1"]
    assert table[f"oea_k0={k0}"][b]["T"] < table["vanilla"][b]["T"]
  assert table["vanilla"]["1"]["T"] == cfg.moe.k
  verdict, _ = oea.verdict_from(
      {k: {int(x): v for x, v in r.items()} for k, r in table.items()}, cfg)
  assert res["report"]["verdict"] == verdict
  for p in res["report"]["plots"]:
    assert os.path.exists(os.path.join(tmp_path, p))
