"""The descriptions of accel-core's own strategies, published like any engine's
(``[project.entry-points."accel.strategies"]`` in accel-core's pyproject)."""

from __future__ import annotations

from typing import NamedTuple

from accel_core.engine_description import EngineDescription

SINGLE_DEVICE = EngineDescription(
    name="single_device",
    title="one device",
    strategy="accel_core.strategies.single_device:SingleDeviceStrategy",
    install="accel-core",
    aliases=("no", "single", "single-device"),
    distributed_type="NO",
)

DDP = EngineDescription(
    name="ddp",
    title="DDP",
    strategy="accel_core.strategies.ddp:DDPStrategy",
    install="accel-core",
    aliases=("multi_cpu", "multi_gpu"),
    distributed_type="MULTI_GPU",
)

#: accel-core's strategies by name, for a source checkout without installed metadata.
BUILT_IN = {description.name: description for description in (SINGLE_DEVICE, DDP)}


class ProvidedElsewhere(NamedTuple):
    """An engine another package provides, as far as accel-core's errors need to know it."""

    title: str
    install: str
    plugin_keywords: tuple[str, ...] = ()
    shards_by_default: bool = False


#: Engines of accel-backends, by strategy name. Only what happens while such an engine is *not*
#: installed reads this table (an absent package cannot describe itself): the error that says
#: what to install, the keyword of a plugin given without its engine, and the name a sharding
#: ``ParallelismConfig`` asks for. Everything else reads the installed descriptions.
PROVIDED_ELSEWHERE = {
    "deepspeed": ProvidedElsewhere(
        "DeepSpeed", "accel-backends[deepspeed]", ("deepspeed_plugin", "deepspeed_plugins")
    ),
    "fsdp": ProvidedElsewhere("FSDP", "accel-backends", ("fsdp_plugin",), shards_by_default=True),
    "xla": ProvidedElsewhere("XLA", "accel-backends[xla]"),
}
