#!/bin/bash
# The attention kernels checked and timed on a machine with one accelerator (an NVIDIA GPU
# or a TPU VM), from the repository root, in under 8 minutes on a fresh machine:
#
#   bash bench/accelerator_check.sh [OUTPUT_DIR]
#
# 1. JAX for the accelerator: kept if the machine's Python already has it, else installed
#    (jax[cuda13] or jax[tpu]; from wheels in .whl/ where the machine cannot reach PyPI),
#    with the few pure-Python packages the model code needs besides JAX and Flax.
# 2. The kernel tests, natively: the Pallas and cuDNN kernels compile for the device.
# 3. bench/kernel_roofline.py: FLOPs, bytes and roofline-bound times, and the kernels timed
#    against XLA's attention, with the MFU of a gin/models/base.gin training step.
# 4. bench/accelerator_timing.py: the demo's training step and beam search, 'auto' against
#    XLA's attention, in float32 and bfloat16.
# 5. With time left: gin/runs/ntrex_flores.gin trained on the device from its task cache
#    (no TensorFlow needed), written beforehand on a machine with the data and carried in
#    TASK_CACHE (default .task_cache/ntrex_flores, which git ignores):
#      python launch/cache_tasks.py --gin_file=gin/runs/ntrex_flores.gin \
#          --output_dir=.task_cache/ntrex_flores
#    Grain, if missing, is installed from .whl/. At each --gin.BATCH_SIZE in TRAIN_BATCHES
#    (default 64 256) the run trains for 100 steps and bench/run_throughput.py prints its
#    tokens/s and MFU; the last trains on for the time left and is scored on the cached
#    FLORES-200 dev against copying the source.
# Each step runs under its own time limit, so one that hangs cannot take the others' time;
# everything printed is also written to OUTPUT_DIR/accelerator_check.log. STEPS="1 5"
# runs only those steps; with CPU_OK=1 a machine without an accelerator goes on (to show
# the script at work on CPU; its figures are no accelerator's).
set -uo pipefail
OUTPUT_DIR=${1:-${OUT:-/tmp/accelerator_check}}
mkdir -p "$OUTPUT_DIR"
exec > >(tee "$OUTPUT_DIR/accelerator_check.log") 2>&1
PYTHON=${PYTHON:-python3}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=2
START=$SECONDS
step() { echo; echo "== [$((SECONDS - START)) s] $*"; }
wanted() { [[ " ${STEPS:-1 2 3 4 5} " == *" $1 "* ]]; }

step "1. JAX for the accelerator"
backend() { "$PYTHON" -c 'import jax; print(jax.default_backend())' 2>/dev/null; }
if [ -z "${CPU_OK:-}" ] && { [ "$(backend)" = cpu ] || [ -z "$(backend)" ]; }; then
  if ls /dev/accel* >/dev/null 2>&1; then extra=tpu; else extra=cuda13; fi
  if ls .whl/*.whl >/dev/null 2>&1; then
    "$PYTHON" -m pip install -q --no-index --find-links .whl "jax[$extra]"
  else
    "$PYTHON" -m pip install -q -U "jax[$extra]"
  fi
fi
if ls .whl/*.whl >/dev/null 2>&1; then  # Pure-Python needs the image may lack (gin-config).
  "$PYTHON" -m pip install -q --no-index --no-deps --target /tmp/accelerator_site .whl/*.whl \
    && export PYTHONPATH="$PYTHONPATH:/tmp/accelerator_site"
fi
"$PYTHON" - <<'EOF'
import jax, jaxlib
print(f'jax {jax.__version__}, jaxlib {jaxlib.__version__}, backend {jax.default_backend()}:',
      ', '.join(d.device_kind for d in jax.devices()))
EOF
if [ "$(backend)" = cpu ] && [ -z "${CPU_OK:-}" ]; then echo 'no accelerator: stopping'; exit 1; fi

if wanted 2; then
step "2. Kernel tests, natively"
# The TPU kernels' interpreter runs are proofs for CPU hosts; a GPU runs its own natively.
# The tests hold float32 kernels to 1e-5 of XLA and of float64 references: accelerators
# multiply float32 in TF32 (GPUs) or bfloat16 passes (TPUs) unless asked for full precision.
if [ "$("$PYTHON" -c 'from t5x_mt import kernels; print(kernels.process_platform())')" = tpu ]
then select=''; else select='not tpu'; fi
JAX_DEFAULT_MATMUL_PRECISION=highest XLA_FLAGS=--xla_force_host_platform_device_count=8 \
  timeout 150 "$PYTHON" -m pytest \
  --noconftest -o addopts= -p no:cacheprovider -q -rs --durations=10 -k "$select" tests/kernels

fi

if wanted 3; then
step "3. bench/kernel_roofline.py"
timeout 150 "$PYTHON" bench/kernel_roofline.py --json="$OUTPUT_DIR/kernel_roofline.json" \
  --shapes=256,2048 --head_dims=64 --train_implementations=auto,xla --train_steps=5

fi

if wanted 4; then
step "4. bench/accelerator_timing.py: the demo's train step and beam search"
for dtype in float32 bfloat16; do
  timeout 60 "$PYTHON" bench/accelerator_timing.py --dtype=$dtype
done

fi

if wanted 5; then
step "5. gin/runs/ntrex_flores.gin from its task cache"
TASK_CACHE=${TASK_CACHE:-.task_cache/ntrex_flores}
BUDGET_S=${BUDGET_S:-480}
if ! "$PYTHON" -c 'import grain' >/dev/null 2>&1 && ls .whl/*.whl >/dev/null 2>&1; then
  "$PYTHON" -m pip install -q --no-index --find-links .whl grain
fi
if [ ! -f "$TASK_CACHE/cache_info.json" ]; then
  echo "skipped: no task cache in $TASK_CACHE (write it with launch/cache_tasks.py and carry it)"
elif [ $((SECONDS - START)) -gt $((BUDGET_S - 120)) ]; then
  echo "skipped: $((SECONDS - START)) s spent, too little left of $BUDGET_S s"
else
  run() {  # run BATCH_SIZE STEPS SECONDS: train from the cache, checkpoints kept (kill-safe)
    timeout "$3" "$PYTHON" launch/train.py --gin_file=gin/runs/ntrex_flores.gin \
      --gin.CACHED_TASKS_DIR="'$TASK_CACHE'" --gin.MODEL_DIR="'$OUTPUT_DIR/ntrex_flores_$1'" \
      --gin.VOCABULARY_PATH="'$OUTPUT_DIR/vocab.model'" --gin.BATCH_SIZE="$1" \
      --gin.TRAIN_STEPS="$2" --gin.ACTIVATION_DTYPE="'bfloat16'" \
      --gin.CHECKPOINT_EVERY_STEPS=100 --gin.LOG_EVERY_STEPS=10 --gin.EVAL_EVERY_STEPS=0
    "$PYTHON" bench/run_throughput.py --model_dir="$OUTPUT_DIR/ntrex_flores_$1" --skip_steps=10
  }
  for batch in ${TRAIN_BATCHES:-64 256}; do last=$batch; run "$batch" 100 90; done
  left=$((BUDGET_S - (SECONDS - START) - 60))
  if [ $left -gt 30 ]; then run "$last" 100000 "$left"; fi
  timeout 60 "$PYTHON" launch/evaluate.py --checkpoint_dir="$OUTPUT_DIR/ntrex_flores_$last" \
    --tasks=ntrex_flores --corpus=flores200 --split=validation --max_sentences=200 \
    --baseline=copy || echo "evaluation stopped: exit $? (124: past its 60 s)"
fi
fi
step "done"
