"""accel.accelerator, accel.checkpointing, accel.data_loader, accel.logging, accel.optimizer,
accel.tracking, accel.utils.dataclasses / ao / transformer_engine: the names accel-core defines."""

import logging

import pytest


def test_accelerator_module():
    import accel.accelerator
    import accel_core

    assert accel.accelerator.Accelerator is accel_core.Accelerator


def test_checkpointing_functions_are_accel_cores():
    from accel.checkpointing import (
        load_accelerator_state,
        load_custom_state,
        save_accelerator_state,
        save_custom_state,
    )
    from accel_core.checkpointing import state_functions

    assert save_accelerator_state is state_functions.save_accelerator_state
    assert load_accelerator_state is state_functions.load_accelerator_state
    assert (save_custom_state, load_custom_state) == (
        state_functions.save_custom_state,
        state_functions.load_custom_state,
    )


def test_get_logger_returns_the_exported_adapter():
    from accel.logging import MultiProcessAdapter, get_logger

    adapter = get_logger("accel_kit_test")
    assert isinstance(adapter, MultiProcessAdapter) and isinstance(adapter, logging.LoggerAdapter)


def test_data_loader_and_optimizer_helpers():
    import torch

    from accel.data_loader import (
        DataLoaderAdapter,
        DataLoaderShard,
        DataLoaderStateMixin,
        get_sampler,
    )
    from accel.optimizer import move_to_device, patch_optimizer_step

    assert issubclass(DataLoaderShard, DataLoaderStateMixin)
    adapter = DataLoaderAdapter(list(range(4)), batch_size=2)
    assert isinstance(adapter, torch.utils.data.DataLoader) and get_sampler(adapter) is not None
    assert move_to_device((torch.ones(1),), "meta")[0].device.type == "meta"
    assert callable(patch_optimizer_step)


def test_tracking_names_and_the_class_table():
    from accel.tracking import (
        LOGGER_TYPE_TO_CLASS,
        ClearMLTracker,
        DVCLiveTracker,
        GeneralTracker,
        SwanLabTracker,
        TrackioTracker,
        register_tracker_class,
    )

    for tracker in (ClearMLTracker, DVCLiveTracker, SwanLabTracker, TrackioTracker):
        assert issubclass(tracker, GeneralTracker)
        assert LOGGER_TYPE_TO_CLASS[tracker.name] is tracker
    assert callable(register_tracker_class)


def test_out_of_scope_fp8_names_resolve_build_and_refuse():
    import torch

    import accel.utils
    from accel.utils.ao import convert_model_to_fp8_ao, has_ao_layers
    from accel.utils.dataclasses import FP8BackendType, SageMakerDistributedType, TERecipeKwargs
    from accel.utils.transformer_engine import convert_model, has_transformer_engine_layers
    from accel_core.out_of_scope import OutOfScopeError

    assert accel.utils.TERecipeKwargs is TERecipeKwargs  # accel.utils merges its submodules
    assert TERecipeKwargs().fp8_format == "HYBRID"
    assert FP8BackendType("TE") is FP8BackendType.TE and SageMakerDistributedType("NO") == "NO"
    model = torch.nn.Linear(2, 2)
    assert has_ao_layers(model) is False and has_transformer_engine_layers(model) is False
    with pytest.raises(OutOfScopeError, match="torchao"):
        convert_model_to_fp8_ao(model)
    with pytest.raises(OutOfScopeError, match="Transformer Engine"):
        convert_model(model)
