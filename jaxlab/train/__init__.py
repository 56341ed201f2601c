"""Training core: state, jitted step, orbax resume, metrics, meshes."""

from jaxlab.train.checkpoint import Checkpointer
from jaxlab.train.loop import train_loop
from jaxlab.train.mesh import (
    AXES,
    batch_sharding,
    fsdp_sharding,
    make_mesh,
    replicated,
    state_sharding,
)
from jaxlab.train.metrics import MetricWriter, progress, read_metrics
from jaxlab.train.state import TrainState, create_train_state, make_train_step

__all__ = [
    "AXES", "Checkpointer", "MetricWriter", "TrainState", "batch_sharding", "create_train_state",
    "fsdp_sharding", "make_mesh", "make_train_step", "progress", "read_metrics", "replicated",
    "state_sharding", "train_loop",
]
