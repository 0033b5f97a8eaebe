"""Pipeline parallelism's configuration, checks and stage split, on one process (the training
itself runs on real processes in ``tests/nd/test_pipeline_parallel.py``)."""

from __future__ import annotations

import pytest
import torch

from accel_backends import ParallelismConfig, PipelineParallelConfig
from accel_backends.fsdp.description import DESCRIPTION, PP
from accel_backends.fsdp.pipelining.stages import even_layers, keep_stage, split_causal_lm
from accel_core import Accelerator
from accel_core.state import AcceleratorState


@pytest.fixture
def fresh_state():
    AcceleratorState._reset_state()
    yield
    AcceleratorState._reset_state()


def test_pp_is_a_dimension_of_the_fsdp_engine_outside_the_others():
    assert PP in DESCRIPTION.dimensions and "pp" in DESCRIPTION.mesh_dimensions
    assert PP.order < 0 and not PP.shards_data and PP.strategy_builds_mesh
    assert PP.launch_option == "parallelism_config_pp_size"


def test_pp_size_multiplies_the_world_size_and_builds_a_default_handler(monkeypatch):
    config = ParallelismConfig(pp_size=2, dp_shard_size=2)
    assert config.total_size == 4 and config.pp_enabled
    assert config.pp_handler == PipelineParallelConfig(schedule="1F1B", microbatches=None)
    monkeypatch.setenv("PARALLELISM_CONFIG_PP_SIZE", "4")
    assert ParallelismConfig().pp_size == 4
    with pytest.raises(ValueError, match="pp_size must be at least 1, but got 0"):
        ParallelismConfig(pp_size=0)
    with pytest.raises(TypeError, match="pp_handler must be a PipelineParallelConfig"):
        ParallelismConfig(pp_size=2, pp_handler={"schedule": "GPipe"})  # type: ignore[arg-type]


def test_the_pipeline_options_are_checked():
    with pytest.raises(ValueError, match=r"schedule='ZeroBubble' .* choose one of 'GPipe', '1F1B'"):
        PipelineParallelConfig(schedule="ZeroBubble")
    with pytest.raises(ValueError, match="microbatches must be at least 1, got 0"):
        PipelineParallelConfig(microbatches=0)
    with pytest.raises(TypeError, match=r"split_fn must be a callable .* got int"):
        PipelineParallelConfig(split_fn=3)  # type: ignore[arg-type]


def test_a_pp_size_that_does_not_fit_the_world_size_is_refused_first(fresh_state):
    with pytest.raises(
        ValueError,
        match=r"^ParallelismConfig total_size \(2\) does not match num_processes \(1\): .*"
        r"pp_size=2 must equal the world size 1",
    ):
        Accelerator(parallelism_config=ParallelismConfig(pp_size=2))
    assert not torch.distributed.is_initialized()


def test_pp_under_a_strategy_that_does_not_declare_it_is_refused(fresh_state):
    from accel_core.parallelism import check_strategy
    from accel_core.strategies import create_strategy

    with pytest.raises(ValueError) as refused:
        check_strategy(ParallelismConfig(pp_size=2), create_strategy("ddp"))
    assert "strategy 'ddp' does not do" in str(refused.value)
    assert "pipeline parallelism runs under the fsdp strategy" in str(refused.value)


class Stack(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(3, 3) for _ in range(4))
        self.act = torch.nn.Tanh()
        self.head = torch.nn.Linear(3, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = self.act(layer(x))
        return self.head(x)


def test_a_stage_keeps_its_modules_under_the_whole_models_names():
    model = Stack()
    tail = torch.nn.Sequential(model.layers[2], model.layers[3], model.head)
    kept = keep_stage(model, lambda m, i, n: tail, 1, 2)
    assert kept is model
    assert [name for name, _ in model.named_parameters()] == [
        "layers.2.weight",
        "layers.2.bias",
        "layers.3.weight",
        "layers.3.bias",
        "head.weight",
        "head.bias",
    ]
    assert model.layers[0] is None and model.act is not None  # no weights: left in place
    x = torch.randn(5, 3)
    with pytest.raises(RuntimeError, match=r"holds stage 1 of 2 .* only through accelerator"):
        model(x)  # outside a schedule: not the whole model's outputs
    model.forward.running = True
    assert torch.equal(model(x), tail(x))  # the model's forward is the stage's


def test_a_bad_split_is_refused_before_the_model_changes():
    model = Stack()
    names = [name for name, _ in model.named_parameters()]
    with pytest.raises(TypeError, match=r"split_fn\(model, 0, 2\) returned list"):
        keep_stage(model, lambda m, i, n: [m.layers[0]], 0, 2)  # type: ignore[arg-type,return-value]
    with pytest.raises(ValueError, match=r"tensor\(s\) that are not the model's"):
        keep_stage(model, lambda m, i, n: torch.nn.Linear(3, 3), 0, 2)
    with pytest.raises(ValueError, match="holds no parameter"):
        keep_stage(model, lambda m, i, n: torch.nn.Tanh(), 0, 2)
    assert [name for name, _ in model.named_parameters()] == names
    half = torch.nn.Linear(3, 2, bias=False)
    half.weight = model.head.weight  # uses the head's weight, not its bias
    with pytest.raises(ValueError, match=r"parameters it does not use \(head.bias\)"):
        keep_stage(model, lambda m, i, n: half, 1, 2)
    assert [name for name, _ in model.named_parameters()] == names


def test_layers_are_split_evenly_the_first_stages_taking_the_rest():
    assert [even_layers(4, i, 2) for i in range(2)] == [range(0, 2), range(2, 4)]
    assert [even_layers(5, i, 3) for i in range(3)] == [range(0, 2), range(2, 4), range(4, 5)]
    with pytest.raises(ValueError, match="3 layers can't be split into 4 pipeline stages"):
        even_layers(3, 0, 4)


def test_a_model_that_is_not_a_causal_lm_needs_a_split_fn():
    with pytest.raises(ValueError, match=r"Stack is not split by accel: .*split_fn=fn"):
        split_causal_lm(Stack(), 0, 2)


def test_a_causal_lm_with_tied_embeddings_is_refused():
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        vocab_size=16,
        hidden_size=8,
        intermediate_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        tie_word_embeddings=True,
    )
    model = transformers.LlamaForCausalLM(config)
    with pytest.raises(ValueError, match="tie_word_embeddings=False for pipeline parallelism"):
        split_causal_lm(model, 0, 2)


class _Size:
    def __init__(self, size: int) -> None:
        self._size = size

    def size(self) -> int:
        return self._size


def _strategy(tp: int = 1, ram_efficient: bool = False, scaler: object = None) -> object:
    # what refuse_unsupported_pipeline reads of the fsdp strategy, as plain attributes (the
    # strategy itself needs a pp mesh, hence several processes: the nd tests run those)
    from types import SimpleNamespace

    return SimpleNamespace(
        pp_mesh=_Size(2),
        tp_mesh=_Size(tp) if tp > 1 else None,
        plugin=SimpleNamespace(cpu_ram_efficient_loading=ram_efficient),
        precision=SimpleNamespace(scaler=scaler),
    )


def test_what_pp_does_not_run_with_is_refused_with_the_reason():
    from accel_backends.fsdp.pipelining.refusals import refuse_unsupported_pipeline

    refuse_unsupported_pipeline(_strategy())  # pp alone: nothing to refuse
    with pytest.raises(ValueError, match=r"pp_size=2\) with tensor parallelism \(tp_size=2\)"):
        refuse_unsupported_pipeline(_strategy(tp=2))
    with pytest.raises(ValueError, match=r"cpu_ram_efficient_loading .*\(pp_size=2\)"):
        refuse_unsupported_pipeline(_strategy(ram_efficient=True))
    with pytest.raises(ValueError, match=r"mixed_precision='fp16' .* use mixed_precision='bf16'"):
        refuse_unsupported_pipeline(_strategy(scaler=torch.amp.GradScaler("cpu")))
