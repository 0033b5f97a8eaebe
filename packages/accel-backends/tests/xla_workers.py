"""Scripts the XLA process tests run in fresh interpreters: ``python xla_workers.py <case>``.

- ``launch``: ``torch_xla.launch`` of two replicas on XLA's CPU device (``CPU_NUM_DEVICES=2``);
  each builds an Accelerator on the ``xla`` strategy and prints the error it gets.
- ``mismatch``: one of several torchrun-style processes (``WORLD_SIZE=2``); prints the error.
- ``spmd``: SPMD over every CPU device; trains, and prints a JSON report of what it saw.
"""

from __future__ import annotations

import json
import sys
import threading

#: The replicas of ``launch`` are threads of one process: one line at a time on stdout (``print``
#: writes the text and the newline separately, so two lines could interleave).
_PRINTING = threading.Lock()


def _accelerator(**options: object) -> object:
    from accel_backends.xla.strategy import XLAStrategy
    from accel_core import Accelerator

    return Accelerator(strategy=XLAStrategy(**options))


def replica(index: int) -> None:
    """One replica of ``torch_xla.launch`` (a thread per CPU device)."""
    try:
        _accelerator()
        line = f"REPLICA {index} NO ERROR"
    except RuntimeError as error:
        line = f"REPLICA {index} ERROR {error}"
    with _PRINTING:
        print(line, flush=True)


def launch() -> None:
    import torch_xla

    torch_xla.launch(replica, args=())


def mismatch() -> None:
    from accel_ops import PartialState

    try:
        _accelerator()
    except RuntimeError as error:
        print(f"RANK {PartialState().process_index} ERROR {error}", flush=True)
    finally:
        PartialState().destroy_process_group()


def spmd() -> None:
    """Train over every CPU device with SPMD and, with plain PyTorch on CPU, on the same global
    batches; report the weights of both, the input sharding, two collectives, and whether a
    checkpoint loads back exactly."""
    import tempfile

    import torch
    import torch_xla
    from xla_support import accelerated_training, make_dataset, make_model, plain_training

    accelerator = _accelerator(spmd=True)  # first: SPMD starts before any XLA tensor exists
    dataset = make_dataset()
    expected, _ = plain_training(make_model(), dataset, batch_size=8, epochs=2)
    model = make_model()
    shardings: list[str] = []
    model[0].register_forward_hook(
        lambda _m, inputs, _o: shardings.append(torch_xla._XLAC._get_xla_sharding_spec(inputs[0]))
    )
    weights, losses = accelerated_training(accelerator, model, dataset, batch_size=8, epochs=2)
    values = torch.tensor([1.0, 2.0], device=accelerator.device)
    folder = accelerator.save_state(tempfile.mkdtemp())
    with torch.no_grad():
        for parameter in accelerator._models[0].parameters():
            parameter.zero_()
    accelerator.load_state(folder)
    reloaded = accelerator.get_state_dict(accelerator._models[0])
    report = {
        "devices": accelerator.strategy.mesh.devices,
        "num_processes": accelerator.num_processes,
        "shardings": sorted(set(shardings)),
        "max_difference": max(float((weights[k] - expected[k]).abs().max()) for k in expected),
        "losses": [losses[0], losses[-1]],
        "gathered": accelerator.gather(values).cpu().tolist(),
        "reduced": accelerator.reduce(values, "mean").cpu().tolist(),
        "reloaded_exactly": all(torch.equal(reloaded[k], weights[k]) for k in weights),
    }
    print("REPORT " + json.dumps(report), flush=True)


if __name__ == "__main__":
    {"launch": launch, "mismatch": mismatch, "spmd": spmd}[sys.argv[1]]()
