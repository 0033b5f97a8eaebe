"""The ``xla`` strategy's collectives: XLA tensors through torch_xla's, the rest through accel_ops.

One replica (XLA's CPU device runs no more, see test_xla_processes.py): the values are those of a
one-process world, computed by torch_xla's collectives inside the XLA graph.
Needs torch_xla (the ``backend-xla`` session, ``PJRT_DEVICE=CPU``); skipped elsewhere.
"""

from __future__ import annotations

import pytest

torch_xla = pytest.importorskip("torch_xla")
torch_xla.device()  # the XLA runtime must start before any backward pass of the process

import torch  # noqa: E402
from xla_support import xla_accelerator  # noqa: E402

from accel_core.strategies import SupportsCollectives  # noqa: E402


@pytest.fixture
def accelerator():
    with xla_accelerator() as accelerator:
        yield accelerator


def _on(accelerator, values, dtype=torch.float32):
    return torch.tensor(values, dtype=dtype, device=accelerator.device)


def test_the_strategy_routes_the_accelerators_collectives(accelerator):
    assert isinstance(accelerator.strategy, SupportsCollectives)


def test_gather(accelerator):
    gathered = accelerator.gather(
        {"a": _on(accelerator, [[1.0, 2.0]]), "b": [_on(accelerator, 3.0)]}
    )
    assert gathered["a"].device.type == "xla"
    assert gathered["a"].cpu().tolist() == [[1.0, 2.0]]
    # A 0-dim tensor becomes one element per replica, as in Accelerate's XLA gather.
    assert gathered["b"][0].shape == (1,) and gathered["b"][0].cpu().tolist() == [3.0]
    cpu = torch.tensor([5, 6])
    assert accelerator.gather(cpu) is cpu  # accel_ops' one-process gather: the input itself
    with pytest.raises(TypeError, match=r"^Unsupported types \(<class 'str'>\)"):
        accelerator.gather({"a": "text"})


def test_reduce(accelerator):
    tensor = _on(accelerator, [1.0, -2.0, 4.0])
    assert accelerator.reduce(tensor, "sum").cpu().tolist() == [1.0, -2.0, 4.0]
    assert accelerator.reduce(tensor, "mean", scale=0.5).cpu().tolist() == [0.5, -1.0, 2.0]
    assert accelerator.strategy.reduce(tensor, "max").cpu().tolist() == [1.0, -2.0, 4.0]
    copied = accelerator.reduce(tensor, "none", scale=3.0)
    assert copied.cpu().tolist() == [3.0, -6.0, 12.0] and copied is not tensor
    assert tensor.cpu().tolist() == [1.0, -2.0, 4.0]  # the input is unchanged
    integers = _on(accelerator, [3, 4], dtype=torch.int64)
    assert accelerator.reduce(integers).cpu().tolist() == [3, 4]
    with pytest.raises(
        ValueError, match=r"reduction='product'\) is not one of mean, sum, max, none"
    ):
        accelerator.reduce(tensor, "product")


def test_broadcast_and_objects(accelerator):
    strategy = accelerator.strategy
    tensor = _on(accelerator, [7.0, 8.0])
    assert strategy.broadcast(tensor) is tensor and tensor.cpu().tolist() == [7.0, 8.0]
    with pytest.raises(ValueError, match=r"from_process=1\) is out of range: there are 1"):
        strategy.broadcast(tensor, from_process=1)
    assert strategy.gather_object({"loss": 1.5}) == [{"loss": 1.5}]
    assert strategy.gather_object([1, 2]) == [1, 2]
    assert accelerator.gather_for_metrics(["a", "b"], use_gather_object=True) == ["a", "b"]
