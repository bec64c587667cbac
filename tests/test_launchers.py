"""The TPU pod and Slurm launchers, through the commands they print with --print_only (and,
for Slurm, the command each task runs): every process runs launch/train.py with exactly
the user's arguments and its own distributed flags."""

import os
import pathlib
import shlex
import shutil
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
TPU_POD = REPO / 'launch' / 'tpu_pod.sh'
SBATCH = REPO / 'launch' / 'slurm' / 'train.sbatch'

# Arguments whose quoting must survive the launchers: a space, parentheses, single quotes.
TRAIN_ARGS = ['--gin_file=gin/runs/demo.gin', '--gin.MESH_SHAPE=(1, 4, 2)',
              "--gin.MODEL_DIR='gs://bucket/run one'", '--gin.TRAIN_STEPS=20']
DISTRIBUTED_FLAGS = ('--coordinator_address', '--num_processes', '--process_id',
                     '--local_device_ids')


def fake_command(folder: pathlib.Path, name: str, body: str) -> None:
  path = folder / name
  path.write_text(f'#!/bin/sh\n{body}\n')
  path.chmod(0o755)


@pytest.fixture(name='fake_bin')
def fixture_fake_bin(tmp_path: pathlib.Path) -> pathlib.Path:
  """A PATH folder with a gcloud, srun and python that only leave a trace in calls.log."""
  folder = tmp_path / 'bin'
  folder.mkdir()
  for name in ('gcloud', 'srun'):
    fake_command(folder, name, f'echo {name} "$@" >> {tmp_path}/calls.log')
  fake_command(folder, 'python', 'printf "%s\\n" "$0" "$@"; echo "XLA_FLAGS=$XLA_FLAGS"; pwd')
  return folder


def run_launcher(script: pathlib.Path, args: list[str], fake_bin: pathlib.Path,
                 **environment: str) -> subprocess.CompletedProcess:
  """Runs a launcher with `fake_bin` first on a PATH that lacks Slurm's commands, as on a
  laptop: what the launchers print needs neither Slurm nor Cloud TPU."""
  system_path = [folder for folder in os.environ['PATH'].split(os.pathsep)
                 if not shutil.which('scontrol', path=folder)]
  env = {'PATH': os.pathsep.join([str(fake_bin), *system_path]),
         'TMPDIR': str(fake_bin.parent), **environment}
  return subprocess.run(['bash', str(script), *args], env=env, capture_output=True,
                        text=True, timeout=60, check=False, cwd=fake_bin.parent)


def slurm_job(nodes: int, tasks: int, **extra: str) -> dict[str, str]:
  return {'SLURM_JOB_ID': '4242', 'SLURM_JOB_NODELIST': 'gpu-a,gpu-b',
          'SLURM_JOB_NUM_NODES': str(nodes), 'SLURM_NTASKS': str(tasks),
          'SLURM_SUBMIT_DIR': str(REPO), **extra}


def train_py_call(words: list[str]) -> tuple[dict[str, str], list[str]]:
  """The distributed flags and the other arguments of the launch/train.py call in `words`
  (a command line split into words), up to the first shell operator."""
  start = words.index('launch/train.py') + 1
  args = []
  for word in words[start:]:
    if word in ('2>&1', '|', '&&', ';'):
      break
    args.append(word)
  flags = dict(arg.split('=', 1) for arg in args if arg.startswith(DISTRIBUTED_FLAGS))
  return flags, [arg for arg in args if not arg.startswith(DISTRIBUTED_FLAGS)]


def printed_lines(result: subprocess.CompletedProcess) -> list[list[str]]:
  assert result.returncode == 0, result.stderr
  return [shlex.split(line) for line in result.stdout.splitlines()]


def test_slurm_runs_one_train_py_per_gpu_with_ids_0_to_n_and_one_coordinator(fake_bin):
  """Each task is bound to its own GPU (--gpus-per-task=1), which it sees as device 0."""
  result = run_launcher(SBATCH, ['--print_only', *TRAIN_ARGS], fake_bin,
                        **slurm_job(nodes=2, tasks=8))
  srun, *processes = printed_lines(result)
  assert srun[:2] == ['srun', '--kill-on-bad-exit=1']
  assert srun[srun.index(str(SBATCH)) + 1:] == TRAIN_ARGS
  assert len(processes) == 8
  calls = [train_py_call(words) for words in processes]
  assert [flags['--process_id'] for flags, _ in calls] == [str(i) for i in range(8)]
  assert {flags['--num_processes'] for flags, _ in calls} == {'8'}
  assert {flags['--coordinator_address'] for flags, _ in calls} == {'gpu-a:24242'}
  assert {flags['--local_device_ids'] for flags, _ in calls} == {'0'}
  assert all(args == TRAIN_ARGS for _, args in calls)
  assert {words[1] for words in processes} == {
      'XLA_FLAGS=--xla_gpu_enable_latency_hiding_scheduler=true'}


def test_slurm_one_process_per_node_drives_all_the_nodes_gpus(fake_bin):
  job = slurm_job(nodes=2, tasks=2, PROCESS_PER='node', SLURM_GPUS_ON_NODE='4',
                  COORDINATOR_PORT='23456', XLA_FLAGS='--xla_dump_to=/tmp/dump')
  _, *processes = printed_lines(run_launcher(SBATCH, ['--print_only', *TRAIN_ARGS],
                                             fake_bin, **job))
  calls = [train_py_call(words) for words in processes]
  assert [flags for flags, _ in calls] == [
      {'--coordinator_address': 'gpu-a:23456', '--num_processes': '2', '--process_id': str(i),
       '--local_device_ids': '0,1,2,3'} for i in range(2)]
  assert all(args == TRAIN_ARGS for _, args in calls)
  assert processes[0][1] == ('XLA_FLAGS=--xla_gpu_enable_latency_hiding_scheduler=true '
                             '--xla_dump_to=/tmp/dump')


@pytest.mark.parametrize('nodelist,coordinator', [
    ('gpu[07-08,11],login1', 'gpu07'), ('rack2-[05-06]-n[1-4]', 'rack2-05-n1'),
    ('node9,node10', 'node9')])
def test_slurm_coordinates_on_the_first_host_of_the_node_list_without_scontrol(
    fake_bin, nodelist, coordinator):
  """The first host Slurm lists, each bracketed range at its first value (zero padding
  kept), found without `scontrol`, so --print_only runs anywhere."""
  job = slurm_job(nodes=2, tasks=2, SLURM_JOB_NODELIST=nodelist)
  _, *processes = printed_lines(run_launcher(SBATCH, ['--print_only', *TRAIN_ARGS],
                                             fake_bin, **job))
  assert [train_py_call(words)[0]['--coordinator_address'] for words in processes] == [
      f'{coordinator}:24242'] * 2


def test_a_slurm_task_runs_train_py_from_the_repository_as_its_own_process(fake_bin):
  task = {'T5X_MT_SLURM_COORDINATOR': 'gpu-a:24242', 'SLURM_PROCID': '5', 'SLURM_NTASKS': '8',
          'CUDA_VISIBLE_DEVICES': '5'}
  result = run_launcher(SBATCH, TRAIN_ARGS, fake_bin, **task)
  assert result.returncode == 0, result.stderr
  *argv, xla_flags, workdir = result.stdout.splitlines()
  assert argv == [str(fake_bin / 'python'), 'launch/train.py',
                  '--coordinator_address=gpu-a:24242', '--num_processes=8', '--process_id=5',
                  '--local_device_ids=0', *TRAIN_ARGS]
  assert xla_flags == 'XLA_FLAGS=--xla_gpu_enable_latency_hiding_scheduler=true'
  assert pathlib.Path(workdir) == REPO


def tpu_pod_all(fake_bin, *options: str) -> list[list[str]]:
  args = ['all', '--print_only', '--name=mt-pod', '--zone=us-central2-b',
          '--accelerator_type=v4-32', '--num_workers=4', *options, '--', *TRAIN_ARGS]
  return printed_lines(run_launcher(TPU_POD, args, fake_bin))


def remote_command(words: list[str]) -> list[str]:
  [command] = [word for word in words if word.startswith('--command=')]
  return shlex.split(command.removeprefix('--command='))


def test_tpu_pod_runs_the_same_train_py_command_on_all_workers_and_runs_nothing(fake_bin):
  lines = tpu_pod_all(fake_bin, '--env=T5X_MT_SHARED_DATA=/mnt/disks/mt data')
  assert not (fake_bin.parent / 'calls.log').exists()
  assert not list(fake_bin.parent.glob('*.tar.gz'))
  verbs = [words[4] for words in lines if words[0] == 'gcloud']
  assert verbs == ['describe', 'create', 'scp', 'ssh', 'ssh', 'ssh'] + ['scp'] * 4
  to_workers = [words for words in lines if words[0] == 'gcloud'][2:6]
  assert all('--worker=all' in words for words in to_workers)
  [train] = [command for command in map(remote_command, to_workers[1:])
             if 'launch/train.py' in command]
  flags, args = train_py_call(train)
  assert flags == {}
  assert args == TRAIN_ARGS
  assert train[train.index('launch/train.py') - 1] == '.venv/bin/python'
  [libtpu] = [word for word in train if word.startswith('LIBTPU_INIT_ARGS=')]
  assert '--xla_tpu_enable_async_collective_fusion=true' in libtpu.split()
  assert train[train.index(libtpu) - 1:train.index(libtpu) + 2] == [
      'export', libtpu, 'T5X_MT_SHARED_DATA=/mnt/disks/mt data']
  assert train[-3:] == ['tee', '-a', '../t5x_mt_logs/train.log']


def test_tpu_pod_creates_the_slice_for_its_generation_and_fetches_each_workers_log(fake_bin):
  lines = tpu_pod_all(fake_bin, '--spot', '--project=my-project')
  create = next(words for words in lines if words[:5] == ['gcloud', 'compute', 'tpus',
                                                           'tpu-vm', 'create'])
  assert create[5:] == ['mt-pod', '--accelerator-type=v4-32', '--version=tpu-ubuntu2204-base',
                        '--spot', '--zone=us-central2-b', '--project=my-project']
  fetches = [words for words in lines if words[4:5] == ['scp'] and '--worker=all' not in words]
  assert [(words[5], words[6], words[7]) for words in fetches] == [
      ('mt-pod:t5x_mt_logs/train.log', f'tpu_logs/mt-pod/worker_{i}.log', f'--worker={i}')
      for i in range(4)]


@pytest.mark.parametrize('accelerator_type,workers', [
    ('v4-32', 4), ('v5p-8', 1), ('v5litepod-8', 1), ('v5litepod-16', 4), ('v6e-256', 64)])
def test_tpu_pod_print_only_fetches_the_logs_of_the_workers_of_its_accelerator_type(
    fake_bin, accelerator_type, workers):
  """Without --num_workers, the workers (TPU VMs) a slice has: v4 and v5p name TensorCores,
  4 chips (8 cores) a worker; v5litepod and v6e name chips, 4 a worker past 8."""
  args = ['all', '--print_only', '--name=mt-pod', '--zone=us-central2-b',
          f'--accelerator_type={accelerator_type}', '--', *TRAIN_ARGS]
  lines = printed_lines(run_launcher(TPU_POD, args, fake_bin))
  workers_copied_to = [word for words in lines if words[4:5] == ['scp']
                       for word in words if word.startswith('--worker=')]
  assert workers_copied_to == ['--worker=all'] + [f'--worker={i}' for i in range(workers)]


def test_tpu_pod_clones_a_repo_url_instead_of_copying_the_working_tree(fake_bin):
  lines = tpu_pod_all(fake_bin, '--repo_url=https://example.com/t5x_mt.git', '--ref=v2')
  commands = [remote_command(words) for words in lines if words[4:5] == ['ssh']]
  assert commands[0] == ['rm', '-rf', 't5x_mt', '&&', 'git', 'clone', '--depth=1',
                         '--branch=v2', 'https://example.com/t5x_mt.git', 't5x_mt']
  assert not any(words[4:5] == ['scp'] and '--worker=all' in words for words in lines)


SLURM_JOB = slurm_job(nodes=2, tasks=8)


@pytest.mark.parametrize('script,args,environment,message', [
    (TPU_POD, [], {}, 'give a command'),
    (TPU_POD, ['deploy', '--name=a', '--zone=b'], {}, 'deploy: not a command'),
    (TPU_POD, ['train', '--name=a', '--zone=b', '--workers=2', '--', '-x'], {},
     '--workers=2: unknown option'),
    (TPU_POD, ['train', '--zone=b', '--', '-x'], {}, '--name: needed'),
    (TPU_POD, ['train', '--name=a', '--zone=b', '--env=DATA', '--', '-x'], {},
     '--env=DATA: expected --env=NAME=VALUE'),
    (TPU_POD, ['train', '--name=a', '--zone=b'], {}, "train: give train.py's arguments"),
    (TPU_POD, ['up', '--name=a', '--zone=b', '--accelerator_type=v3-8'], {},
     '--runtime_version: needed for --accelerator_type=v3-8'),
    (TPU_POD, ['fetch-logs', '--name=a', '--zone=b', '--num_workers=two'], {},
     '--num_workers: two is not a positive whole number'),
    (TPU_POD, ['fetch-logs', '--print_only', '--name=a', '--zone=b', '--accelerator_type=v3-8'],
     {}, '--num_workers: needed with --print_only for fetch-logs, unless --accelerator_type '
     'names a v4, v5p, v5litepod or v6e slice'),
    (SBATCH, ['--print_only', '--process_id=3', *TRAIN_ARGS], SLURM_JOB,
     '--process_id=3: the launcher sets --process_id'),
    (SBATCH, ['--print_only', *TRAIN_ARGS], {**SLURM_JOB, 'PROCESS_PER': 'socket'},
     'PROCESS_PER=socket: expected gpu or node'),
    (SBATCH, ['--print_only', *TRAIN_ARGS], {**SLURM_JOB, 'PROCESS_PER': 'node'},
     'PROCESS_PER=node: the job has 8 tasks on 2 nodes'),
    (SBATCH, ['--print_only', *TRAIN_ARGS], {}, '$SLURM_JOB_ID is not set'),
    (SBATCH, ['--print_only'], SLURM_JOB, "give launch/train.py's arguments"),
    (SBATCH, TRAIN_ARGS, {'T5X_MT_SLURM_COORDINATOR': 'gpu-a:24242', 'SLURM_PROCID': '5',
                          'SLURM_NTASKS': '8', 'CUDA_VISIBLE_DEVICES': '0,1,2,3'},
     'PROCESS_PER=gpu: task 5 sees 4 GPUs'),
])
def test_bad_launcher_input_prints_one_line_and_exits_2(fake_bin, script, args, environment,
                                                         message):
  result = run_launcher(script, args, fake_bin, **environment)
  assert result.returncode == 2
  assert result.stdout == ''
  [line] = result.stderr.splitlines()
  assert line.startswith(f'error: {message}')
