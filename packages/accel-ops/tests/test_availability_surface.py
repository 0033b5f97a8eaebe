"""The availability checks of ``accelerate.utils.imports``: truthful, and by Accelerate's rules.

Libraries are made present or absent with fake distributions (a module plus its ``.dist-info``)
on ``sys.path``, so each check is seen to answer both ways whatever this machine has installed.
"""

import importlib
import subprocess
import sys

import pytest
import torch
from packaging.version import Version

import accel_ops
from accel_ops import accelerators, availability


@pytest.fixture
def fake_dist(tmp_path, monkeypatch):
    """``fake_dist(module, version, distribution=None)``: install a fake library on sys.path."""
    monkeypatch.syspath_prepend(str(tmp_path))

    def install(module, version, distribution=None, source=""):
        top = tmp_path / module.split(".")[0]
        top.mkdir(exist_ok=True)
        (top / "__init__.py").write_text(source)
        name = distribution or module
        info = tmp_path / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        importlib.invalidate_caches()
        return top

    yield install
    importlib.invalidate_caches()


# (check, module, distribution) for the checks that are plain "is it installed"
PLAIN = [
    (availability.is_deepspeed_available, "deepspeed", None),
    (availability.is_msamp_available, "msamp", "ms-amp"),
    (availability.is_lomo_available, "lomo_optim", "lomo-optim"),
    (availability.is_schedulefree_available, "schedulefree", None),
    (availability.is_peft_available, "peft", None),
    (availability.is_transformers_available, "transformers", None),
    (availability.is_datasets_available, "datasets", None),
    (availability.is_timm_available, "timm", None),
    (availability.is_torchvision_available, "torchvision", None),
    (availability.is_torchdata_available, "torchdata", None),
    (availability.is_pandas_available, "pandas", None),
    (availability.is_matplotlib_available, "matplotlib", None),
    (availability.is_tqdm_available, "tqdm", None),
    (availability.is_pytest_available, "pytest", None),
    (availability.is_import_timer_available, "import_timer", None),
    (availability.is_pynvml_available, "pynvml", "nvidia-ml-py"),
    (availability.is_amdsmi_available, "amdsmi", None),
    (availability.is_boto3_available, "boto3", None),
    (availability.is_sagemaker_available, "sagemaker", None),
    (availability.is_tensorboard_available, "tensorboardX", None),
    (availability.is_wandb_available, "wandb", None),
    (availability.is_comet_ml_available, "comet_ml", None),
    (availability.is_mlflow_available, "mlflow", "mlflow-skinny"),
    (availability.is_clearml_available, "clearml", None),
    (availability.is_dvclive_available, "dvclive", None),
    (availability.is_swanlab_available, "swanlab", None),
    (availability.is_trackio_available, "trackio", None),
    (availability.is_triton_available, "triton", None),
    (availability.is_bnb_available, "bitsandbytes", None),
    (availability.is_transformer_engine_available, "transformer_engine", "transformer-engine"),
]


@pytest.mark.parametrize(("check", "module", "distribution"), PLAIN, ids=[p[1] for p in PLAIN])
def test_a_plain_check_follows_the_installed_distribution(fake_dist, check, module, distribution):
    fake_dist(module, "99.0", distribution)
    assert check() is True


@pytest.mark.parametrize(
    ("check", "module", "distribution"), PLAIN[:6], ids=[p[1] for p in PLAIN[:6]]
)
def test_a_folder_without_a_distribution_does_not_count(
    tmp_path, monkeypatch, check, module, distribution
):
    # Accelerate's rule: a stray folder named like the library is not the library
    if availability.installed_version(module, distribution) is not None:
        pytest.skip(f"{module} is really installed here")
    (tmp_path / module).mkdir()
    (tmp_path / module / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    assert importlib.util.find_spec(module) is not None
    assert check() is False


def test_minimum_versions_are_accelerates(fake_dist):
    fake_dist("torchao", "0.6.0")
    assert availability.is_torchao_available() is False
    assert availability.is_fp8_available() is (
        availability.is_msamp_available() or availability.is_transformer_engine_available()
    )


def test_torchao_061_enables_fp8(fake_dist):
    fake_dist("torchao", "0.6.1")
    assert availability.is_torchao_available() is True
    assert availability.is_fp8_available() is True


@pytest.mark.parametrize(
    ("version", "any_bnb", "eight_bit", "four_bit"),
    [("0.37.1", True, False, False), ("0.38.0", True, True, False), ("0.39.0", True, True, True)],
)
def test_bitsandbytes_thresholds(fake_dist, version, any_bnb, eight_bit, four_bit):
    fake_dist("bitsandbytes", version)
    assert availability.is_bnb_available() is any_bnb
    assert availability.is_8bit_bnb_available() is eight_bit
    assert availability.is_4bit_bnb_available() is four_bit
    assert availability.is_bnb_available(min_version="0.38.0") is (version != "0.37.1")


def test_bitsandbytes_multi_backend_reads_the_feature_set(fake_dist):
    fake_dist("bitsandbytes", "0.45.0", source="features = {'multi_backend'}\n")
    sys.modules.pop("bitsandbytes", None)
    try:
        assert availability.is_bitsandbytes_multi_backend_available() is True
    finally:
        sys.modules.pop("bitsandbytes", None)


@pytest.mark.parametrize(("version", "expected"), [("3.17.5", True), ("4.0.0", False)])
def test_aim_before_4_only(fake_dist, version, expected):
    fake_dist("aim", version)
    assert availability.is_aim_available() is expected


@pytest.mark.parametrize(("version", "expected"), [("0.7.1", False), ("0.8.0", True)])
def test_stateful_dataloader_needs_torchdata_08(fake_dist, version, expected):
    fake_dist("torchdata", version)
    assert availability.is_torchdata_stateful_dataloader_available() is expected


def test_numpy_minimum_is_a_parameter():
    version = availability.installed_version("numpy")
    assert version is not None  # a dependency of accel-ops
    assert availability.is_numpy_available() is (version >= Version("1.25.0"))
    assert availability.is_numpy_available(min_version="999.0") is False


@pytest.mark.parametrize("flag", ["ACCEL_ENABLE_RICH", "ACCELERATE_ENABLE_RICH"])
def test_rich_needs_the_enable_flag_as_in_accelerate(fake_dist, monkeypatch, flag):
    fake_dist("rich", "13.0.0")
    monkeypatch.delenv("ACCEL_ENABLE_RICH", raising=False)
    monkeypatch.delenv("ACCELERATE_ENABLE_RICH", raising=False)
    assert availability.is_rich_available() is False
    monkeypatch.setenv(flag, "1")
    assert availability.is_rich_available() is True
    monkeypatch.setenv("ACCEL_ENABLE_RICH", "0")  # ours wins over Accelerate's
    assert availability.is_rich_available() is False


def test_megatron_needs_the_flag_core_08_and_its_training_package(fake_dist, monkeypatch):
    top = fake_dist("megatron", "0.8.0", "megatron-core")
    monkeypatch.setenv("ACCELERATE_USE_MEGATRON_LM", "true")
    assert availability.is_megatron_lm_available() is False  # no megatron.training yet
    sys.modules.pop("megatron", None)
    (top / "training").mkdir()
    (top / "training" / "__init__.py").write_text("")
    importlib.invalidate_caches()
    try:
        assert availability.is_megatron_lm_available() is True
        monkeypatch.setenv("ACCELERATE_USE_MEGATRON_LM", "false")
        assert availability.is_megatron_lm_available() is False
    finally:
        sys.modules.pop("megatron", None)
        sys.modules.pop("megatron.training", None)


def test_cuda_is_asked_through_nvml_and_the_variable_is_restored(monkeypatch):
    monkeypatch.delenv("PYTORCH_NVML_BASED_CUDA_CHECK", raising=False)
    seen = []
    monkeypatch.setattr(
        torch.cuda,
        "is_available",
        lambda: seen.append(__import__("os").environ.get("PYTORCH_NVML_BASED_CUDA_CHECK")) or False,
    )
    assert accelerators.is_cuda_available() is False
    assert seen == ["1"]
    assert "PYTORCH_NVML_BASED_CUDA_CHECK" not in __import__("os").environ


def test_device_checks_on_this_machine():
    cuda = torch.cuda.is_available()
    assert accelerators.is_cuda_available() is cuda
    assert accelerators.is_rocm_available() is (cuda and torch.version.hip is not None)
    assert accelerators.is_torch_distributed_available() is torch.distributed.is_available()
    assert accelerators.is_weights_only_available() is True  # torch >= 2.4 is required
    assert accelerators.is_pippy_available() is True
    assert accelerators.is_fp16_available() is True
    if not cuda and not accelerators.is_mps_available():
        assert accelerators.is_bf16_available() is True  # CPU
    for plugin, check in [
        ("torch_npu", accelerators.is_npu_available),
        ("torch_mlu", accelerators.is_mlu_available),
        ("torch_musa", accelerators.is_musa_available),
        ("torch_sdaa", accelerators.is_sdaa_available),
        ("torch_neuronx", accelerators.is_neuron_available),
        ("habana_frameworks", accelerators.is_hpu_available),
    ]:
        if importlib.util.find_spec(plugin) is None:
            assert check() is False, plugin
    if importlib.util.find_spec("habana_frameworks") is None:
        assert accelerators.is_habana_gaudi1() is False


def test_xccl_follows_torch():
    from torch.distributed import distributed_c10d

    expected = bool(getattr(distributed_c10d, "is_xccl_available", lambda: False)())
    assert accelerators.is_xccl_available() is expected


def test_a_vendor_plugin_that_is_installed_and_reports_a_device(fake_dist):
    source = (
        "import torch, types\n"
        "torch.npu = types.SimpleNamespace(is_available=lambda: True, device_count=lambda: 2)\n"
    )
    fake_dist("torch_npu", "2.1.0", source=source)
    accelerators.is_npu_available.cache_clear()
    try:
        assert accelerators.is_npu_available() is True
        assert accelerators.is_npu_available(check_device=True) is True
    finally:
        accelerators.is_npu_available.cache_clear()
        sys.modules.pop("torch_npu", None)
        if hasattr(torch, "npu"):
            delattr(torch, "npu")


def test_a_vendor_plugin_that_fails_to_import_has_no_device(fake_dist):
    fake_dist("torch_mlu", "1.0", source="raise RuntimeError('no driver in this container')\n")
    accelerators.is_mlu_available.cache_clear()
    try:
        assert accelerators.is_mlu_available() is False
    finally:
        accelerators.is_mlu_available.cache_clear()
        sys.modules.pop("torch_mlu", None)


def test_xla_flags_cannot_both_be_set():
    with pytest.raises(ValueError, match="not both"):
        accelerators.is_torch_xla_available(check_is_tpu=True, check_is_gpu=True)


@pytest.mark.parametrize(("value", "expected"), [(None, "True"), ("0", "False"), ("true", "True")])
def test_use_torch_xla_is_read_at_import(monkeypatch, value, expected):
    env = dict(__import__("os").environ)
    env.pop("USE_TORCH_XLA", None)
    if value is not None:
        env["USE_TORCH_XLA"] = value
    done = subprocess.run(
        [sys.executable, "-c", "import accel_ops; print(accel_ops.USE_TORCH_XLA)"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert done.stdout.strip() == expected


def test_with_use_torch_xla_off_xla_is_never_available(monkeypatch):
    monkeypatch.setattr(accelerators, "USE_TORCH_XLA", False)
    accelerators._torch_xla_imports.cache_clear()
    accelerators.is_torch_xla_available.cache_clear()
    try:
        assert accelerators.is_torch_xla_available() is False
    finally:
        accelerators._torch_xla_imports.cache_clear()
        accelerators.is_torch_xla_available.cache_clear()


def test_deepspeed_required_names_the_package_when_absent(monkeypatch):
    from accel_ops import requirements

    monkeypatch.setattr(requirements, "is_deepspeed_available", lambda: False)

    @accel_ops.deepspeed_required
    def needs_engine(x):
        """Doc kept."""
        return x * 2

    assert needs_engine.__doc__ == "Doc kept."
    with pytest.raises(
        ImportError, match=r"needs DeepSpeed.*pip install 'accel-backends\[deepspeed\]'"
    ):
        needs_engine(2)


def test_deepspeed_required_runs_without_state_and_refuses_another_strategy(monkeypatch):
    from accel_ops import requirements

    monkeypatch.setattr(requirements, "is_deepspeed_available", lambda: True)
    doubled = accel_ops.deepspeed_required(lambda x: x * 2)
    assert doubled(2) == 4  # no PartialState yet
    state = accel_ops.PartialState()
    with pytest.raises(
        ValueError,
        match="needs the DeepSpeed strategy, but this process runs NO; launch with --use_deepspeed",
    ):
        doubled(2)
    state.distributed_type = accel_ops.DistributedType.DEEPSPEED
    assert doubled(3) == 6


def test_torchao_required(fake_dist):
    @accel_ops.torchao_required
    def quantize():
        return "done"

    if not accel_ops.is_torchao_available():
        with pytest.raises(
            ImportError, match=r"needs torchao 0\.6\.1 or later, .*: pip install torchao"
        ):
            quantize()
    fake_dist("torchao", "0.7.0")
    assert quantize() == "done"
