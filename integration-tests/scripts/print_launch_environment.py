"""Print this worker's parsed launch environment as one JSON line (accel-ops reads what
accel-launch wrote)."""

import dataclasses
import json

from accel_ops import LaunchEnvironment

environment = LaunchEnvironment.from_environ()
parsed = {f.name: getattr(environment, f.name) for f in dataclasses.fields(environment)}
parsed["strategy_config"] = dict(parsed["strategy_config"])
print(json.dumps(parsed, sort_keys=True))
