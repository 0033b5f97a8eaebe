"""The description types validate what an engine declares, and the entry-point reader finds the
installed engines (none with accel-base alone) and the older form of an entry point."""

from __future__ import annotations

import importlib.metadata
import warnings

import pytest

from accel_base import engine_description
from accel_base.engine_description import (
    ENTRY_POINT_GROUP,
    EngineDescription,
    describe_entry_point,
    engine_for,
)
from accel_base.mesh_dimension import (
    ACCELERATE_DIMENSIONS,
    DP_REPLICATE,
    DP_SHARD,
    TP,
    MeshDimension,
    all_dimensions,
    dimensions_named,
    mesh_order,
)


def _engine(**fields: object) -> EngineDescription:
    return EngineDescription(
        name="demo", title="Demo", strategy="demo:Strategy", install="demo", **fields
    )  # type: ignore[arg-type]


def test_an_engine_trains_over_dp_replicate_unless_it_says_otherwise():
    engine = _engine()
    assert engine.dimensions == (DP_REPLICATE,)
    assert engine.mesh_dimensions == frozenset({"dp_replicate"})


def test_names_alone_still_declare_accelerates_dimensions():
    engine = _engine(mesh_dimensions=frozenset({"dp_shard", "tp"}))
    assert set(engine.dimensions) == {DP_SHARD, TP}


def test_names_that_contradict_the_records_are_refused():
    with pytest.raises(ValueError, match="does not name the dimensions declared"):
        _engine(dimensions=(DP_SHARD,), mesh_dimensions=frozenset({"tp"}))


def test_a_name_accelerate_does_not_have_needs_its_record():
    with pytest.raises(ValueError):
        dimensions_named({"pp"})


def test_a_new_dimension_joins_accelerates_in_mesh_order():
    pp = MeshDimension(
        name="pp", config_key="pp_size", order=-1, shards_data=False, title="Pipelining",
        description="pipeline stages",
    )  # fmt: skip
    known = all_dimensions([_engine(dimensions=(pp, DP_SHARD))])
    assert list(known.values()) == [*ACCELERATE_DIMENSIONS, pp]
    assert mesh_order([TP, pp, DP_SHARD]) == ("pp", "dp_shard", "tp")


def test_a_renamed_key_must_name_a_key_the_engine_reads():
    with pytest.raises(ValueError, match="renamed_config_keys 'old' -> 'new'"):
        _engine(renamed_config_keys={"old": "new"})


def test_engine_for_finds_a_name_or_alias_case_insensitively():
    engine = _engine(aliases=("dm",))
    engines = {"demo": engine}
    assert engine_for(" DEMO ", engines) is engine
    assert engine_for("dm", engines) is engine
    assert engine_for("other", engines) is None


def test_the_older_entry_point_form_is_described_by_its_name():
    entry_point = importlib.metadata.EntryPoint(
        name="Plain", value="collections:OrderedDict", group=ENTRY_POINT_GROUP
    )
    described = describe_entry_point(entry_point)
    assert (described.name, described.title, described.strategy) == (
        "plain", "Plain", "collections:OrderedDict",
    )  # fmt: skip


def test_an_entry_point_that_does_not_load_is_left_out_with_a_warning(monkeypatch):
    broken = importlib.metadata.EntryPoint(
        name="broken", value="no_such_module_here:DESCRIPTION", group=ENTRY_POINT_GROUP
    )
    monkeypatch.setattr(
        engine_description.importlib.metadata, "entry_points", lambda group: [broken]
    )
    engine_description.installed_engines.cache_clear()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert engine_description.installed_engines() == {}
    finally:
        engine_description.installed_engines.cache_clear()
    assert "strategy 'broken'" in str(caught[0].message)


def test_load_hook_imports_module_and_attribute():
    assert engine_description.load_hook("collections:OrderedDict").__name__ == "OrderedDict"
