#!/usr/bin/env bash
# GPU check of the accel packages: one prepared run on the device machine (one GPU).
#
# Here, once before the run (builds the wheels the device machine installs; it has no registry):
#   bash benchmarks/device/gpu_check.sh --build-wheels
# On the device machine (run tool, carry [".whl/gpucheck"]):
#   bash benchmarks/device/gpu_check.sh
# On a CPU machine with the packages already importable (a dry run of the Python steps):
#   GPU_CHECK_PYTHON=/work/venv/bin/python bash benchmarks/device/gpu_check.sh
#
# Each step is its own process with its own time limit and prints one line
# "STEP <name>: PASS|FAIL {numbers}"; a failing step never stops the others.
# GPU_CHECK_ONLY=<regex> runs only the steps whose label matches (e.g. "^3").
# Everything is logged to $OUT/log.txt and the STEP lines to $OUT/steps.txt.
set -u
cd "$(dirname "$0")/../.."
ROOT=$PWD
WHL=$ROOT/.whl/gpucheck

if [ "${1:-}" = "--build-wheels" ]; then
  # our six packages (pure Python) and DeepSpeed 0.19.8 built without ops, plus what DeepSpeed
  # needs that the device image lacks (pydantic and its parts, hjson), for CPython 3.12
  set -e
  mkdir -p "$WHL/ds"
  rm -f "$WHL"/accel_*.whl
  python -m pip wheel -q --no-deps -w "$WHL" packages/accel-ops packages/accel-core \
    packages/accel-bigmodel packages/accel-backends packages/accel-launch packages/accel-kit
  if [ ! -e "$WHL"/ds/deepspeed-0.19.8-py3-none-any.whl ]; then
    tmp=$(mktemp -d)
    python -m pip download -q --no-deps --no-binary :all: deepspeed==0.19.8 -d "$tmp"
    tar xzf "$tmp"/deepspeed-0.19.8.tar.gz -C "$tmp"
    (cd "$tmp"/deepspeed-0.19.8 && DS_BUILD_OPS=0 DS_ACCELERATOR=cuda \
      python -m pip wheel -q --no-deps --no-build-isolation -w "$WHL/ds" .)
    rm -rf "$tmp"
  fi
  python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$WHL/ds" hjson pydantic pydantic-core annotated-types typing-inspection typing-extensions
  ls -la "$WHL" "$WHL/ds"
  exit 0
fi

OUT=${OUT:-/tmp/gpu_check_out}
mkdir -p "$OUT"
export OUT PYTHONUNBUFFERED=1
exec > >(tee -a "$OUT/log.txt") 2>&1

echo "== machine $(date -u +%Y-%m-%dT%H:%M:%SZ)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | head -3

PY=${GPU_CHECK_PYTHON:-}
if [ -z "$PY" ]; then
  # the image's python keeps its torch; our wheels go into $SITE, put first on the path
  # (a venv made from that python, itself a venv's, would not see the venv's torch)
  PY=$(command -v python3)
  export PATH=$(dirname "$PY"):$PATH
  SITE=/tmp/gpucheck-site
  rm -rf "$SITE"
  start=$(date +%s)
  # one pip call: a second --target --upgrade install would replace $SITE/bin (and `accel` with it)
  wheels=("$WHL"/*.whl)
  if ls "$WHL"/ds/*.whl >/dev/null 2>&1; then wheels+=("$WHL"/ds/*.whl); fi
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" \
    "${wheels[@]}" || echo "INSTALL: FAIL"
  export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH} PATH=$SITE/bin:$PATH
  echo "install took $(( $(date +%s) - start )) s"
fi

"$PY" - <<'PYEOF'
import sys, torch
print("python", sys.version.split()[0], sys.executable)
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())
if torch.cuda.is_available():
    print("gpu", torch.cuda.get_device_name(0), "capability", torch.cuda.get_device_capability(0))
    print("nccl", ".".join(map(str, torch.cuda.nccl.version())))
for name in ("accel", "accel_ops", "accel_core", "accel_bigmodel", "accel_backends", "accel_launch", "deepspeed"):
    try:
        from importlib.metadata import version
        module = __import__(name)
        dist = {"accel": "accel-kit"}.get(name, name.replace("_", "-"))
        print(name, version(dist), module.__file__)
    except Exception as error:  # noqa: BLE001
        print(name, "MISSING", type(error).__name__, error)
PYEOF

cd "$ROOT/benchmarks/device"
step() {  # step <seconds> <label> <command...>
  local limit=$1 label=$2; shift 2
  if [ -n "${GPU_CHECK_ONLY:-}" ] && ! [[ $label =~ $GPU_CHECK_ONLY ]]; then return; fi
  echo "== $label ($(date -u +%H:%M:%S), limit ${limit}s): $*"
  local start=$(date +%s)
  timeout -k 10 "$limit" "$@"
  local rc=$?
  echo "== $label: rc=$rc in $(( $(date +%s) - start )) s"
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then echo "STEP $label: FAIL {\"timeout_s\": $limit}" | tee -a "$OUT/steps.txt"; fi
}
TORCHRUN=("$PY" -m torch.distributed.run --standalone --nproc_per_node)

step 75 "1 bigmodel" "$PY" step1_bigmodel.py
step 75 "2 fp16" "$PY" step2_fp16.py
step 60 "3a nccl torchrun ws1" "${TORCHRUN[@]}" 1 step3_nccl.py "3a nccl torchrun ws1"
step 110 "4 fsdp2 accel launch" accel launch --num_processes 1 step4_fsdp.py
if "$PY" -c "import deepspeed" >/dev/null 2>&1; then
  step 120 "5 deepspeed zero2" "${TORCHRUN[@]}" 1 step5_deepspeed.py
elif [ -z "${GPU_CHECK_ONLY:-}" ] || [[ "5 deepspeed zero2" =~ $GPU_CHECK_ONLY ]]; then
  echo "STEP 5 deepspeed zero2 1 process: SKIP {\"reason\": \"deepspeed not importable\"}" | tee -a "$OUT/steps.txt"
fi
# informative: two ranks on the one GPU (recent NCCL may refuse a GPU shared by two ranks),
# started by accel launch and by torchrun
step 45 "3b nccl accel launch ws2 one GPU" accel launch --num_processes 2 step3_nccl.py "3b nccl accel launch ws2 one GPU"
step 45 "3c nccl torchrun ws2 one GPU" "${TORCHRUN[@]}" 2 step3_nccl.py "3c nccl torchrun ws2 one GPU"

echo "== summary"
cat "$OUT/steps.txt" 2>/dev/null
