"""`--cpu_devices=N`: the host CPU as N JAX devices, for data parallel runs over its cores.

`launch.main` and `launch.reproduce` call `apply()` first thing in `main`, before any
JAX computation; a training run's mesh (`config.mesh`, 'data' = -1 by default) then
spans the N devices: the batch is split over them and the gradients summed
(`jaxlab.train.use_cpu_devices`). `launch.bench` hands the value to
`launch.runner.bench`, which otherwise splits the CPU as the benchmarks' configs ask.
"""

from absl import flags

CPU_DEVICES = flags.DEFINE_integer(
    "cpu_devices", None, "Split the host CPU into this many JAX devices (data parallel over "
    "its cores; e.g. the number of cores). Default: JAX's own (one CPU device).", lower_bound=1)


def apply() -> None:
  """`jaxlab.train.use_cpu_devices(--cpu_devices)` when the flag is given."""
  if CPU_DEVICES.value is not None:
    from jaxlab.train import use_cpu_devices
    use_cpu_devices(CPU_DEVICES.value)
