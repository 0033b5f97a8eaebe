"""Walking nested structures of tensors: lists, tuples, namedtuples, mappings and dataclasses.

:func:`recursively_apply` is the one walker; the other helpers here are small uses of it. A leaf
of the wrong type, when it must be a tensor, is a ``TypeError`` naming the type and where it was
found (``data['labels'][2]``).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch


def is_torch_tensor(tensor: object) -> bool:
    """Whether ``tensor`` is a ``torch.Tensor``."""
    return isinstance(tensor, torch.Tensor)


def is_torch_xpu_tensor(tensor: object) -> bool:
    """Whether ``tensor`` is a tensor on an Intel XPU."""
    return isinstance(tensor, torch.Tensor) and tensor.device.type == "xpu"


def is_namedtuple(data: object) -> bool:
    """Whether ``data`` is a namedtuple (a tuple with ``_fields`` and ``_asdict``)."""
    return isinstance(data, tuple) and hasattr(data, "_asdict") and hasattr(data, "_fields")


def _is_dataclass_instance(data: object) -> bool:
    return dataclasses.is_dataclass(data) and not isinstance(data, type)


def honor_type(obj: Any, generator: Iterable[Any]) -> Any:
    """Build an object of ``obj``'s type (list, tuple or namedtuple) from ``generator``."""
    if is_namedtuple(obj):
        return type(obj)(*list(generator))
    return type(obj)(generator)


def rebuild_mapping(original: Mapping[Any, Any], items: dict[Any, Any]) -> Any:
    """A mapping of ``original``'s type holding ``items`` (falls back to a copy for odd types)."""
    if type(original) is dict:
        return items
    kind: Any = type(original)
    try:
        return kind(items)
    except TypeError:  # e.g. defaultdict, whose first argument is the factory
        rebuilt: Any = copy.copy(original)
        rebuilt.update(items)
        return rebuilt


class LeafTypeError(TypeError):
    """Internal: a leaf failed ``test_type``; ``path`` grows as the error travels up the tree."""

    def __init__(self, leaf: object) -> None:
        super().__init__(type(leaf).__name__)
        self.leaf = leaf
        self.path: list[str] = []

    def where(self, root: str) -> str:
        return root + "".join(reversed(self.path))


def _walk(
    func: Callable[..., Any],
    data: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    test_type: Callable[[Any], bool],
    error_on_other_type: bool,
) -> Any:
    if isinstance(data, (tuple, list)):
        out = []
        for index, item in enumerate(data):
            try:
                out.append(_walk(func, item, args, kwargs, test_type, error_on_other_type))
            except LeafTypeError as error:
                error.path.append(f"[{index}]")
                raise
        return honor_type(data, out)
    if isinstance(data, Mapping):
        items = {}
        for key, value in data.items():
            try:
                items[key] = _walk(func, value, args, kwargs, test_type, error_on_other_type)
            except LeafTypeError as error:
                error.path.append(f"[{key!r}]")
                raise
        return rebuild_mapping(data, items)
    if test_type(data):
        return func(data, *args, **kwargs)
    if _is_dataclass_instance(data):
        changes = {}
        for item in dataclasses.fields(data):
            if not item.init:
                continue
            try:
                changes[item.name] = _walk(
                    func, getattr(data, item.name), args, kwargs, test_type, error_on_other_type
                )
            except LeafTypeError as error:
                error.path.append(f".{item.name}")
                raise
        return dataclasses.replace(data, **changes)
    if error_on_other_type:
        raise LeafTypeError(data)
    return data


def apply_to_tensors(
    operation: str,
    func: Callable[..., Any],
    data: Any,
    *args: Any,
    root: str = "tensor",
    **kwargs: Any,
) -> Any:
    """Apply ``func`` to every tensor in ``data``; any other leaf is a ``TypeError`` with its path.

    Used by the collectives, whose leaves must all be tensors. ``root`` names the argument in
    messages.
    """
    if isinstance(data, torch.Tensor):
        return func(data, *args, **kwargs)
    try:
        return _walk(func, data, args, kwargs, is_torch_tensor, True)
    except LeafTypeError as error:
        raise TypeError(
            f"{operation} expects tensors (alone or nested in lists, tuples, dicts, namedtuples or "
            f"dataclasses), but found {type(error.leaf).__qualname__} at {error.where(root)}. "
            f"Convert it with torch.as_tensor(...) or leave it out of the data passed to "
            f"{operation}."
        ) from None


def recursively_apply(
    func: Callable[..., Any],
    data: Any,
    *args: Any,
    test_type: Callable[[Any], bool] = is_torch_tensor,
    error_on_other_type: bool = False,
    **kwargs: Any,
) -> Any:
    """Apply ``func(leaf, *args, **kwargs)`` to every leaf of ``data`` accepted by ``test_type``.

    ``data`` may nest lists, tuples, namedtuples, mappings and dataclasses; the result has the same
    structure and container types. Leaves that ``test_type`` rejects are kept as they are, or,
    with ``error_on_other_type=True``, raise a ``TypeError`` naming their type and path
    (``data['a'][2]``).
    """
    try:
        return _walk(func, data, args, kwargs, test_type, error_on_other_type)
    except LeafTypeError as error:
        func_name = getattr(func, "__name__", repr(func))
        test_name = getattr(test_type, "__name__", repr(test_type))
        raise TypeError(  # Accelerate's words first, then where the value sits
            f"Unsupported types ({type(error.leaf)}) passed to `{func_name}`. Only nested "
            f"list/tuple/dicts of objects that are valid for `{test_name}` should be passed. The "
            f"{type(error.leaf).__qualname__} is at {error.where('data')} (namedtuples and "
            "dataclasses are walked too)."
        ) from None


@dataclasses.dataclass
class TensorInformation:
    """The shape and dtype of a tensor, without its data."""

    shape: torch.Size
    dtype: torch.dtype


def is_tensor_information(tensor_info: object) -> bool:
    """Whether ``tensor_info`` is a :class:`TensorInformation`."""
    return isinstance(tensor_info, TensorInformation)


def get_data_structure(data: Any) -> Any:
    """The structure of ``data`` with every tensor replaced by its :class:`TensorInformation`."""
    return recursively_apply(lambda t: TensorInformation(shape=t.shape, dtype=t.dtype), data)


def get_shape(data: Any) -> Any:
    """The structure of ``data`` with every tensor replaced by its shape as a list."""
    return recursively_apply(lambda t: list(t.shape), data)


def initialize_tensors(data_structure: Any) -> Any:
    """Empty tensors in the structure described by :func:`get_data_structure`'s output.

    Leaves may be any object with ``shape`` and ``dtype`` attributes (e.g. a TensorInformation).
    """
    return recursively_apply(
        lambda info: torch.empty(info.shape, dtype=info.dtype),
        data_structure,
        test_type=is_tensor_information,
    )


def listify(data: Any) -> Any:
    """The structure of ``data`` with every tensor converted to (nested) Python lists or numbers."""

    def to_list(tensor: torch.Tensor) -> Any:
        tensor = tensor.detach().cpu()
        if tensor.dtype == torch.bfloat16:
            tensor = tensor.to(torch.float32)
        return tensor.tolist()

    return recursively_apply(to_list, data)
