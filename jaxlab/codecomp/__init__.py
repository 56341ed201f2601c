"""APC: uncertainty-aware code completion with placeholders (arXiv 2604.01849).

Modules: `cost` (simulated-user costs, rho, the Fano critical entropy H*, the
editing-cost DP and the cost reward), `placeholders` (threshold placement,
collapsing, snippet rendering, targets from edit logs), `data` (line
completions from the stdlib corpus, split by file), `decode` (decoding with
per-position entropy, scoring), `train` (SFT on placeholder targets, cost-reward
GRPO).
"""

from jaxlab.codecomp.cost import (
    DEFAULT_COSTS,
    NAVIGATION,
    PLACEHOLDER,
    CostModel,
    binary_entropy,
    cost_reward,
    critical_entropy,
    editing_cost,
    entropy,
    reference_editing_cost,
    wildcard_distance,
)
from jaxlab.codecomp.data import Completions, line_completions
from jaxlab.codecomp.decode import Decoded, Scores, decode, own_guesses, score, sequence_logp
from jaxlab.codecomp.placeholders import (
    collapse,
    encode,
    parse_snippet,
    placeholder_precision,
    placeholder_target,
    render_snippet,
    threshold_placeholders,
)
from jaxlab.codecomp.train import (
    hard_completion,
    make_grpo_step,
    make_sft_step,
    sft_loss,
    sft_sequences,
)

__all__ = [
    "DEFAULT_COSTS", "NAVIGATION", "PLACEHOLDER", "Completions", "CostModel", "Decoded",
    "Scores", "binary_entropy", "collapse", "cost_reward", "critical_entropy", "decode",
    "editing_cost", "encode", "entropy", "hard_completion", "line_completions",
    "make_grpo_step", "make_sft_step", "own_guesses", "parse_snippet", "placeholder_precision",
    "placeholder_target", "reference_editing_cost", "render_snippet", "score", "sequence_logp",
    "sft_loss", "sft_sequences", "threshold_placeholders", "wildcard_distance",
]
