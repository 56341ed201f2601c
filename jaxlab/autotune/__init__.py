"""KernelBand: hardware-aware bandit autotuning of kernel configurations (ICML 2026).

Public API: tasks and strategies (`space`), the cost model and device specs
(`cost_model`), proposers, `KernelBand` and its pure bandit pieces
(`kernelband`), the baselines, the CPU `TimingEvaluator`, and the benchmark.
Results become a `pallas_kernels.tuning.TuningTable` the kernels read.
"""

from jaxlab.autotune import baselines, benchmark, cost_model, kernelband, proposers, space, timing
from jaxlab.autotune.cost_model import DEVICES, CostModelEvaluator, DeviceSpec, Measurement
from jaxlab.autotune.kernelband import (
    KernelBand,
    KernelBandPolicy,
    SearchResult,
    hardware_mask,
    kmeans_pp,
    parent_probabilities,
    reward,
    run_search,
    ucb_scores,
    ucb_select,
    ucb_update,
)
from jaxlab.autotune.proposers import LLMProposer, LocalProposer, parse_config
from jaxlab.autotune.space import STRATEGIES, Task
from jaxlab.autotune.timing import TimingEvaluator

__all__ = [
    "DEVICES", "STRATEGIES", "CostModelEvaluator", "DeviceSpec", "KernelBand", "KernelBandPolicy",
    "LLMProposer", "LocalProposer", "Measurement", "SearchResult", "Task", "TimingEvaluator",
    "baselines", "benchmark", "cost_model", "hardware_mask", "kernelband", "kmeans_pp",
    "parent_probabilities", "parse_config", "proposers", "reward", "run_search", "space", "timing",
    "ucb_scores", "ucb_select", "ucb_update",
]
