"""What this machine is: its GPUs (asked through ``nvidia-smi``, so CUDA stays uninitialised), its
kernel, the CPU ranks an MPI launcher gave it, and the device family torch would use.
"""

from __future__ import annotations

import functools
import logging
import os
import platform
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch

from accel_ops.environment import get_int_from_env

logger = logging.getLogger(__name__)

MIN_KERNEL_VERSION = "5.5.0"
"""Older Linux kernels can make processes hang in collectives (Accelerate issue #1929)."""

# Consumer GPUs whose peer-to-peer and InfiniBand transfers need a recent driver.
_P2P_LIMITED_GPUS = ("RTX 40",)
_P2P_FIXED_DRIVER = "550.40.07"


@dataclass
class CPUInformation:
    """This process's place among CPU processes, as the launcher (torchrun or MPI) set it."""

    rank: int = field(default=0, metadata={"help": "The rank of the current process."})
    world_size: int = field(default=1, metadata={"help": "The number of processes."})
    local_rank: int = field(default=0, metadata={"help": "The rank on this machine."})
    local_world_size: int = field(default=1, metadata={"help": "Processes on this machine."})


def get_cpu_distributed_information() -> CPUInformation:
    """Rank and sizes from torchrun's variables, else Intel MPI's, Open MPI's or MVAPICH's."""
    return CPUInformation(
        rank=get_int_from_env(
            ("RANK", "PMI_RANK", "OMPI_COMM_WORLD_RANK", "MV2_COMM_WORLD_RANK"), 0
        ),
        world_size=get_int_from_env(
            ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE"), 1
        ),
        local_rank=get_int_from_env(
            (
                "LOCAL_RANK",
                "MPI_LOCALRANKID",
                "OMPI_COMM_WORLD_LOCAL_RANK",
                "MV2_COMM_WORLD_LOCAL_RANK",
            ),
            0,
        ),
        local_world_size=get_int_from_env(
            (
                "LOCAL_WORLD_SIZE",
                "MPI_LOCALNRANKS",
                "OMPI_COMM_WORLD_LOCAL_SIZE",
                "MV2_COMM_WORLD_LOCAL_SIZE",
            ),
            1,
        ),
    )


def are_libraries_initialized(*library_names: str) -> list[str]:
    """Those of ``library_names`` that are already imported in this process."""
    return [name for name in library_names if name in sys.modules]


def get_current_device_type() -> tuple[str, str]:
    """The accelerator family and its multi-process distributed type, without touching a device.

    Checked in Accelerate's order: MLU, SDAA, MUSA, NPU, HPU, XPU, Neuron; anything else gives
    ``("cuda", "MULTI_GPU")``, as in Accelerate, even on a machine without a GPU (ask
    :func:`~accel_ops.is_cuda_available` for that).
    """
    from accel_ops import accelerators as found

    for available, device, kind in (
        (found.is_mlu_available, "mlu", "MULTI_MLU"),
        (found.is_sdaa_available, "sdaa", "MULTI_SDAA"),
        (found.is_musa_available, "musa", "MULTI_MUSA"),
        (found.is_npu_available, "npu", "MULTI_NPU"),
        (found.is_hpu_available, "hpu", "MULTI_HPU"),
        (found.is_xpu_available, "xpu", "MULTI_XPU"),
        (found.is_neuron_available, "neuron", "MULTI_NEURON"),
    ):
        if available():
            return device, kind
    return "cuda", "MULTI_GPU"


def _nvidia_smi() -> str:
    found = shutil.which("nvidia-smi")
    if found is None and platform.system() == "Windows":
        drive = os.environ.get("SYSTEMDRIVE", "C:")
        candidate = Path(f"{drive}\\Program Files\\NVIDIA Corporation\\NVSMI\\nvidia-smi.exe")
        found = str(candidate) if candidate.exists() else None
    if found is None:
        raise FileNotFoundError(
            "nvidia-smi was not found on PATH: this machine has no NVIDIA driver (or it is not "
            "installed where the PATH looks)"
        )
    return found


def _query_gpus(field_name: str) -> list[str]:
    output = subprocess.check_output(
        [_nvidia_smi(), f"--query-gpu={field_name}", "--format=csv,noheader"], text=True
    )
    return [line.strip() for line in output.strip().splitlines() if line.strip()]


def get_gpu_info() -> tuple[list[str], int]:
    """The names of the NVIDIA GPUs and their number, from ``nvidia-smi`` (CUDA stays untouched).

    Raises ``FileNotFoundError`` when ``nvidia-smi`` is missing and ``CalledProcessError`` when
    it fails (e.g. no driver loaded).
    """
    names = _query_gpus("name")
    return names, len(names)


def get_driver_version() -> str:
    """The NVIDIA driver version of the first GPU, from ``nvidia-smi`` (errors as above)."""
    return _query_gpus("driver_version")[0]


def check_cuda_p2p_ib_support() -> bool:
    """False only when several consumer GPUs known to break peer-to-peer and InfiniBand transfers
    (RTX 40xx) run a driver older than 550.40.07; True otherwise, and when it can't be told."""
    from packaging.version import InvalidVersion, Version

    try:
        names, count = get_gpu_info()
        if count > 1 and any(model in name for name in names for model in _P2P_LIMITED_GPUS):
            return Version(get_driver_version()) >= Version(_P2P_FIXED_DRIVER)
    except (OSError, subprocess.SubprocessError, InvalidVersion, IndexError):
        pass
    return True


@functools.cache
def check_cuda_fp8_capability() -> bool:
    """Whether the first NVIDIA GPU has FP8 tensor cores (compute capability 8.9 or higher).

    Asked through ``nvidia-smi``; if that fails, through torch (which initialises CUDA). False
    when there is no CUDA GPU. Cached for the process.
    """
    try:
        major, minor = _query_gpus("compute_cap")[0].split(".")
        capability = (int(major), int(minor))
    except (OSError, subprocess.SubprocessError, IndexError, ValueError):
        if not torch.cuda.is_available():
            return False
        capability = torch.cuda.get_device_capability()
    return capability >= (8, 9)


def check_os_kernel() -> None:
    """Log a warning (on the main process) when Linux is older than :data:`MIN_KERNEL_VERSION`."""
    info = platform.uname()
    if info.system != "Linux":
        return
    from packaging.version import Version

    match = re.search(r"\d+\.\d+\.\d+", info.release)
    if match is None or Version(match.group()) >= Version(MIN_KERNEL_VERSION):
        return
    from accel_ops.state import PartialState

    if PartialState._shared_state and not PartialState().is_main_process:
        return
    logger.warning(
        "Detected kernel version %s, which is below the recommended minimum of %s; this can "
        "cause the process to hang. It is recommended to upgrade the kernel to the minimum "
        "version or higher.",
        match.group(),
        MIN_KERNEL_VERSION,
    )
