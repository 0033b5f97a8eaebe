"""set_seed and synchronize_rng_state(s), on one process and on two gloo processes."""

from __future__ import annotations

import json
import random
import sys
import types

import pytest
import torch

from accel_base import engine_description
from accel_core.built_in_engines import ENGINE_HINT
from accel_core.engine_description import EngineDescription
from accel_core.seeding import set_seed, synchronize_rng_state, synchronize_rng_states
from accel_testing import run_workers

try:  # numpy is optional for accel-core: set_seed seeds it when it is installed
    import numpy as np
except ImportError:  # pragma: no cover - depends on the environment
    np = None


@pytest.fixture(autouse=True)
def fresh_process_state():
    """Tests here create a one-process PartialState; don't leave it to the next test file."""
    from accel_ops import PartialState

    PartialState._reset_state()
    yield
    PartialState._reset_state()


def _draws() -> list:
    numpy_draw = float(np.random.rand()) if np is not None else None
    return [random.random(), numpy_draw, torch.rand(3).tolist()]


def test_same_seed_same_draws_everywhere():
    set_seed(1234)
    first = _draws()
    set_seed(1234)
    assert _draws() == first
    set_seed(1235)
    assert _draws() != first


def test_set_seed_matches_seeding_each_library_by_hand():
    set_seed(7)
    ours = _draws()
    random.seed(7)
    if np is not None:
        np.random.seed(7)
    torch.manual_seed(7)
    assert ours == _draws()


def test_device_specific_on_one_process_adds_index_zero():
    set_seed(99, device_specific=True)
    ours = _draws()
    set_seed(99)
    assert ours == _draws()


def test_deterministic_turns_on_deterministic_algorithms():
    try:
        set_seed(0, deterministic=True)
        assert torch.are_deterministic_algorithms_enabled()
    finally:
        torch.use_deterministic_algorithms(False)


def test_bad_seed_and_bad_rng_type():
    with pytest.raises(TypeError, match=r"seed must be an int, got '3' \(str\)"):
        set_seed("3")
    with pytest.raises(
        ValueError, match="rng_type='npu' can't be synchronized; choose one of torch"
    ):
        synchronize_rng_state("npu")
    with pytest.raises(ValueError, match="rng_type='dice' can't be synchronized"):
        synchronize_rng_states(["torch", "dice"])
    with pytest.raises(ValueError, match="needs the generator"):
        synchronize_rng_state("generator")


def test_one_process_synchronisation_leaves_the_state_alone():
    torch.manual_seed(5)
    before = torch.get_rng_state()
    synchronize_rng_states(["torch"])
    assert torch.equal(torch.get_rng_state(), before)


class _EngineGenerator:
    """An engine's own generator (what accel-backends' ``accel_backends.xla.rng`` is for XLA)."""

    rng_type = "xla"
    requirement = "fake_xla: pip install fake-xla"

    def __init__(self, state: int = 0, available: bool = True) -> None:
        self.state, self.available, self.calls = state, available, []

    def is_available(self) -> bool:
        return self.available

    def manual_seed(self, seed: int) -> None:
        self.calls.append(("manual_seed", seed))
        self.state = seed

    def get_rng_state(self) -> int:
        self.calls.append(("get_rng_state",))
        return self.state

    def set_rng_state(self, state: object) -> None:
        self.calls.append(("set_rng_state", state))
        self.state = state


def _install_engine_generator(generator: _EngineGenerator, setitem) -> None:
    """An installed engine whose description names ``generator`` (``random_generator``), and no
    other engine: ``setitem(mapping, key, value)`` (``monkeypatch.setitem`` in a test)."""
    module = types.ModuleType("fake_engine_rng")
    module.GENERATOR = generator
    setitem(sys.modules, "fake_engine_rng", module)
    description = EngineDescription(
        name="fake_xla",
        title="Fake XLA",
        strategy="accel_core.strategies.single_device:SingleDeviceStrategy",
        install="fake-xla",
        random_generator="fake_engine_rng:GENERATOR",
    )
    setitem(vars(engine_description), "installed_engines", lambda: {"fake_xla": description})


def test_set_seed_seeds_an_installed_engines_generator_when_it_is_available(monkeypatch):
    generator = _EngineGenerator()
    _install_engine_generator(generator, monkeypatch.setitem)
    set_seed(11)
    assert generator.calls == [("manual_seed", 11)]
    generator.available, generator.calls = False, []
    set_seed(12)
    assert generator.calls == []  # not there (torch_xla missing): left alone, no error


def test_synchronizing_an_engines_generator_checks_it_and_does_nothing_on_one_process(
    monkeypatch,
):
    generator = _EngineGenerator(available=False)
    _install_engine_generator(generator, monkeypatch.setitem)
    with pytest.raises(ValueError) as caught:
        synchronize_rng_state("xla")
    assert str(caught.value) == "rng_type='xla' needs fake_xla: pip install fake-xla."
    with pytest.raises(ValueError, match="choose one of torch, cuda, xla, generator"):
        synchronize_rng_state("npu")
    generator.available = True
    synchronize_rng_states(["xla", "torch"])
    assert generator.calls == []


def test_without_an_engine_that_owns_it_a_generator_says_what_to_install(monkeypatch):
    monkeypatch.setattr(engine_description, "installed_engines", dict)
    with pytest.raises(ValueError) as caught:
        synchronize_rng_state("xla")
    message = str(caught.value)
    assert message.startswith("rng_type='xla' can't be synchronized; choose one of torch, cuda, ")
    assert ENGINE_HINT in message
    with pytest.raises(ValueError) as caught:
        synchronize_rng_state("dice")  # not a generator Accelerate knows: no install hint
    assert ENGINE_HINT not in str(caught.value)


def seeding_worker():
    """Each rank reports its draws for: same seed, device-specific seed, synchronised states."""
    from accel_ops import PartialState

    state = PartialState()
    report = {"rank": state.process_index}
    set_seed(42)
    report["same"] = torch.rand(4).tolist()
    set_seed(42, device_specific=True)
    report["device_specific"] = torch.rand(4).tolist()
    torch.manual_seed(42 + state.process_index)
    generator = torch.Generator().manual_seed(100 + state.process_index)
    report["before_sync"] = torch.rand(4).tolist()
    synchronize_rng_states(["torch", "generator"], generator=generator)
    report["after_sync"] = torch.rand(4).tolist()
    report["generator"] = torch.rand(4, generator=generator).tolist()
    synchronize_rng_state(generator=generator)  # None: the generator, since one is given
    # an installed engine's own generator: rank 0's state reaches every process
    engine_generator = _EngineGenerator(state=1000 + state.process_index)
    _install_engine_generator(
        engine_generator, lambda mapping, key, value: mapping.update({key: value})
    )
    synchronize_rng_state("xla")
    report["engine_generator"] = [engine_generator.state, engine_generator.calls]
    print(json.dumps(report))
    state.destroy_process_group()


@pytest.mark.multiprocess
@pytest.mark.slow
def test_seeding_across_two_processes():
    results = run_workers(2, function=f"{__file__}::seeding_worker", timeout=90)
    rank0, rank1 = (json.loads(r.stdout.strip().splitlines()[-1]) for r in results)
    assert rank0["same"] == rank1["same"]
    # device_specific: rank r draws what seed 42 + r draws on one process
    for report in (rank0, rank1):
        torch.manual_seed(42 + report["rank"])
        assert report["device_specific"] == torch.rand(4).tolist()
    assert rank0["device_specific"] != rank1["device_specific"]
    assert rank0["before_sync"] != rank1["before_sync"]
    # after synchronising, both continue rank 0's sequence
    torch.manual_seed(42)
    torch.rand(4)
    expected = torch.rand(4).tolist()
    assert rank0["after_sync"] == rank1["after_sync"] == expected
    assert rank0["generator"] == rank1["generator"]
    assert (
        rank0["generator"] == torch.rand(4, generator=torch.Generator().manual_seed(100)).tolist()
    )
    assert rank0["engine_generator"] == [1000, [["get_rng_state"], ["set_rng_state", 1000]]]
    assert rank1["engine_generator"] == [1000, [["get_rng_state"], ["set_rng_state", 1000]]]
