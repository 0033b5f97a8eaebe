"""The ``--parallelism_config_*`` sizes come from the mesh dimensions' records: an installed engine
that declares a new dimension gives ``accel launch`` its flag, its config-file key and its
``PARALLELISM_CONFIG_*`` variable, with nothing in the launcher edited."""

from __future__ import annotations

import argparse

import pytest

from accel_base.engine_description import EngineDescription
from accel_base.mesh_dimension import DP_REPLICATE, MeshDimension
from accel_launch.config import schema
from accel_launch.launch import engines, options
from accel_launch.launch.parallelism import prepare_extend_env_parallelism_config
from accel_launch.launch.resolve import resolve

# a dimension no installed engine declares (the fsdp engine declares ``pp`` itself)
VPP = MeshDimension(
    name="vpp",
    config_key="vpp_size",
    order=5,
    shards_data=False,
    title="Virtual pipeline parallelism",
    description="virtual stages per process (the model split by layers)",
    launch_option="parallelism_config_vpp_size",
)
PIPELINES = EngineDescription(
    name="pipelines",
    title="Pipelines",
    strategy="pipelines.strategy:PipelineStrategy",
    install="pipelines",
    dimensions=(DP_REPLICATE, VPP),
)


@pytest.fixture
def with_pipelines(monkeypatch: pytest.MonkeyPatch):
    """The launcher with an engine installed that declares ``vpp``."""
    cached = (options.launch_options, schema.sections, schema.top_keys)
    installed = {**engines.installed(), PIPELINES.name: PIPELINES}
    monkeypatch.setattr(engines, "installed", lambda: installed)
    for function in cached:
        function.cache_clear()
    yield
    for function in cached:
        function.cache_clear()


def _flags(*args: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    options.add_options(parser)
    return parser.parse_args(list(args))


def test_the_sizes_are_accelerates_dimensions_in_their_order_then_the_engines():
    sizes = [key for key in schema.parallelism_keys() if key.endswith("_size")]
    assert sizes[:5] == [
        "parallelism_config_dp_replicate_size",
        "parallelism_config_dp_shard_size",
        "parallelism_config_tp_size",
        "parallelism_config_cp_size",
        "parallelism_config_sp_size",
    ]
    # declared by the fsdp engine (accel-backends), in mesh order
    assert sizes[5:] == ["parallelism_config_pp_size", "parallelism_config_ep_size"]


def test_a_declared_dimension_gets_its_flag_key_and_variable(with_pipelines):
    option = next(o for o in options.launch_options() if o.name == "parallelism_config_vpp_size")
    assert option.group == "parallelism" and option.default == 1 and option.minimum == 1
    assert (
        option.help == "Virtual stages per process (the model split by layers). Implies "
        "--use_parallelism_config."
    )
    assert option.config_key == ("parallelism_config", "parallelism_config_vpp_size")
    # after Accelerate's dimensions and their settings
    assert list(schema.sections()["parallelism_config"])[-1] == "parallelism_config_vpp_size"
    checked = schema.validate({"parallelism_config": {"parallelism_config_vpp_size": "4"}})
    assert checked["parallelism_config"] == {"parallelism_config_vpp_size": 4}

    plan = resolve(_flags("--cpu", "--parallelism_config_vpp_size", "2"), {}, {})
    assert (
        plan.values["use_parallelism_config"].source == "implied by --parallelism_config_vpp_size"
    )
    env = prepare_extend_env_parallelism_config(
        argparse.Namespace(parallelism_config_vpp_size=2), {}
    )
    assert env["PARALLELISM_CONFIG_VPP_SIZE"] == "2"
    assert env["PARALLELISM_CONFIG_TP_SIZE"] == "1"
