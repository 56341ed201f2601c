"""Proposers: turn (parent config, strategy) into a child config.

`LocalProposer` applies the strategy as a deterministic-given-rng config edit
(`space.apply_strategy`); it may emit configs the evaluator rejects (a block
that no longer divides the shape, on-chip memory overflow). `LLMProposer`
asks any client with `generate(messages) -> str` for a JSON config (off by
default; jaxlab interpretation of the paper's LLM rewriting kernel source).
"""

import dataclasses
import json
import re

import numpy as np

from jaxlab.autotune import space
from pallas_kernels.tuning import KernelConfig


class LocalProposer:
  """One `space.apply_strategy` edit per proposal."""

  def propose(self, task: space.Task, parent: KernelConfig, strategy: str,
              rng: np.random.Generator) -> KernelConfig | None:
    return space.apply_strategy(task, parent, strategy, rng)


_PROMPT = ("You tune a tiled {op} kernel of shape {shape} ({dims}), dtype {dtype}, on {device}. "
           "Current config: {config}. Apply the optimisation strategy '{strategy}' ({hint}). "
           "Reply with only a JSON object with the keys {keys}.")
_HINTS = {
    "tiling": "change block_m or block_n", "vectorization": "change block_k",
    "fusion": "trade block_n against block_k", "pipeline": "change num_stages",
    "reordering": "change grid_order or num_warps", "access_layout": "trade block_m and block_n",
}


def parse_config(reply: str) -> KernelConfig:
  """The KernelConfig in a reply: its first {...} JSON object (also inside a json code fence).

  Example:
    >>> parse_config('Use {"block_m": 128, "num_stages": 3}.')  # the other fields: defaults
    KernelConfig(block_m=128, block_n=128, block_k=512, grid_order='mn', num_warps=4, num_stages=3)
  """
  found = re.search(r"\{.*?\}", reply, re.S)
  if found is None:
    raise ValueError(f"the client reply contains no JSON object: {reply[:200]!r}")
  try:
    obj = json.loads(found.group(0))
  except json.JSONDecodeError as e:
    raise ValueError(f"the client reply is not valid JSON: {found.group(0)[:200]!r}") from e
  try:
    return KernelConfig.from_dict(obj)
  except TypeError as e:
    raise ValueError(f"the client reply is not a KernelConfig: {obj!r}") from e


class LLMProposer:
  """Asks `client.generate(messages) -> str` for the child config.

  Args:
    client: any object with `generate(messages)`; messages are
      [{"role": "user", "content": prompt}].
    strict: raise on an unparsable reply (True) or count it as an invalid
      candidate (False, the paper's loop: a failed generation gets reward 0).
  """

  def __init__(self, client, *, strict: bool = False):
    if not callable(getattr(client, "generate", None)):
      raise ValueError("client must have a generate(messages) -> str method")
    self.client, self.strict = client, strict

  def prompt(self, task: space.Task, parent: KernelConfig, strategy: str) -> str:
    return _PROMPT.format(op=task.op, shape=tuple(task.shape), dims=",".join(space.OPS[task.op]),
                          dtype=task.dtype, device=task.device,
                          config=json.dumps(parent.to_dict()), strategy=strategy,
                          hint=_HINTS[strategy],
                          keys=", ".join(f.name for f in dataclasses.fields(KernelConfig)))

  def propose(self, task, parent, strategy, rng) -> KernelConfig | None:
    del rng
    reply = self.client.generate([{"role": "user",
                                   "content": self.prompt(task, parent, strategy)}])
    try:
      return parse_config(str(reply))
    except ValueError:
      if self.strict:
        raise
      return None
