"""DeepSpeed ZeRO checkpoints load into other layouts and back (real gloo processes, CPU,
DeepSpeed 0.19): ZeRO-2 and ZeRO-3 saved on 2 processes load under FSDP2 on 3 and on one process
(with ``deepspeed`` unimportable there: the partitions are read from the files alone); FSDP2 and
one-process checkpoints load under ZeRO-2 and ZeRO-3 on 2. Each load is compared with the full
weights and Adam state (``exp_avg``, ``exp_avg_sq``, ``step``, the groups' settings) gathered at
the save, exactly."""

from __future__ import annotations

from pathlib import Path

import pytest
from layout_matrix import LOADED_EXACTLY, cell_results, run_matrix

pytest.importorskip("deepspeed")

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

WORKERS = f"{Path(__file__).parent / 'deepspeed_layout_workers.py'}::run"

LAUNCHES = [
    ("zero", 2, ["save:zero2:zero2", "save:zero3:zero3"]),
    ("fsdp", 3, ["load:fsdp2:zero2", "load:fsdp2:zero3", "save:fsdp2:fsdp3"]),
    ("one", 1, ["load:ddp:zero2", "load:ddp:zero3", "save:ddp:one"]),
    ("back", 2, ["load:zero2:fsdp3", "load:zero3:fsdp3", "load:zero2:one", "load:zero3:one"]),
]
CELLS = [
    ("fsdp", "zero2->fsdp2", "FSDP2Strategy"),
    ("fsdp", "zero3->fsdp2", "FSDP2Strategy"),
    ("one", "zero2->ddp", "SingleDeviceStrategy"),
    ("one", "zero3->ddp", "SingleDeviceStrategy"),
    ("back", "fsdp3->zero2", "DeepSpeedStrategy"),
    ("back", "fsdp3->zero3", "DeepSpeedStrategy"),
    ("back", "one->zero2", "DeepSpeedStrategy"),
    ("back", "one->zero3", "DeepSpeedStrategy"),
]
PROCESSES = {label: processes for label, processes, _ in LAUNCHES}


@pytest.fixture(scope="module")
def matrix(tmp_path_factory) -> Path:
    return run_matrix(
        tmp_path_factory.mktemp("deepspeed_layouts"), WORKERS, LAUNCHES, DS_ACCELERATOR="cpu"
    )


@pytest.mark.parametrize(("launch", "cell", "strategy"), CELLS, ids=[c[1] for c in CELLS])
def test_a_checkpoint_loads_exactly_into_another_layout(matrix, launch, cell, strategy):
    for rank, found in enumerate(cell_results(matrix, launch, PROCESSES[launch], cell)):
        assert found == {"strategy": strategy, **LOADED_EXACTLY}, (cell, rank)
