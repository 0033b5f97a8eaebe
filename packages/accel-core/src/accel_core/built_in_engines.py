"""The descriptions of accel-core's own strategies, published like any engine's
(``[project.entry-points."accel.strategies"]`` in accel-core's pyproject)."""

from __future__ import annotations

from accel_base.engine_description import EngineDescription

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


#: The one line accel-core's errors print when an engine is not installed here (a strategy name,
#: an Accelerate plugin keyword, a sharding ``ParallelismConfig`` or an engine's random number
#: generator that no installed package describes). An absent package cannot describe itself, so
#: this is the only text in accel-core that names accel-backends' engines; everything else reads
#: the installed descriptions.
ENGINE_HINT = (
    "Strategies come from packages that register an 'accel.strategies' entry point; "
    "accel-backends provides fsdp (`pip install accel-backends`), deepspeed "
    "(`pip install accel-backends[deepspeed]`) and xla (`pip install accel-backends[xla]`)."
)

#: The distribution :data:`ENGINE_HINT` points to: an error says which version of it is
#: installed when the strategy asked for is still missing.
ENGINE_PACKAGE = "accel-backends"
