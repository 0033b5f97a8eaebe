"""Read the machine layout from SLURM's variables when ``accel launch`` runs under ``srun``."""

from __future__ import annotations

import re
from collections.abc import Mapping

from accel_launch.errors import AccelLaunchError

_BRACKET = re.compile(r"^(?P<prefix>[^\[,]*)\[(?P<ranges>[^\]]+)\](?P<suffix>[^,]*)")


def _split_top_level(nodelist: str) -> list[str]:
    """Split ``a[1-2],b,c[3,5]`` on the commas that are outside brackets."""
    parts, depth, current = [], 0, ""
    for char in nodelist:
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    if current:
        parts.append(current)
    return [part.strip() for part in parts if part.strip()]


def expand_nodelist(nodelist: str) -> list[str]:
    """Host names of a SLURM node list: ``node[01-03],gpu7`` -> node01, node02, node03, gpu7.

    Handles one bracket group per item with comma-separated numbers and ranges (zero padding
    kept), which is what SLURM writes for ordinary clusters.
    """
    hosts: list[str] = []
    for item in _split_top_level(nodelist):
        match = _BRACKET.match(item)
        if match is None:
            hosts.append(item)
            continue
        for piece in match["ranges"].split(","):
            if "-" in piece:
                low, high = piece.split("-", 1)
                if not (low.isdigit() and high.isdigit()):
                    raise AccelLaunchError(
                        f"cannot read SLURM node list {nodelist!r} (part {piece!r})"
                    )
                width = len(low)
                hosts += [
                    f"{match['prefix']}{n:0{width}d}{match['suffix']}"
                    for n in range(int(low), int(high) + 1)
                ]
            else:
                hosts.append(f"{match['prefix']}{piece}{match['suffix']}")
    return hosts


def slurm_layout(environ: Mapping[str, str]) -> dict[str, tuple[object, str]]:
    """``{option: (value, variable)}`` for num_machines, machine_rank, main_process_ip under SLURM.

    Empty when ``SLURM_NNODES`` is not set. The machine rank comes from ``SLURM_NODEID`` (else
    ``SLURM_PROCID``, which equals it with one task per node, the way to run ``srun accel launch``).
    """
    if not environ.get("SLURM_NNODES"):
        return {}
    found: dict[str, tuple[object, str]] = {}
    try:
        found["num_machines"] = (int(environ["SLURM_NNODES"]), "SLURM_NNODES")
        for variable in ("SLURM_NODEID", "SLURM_PROCID"):
            if environ.get(variable):
                found["machine_rank"] = (int(environ[variable]), variable)
                break
    except ValueError as error:
        raise AccelLaunchError(f"cannot read SLURM's variables: {error}") from None
    for variable in ("SLURM_JOB_NODELIST", "SLURM_NODELIST", "SLURM_STEP_NODELIST"):
        if environ.get(variable):
            hosts = expand_nodelist(environ[variable])
            if hosts:
                found["main_process_ip"] = (hosts[0], variable)
            break
    return found
