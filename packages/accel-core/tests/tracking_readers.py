"""Read back what the trackers wrote, through each backend's own reader where it has one.

W&B has no public reader of offline ``.wandb`` files any more (its Python datastore reader was
removed when the Go core took over writing them), so :func:`wandb_run` reads the file's framing
(the 7-byte ``:W&B`` header, then LevelDB-log records in 32 KiB blocks) and decodes each record
with wandb's own protobuf class ``wandb_internal_pb2.Record``.
"""

from __future__ import annotations

import glob
import json
import struct
import zipfile
from pathlib import Path

_BLOCK = 32768
_HEADER = 7  # crc32 (4), length (2), type (1)
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def _wandb_payloads(path: Path) -> list[bytes]:
    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a W&B transaction log"
    position, payloads, pending = 7, [], b""
    while position + _HEADER <= len(data):
        left = _BLOCK - position % _BLOCK
        if left < _HEADER:
            position += left
            continue
        _, length, kind = struct.unpack("<IHB", data[position : position + _HEADER])
        chunk = data[position + _HEADER : position + _HEADER + length]
        position += _HEADER + length
        if kind == _FULL:
            payloads.append(chunk)
        elif kind == _FIRST:
            pending = chunk
        elif kind == _MIDDLE:
            pending += chunk
        elif kind == _LAST:
            payloads.append(pending + chunk)
        elif kind == 0 and length == 0:  # zero padding at the end of a block
            position += _BLOCK - position % _BLOCK if position % _BLOCK else 0
    return payloads


def wandb_run(run_folder: str | Path) -> dict:
    """``{"run_id", "project", "config", "history", "exit_code"}`` of one offline run folder."""
    from wandb.proto import wandb_internal_pb2

    (path,) = Path(run_folder).glob("run-*.wandb")
    result: dict = {"config": {}, "history": [], "exit_code": None}
    for payload in _wandb_payloads(path):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(payload)
        kind = record.WhichOneof("record_type")
        if kind == "run":
            result["run_id"] = record.run.run_id
            result["project"] = record.run.project
            for item in record.run.config.update:
                result["config"][item.key] = json.loads(item.value_json)
        elif kind == "config":
            for item in record.config.update:
                result["config"][item.key] = json.loads(item.value_json)
        elif kind == "history":
            row = {
                item.key or "/".join(item.nested_key): json.loads(item.value_json)
                for item in record.history.item
            }
            result["history"].append(row)
        elif kind == "exit":
            result["exit_code"] = record.exit.exit_code
    return result


def wandb_runs(wandb_dir: str | Path) -> list[dict]:
    """Every offline run under ``<wandb_dir>/wandb``, oldest first.

    ``wandb.teardown()`` first: ``run.finish()`` returns before wandb's writer process has
    flushed the ``.wandb`` file; teardown waits for that process to exit.
    """
    import wandb

    wandb.teardown()
    folders = sorted(glob.glob(str(Path(wandb_dir) / "wandb" / "offline-run-*")))
    return [wandb_run(folder) for folder in folders]


def user_config(config: dict) -> dict:
    """A W&B config without the key wandb adds itself (``_wandb``)."""
    return {key: value for key, value in config.items() if key != "_wandb"}


def tensorboard_run(log_dir: str | Path) -> dict:
    """``{"scalars": {tag: [(step, value)]}, "text": {...}, "hparams": {...}, "status": ...}``
    through tensorboard's ``EventAccumulator`` and the hparams plugin's protobuf."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import api_pb2, plugin_data_pb2
    from tensorboard.util import tensor_util

    accumulator = EventAccumulator(str(log_dir), size_guidance={"scalars": 0, "tensors": 0})
    accumulator.Reload()
    tags = accumulator.Tags()
    scalars = {
        tag: [(event.step, event.value) for event in accumulator.Scalars(tag)]
        for tag in tags["scalars"]
    }
    text = {
        tag: [
            (event.step, tensor_util.make_ndarray(event.tensor_proto).item().decode())
            for event in accumulator.Tensors(tag)
        ]
        for tag in tags["tensors"]
    }
    hparams, status = {}, None
    try:
        contents = accumulator.PluginTagToContent("hparams").values()
    except KeyError:  # no config was stored
        contents = []
    for content in contents:
        data = plugin_data_pb2.HParamsPluginData.FromString(content)
        if data.WhichOneof("data") == "session_start_info":
            for key, value in data.session_start_info.hparams.items():
                hparams[key] = getattr(value, value.WhichOneof("kind"))
        elif data.WhichOneof("data") == "session_end_info":
            status = api_pb2.Status.Name(data.session_end_info.status)
    return {"scalars": scalars, "text": text, "hparams": hparams, "status": status}


def aim_run(repo_path: str | Path, run_hash: str) -> dict:
    """``{"name", "hparams", "metrics": {name: [(step, value)]}, "finished"}`` of an Aim run.

    Aim's read-only API reads the repository index, which its UI server keeps up to date; the
    run is indexed here first with Aim's own index manager.
    """
    from aim import Repo
    from aim.sdk.index_manager import RepoIndexManager

    RepoIndexManager.get_index_manager(Repo.from_path(str(repo_path))).index(run_hash)
    repo = Repo.from_path(str(repo_path))
    run = repo.get_run(run_hash)
    assert run is not None, f"no run {run_hash} in {repo_path}"
    metrics = {}
    for metric in run.metrics():
        if metric.name.startswith("__system__"):
            continue
        metrics[metric.name] = [(step, fields[0]) for step, fields in metric.data.items()]
    return {"name": run.name, "hparams": run["hparams"], "metrics": metrics}


def comet_archives(offline_directory: str | Path) -> list[dict]:
    """Every offline Comet archive: ``{"experiment": experiment.json, "messages": [...]}``."""
    archives = []
    for path in sorted(Path(offline_directory).glob("*.zip")):
        with zipfile.ZipFile(path) as archive:
            experiment = json.loads(archive.read("experiment.json"))
            messages = [
                json.loads(line)
                for line in archive.read("messages.json").decode().splitlines()
                if line.strip()
            ]
        archives.append({"experiment": experiment, "messages": messages})
    return archives


def jsonl_run(run_file: str | Path) -> tuple[list[dict], dict]:
    """The records of a JSON-lines run and its ``.run.json``."""
    path = Path(run_file)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    meta = json.loads(path.with_name(path.name[: -len(".jsonl")] + ".run.json").read_text())
    return records, meta


def awkward_config(folder: Path) -> dict:
    """A config with what trackers can't store as is: a list, a dict, None and a path."""
    return {
        "lr": 0.1,
        "layers": [2, 4],
        "optim": {"name": "adam"},
        "none": None,
        "path": folder / "data",
    }


def awkward_config_as_json(folder: Path) -> dict:
    """:func:`awkward_config` as a tracker keeping nesting stores it (the path as a string)."""
    return {**awkward_config(folder), "path": str(folder / "data")}
