"""The dimensions of a device mesh as data: defined in :mod:`accel_base.mesh_dimension` (accel-base,
standard library only, which the launcher imports without torch). This module path stays,
re-exporting the same objects.
"""

from __future__ import annotations

from accel_base.mesh_dimension import (
    ACCELERATE_DIMENSIONS,
    ALWAYS_RUN,
    CP,
    DP_REPLICATE,
    DP_SHARD,
    SP,
    TP,
    DeclaresDimensions,
    MeshDimension,
    all_dimensions,
    dimensions_named,
    mesh_order,
)

__all__ = [
    "ACCELERATE_DIMENSIONS",
    "ALWAYS_RUN",
    "CP",
    "DP_REPLICATE",
    "DP_SHARD",
    "SP",
    "TP",
    "DeclaresDimensions",
    "MeshDimension",
    "all_dimensions",
    "dimensions_named",
    "mesh_order",
]
