"""Checkpoints in object storage: ``save_state`` / ``load_state`` at an ``s3://`` URL on a real
S3-compatible server (moto's server mode, a process of its own on loopback), against fsspec's own
``put`` / ``get`` of the same files (the "raw" column: the bytes moved by hand, without accel's
staging, checksums, manifest and checks). One process; the state is a float32 model and its AdamW
state (see workloads/object_storage_round_trip.py); each figure is the median over several
interleaved rounds after a warm-up round. Hugging Face Accelerate can't save to a URL (it writes
a local folder named ``s3:``), so it has no column.
"""

from __future__ import annotations

import os
import sys

from harness import HERE, Context, Row, json_result

TITLE = (
    "Checkpoints in object storage (S3 server on loopback), 1 process, vs fsspec put/get (seconds)"
)
WORKLOAD = str(HERE / "workloads" / "object_storage_round_trip.py")


def run(ctx: Context) -> list[Row]:
    from accel_testing.s3_server import S3Server

    millions, repeats = (4.0, 2) if ctx.quick else (25.0, 5)
    with S3Server() as server:
        env = {**server.environment(), "ACCEL_STAGING_DIR": str(ctx.scratch / "staging")}
        result = json_result(
            [ctx.python, WORKLOAD, str(millions), str(repeats), str(ctx.scratch)], env
        )
    print(f"object storage rounds: {result['rounds']}", file=sys.stderr)
    megabytes = result["bytes"] / 1e6
    return [
        Row(
            f"save_state to s3:// ({megabytes:.0f} MB) vs fsspec put",
            "s",
            result["save"],
            raw=result["put"],
            target="<= 1.1x raw",
            met=result["save"] <= 1.1 * result["put"],
        ),
        Row(
            f"load_state from s3:// ({megabytes:.0f} MB) vs fsspec get",
            "s",
            result["load"],
            raw=result["get"],
            target="<= 1.1x raw",
            met=result["load"] <= 1.1 * result["get"],
        ),
    ]


if __name__ == "__main__":  # pragma: no cover
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
