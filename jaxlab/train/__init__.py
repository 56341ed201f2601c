"""Training core: the one optimizer builder (`optimizer`), state, jitted step, orbax resume,
metrics, meshes, schedules, caches, compiling ahead, the process's malloc policy.

`jaxlab.train.lm` (the byte-LM recipe: `train_lm`, `pretrained`, ...) imports
flax and the data loaders, so it is imported on its own: `from jaxlab.train import lm`.
"""

from jaxlab.train.arm_cache import ArmCache, config_hash
from jaxlab.train.checkpoint import Checkpointer, CheckpointMismatchError, CheckpointSaveError
from jaxlab.train.compile_ahead import AheadCompiled, CompileAhead
from jaxlab.train.loop import NonFiniteLossError, train_loop
from jaxlab.train.malloc import reuse_freed_memory
from jaxlab.train.mesh import (
    AXES,
    batch_sharding,
    fsdp_sharding,
    make_mesh,
    replicated,
    state_sharding,
    use_cpu_devices,
)
from jaxlab.train.metrics import MetricWriter, progress, read_metrics
from jaxlab.train.optimizers import optimizer
from jaxlab.train.progress_display import Progress
from jaxlab.train.schedules import make_schedule, warmup_cosine
from jaxlab.train.state import TrainState, create_train_state, make_train_step
from jaxlab.train.workdir import (
    WorkdirConfigError,
    check_config,
    check_or_write_fingerprint,
    check_workdir_path,
    config_fingerprint,
)

__all__ = [
    "AXES", "AheadCompiled", "ArmCache", "CheckpointMismatchError", "CheckpointSaveError",
    "Checkpointer", "CompileAhead",
    "MetricWriter", "NonFiniteLossError", "Progress", "TrainState", "WorkdirConfigError", "batch_sharding",
    "check_config", "check_or_write_fingerprint", "check_workdir_path", "config_fingerprint",
    "config_hash",
    "create_train_state", "fsdp_sharding", "make_mesh", "make_schedule", "make_train_step",
    "optimizer",
    "progress", "read_metrics", "replicated", "reuse_freed_memory", "state_sharding", "train_loop",
    "use_cpu_devices", "warmup_cosine",
]
