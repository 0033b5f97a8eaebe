"""Copied as ``sitecustomize.py`` next to the rewritten scripts (first on ``PYTHONPATH``), so every
process that ``accel launch`` starts imports it: as it exits, each worker writes its rank, world
size and any ``accelerate`` module it imported to ``$ACCEL_CONFORMANCE_RECORDS/rank-<rank>.json``.
"""

import atexit
import json
import os
import sys


def _record() -> None:
    folder = os.environ.get("ACCEL_CONFORMANCE_RECORDS")
    if not folder or "RANK" not in os.environ:  # the launcher itself, or not a conformance run
        return
    imported = sorted(m for m in sys.modules if m == "accelerate" or m.startswith("accelerate."))
    record = {
        "rank": int(os.environ["RANK"]),
        "world_size": int(os.environ["WORLD_SIZE"]),
        "accelerate_imported": imported,
    }
    with open(os.path.join(folder, f"rank-{record['rank']}.json"), "w") as handle:
        json.dump(record, handle)


atexit.register(_record)
