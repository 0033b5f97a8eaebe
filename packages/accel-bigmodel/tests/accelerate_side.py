"""Run the parity cases with Hugging Face Accelerate: ``python accelerate_side.py < request.json``.

Run by the interpreter of an environment that has Accelerate (``ACCEL_TEST_HF_PYTHON``); needs
only torch and accelerate there. Reads ``{"specs": {key: spec}, "cases": [...]}`` on stdin and
writes ``{"accelerate_version": ..., "results": {case id: result}}`` on stdout.
"""

import json
import logging
import sys
import warnings

from device_map_parity_cases import build_from_spec, run_case


def main() -> None:
    import accelerate
    from accelerate import utils

    logging.disable(logging.WARNING)  # "Device 0 is not available": no GPU is needed here
    warnings.simplefilter("ignore")
    request = json.load(sys.stdin)
    models = {key: build_from_spec(spec) for key, spec in request["specs"].items()}
    results = {
        case["id"]: run_case(case, models[case["model"]], utils) for case in request["cases"]
    }
    json.dump({"accelerate_version": accelerate.__version__, "results": results}, sys.stdout)


if __name__ == "__main__":
    main()
