#!/usr/bin/env bash
# Trains on a Cloud TPU VM slice: every worker runs the same launch/train.py command, and
# jax.distributed.initialize() finds the slice's other workers by itself.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: launch/tpu_pod.sh COMMAND --name=NAME --zone=ZONE [options] [-- TRAIN_ARGS...]

Runs `python launch/train.py TRAIN_ARGS` on every worker of a Cloud TPU VM slice.
Re-running `all` (or `train`) with the same arguments resumes from the latest checkpoint
in MODEL_DIR; give MODEL_DIR as gs://..., which every worker reads and writes.

Commands:
  up          create the slice, or reuse it when it is READY (a PREEMPTED one is deleted
              and created again); copy the repository to every worker; install it there
  train       run launch/train.py TRAIN_ARGS on every worker, output appended to
              ~/t5x_mt_logs/train.log on each
  fetch-logs  copy each worker's log to LOG_DIR/worker_<i>.log
  all         up, train, then fetch-logs (also when training fails)

Options:
  --name=NAME                the TPU VM slice (required)
  --zone=ZONE                its zone, e.g. us-central2-b (required)
  --project=PROJECT          the Google Cloud project (default: gcloud's)
  --accelerator_type=TYPE    for up: e.g. v4-128, v5litepod-256, v5p-128, v6e-256 (required);
                             for fetch-logs --print_only, it gives the worker count
  --runtime_version=VERSION  for up: the TPU VM image (default: by generation,
                             v4: tpu-ubuntu2204-base, v5litepod: v2-alpha-tpuv5-lite,
                             v5p: v2-alpha-tpuv5, v6e: v2-alpha-tpuv6e)
  --spot                     for up: create a Spot (preemptible) slice
  --repo_url=URL             for up: git clone URL on every worker instead of copying a
                             tarball of this working tree
  --ref=REF                  with --repo_url: the branch or tag to clone
  --python=PYTHON            the interpreter of the workers' virtual env (default
                             python3.11, installed with apt-get where missing)
  --libtpu_init_args=FLAGS   LIBTPU_INIT_ARGS for train (default: async collectives)
  --env=NAME=VALUE           for train: an environment variable of train.py on every
                             worker, e.g. --env=T5X_MT_SHARED_DATA=/mnt/disks/data
                             (repeatable)
  --num_workers=N            for fetch-logs: the slice's workers (default: asked of gcloud;
                             with --print_only, from --accelerator_type)
  --log_dir=DIR              for fetch-logs: where logs land (default: tpu_logs/NAME)
  --print_only               print every command, one per line, and run none
  -h, --help                 this help

Example:
  launch/tpu_pod.sh all --name=mt-v4 --zone=us-central2-b --accelerator_type=v4-128 -- \
    --gin_file=gin/runs/ntrex_flores.gin --gin.MODEL_DIR="'gs://my-bucket/runs/mt-v4'"
EOF
}

readonly ASYNC_COLLECTIVES="--xla_tpu_enable_data_parallel_all_reduce_opt=true \
--xla_tpu_data_parallel_opt_different_sized_ops=true \
--xla_tpu_enable_async_collective_fusion=true \
--xla_tpu_enable_async_collective_fusion_fuse_all_gather=true \
--xla_tpu_enable_async_collective_fusion_multiple_steps=true \
--xla_tpu_overlap_compute_collective_tc=true --xla_enable_async_all_gather=true"
readonly REMOTE_REPO=t5x_mt
readonly REMOTE_LOG=t5x_mt_logs/train.log
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
readonly REPO_ROOT

fail() {
  echo "error: $*" >&2
  exit 2
}

# One shell word per argument, single-quoted only where the shell needs quotes.
quote() {
  local word quoted=()
  for word in "$@"; do
    if [[ "${word}" =~ ^[A-Za-z0-9_./:=,@%+-]+$ ]]; then
      quoted+=("${word}")
    else
      quoted+=("'${word//\'/\'\\\'\'}'")
    fi
  done
  echo "${quoted[*]}"
}

run() {
  if [[ "${print_only}" == true ]]; then
    quote "$@"
  else
    "$@"
  fi
}

# A local pipeline, given as one line of shell.
run_shell() {
  if [[ "${print_only}" == true ]]; then
    echo "$1"
  else
    bash -c "$1"
  fi
}

tpu_vm() {
  local verb="$1"
  shift
  run gcloud compute tpus tpu-vm "${verb}" "$@" "${location[@]}"
}

on_all_workers() {
  tpu_vm ssh "${name}" --worker=all --command="$1"
}

default_runtime_version() {
  case "${accelerator_type}" in
    v4-*) echo tpu-ubuntu2204-base ;;
    v5litepod-*) echo v2-alpha-tpuv5-lite ;;
    v5p-*) echo v2-alpha-tpuv5 ;;
    v6e-*) echo v2-alpha-tpuv6e ;;
    *) fail "--runtime_version: needed for --accelerator_type=${accelerator_type}" ;;
  esac
}

create_slice() {
  local flags=(--accelerator-type="${accelerator_type}" --version="${runtime_version}")
  if [[ "${spot}" == true ]]; then
    flags+=(--spot)
  fi
  tpu_vm create "${name}" "${flags[@]}"
}

# A slice that is READY is reused. --print_only assumes there is none yet.
create_or_reuse_slice() {
  local state=''
  if [[ "${print_only}" == true ]]; then
    tpu_vm describe "${name}" --format='value(state)'
  else
    state="$(tpu_vm describe "${name}" --format='value(state)' 2>/dev/null || true)"
  fi
  case "${state}" in
    READY) ;;
    '') create_slice ;;
    PREEMPTED)
      tpu_vm delete "${name}" --quiet
      create_slice ;;
    *) fail "--name=${name}: the slice is ${state}; wait until it is READY, or delete it" ;;
  esac
}

copy_repository() {
  if [[ -n "${repo_url}" ]]; then
    local clone=(git clone --depth=1)
    if [[ -n "${ref}" ]]; then
      clone+=(--branch="${ref}")
    fi
    on_all_workers "rm -rf ${REMOTE_REPO} && $(quote "${clone[@]}" "${repo_url}" "${REMOTE_REPO}")"
    return
  fi
  local tarball="${TMPDIR:-/tmp}/t5x_mt_${name}.tar.gz"
  run_shell "git -C $(quote "${REPO_ROOT}") ls-files -z --cached --others --exclude-standard \
| tar -C $(quote "${REPO_ROOT}") --null --ignore-failed-read -T - -czf $(quote "${tarball}")"
  tpu_vm scp "${tarball}" "${name}:t5x_mt.tar.gz" --worker=all
  on_all_workers "rm -rf ${REMOTE_REPO} && mkdir ${REMOTE_REPO} \
&& tar -xzf t5x_mt.tar.gz -C ${REMOTE_REPO}"
}

install_repository() {
  local python
  python="$(quote "${python_bin}")"
  on_all_workers "cd ${REMOTE_REPO} && { ${python} -c 'import ensurepip' 2>/dev/null \
|| { sudo apt-get update -q && sudo apt-get install -y -q ${python}-venv; }; } \
&& ${python} -m venv .venv && .venv/bin/pip install -q -U pip \
&& .venv/bin/pip install -q -r requirements.txt 'jax[tpu]'"
}

train() {
  local exports=("LIBTPU_INIT_ARGS=${libtpu_init_args}" "${train_env[@]}")
  on_all_workers "set -o pipefail; mkdir -p $(dirname "${REMOTE_LOG}") && cd ${REMOTE_REPO} \
&& export $(quote "${exports[@]}") \
&& .venv/bin/python launch/train.py $(quote "${train_args[@]}") 2>&1 | tee -a ../${REMOTE_LOG}"
}

# The workers (TPU VMs) of an --accelerator_type slice: v4 and v5p name TensorCores, eight
# to a worker (4 chips); v5litepod and v6e name chips, one worker up to 8 chips, else 4 chips
# to a worker.
accelerator_type_workers() {
  local count="${accelerator_type##*-}"
  [[ "${count}" =~ ^[1-9][0-9]*$ ]] || return 1
  case "${accelerator_type}" in
    v4-*|v5p-*) echo $(( count <= 8 ? 1 : count / 8 )) ;;
    v5litepod-*|v6e-*) echo $(( count <= 8 ? 1 : count / 4 )) ;;
    *) return 1 ;;
  esac
}

worker_count() {
  if [[ -n "${num_workers}" ]]; then
    echo "${num_workers}"
  elif [[ "${print_only}" == false ]]; then
    tpu_vm describe "${name}" --format='value(networkEndpoints.len())'
  else
    accelerator_type_workers || fail "--num_workers: needed with --print_only for \
fetch-logs, unless --accelerator_type names a v4, v5p, v5litepod or v6e slice"
  fi
}

fetch_logs() {
  local count worker
  count="$(worker_count)"
  run mkdir -p "${log_dir}"
  for ((worker = 0; worker < count; worker++)); do
    tpu_vm scp "${name}:${REMOTE_LOG}" "${log_dir}/worker_${worker}.log" --worker="${worker}"
  done
}

parse_arguments() {
  [[ $# -gt 0 ]] || fail 'give a command: up, train, fetch-logs or all (-h for help)'
  case "$1" in
    -h|--help) usage; exit 0 ;;
    up|train|fetch-logs|all) command="$1" ;;
    *) fail "$1: not a command (up, train, fetch-logs, all; -h for help)" ;;
  esac
  shift
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --name=*) name="${1#*=}" ;;
      --zone=*) zone="${1#*=}" ;;
      --project=*) project="${1#*=}" ;;
      --accelerator_type=*) accelerator_type="${1#*=}" ;;
      --runtime_version=*) runtime_version="${1#*=}" ;;
      --spot) spot=true ;;
      --repo_url=*) repo_url="${1#*=}" ;;
      --ref=*) ref="${1#*=}" ;;
      --python=*) python_bin="${1#*=}" ;;
      --libtpu_init_args=*) libtpu_init_args="${1#*=}" ;;
      --num_workers=*) num_workers="${1#*=}" ;;
      --env=*)
        [[ "${1#*=}" =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || fail "$1: expected --env=NAME=VALUE"
        train_env+=("${1#*=}") ;;
      --log_dir=*) log_dir="${1#*=}" ;;
      --print_only) print_only=true ;;
      -h|--help) usage; exit 0 ;;
      --) shift; train_args=("$@"); break ;;
      *) fail "$1: unknown option (-h for help; arguments for train.py go after --)" ;;
    esac
    shift
  done
}

check_arguments() {
  [[ -n "${name}" ]] || fail '--name: needed (the TPU VM slice)'
  [[ -n "${zone}" ]] || fail '--zone: needed (the slice'"'"'s zone)'
  [[ -z "${num_workers}" || "${num_workers}" =~ ^[1-9][0-9]*$ ]] \
    || fail "--num_workers: ${num_workers} is not a positive whole number"
  [[ -z "${ref}" || -n "${repo_url}" ]] || fail '--ref: only with --repo_url'
  if [[ "${command}" == up || "${command}" == all ]]; then
    [[ -n "${accelerator_type}" ]] || fail '--accelerator_type: needed to create a slice'
    runtime_version="${runtime_version:-$(default_runtime_version)}"
  fi
  if [[ "${command}" == train || "${command}" == all ]]; then
    [[ ${#train_args[@]} -gt 0 ]] || fail "${command}: give train.py's arguments after --"
  fi
}

main() {
  command='' name='' zone='' project='' accelerator_type='' runtime_version='' spot=false
  repo_url='' ref='' python_bin=python3.11 num_workers='' log_dir='' print_only=false
  libtpu_init_args="${ASYNC_COLLECTIVES}"
  train_args=() train_env=()
  parse_arguments "$@"
  check_arguments
  log_dir="${log_dir:-tpu_logs/${name}}"
  location=(--zone="${zone}")
  if [[ -n "${project}" ]]; then
    location+=(--project="${project}")
  fi
  case "${command}" in
    up) create_or_reuse_slice; copy_repository; install_repository ;;
    train) train ;;
    fetch-logs) fetch_logs ;;
    all)
      create_or_reuse_slice; copy_repository; install_repository
      local status=0
      train || status=$?
      fetch_logs
      return "${status}" ;;
  esac
}

main "$@"
