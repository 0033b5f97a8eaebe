"""Constants, versions and the operations helpers of ``accelerate.utils.constants``,
``.versions`` and ``.operations`` that accel-ops adds, checked by value on one process.
"""

import contextlib
import importlib.metadata

import pytest
import torch
from packaging.version import Version

import accel_ops
from accel_ops import constants

# Every value of accelerate.utils.constants 1.15 (printed from Accelerate, then pasted).
ACCELERATE_CONSTANTS = {
    "BETA_CP_AVAILABLE_PYTORCH_VERSION": "2.6.0",
    "BETA_SP_AVAILABLE_DEEPSPEED_VERSION": "0.18.2",
    "BETA_TP_AVAILABLE_PYTORCH_VERSION": "2.3.0",
    "BETA_TP_AVAILABLE_TRANSFORMERS_VERSION": "4.52.0",
    "CUDA_DISTRIBUTED_TYPES": ["DEEPSPEED", "MULTI_GPU", "FSDP", "MEGATRON_LM", "TP"],
    "DEEPSPEED_MULTINODE_LAUNCHERS": [
        "pdsh",
        "standard",
        "openmpi",
        "mvapich",
        "mpich",
        "nossh",
        "slurm",
    ],
    "DTENSOR_PYTORCH_VERSION": "2.5.0",
    "ELASTIC_LOG_LINE_PREFIX_TEMPLATE_PYTORCH_VERSION": "2.2.0",
    "FSDP2_PYTORCH_VERSION": "2.6.0",
    "FSDP2_STATE_DICT_TYPE": ["SHARDED_STATE_DICT", "FULL_STATE_DICT"],
    "FSDP_AUTO_WRAP_POLICY": ["TRANSFORMER_BASED_WRAP", "SIZE_BASED_WRAP", "NO_WRAP"],
    "FSDP_BACKWARD_PREFETCH": ["BACKWARD_PRE", "BACKWARD_POST", "NO_PREFETCH"],
    "FSDP_MODEL_NAME": "pytorch_model_fsdp",
    "FSDP_PYTORCH_VERSION": "2.1.0.a0+32f93b1",
    "FSDP_SHARDING_STRATEGY": [
        "FULL_SHARD",
        "SHARD_GRAD_OP",
        "NO_SHARD",
        "HYBRID_SHARD",
        "HYBRID_SHARD_ZERO2",
    ],
    "FSDP_STATE_DICT_TYPE": ["FULL_STATE_DICT", "LOCAL_STATE_DICT", "SHARDED_STATE_DICT"],
    "MITA_PROFILING_AVAILABLE_PYTORCH_VERSION": "2.1.0",
    "MODEL_NAME": "pytorch_model",
    "OPTIMIZER_NAME": "optimizer",
    "PROFILE_PATTERN_NAME": "profile_{suffix}.json",
    "RNG_STATE_NAME": "random_states",
    "SAFE_MODEL_NAME": "model",
    "SAFE_WEIGHTS_INDEX_NAME": "model.safetensors.index.json",
    "SAFE_WEIGHTS_NAME": "model.safetensors",
    "SAFE_WEIGHTS_PATTERN_NAME": "model{suffix}.safetensors",
    "SAGEMAKER_PARALLEL_EC2_INSTANCES": ["ml.p3.16xlarge", "ml.p3dn.24xlarge", "ml.p4dn.24xlarge"],
    "SAGEMAKER_PYTHON_VERSION": "py38",
    "SAGEMAKER_PYTORCH_VERSION": "1.10.2",
    "SAGEMAKER_TRANSFORMERS_VERSION": "4.17.0",
    "SAMPLER_NAME": "sampler",
    "SCALER_NAME": "scaler.pt",
    "SCHEDULER_NAME": "scheduler",
    "TORCH_DISTRIBUTED_OPERATION_TYPES": [
        "DEEPSPEED",
        "MULTI_GPU",
        "FSDP",
        "MEGATRON_LM",
        "TP",
        "MULTI_NPU",
        "MULTI_MLU",
        "MULTI_SDAA",
        "MULTI_MUSA",
        "MULTI_XPU",
        "MULTI_CPU",
        "MULTI_HPU",
        "MULTI_NEURON",
    ],
    "TORCH_DYNAMO_MODES": ["default", "reduce-overhead", "max-autotune"],
    "TORCH_LAUNCH_PARAMS": [
        "nnodes",
        "nproc_per_node",
        "rdzv_backend",
        "rdzv_endpoint",
        "rdzv_id",
        "rdzv_conf",
        "standalone",
        "max_restarts",
        "monitor_interval",
        "start_method",
        "role",
        "module",
        "m",
        "no_python",
        "run_path",
        "log_dir",
        "r",
        "redirects",
        "t",
        "tee",
        "node_rank",
        "master_addr",
        "master_port",
    ],
    "WEIGHTS_INDEX_NAME": "pytorch_model.bin.index.json",
    "WEIGHTS_NAME": "pytorch_model.bin",
    "WEIGHTS_PATTERN_NAME": "pytorch_model{suffix}.bin",
    "XPU_PROFILING_AVAILABLE_PYTORCH_VERSION": "2.4.0",
}


def test_every_constant_has_accelerates_value():
    ours = {name: getattr(accel_ops, name) for name in ACCELERATE_CONSTANTS}
    assert ours == ACCELERATE_CONSTANTS
    assert set(constants.__all__) == {
        *ACCELERATE_CONSTANTS,
        "STR_OPERATION_TO_FUNC",
        "SUPPORTED_PYTORCH_LAYERS_FOR_UPCASTING",
    }


def test_patterns_fill_in_like_accelerates():
    assert accel_ops.WEIGHTS_PATTERN_NAME.format(suffix="-00001-of-00002") == (
        "pytorch_model-00001-of-00002.bin"
    )
    assert accel_ops.SAFE_WEIGHTS_PATTERN_NAME.format(suffix="_1") == "model_1.safetensors"
    assert accel_ops.PROFILE_PATTERN_NAME.format(suffix="3") == "profile_3.json"


def test_layer_and_operator_tables():
    names = [layer.__name__ for layer in accel_ops.SUPPORTED_PYTORCH_LAYERS_FOR_UPCASTING]
    assert names == [
        "Conv1d",
        "Conv2d",
        "Conv3d",
        "ConvTranspose1d",
        "ConvTranspose2d",
        "ConvTranspose3d",
        "Linear",
    ]
    table = accel_ops.STR_OPERATION_TO_FUNC
    assert sorted(table) == ["!=", "<", "<=", "==", ">", ">="]
    assert table[">="](Version("2.1"), Version("2.1")) and not table["<"](2, 1)
    assert constants.STR_OPERATION_TO_FUNC is table


def test_torch_version_is_a_packaging_version_of_the_installed_torch():
    from accel_ops.versions import torch_version

    assert isinstance(torch_version, Version)
    assert torch_version == Version(importlib.metadata.version("torch"))
    assert torch_version.base_version == torch.__version__.split("+")[0]
    assert accel_ops.compare_versions(torch_version, ">=", "2.4") is True
    assert accel_ops.is_torch_version("<", "2.4") is False


def test_tensor_dtype_codes_are_accelerates():
    assert {
        torch.float32: 1,
        torch.float64: 2,
        torch.float16: 3,
        torch.bfloat16: 4,
        torch.uint8: 5,
        torch.int8: 6,
        torch.int16: 7,
        torch.int32: 8,
        torch.int64: 9,
        torch.bool: 10,
    } == accel_ops.TENSOR_TYPE_TO_INT
    assert {code: dtype for dtype, code in accel_ops.TENSOR_TYPE_TO_INT.items()} == (
        accel_ops.TENSOR_INT_TO_DTYPE
    )


def test_gather_tensor_shape_on_one_process():
    shape, code = accel_ops.gather_tensor_shape(torch.ones(2, 0, 3, dtype=torch.int64))
    assert shape.tolist() == [2, 0, 3] and shape.dtype == torch.int64
    assert accel_ops.TENSOR_INT_TO_DTYPE[code] == torch.int64
    shape, code = accel_ops.gather_tensor_shape(torch.tensor(1.5))
    assert shape.tolist() == [] and code == 1
    with pytest.raises(ValueError, match="got None on the only process"):
        accel_ops.gather_tensor_shape(None)
    with pytest.raises(ValueError, match=r"can't send dtype torch\.complex64"):
        accel_ops.gather_tensor_shape(torch.ones(1, dtype=torch.complex64))


def test_tensor_predicates_and_shapes():
    assert accel_ops.is_torch_xpu_tensor(torch.ones(1)) is False
    assert accel_ops.is_torch_xpu_tensor([1]) is False
    info = accel_ops.TensorInformation(shape=torch.Size([2]), dtype=torch.float32)
    assert accel_ops.is_tensor_information(info) and not accel_ops.is_tensor_information(2)
    assert accel_ops.get_shape({"a": torch.ones(2, 3), "b": [torch.ones(1)]}) == {
        "a": [2, 3],
        "b": [[1]],
    }


def test_verify_operation_calls_through_on_one_process():
    calls = []

    @accel_ops.verify_operation
    def my_collective(tensor, scale=1):
        """Mine."""
        calls.append((tensor.shape, scale))
        return tensor * scale

    assert my_collective.__doc__ == "Mine." and my_collective.__name__ == "my_collective"
    state = accel_ops.PartialState()
    state.debug = True  # one process: nothing to compare with
    assert torch.equal(my_collective(torch.ones(2), scale=3), torch.full((2,), 3.0))
    assert torch.equal(my_collective(tensor=torch.ones(1)), torch.ones(1))
    assert calls == [(torch.Size([2]), 3), (torch.Size([1]), 1)]


def test_chained_operation_names_the_function_and_keeps_the_cause():
    @accel_ops.chained_operation
    def outer():
        raise accel_ops.DistributedOperationException("shapes differ")

    with pytest.raises(accel_ops.DistributedOperationException) as caught:
        outer()
    assert "Error found while calling" in str(caught.value)
    assert "outer" in str(caught.value) and "shapes differ" in str(caught.value)
    assert str(caught.value.__cause__) == "shapes differ"

    @accel_ops.chained_operation
    def other_error():
        raise KeyError("k")

    with pytest.raises(KeyError):
        other_error()


def test_gathered_parameters_is_a_no_op_for_plain_parameters():
    model = torch.nn.Linear(2, 2)
    with accel_ops.GatheredParameters(model.parameters(), modifier_rank=0), torch.no_grad():
        model.weight.fill_(2.0)
    assert torch.equal(model.weight, torch.full((2, 2), 2.0))
    with accel_ops.GatheredParameters(model.weight):
        pass


@pytest.fixture
def fake_gatherer(monkeypatch):
    """An installed engine's context under ``accel.parameter_gatherers``."""
    calls = []

    @contextlib.contextmanager
    def gathered(params, modifier_rank=None, fwd_module=None, enabled=True):
        calls.append(("enter", list(params), modifier_rank, fwd_module, enabled))
        yield
        calls.append(("exit",))

    monkeypatch.setattr("accel_ops.zero3._gatherers", lambda: (gathered,))
    return calls


def test_gathered_parameters_enters_the_installed_engines_contexts(fake_gatherer):
    model = torch.nn.Linear(2, 2)
    with accel_ops.GatheredParameters(model.parameters(), modifier_rank=0, fwd_module=model):
        fake_gatherer.append(("inside",))
    assert fake_gatherer[0][0] == "enter"
    assert fake_gatherer[0][1][0] is model.weight and len(fake_gatherer[0][1]) == 2
    assert fake_gatherer[0][2:] == (0, model, True)
    assert fake_gatherer[1:] == [("inside",), ("exit",)]
    with accel_ops.GatheredParameters(model.parameters(), enabled=False):
        pass
    assert len(fake_gatherer) == 3


def test_gathered_parameters_names_no_engine():
    with open(accel_ops.zero3.__file__, encoding="utf-8") as file:
        source = file.read().lower()
    assert "deepspeed" not in source and "ds_id" not in source


def test_a_gatherer_that_does_not_load_is_left_out_with_a_warning(monkeypatch):
    broken = importlib.metadata.EntryPoint(
        name="broken", value="no_such_module_here:Gather", group=accel_ops.zero3.GATHERER_GROUP
    )
    monkeypatch.setattr(accel_ops.zero3, "entry_points", lambda group: [broken])
    accel_ops.zero3._gatherers.cache_clear()
    try:
        with pytest.warns(RuntimeWarning, match=r"'broken': its entry point .* does not load"):
            assert accel_ops.zero3._gatherers() == ()
    finally:
        accel_ops.zero3._gatherers.cache_clear()
