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

PP = MeshDimension(
    name="pp",
    config_key="pp_size",
    order=-1,
    shards_data=False,
    title="Pipeline parallelism",
    description="pipeline stages (the model split by layers)",
    launch_option="parallelism_config_pp_size",
)
PIPELINES = EngineDescription(
    name="pipelines",
    title="Pipelines",
    strategy="pipelines.strategy:PipelineStrategy",
    install="pipelines",
    dimensions=(DP_REPLICATE, PP),
)


@pytest.fixture
def with_pipelines(monkeypatch: pytest.MonkeyPatch):
    """The launcher with an engine installed that declares ``pp``."""
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


def test_the_sizes_are_accelerates_dimensions_in_their_order():
    sizes = [key for key in schema.parallelism_keys() if key.endswith("_size")]
    assert sizes == [
        "parallelism_config_dp_replicate_size",
        "parallelism_config_dp_shard_size",
        "parallelism_config_tp_size",
        "parallelism_config_cp_size",
        "parallelism_config_sp_size",
        "parallelism_config_ep_size",  # the fsdp engine's (accel-backends is installed)
    ]


def test_a_declared_dimension_gets_its_flag_key_and_variable(with_pipelines):
    option = next(o for o in options.launch_options() if o.name == "parallelism_config_pp_size")
    assert option.group == "parallelism" and option.default == 1 and option.minimum == 1
    assert (
        option.help
        == "Pipeline stages (the model split by layers). Implies --use_parallelism_config."
    )
    assert option.config_key == ("parallelism_config", "parallelism_config_pp_size")
    # after Accelerate's dimensions and their settings, in mesh order with the fsdp engine's ep
    assert list(schema.sections()["parallelism_config"])[-2:] == [
        "parallelism_config_pp_size",
        "parallelism_config_ep_size",
    ]
    checked = schema.validate({"parallelism_config": {"parallelism_config_pp_size": "4"}})
    assert checked["parallelism_config"] == {"parallelism_config_pp_size": 4}

    plan = resolve(_flags("--cpu", "--parallelism_config_pp_size", "2"), {}, {})
    assert plan.values["use_parallelism_config"].source == "implied by --parallelism_config_pp_size"
    env = prepare_extend_env_parallelism_config(
        argparse.Namespace(parallelism_config_pp_size=2), {}
    )
    assert env["PARALLELISM_CONFIG_PP_SIZE"] == "2"
    assert env["PARALLELISM_CONFIG_TP_SIZE"] == "1"
