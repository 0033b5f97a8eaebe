"""Write this worker's parsed launch environment to $OUT/environment-<rank>.json (accel-ops reads
what accel-launch wrote). A file per rank, since the workers share one stdout."""

import dataclasses
import json
import os
from pathlib import Path

from accel_ops import LaunchEnvironment

environment = LaunchEnvironment.from_environ()
parsed = {f.name: getattr(environment, f.name) for f in dataclasses.fields(environment)}
parsed["strategy_config"] = dict(parsed["strategy_config"])
Path(os.environ["OUT"], f"environment-{environment.rank}.json").write_text(json.dumps(parsed))
