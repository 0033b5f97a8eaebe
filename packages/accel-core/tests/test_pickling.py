"""The states, the Accelerator and every prepared object pickle and unpickle, as in Accelerate.

transformers' ``TrainingArguments`` holds the ``PartialState`` and Trainer does
``torch.save(args)`` at every checkpoint; peft and trl keep Accelerators in objects they pickle.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import traceback
from pathlib import Path

import pytest
import torch

from accel_core import Accelerator
from accel_core.gradient_state import GradientState
from accel_core.state import AcceleratorState
from accel_ops import PartialState
from accel_testing import run_workers


def _prepared() -> tuple[Accelerator, list[object]]:
    torch.manual_seed(0)
    accelerator = Accelerator()
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1)
    data = torch.utils.data.DataLoader(torch.arange(24.0).view(8, 3), batch_size=2)
    return accelerator, list(accelerator.prepare(model, optimizer, data, scheduler))


def _round_trip(value: object) -> object:
    buffer = io.BytesIO()
    torch.save(value, buffer)  # what Trainer does with TrainingArguments
    buffer.seek(0)
    return torch.load(buffer, weights_only=False)


def test_states_pickle_with_their_values():
    state = PartialState()
    copy = pickle.loads(pickle.dumps(state))
    assert type(copy) is PartialState
    assert (copy.num_processes, copy.process_index, copy.device) == (1, 0, torch.device("cpu"))
    assert copy.launch_environment == state.launch_environment
    accelerator, _ = _prepared()
    for value in (AcceleratorState(), GradientState()):
        assert type(_round_trip(value)) is type(value)
    assert _round_trip(AcceleratorState()).mixed_precision == accelerator.mixed_precision


def test_accelerator_and_prepared_objects_survive_torch_save():
    accelerator, (model, optimizer, data, scheduler) = _prepared()
    loss = model(next(iter(data))).sum()
    accelerator.backward(loss)
    optimizer.step()
    scheduler.step()
    holder = {"accelerator": accelerator, "objects": [model, optimizer, data, scheduler]}
    copy = _round_trip(holder)
    same, (model2, optimizer2, data2, scheduler2) = copy["accelerator"], copy["objects"]
    assert type(same) is Accelerator and repr(same) == repr(accelerator)
    assert [type(o) for o in copy["objects"]] == [
        type(model),
        type(optimizer),
        type(data),
        type(scheduler),
    ]
    assert torch.equal(model2.weight, model.weight)
    assert scheduler2.state_dict()["last_epoch"] == scheduler.state_dict()["last_epoch"] == 1
    assert optimizer2.state_dict()["param_groups"][0]["lr"] == pytest.approx(0.01)
    assert [batch.tolist() for batch in data2] == [batch.tolist() for batch in data]
    assert len(same._original_loaders) == len(accelerator._original_loaders)


def test_an_accelerator_pickled_after_an_async_save_carries_no_thread(tmp_path):
    accelerator, _ = _prepared()
    accelerator.save_state(str(tmp_path / "checkpoint"), async_save=True)
    copy = pickle.loads(pickle.dumps(accelerator))  # while the thread runs or holds its copies
    accelerator.wait_for_checkpoint()
    assert accelerator._background_saver.staging is not None
    assert not copy._background_saver.busy and copy._background_saver.staging is None
    assert (tmp_path / "checkpoint" / "model.safetensors").is_file()


# --------------------------------------------------------------------------------------------
# two processes


def worker() -> None:
    out = Path(os.environ["OUT"])
    rank = int(os.environ["RANK"])
    torch.set_num_threads(1)
    result: dict = {}
    try:
        accelerator, (model, optimizer, data, scheduler) = _prepared()
        copy = _round_trip({"state": PartialState(), "accelerator": accelerator, "model": model})
        result["process_index"] = copy["state"].process_index
        result["num_processes"] = copy["accelerator"].num_processes
        result["weights_equal"] = bool(
            torch.equal(accelerator.unwrap_model(copy["model"]).weight, model.module.weight)
        )
        result["other"] = [type(_round_trip(o)).__name__ for o in (optimizer, data, scheduler)]
        accelerator.wait_for_everyone()
    except Exception:
        result["error"] = traceback.format_exc()
    (out / f"rank{rank}.json").write_text(json.dumps(result))


@pytest.mark.multiprocess
def test_two_processes_pickle_their_states_and_prepared_objects(tmp_path):
    run_workers(2, function=f"{__file__}::worker", env={"OUT": str(tmp_path)}, timeout=180)
    for rank in range(2):
        result = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert "error" not in result, result.get("error")
        assert result == {
            "process_index": rank,
            "num_processes": 2,
            "weights_equal": True,
            "other": ["AcceleratedOptimizer", "DataLoaderShard", "AcceleratedScheduler"],
        }
