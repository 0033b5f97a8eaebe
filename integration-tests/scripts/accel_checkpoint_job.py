"""Our side of the checkpoint-compatibility test (run by our interpreter).

    python accel_checkpoint_job.py RECORDS NAME --seed N [--load DIR] [--save DIR]

The job of ``checkpoint_workload.py`` with our ``Accelerator`` (one process, or under
``accel launch``). After loading it also records the order the loader's seedable sampler yields
next and the loader's epoch (a ``sampler.bin`` pickled by Accelerate sets them), and which
``accelerate`` modules are imported (none may be).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from accel import Accelerator, DataLoaderConfiguration

sys.path.insert(0, str(Path(__file__).parent))
import checkpoint_workload as work


def sampler_and_imports(accelerator: Any, parts: work.Parts, checkpoint: Path) -> dict[str, Any]:
    imported = sorted(name for name in sys.modules if name.split(".")[0] == "accelerate")
    return {
        "order": list(parts.loader.get_sampler()),
        "loader_epoch": parts.loader.iteration,
        "accelerate_imported": imported,
    }


if __name__ == "__main__":
    work.main(Accelerator, DataLoaderConfiguration, after_load=sampler_and_imports)
