"""``save_model`` to a URL (``s3://bucket/model``): the same files as a local save, uploaded.

Each shard is written into a local staging folder, uploaded and deleted before the next one is
written, so the machine needs room for one shard, not the model. The index is uploaded last (a
loader reading the index never meets a shard that is not there yet); then the files of an
earlier save of the same format that the new one does not use are deleted, the index first.
Unlike a local save, the shards of an earlier save with the same names are replaced one by one:
an object store has no rename to swap a whole set at once.
"""

from __future__ import annotations

import json
import logging
import posixpath
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from accel_core.checkpointing.object_storage import RemoteFolder
from accel_core.shard_planning import ShardPlan, WeightsFormat, plan_shards

logger = logging.getLogger(__name__)


def upload_checkpoint(
    state: Mapping[str, Any],
    target: RemoteFolder,
    max_shard_size: int,
    weights_format: WeightsFormat,
    write_shard: Any,
) -> ShardPlan:
    """Write ``state`` (ready for ``weights_format``) to ``target`` shard by shard with
    ``write_shard(shard, local_path, weights_format)``; returns the plan written."""
    plan = plan_shards(state, max_shard_size, weights_format)
    fs = target.fs
    with tempfile.TemporaryDirectory(prefix="accel-save-model-") as staging:
        for filename, names in plan.files.items():
            local = Path(staging) / filename
            write_shard({name: state[name] for name in names}, local, weights_format)
            fs.put_file(str(local), target.file(filename))
            local.unlink()
    if plan.is_sharded:
        content = json.dumps(plan.index(), indent=2, sort_keys=True) + "\n"
        fs.pipe_file(target.file(weights_format.index_name), content.encode())
    keep = set(plan.files) | ({weights_format.index_name} if plan.is_sharded else set())
    _remove_stale(target, weights_format, keep)
    logger.info("Model weights saved in %s (%d file(s))", target, len(plan.files))
    return plan


def _remove_stale(target: RemoteFolder, weights_format: WeightsFormat, keep: set[str]) -> None:
    fs = target.fs
    fs.invalidate_cache(target.path)
    names = [
        posixpath.basename(str(entry).rstrip("/")) for entry in fs.ls(target.path, detail=False)
    ]
    stale = [name for name in names if weights_format.is_weights_file(name) and name not in keep]
    stale.sort(key=lambda name: (name != weights_format.index_name, name))
    for name in stale:  # the index first: an index never names shards that are gone
        fs.rm_file(target.file(name))
