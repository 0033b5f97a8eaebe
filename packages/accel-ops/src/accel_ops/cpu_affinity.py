"""Pin each process to the CPUs nearest its GPU (the GPU's NUMA node), as Accelerate does.

NVIDIA GPUs are asked through NVML (``pip install nvidia-ml-py``), AMD GPUs through AMD SMI
(shipped with ROCm). Without a GPU nothing changes and an info line says so, so calling this on a
CPU machine is safe.
"""

from __future__ import annotations

import functools
import logging
import math
import os

from accel_base.env_values import parse_bool
from accel_ops.accelerate_spellings import read_accel_variable

logger = logging.getLogger(__name__)

_BITS_PER_MASK_WORD = 64


def parse_cpu_list(text: str) -> list[int]:
    """CPU numbers of a Linux cpulist such as ``"0-7,16-23"``."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        first, _, last = part.partition("-")
        cpus.extend(range(int(first), int(last or first) + 1))
    return cpus


def _nvidia_gpu_cpus(local_process_index: int) -> list[int]:
    from accel_ops.availability import is_pynvml_available

    if not is_pynvml_available():
        raise ImportError(
            "Setting the CPU affinity of a process next to its NVIDIA GPU needs NVML's Python "
            "bindings: pip install nvidia-ml-py"
        )
    import pynvml

    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(local_process_index)
        words = math.ceil((os.cpu_count() or 1) / _BITS_PER_MASK_WORD)
        masks = pynvml.nvmlDeviceGetCpuAffinity(handle, words)
    finally:
        pynvml.nvmlShutdown()
    # word i holds CPUs 64*i .. 64*i+63, lowest bit first
    return [
        index * _BITS_PER_MASK_WORD + bit
        for index, word in enumerate(masks)
        for bit in range(_BITS_PER_MASK_WORD)
        if int(word) >> bit & 1
    ]


def _amd_gpu_cpus(local_process_index: int) -> list[int]:
    from accel_ops.availability import is_amdsmi_available

    if not is_amdsmi_available():
        raise ImportError(
            "Setting the CPU affinity of a process next to its AMD GPU needs the amdsmi package; "
            "it ships with ROCm: put ROCm's Python bindings on PYTHONPATH"
        )
    import amdsmi

    amdsmi.amdsmi_init()
    try:
        handle = amdsmi.amdsmi_get_processor_handles()[local_process_index]
        node = amdsmi.amdsmi_topo_get_numa_node_number(handle)
    finally:
        amdsmi.amdsmi_shut_down()
    if node is None or node < 0:  # the GPU is not attached to one NUMA node
        return sorted(os.sched_getaffinity(0))
    with open(f"/sys/devices/system/node/node{node}/cpulist") as handle_file:
        return parse_cpu_list(handle_file.read())


def override_numa_affinity(local_process_index: int, verbose: bool | None = None) -> None:
    """Pin this process to the CPUs of the NUMA node of GPU ``local_process_index``, now.

    ``verbose`` (default: ``ACCEL_DEBUG_MODE``, or Accelerate's ``ACCELERATE_DEBUG_MODE``) logs
    the CPUs chosen. Without a CUDA or ROCm GPU it changes nothing and logs that at info level.
    Raises ``ImportError`` when the GPU's management library (NVML or AMD SMI) is missing.
    """
    from accel_ops.accelerators import is_cuda_available, is_rocm_available

    if verbose is None:
        flag = read_accel_variable("ACCEL_DEBUG_MODE")
        verbose = flag is not None and parse_bool(flag)
    if not is_cuda_available():
        logger.info(
            "No CUDA or ROCm GPU is visible: the CPU affinity of process %d is left as it is",
            local_process_index,
        )
        return
    if is_rocm_available():
        cpus = _amd_gpu_cpus(local_process_index)
    else:
        cpus = _nvidia_gpu_cpus(local_process_index)
    os.sched_setaffinity(0, cpus)
    if verbose:
        chosen = sorted(os.sched_getaffinity(0))
        logger.info(
            "Assigning %d CPU cores to process %d: %s", len(chosen), local_process_index, chosen
        )


@functools.cache
def set_numa_affinity(local_process_index: int, verbose: bool | None = None) -> None:
    """:func:`override_numa_affinity`, done once per process and arguments (later calls return
    at once; call ``override_numa_affinity`` to redo it)."""
    override_numa_affinity(local_process_index=local_process_index, verbose=verbose)
