"""A DeepSpeed JSON configuration and the questions asked of it (ZeRO stage, offload, values).

:class:`HfDeepSpeedConfig` is Accelerate's (and transformers') name for it. It only reads and
edits the dictionary; the DeepSpeed strategy fills its ``"auto"`` values from the prepared
objects.
"""

from __future__ import annotations

import base64
import binascii
import copy
import json
import os
from typing import Any

#: A DeepSpeed configuration: DeepSpeed's JSON object, as a dictionary.
DeepSpeedConfigDict = dict[str, Any]

_OFFLOAD_DEVICES = frozenset({"cpu", "nvme"})


class HfDeepSpeedConfig:
    """A DeepSpeed configuration dictionary, and quick queries of it (ZeRO stage, offload).

    Args:
        config_file_or_dict: a dictionary (copied, so the caller's stays untouched), the path of
            a JSON file, a JSON string, or a URL-safe base64 encoding of a JSON string.

    Raises:
        ValueError: for a string that is none of the above.
    """

    def __init__(self, config_file_or_dict: DeepSpeedConfigDict | str | os.PathLike[str]) -> None:
        self.config: DeepSpeedConfigDict = _read_config(config_file_or_dict)
        self._stage = -1
        self._offload = False
        self.set_stage_and_offload()

    def set_stage_and_offload(self) -> None:
        """Read the ZeRO stage and whether anything is offloaded (call again after edits)."""
        self._stage = self.get_value("zero_optimization.stage", -1)
        devices = {
            self.get_value("zero_optimization.offload_optimizer.device"),
            self.get_value("zero_optimization.offload_param.device"),
        }
        self._offload = (self.is_zero2() or self.is_zero3()) and bool(devices & _OFFLOAD_DEVICES)

    def find_config_node(self, ds_key_long: str) -> tuple[dict[str, Any] | None, str]:
        """The dictionary holding dotted key ``ds_key_long`` and the last part of the key.

        The dictionary is ``None`` when a parent section is missing.
        """
        *parents, key = ds_key_long.split(".")
        node: Any = self.config
        for parent in parents:
            node = node.get(parent) if isinstance(node, dict) else None
            if node is None:
                return None, key
        return (node if isinstance(node, dict) else None), key

    def get_value(self, ds_key_long: str, default: Any = None) -> Any:
        """The value at dotted key ``ds_key_long`` (e.g. ``"zero_optimization.stage"``), or
        ``default`` when it is not set."""
        node, key = self.find_config_node(ds_key_long)
        return default if node is None else node.get(key, default)

    def del_config_sub_tree(self, ds_key_long: str, must_exist: bool = False) -> None:
        """Remove the section at dotted key ``ds_key_long``.

        Raises ``ValueError`` if it is missing and ``must_exist`` is true.
        """
        node, key = self.find_config_node(ds_key_long)
        if node is None or key not in node:
            if must_exist:
                raise ValueError(f"Can't find {ds_key_long} entry in the config: {self.config}")
            return
        del node[key]

    def is_true(self, ds_key_long: str) -> bool:
        """Whether the value is set and true (unset is ``False``)."""
        value = self.get_value(ds_key_long)
        return False if value is None else bool(value)

    def is_false(self, ds_key_long: str) -> bool:
        """Whether the value is set and false (unset is ``False`` too)."""
        value = self.get_value(ds_key_long)
        return False if value is None else not bool(value)

    def is_zero2(self) -> bool:
        """Whether the configuration runs ZeRO stage 2."""
        return self._stage == 2

    def is_zero3(self) -> bool:
        """Whether the configuration runs ZeRO stage 3."""
        return self._stage == 3

    def is_offload(self) -> bool:
        """Whether ZeRO 2 or 3 offloads the optimizer or the parameters (to CPU or NVMe)."""
        return self._offload


def _read_config(source: DeepSpeedConfigDict | str | os.PathLike[str]) -> DeepSpeedConfigDict:
    if isinstance(source, dict):
        return copy.deepcopy(source)
    if os.path.exists(source):
        with open(source, encoding="utf-8") as file:
            loaded = json.load(file)
        return _object(loaded, f"the DeepSpeed config file {os.fspath(source)!r}")
    text = os.fspath(source)
    try:
        return _object(json.loads(text), "the DeepSpeed config string")
    except json.JSONDecodeError:
        pass
    try:
        decoded = base64.urlsafe_b64decode(text).decode("utf-8")
        return _object(json.loads(decoded), "the base64 DeepSpeed config")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise ValueError(
            "Expected a string path to an existing deepspeed config, or a dictionary, or a "
            f"base64 encoded string. Received: {text}"
        ) from None


def _object(value: object, what: str) -> DeepSpeedConfigDict:
    if not isinstance(value, dict):
        raise ValueError(f"{what} must hold a JSON object, got a {type(value).__name__}")
    return value
