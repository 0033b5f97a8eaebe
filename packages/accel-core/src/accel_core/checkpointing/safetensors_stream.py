"""Writing a safetensors file into a stream, tensor by tensor, with no full copy in memory.

safetensors' own ``save`` builds the whole file in memory and ``save_file`` needs a local path;
a checkpoint at a URL streams instead (see :class:`~accel_core.checkpointing.object_storage.
StreamingUpload`). The bytes are the ones ``safetensors.torch.save_file`` writes for the same
tensors and metadata: an 8-byte little-endian header length, the JSON header (``__metadata__``
first, then the tensors in safetensors' own order: by dtype, largest first, then by name, with
their dtype, shape and data offsets), padded with spaces to a multiple of 8, then each tensor's
bytes in that order. The dtype order and names are taken from safetensors itself (a one-element
tensor of each dtype serialized), so they follow the installed version.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from typing import Any

import torch

#: Bytes of tensor data handed to the stream per write.
SLICE_BYTES = 8 << 20


def _dtype_names_in_order(dtypes: set[torch.dtype]) -> list[tuple[torch.dtype, str]]:
    """``(dtype, safetensors' name)`` for ``dtypes``, in the order safetensors writes them."""
    from safetensors.torch import save

    probe = {str(index): torch.zeros(1, dtype=dtype) for index, dtype in enumerate(dtypes)}
    data = save(probe)
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length])
    ordered = list(dtypes)
    return [(ordered[int(name)], entry["dtype"]) for name, entry in header.items()]


def write_safetensors(
    tensors: Mapping[str, torch.Tensor], stream: Any, metadata: dict[str, str] | None = None
) -> None:
    """Write ``tensors`` (no two sharing memory: see ``clean_state_dict_for_safetensors``) as a
    safetensors file into ``stream`` (anything with ``write``)."""
    dtypes = _dtype_names_in_order({tensor.dtype for tensor in tensors.values()})
    rank = {dtype: index for index, (dtype, _) in enumerate(dtypes)}
    names = dict(dtypes)
    order = sorted(tensors, key=lambda name: (rank[tensors[name].dtype], name))
    header: dict[str, Any] = {"__metadata__": metadata} if metadata is not None else {}
    offset = 0
    for name in order:
        tensor = tensors[name]
        size = tensor.numel() * tensor.element_size()
        header[name] = {
            "dtype": names[tensor.dtype],
            "shape": list(tensor.shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    text += b" " * (-len(text) % 8)
    stream.write(struct.pack("<Q", len(text)) + text)
    for name in order:
        flat = tensors[name].detach().to("cpu").contiguous().reshape(-1).view(torch.uint8)
        view = memoryview(flat.numpy())
        for start in range(0, len(view), SLICE_BYTES):
            stream.write(view[start : start + SLICE_BYTES])
