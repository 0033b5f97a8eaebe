"""Mesh dimensions as data: a dimension no code of accel names (``pp``, an ``xp``) is read, counted,
chosen for, accepted and refused from the records its engine's description declares."""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass, replace

import pytest

from accel_core.built_in_engines import ENGINE_HINT
from accel_core.engine_description import ENTRY_POINT_GROUP, EngineDescription
from accel_core.mesh_dimension import (
    ACCELERATE_DIMENSIONS,
    DP_REPLICATE,
    TP,
    MeshDimension,
    all_dimensions,
)
from accel_core.out_of_scope import OutOfScopeError
from accel_core.parallelism import (
    check_sizes,
    check_strategy,
    dimension_sizes,
    needed_dimensions,
    refuse_unsupported,
)
from accel_core.strategies import create_strategy, registry
from accel_core.strategies.resolver import default_strategy_name
from accel_core.strategies.single_device import SingleDeviceStrategy

PP = MeshDimension(
    name="pp",
    config_key="pp_size",
    order=-1,
    shards_data=False,
    title="Pipeline parallelism",
    description="pipeline stages",
    why_not="pipeline stages run under the pp_engine strategy (strategy='pp_engine')",
    launch_option="parallelism_config_pp_size",
)
#: A dimension whose strategy builds the mesh, with no refusal text of its own.
XP = MeshDimension(
    name="xp",
    config_key="xp_size",
    order=3,
    shards_data=True,
    title="Expert parallelism",
    description="processes the experts are spread over",
    strategy_builds_mesh=True,
)


class PipelineStrategy(SingleDeviceStrategy):
    name = "pp_engine"


class ExpertStrategy(SingleDeviceStrategy):
    name = "xp_engine"


PP_ENGINE = EngineDescription(
    name="pp_engine",
    title="Pipelines",
    strategy=f"{__name__}:PipelineStrategy",
    install="pp-engine",
    dimensions=(DP_REPLICATE, PP),
)
XP_ENGINE = EngineDescription(
    name="xp_engine",
    title="Experts",
    strategy=f"{__name__}:ExpertStrategy",
    install="xp-engine",
    dimensions=(DP_REPLICATE, XP),
)

#: An engine that shards by default (what accel-backends' fsdp is).
SHARDING_ENGINE = EngineDescription(
    name="sharding_engine",
    title="Sharding",
    strategy=f"{__name__}:PipelineStrategy",
    install="sharding-engine",
    shards_by_default=True,
)


@dataclass
class _Config:
    """A ParallelismConfig-like object with two more dimensions."""

    dp_replicate_size: int = 1
    dp_shard_size: int = 1
    tp_size: int = 1
    cp_size: int = 1
    sp_size: int = 1
    pp_size: int = 1
    xp_size: int = 1


@pytest.fixture
def third_party_engines(monkeypatch: pytest.MonkeyPatch) -> None:
    """Both engines installed, as an entry point of the ``accel.strategies`` group names them,
    beside accel-core's own (not accel-backends', whose fsdp engine declares a ``pp`` of its
    own: here the dimensions are only the stand-ins')."""
    _only_built_in_engines(monkeypatch, pp_engine="PP_ENGINE", xp_engine="XP_ENGINE")


def test_the_known_dimensions_are_accelerates_then_those_engines_declare(third_party_engines):
    names = [dimension.name for dimension in ACCELERATE_DIMENSIONS]
    assert names == ["dp_replicate", "dp_shard", "tp", "cp", "sp"]
    assert list(all_dimensions([PP_ENGINE, XP_ENGINE])) == [*names, "pp", "xp"]
    assert dimension_sizes(_Config(pp_size=2, tp_size=3)) == {
        "dp_replicate": 1,
        "dp_shard": 1,
        "tp": 3,
        "cp": 1,
        "sp": 1,
        "pp": 2,
        "xp": 1,
    }


def test_a_new_dimension_counts_towards_the_world_size(third_party_engines):
    # listed: the dimensions that deal different batches (xp too), and the others above 1
    product = r"dp_replicate_size=1 x dp_shard_size=1 x pp_size=2 x xp_size=1 must equal"
    with pytest.raises(ValueError, match=rf"^ParallelismConfig total_size \(2\) .*: {product}"):
        check_sizes(_Config(pp_size=2), 1)
    check_sizes(_Config(pp_size=2), 2)
    check_sizes(_Config(pp_size=2, xp_size=2), 4)


def test_a_new_dimension_chooses_the_engine_that_declares_it(third_party_engines, monkeypatch):
    assert needed_dimensions(_Config(pp_size=2, dp_replicate_size=2)) == {"pp"}
    assert default_strategy_name(4, needed=frozenset({"pp"})) == "pp_engine"
    assert default_strategy_name(4, needed=frozenset({"xp"})) == "xp_engine"
    assert default_strategy_name(4, needed=frozenset({"pp", "tp"})) == "ddp"  # none runs both
    # none runs both, and xp's strategy builds the mesh: the sharding engine, as for dp_shard
    # (accel-backends' fsdp; here a stand-in, the only installed engine that shards by default)
    found = {
        name: entry_point
        for name, entry_point in registry._entry_points().items()
        if not entry_point.value.startswith("accel_backends")
    }
    found["sharding_engine"] = importlib.metadata.EntryPoint(
        name="sharding_engine", value=f"{__name__}:SHARDING_ENGINE", group=ENTRY_POINT_GROUP
    )
    monkeypatch.setattr(registry, "_entry_points", lambda: found)
    assert default_strategy_name(4, needed=frozenset({"pp", "xp"})) == "sharding_engine"


def test_a_new_dimension_is_refused_at_prepare_under_a_strategy_that_does_not_run_it(
    third_party_engines,
):
    config = _Config(pp_size=2)
    check_strategy(config, create_strategy("ddp"))  # refused by prepare, not before
    with pytest.raises(OutOfScopeError) as refused:
        refuse_unsupported(config, create_strategy("ddp"))
    assert str(refused.value) == (
        "Pipeline parallelism (ParallelismConfig(pp_size=2)) is not run by strategy 'ddp': "
        "pipeline stages run under the pp_engine strategy (strategy='pp_engine'). The device "
        "mesh is built (accelerator.torch_device_mesh); prepare() does not train on this "
        "dimension."
    )
    refuse_unsupported(config, create_strategy("pp_engine"))
    with pytest.raises(OutOfScopeError, match=r"^Tensor parallelism .* 'pp_engine': "):
        refuse_unsupported(_Config(pp_size=2, tp_size=2), create_strategy("pp_engine"))


def test_a_dimension_whose_strategy_builds_the_mesh_is_refused_when_the_strategy_is_chosen(
    third_party_engines,
):
    config = _Config(xp_size=2, dp_replicate_size=2)
    with pytest.raises(ValueError) as refused:
        check_strategy(config, create_strategy("ddp"))
    # no refusal text of its own: the installed strategies that declare it
    assert str(refused.value) == (
        "ParallelismConfig(dp_replicate_size=2, dp_shard_size=1, xp_size=2) shards the model over "
        "the device mesh, which strategy 'ddp' does not do: expert parallelism runs under "
        "strategy 'xp_engine' (name it: Accelerator(strategy=NAME) or `accel launch --strategy "
        "NAME`)."
    )
    check_strategy(config, create_strategy("xp_engine"))
    refuse_unsupported(config, create_strategy("ddp"))  # check_strategy's, not prepare's


def test_without_its_engine_a_new_dimension_is_not_known(monkeypatch):
    _only_built_in_engines(monkeypatch)
    assert "pp" not in dimension_sizes(_Config(pp_size=2))
    check_sizes(_Config(pp_size=2), 1)  # a field nothing declares is not a dimension here


def test_descriptions_declare_records_and_still_accept_names():
    older = EngineDescription(
        name="older", title="Older", strategy="m:S", install="older", mesh_dimensions={"tp"}
    )
    assert older.dimensions == (TP,) and older.mesh_dimensions == {"tp"}
    assert EngineDescription(name="x", title="X", strategy="m:S", install="x").dimensions == (
        DP_REPLICATE,
    )
    assert PP_ENGINE.mesh_dimensions == {"dp_replicate", "pp"}
    with pytest.raises(ValueError, match=r"'pp' have no record.*MeshDimension"):
        EngineDescription(
            name="x", title="X", strategy="m:S", install="x", mesh_dimensions=frozenset({"pp"})
        )
    with pytest.raises(ValueError, match="does not name the dimensions declared"):
        EngineDescription(
            name="x",
            title="X",
            strategy="m:S",
            install="x",
            dimensions=(DP_REPLICATE, PP),
            mesh_dimensions=frozenset({"dp_replicate"}),
        )


def _only_built_in_engines(monkeypatch: pytest.MonkeyPatch, **extra: str) -> None:
    """The entry points without accel-backends', plus ``extra`` (name -> this module's object)."""
    found = {
        name: entry_point
        for name, entry_point in registry._entry_points().items()
        if not entry_point.value.startswith("accel_backends")
    }
    for name, attribute in extra.items():
        found[name] = importlib.metadata.EntryPoint(
            name=name, value=f"{__name__}:{attribute}", group=ENTRY_POINT_GROUP
        )
    monkeypatch.setattr(registry, "_entry_points", lambda: found)


class TensorStrategy(SingleDeviceStrategy):
    name = "tp_engine"


#: An engine that runs one of Accelerate's dimensions and says how to choose it for it.
TP_ENGINE = EngineDescription(
    name="tp_engine",
    title="Tensors",
    strategy=f"{__name__}:TensorStrategy",
    install="tp-engine",
    dimensions=(DP_REPLICATE, replace(TP, why_not="pass strategy='tp_engine' for tp_size")),
)


def test_a_dimension_is_refused_with_the_words_of_the_engine_that_declares_it(monkeypatch):
    _only_built_in_engines(monkeypatch, tp_engine="TP_ENGINE")
    with pytest.raises(OutOfScopeError) as refused:
        refuse_unsupported(_Config(tp_size=2), create_strategy("ddp"))
    assert str(refused.value).startswith(
        "Tensor parallelism (ParallelismConfig(tp_size=2)) is not run by strategy 'ddp': "
        "pass strategy='tp_engine' for tp_size. The device mesh is built"
    )


def test_a_dimension_no_installed_engine_declares_is_refused_with_what_to_install(monkeypatch):
    _only_built_in_engines(monkeypatch)
    with pytest.raises(OutOfScopeError) as refused:
        refuse_unsupported(_Config(tp_size=2), create_strategy("ddp"))
    assert "'ddp': no installed strategy declares tensor parallelism ('tp'): " in str(refused.value)
    assert f"{ENGINE_HINT[:-1]}. The device mesh is built" in str(refused.value)
    with pytest.raises(ValueError, match=r"does not do: no installed strategy declares shard"):
        check_strategy(_Config(dp_shard_size=2), create_strategy("ddp"))
    # a dimension with a text of its own (no engine runs it) keeps it
    with pytest.raises(OutOfScopeError, match=r"'ddp': sequence parallelism \(Accelerate's"):
        refuse_unsupported(_Config(sp_size=2), create_strategy("ddp"))
