#!/usr/bin/env bash
# The fault cases on the device machine's own torch (a release other than the CPU venv's 2.13):
# a worker SIGKILLed and the group restarted (static and c10d), and SIGTERM preemption then
# resume, each compared bit for bit with an uninterrupted run; on CPU processes (gloo), since the
# machine has one GPU and NCCL refuses two ranks on one device.
#   here:   bash benchmarks/device/gpu_check.sh --build-wheels
#   device: run tool, carry [".whl/gpucheck"]: bash benchmarks/device/faults_check.sh
set -u
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${OUT:-/tmp/faults_check_out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/log.txt") 2>&1
PY=$(command -v python3)
SITE=/tmp/faults-site
rm -rf "$SITE"
"$PY" -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "$ROOT"/.whl/gpucheck/accel_*.whl
export PYTHONPATH=$SITE PATH=$SITE/bin:$PATH OMP_NUM_THREADS=1 ACCEL_PREEMPTION_VOTE_SECONDS=0
"$PY" -c "import torch, accel_launch; print('torch', torch.__version__, 'accel-launch', accel_launch.__version__)"
JOB=$ROOT/integration-tests/faults/train_job.py
W=/tmp/faults-work; rm -rf $W; mkdir -p $W
same() { "$PY" -c "
import sys, torch
a = torch.load(sys.argv[1])['weights']; b = torch.load(sys.argv[2])['weights']
print('bit-identical' if all(torch.equal(a[k], b[k]) for k in a) else 'DIFFERENT')" "$@"; }
timeout 120 accel launch --quiet --cpu --num_processes 2 $JOB --project $W/ref --result $W/ref.pt; echo "reference rc=$?"
for backend in static c10d; do
  for i in 1 2 3; do
    p=$W/restart-$backend-$i
    timeout 120 accel launch --quiet --cpu --num_processes 2 --rdzv_backend $backend --max_restarts 1 $JOB --project $p --result $p.pt --die-at 10 > $p.log 2>&1
    echo "STEP restart $backend $i: rc=$? $(same $W/ref.pt $p.pt 2>&1 | tail -1)"
  done
done
p=$W/preempt
timeout 120 accel launch --quiet --cpu --num_processes 2 $JOB --project $p --result $p.pt --signal-at 13 > $p.log 2>&1
echo "STEP preempt: rc=$? $(grep -o 'stopped by.*checkpoint_[0-9]*' $p.log)"
timeout 120 accel launch --quiet --cpu --num_processes 2 $JOB --project $p --result $p.pt > $p.resume.log 2>&1
echo "STEP resume: rc=$? $(same $W/ref.pt $p.pt 2>&1 | tail -1)"
