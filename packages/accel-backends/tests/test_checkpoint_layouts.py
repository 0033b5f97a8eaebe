"""A checkpoint written by one strategy on one number of processes loads into another (real gloo
processes, CPU): DDP 4 -> 2 -> 3 processes; FSDP2 4 -> 2 -> 1 and 2 -> 3; FSDP2 with tensor
parallelism (``dp_shard_size=2, tp_size=2``) -> FSDP2 on 2 -> one process; one process -> DDP,
FSDP2 and tensor parallelism. Each load is compared with the weights and the optimizer state
(Adam's moments and steps, the groups' settings) gathered at the save, exactly.

Five launches (1, 4, 2, 3 and 1 processes) run the whole matrix, each saving and loading several
checkpoints in turn (``layout_workers.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from layout_matrix import LOADED_EXACTLY, cell_results, run_matrix

pytestmark = [pytest.mark.multiprocess]

WORKERS = f"{Path(__file__).parent / 'layout_workers.py'}::run"

#: (label, processes, steps): each launch after the ones whose checkpoints it loads.
LAUNCHES = [
    ("one", 1, ["save:ddp:net:one_net", "save:ddp:mlp:one_mlp"]),
    (
        "four",
        4,
        [
            "save:ddp:net:ddp4",
            "save:fsdp2:net:fsdp4",
            "save:tp:mlp:tp4",
            "load:fsdp2:net:one_net",
            "load:tp:mlp:one_mlp",
        ],
    ),
    (
        "two",
        2,
        [
            "load:ddp:net:ddp4",
            "load:fsdp2:net:fsdp4",
            "load:fsdp2:mlp:tp4",
            "save:ddp:net:ddp2",
            "save:fsdp2:net:fsdp2",
        ],
    ),
    ("three", 3, ["load:ddp:net:ddp2", "load:fsdp2:net:fsdp2", "load:ddp:net:one_net"]),
    ("last", 1, ["load:ddp:net:fsdp2", "load:ddp:net:fsdp4", "load:ddp:mlp:tp4"]),
]

#: (launch, checkpoint -> strategy, the strategy class that loaded it)
CELLS = [
    ("four", "one_net->fsdp2", "FSDP2Strategy"),
    ("four", "one_mlp->tp", "FSDP2Strategy"),
    ("two", "ddp4->ddp", "DDPStrategy"),
    ("two", "fsdp4->fsdp2", "FSDP2Strategy"),
    ("two", "tp4->fsdp2", "FSDP2Strategy"),
    ("three", "ddp2->ddp", "DDPStrategy"),
    ("three", "fsdp2->fsdp2", "FSDP2Strategy"),
    ("three", "one_net->ddp", "DDPStrategy"),
    ("last", "fsdp2->ddp", "SingleDeviceStrategy"),
    ("last", "fsdp4->ddp", "SingleDeviceStrategy"),
    ("last", "tp4->ddp", "SingleDeviceStrategy"),
]
PROCESSES = {label: processes for label, processes, _ in LAUNCHES}


@pytest.fixture(scope="module")
def matrix(tmp_path_factory) -> Path:
    return run_matrix(tmp_path_factory.mktemp("layouts"), WORKERS, LAUNCHES)


def test_the_saves_wrote_each_strategy_s_own_layout(matrix):
    def files(name: str) -> set[str]:
        folder = matrix / name
        return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}

    assert {"model.safetensors", "optimizer.bin"} <= files("ddp4")
    for sharded in ("fsdp4", "tp4"):
        assert "pytorch_model_fsdp_0/.metadata" in files(sharded)
        assert "model.safetensors" not in files(sharded)
    assert "pytorch_model_fsdp_0/__3_0.distcp" in files("fsdp4")


@pytest.mark.parametrize(("launch", "cell", "strategy"), CELLS, ids=[c[1] for c in CELLS])
def test_a_checkpoint_loads_exactly_into_another_layout(matrix, launch, cell, strategy):
    for rank, found in enumerate(cell_results(matrix, launch, PROCESSES[launch], cell)):
        assert found == {"strategy": strategy, **LOADED_EXACTLY}, (cell, rank)


def _error(folder: Path) -> str:
    from accel_core.checkpointing import CheckpointError, CheckpointReader
    from accel_core.checkpointing.layouts import find_layout

    with pytest.raises(CheckpointError) as caught:
        find_layout(CheckpointReader(folder, None), 0, loading="fsdp")
    return str(caught.value)


def test_a_folder_no_engine_reads_is_an_error_naming_what_it_holds(tmp_path):
    (tmp_path / "random_states_0.pkl").write_bytes(b"")
    (tmp_path / "pytorch_model_fsdp_0").mkdir()  # no .metadata: not a DCP folder
    message = _error(tmp_path)
    assert f"checkpoint {tmp_path} (written by Hugging Face Accelerate" in message
    assert "no weights for model 0 in any layout strategy 'fsdp' can convert" in message
    assert "it holds pytorch_model_fsdp_0/, random_states_0.pkl." in message


def test_a_tensor_parallel_deepspeed_checkpoint_is_refused_with_the_reason(tmp_path):
    (tmp_path / "pytorch_model").mkdir()
    for rank in (0, 1):
        (tmp_path / "pytorch_model" / f"mp_rank_0{rank}_model_states.pt").write_bytes(b"")
    message = _error(tmp_path)
    assert (
        "pytorch_model/ is a DeepSpeed checkpoint split by tensor or pipeline parallelism"
        in message
    )
    assert "mp_rank_01_model_states.pt" in message and "record no DTensor-like" in message
