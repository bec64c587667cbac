"""Several processes on localhost train exactly as one process with as many devices.

Each run is `launch/train.py` on gin/runs/demo.gin, as a user starts it, with the model
shrunk and two directions in its mixture (conftest.tiny_run_flags): two processes with two
CPU devices each, joined by gloo through --coordinator_address, against one process with
four devices. Their losses agree to rounding, a run stopped and resumed continues the same
curve, and a checkpoint moves between process counts and meshes.

The runs train from the mixture's task cache (CACHED_TASKS_DIR, written once by
launch/cache_tasks.py), in processes where TensorFlow, seqio and TFDS cannot be imported,
as on an accelerator host that lacks them: training, evaluating, translating and
back-translating need none of them, and what they import is installed by
requirements-cached.txt. The preemption test trains from seqio's tasks, in processes
that have TensorFlow.

Every process pays ~10 s of imports and traces its programs afresh, so the commands run
in three groups of processes (tests/run_commands.py chains them): two processes train
the first half of their run; one process trains the reference and resumes the two
processes' checkpoint; two processes finish their run and resume the one process's.
"""

import importlib.metadata
import importlib.util
import json
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

import gin
import jax
import numpy as np
import pytest

from conftest import tiny_run_flags
from conftest import xla_flags
import run_commands as run_commands_script
from t5x_mt.decoding import back_translation
from t5x_mt.model import parameter_layout
from t5x_mt.runs import checkpoints
from test_back_translation import read_pairs

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess]

REPO = pathlib.Path(__file__).resolve().parents[1]
STEPS = 10
HALF = 5
DEVICES = 4


def free_port() -> int:
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    return s.getsockname()[1]


MIXTURE = 'two_directions'


def demo_flags(model_dir: pathlib.Path, vocabulary: pathlib.Path, steps: int,
               *bindings: str) -> list[str]:
  """The shrunk demo on two directions for `steps` steps, logging every step and scoring
  a few sentences at the end so the decoding that processes share is part of every run.
  Its learning rate is high enough that after STEPS steps the run translates: outputs
  that were all empty would agree whoever decoded them."""
  return [*tiny_run_flags(
      model_dir, vocabulary, MIXTURE, steps, CHECKPOINT_EVERY_STEPS=str(HALF),
      LEARNING_RATE='2e-2',
      **{'data_tasks.register_from_config.mixtures':
         f"{{'{MIXTURE}': ['cldr_eng_Latn.fra_Latn', 'cldr_hau_Latn.eng_Latn']}}",
         'evaluation.EvalConfig.max_sentences': '2',
         'decoding.DecodeSettings.max_decode_length': '16'}),
          *(f'--gin.{b}' for b in bindings)]


def run_processes(num_processes: int, flags: list[str], program: str = 'launch/train.py'
                  ) -> list[subprocess.CompletedProcess]:
  """`program` (a launch command by default) in `num_processes` processes sharing DEVICES
  devices evenly."""
  env = dict(os.environ, XLA_FLAGS=xla_flags(DEVICES // num_processes))
  distributed = []
  if num_processes > 1:
    distributed = [f'--coordinator_address=127.0.0.1:{free_port()}',
                   f'--num_processes={num_processes}']
  started = [subprocess.Popen(
      [sys.executable, program, *flags, *distributed,
       *([f'--process_id={index}'] if num_processes > 1 else [])],
      cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
      for index in range(num_processes)]
  finished = []
  for process in started:
    stdout, stderr = process.communicate(timeout=900)
    finished.append(subprocess.CompletedProcess(process.args, process.returncode, stdout,
                                                stderr))
  for index, done in enumerate(finished):
    assert done.returncode == 0, f'process {index} failed:\n{done.stderr[-3000:]}'
  return finished


def run_commands(num_processes: int, commands: dict[str, list[str]], *runner_flags: str
                 ) -> dict[str, list[subprocess.CompletedProcess]]:
  """Launch commands (`name: [script, *flags]`) one after another in the same
  `num_processes` processes (tests/run_commands.py, given `runner_flags` too), as `&&`
  would chain them in as many: for each, what each process printed."""
  finished = run_processes(num_processes, [f'--commands={json.dumps(list(commands.values()))}',
                                           *runner_flags], 'tests/run_commands.py')
  printed = [(run_commands_script.split_output(done.stdout, len(commands)),
              run_commands_script.split_output(done.stderr, len(commands)))
             for done in finished]
  return {name: [subprocess.CompletedProcess(command, 0, stdout[index], stderr[index])
                 for stdout, stderr in printed]
          for index, (name, command) in enumerate(commands.items())}


def losses(model_dir: pathlib.Path) -> dict[int, float]:
  records = [json.loads(line) for line in (model_dir / 'metrics.jsonl').read_text().splitlines()]
  steps = [record['step'] for record in records]
  assert steps == sorted(set(steps)), f'steps logged more than once: {steps}'
  return {record['step']: record['loss'] for record in records}


def assert_same_curve(model_dir: pathlib.Path, reference: dict[int, float]) -> None:
  curve = losses(model_dir)
  assert sorted(curve) == sorted(reference)
  np.testing.assert_allclose([curve[s] for s in sorted(curve)],
                             [reference[s] for s in sorted(reference)], rtol=1e-5)


def keep_until(source: pathlib.Path, target: pathlib.Path, step: int) -> pathlib.Path:
  """A copy of run `source` as it was when checkpoint `step` was its latest: later
  checkpoints, input positions, evaluations and metrics records removed, so that what the
  resumed run logs is its own."""
  shutil.copytree(source, target)
  for folder in (target / 'checkpoints', target / 'input_state', target / 'eval'):
    for child in folder.iterdir():
      saved_at = child.name.removeprefix('step_').split('.')[0]
      if saved_at.isdigit() and int(saved_at) > step:
        (shutil.rmtree if child.is_dir() else pathlib.Path.unlink)(child)
  metrics = target / 'metrics.jsonl'
  metrics.write_text(''.join(line + '\n' for line in metrics.read_text().splitlines()
                             if json.loads(line)['step'] <= step))
  assert max(losses(target)) == step
  return target


@pytest.fixture(scope='module')
def workspace(tmp_path_factory) -> pathlib.Path:
  """The module's folder, with the mixture cached in cache/ (made with cache_vocab.model;
  the runs' VOCABULARY_PATH, vocab.model, does not exist until the first run takes the
  cache's)."""
  workspace = tmp_path_factory.mktemp('multiprocess')
  spec = importlib.util.spec_from_file_location('launch_cache_tasks',
                                                REPO / 'launch' / 'cache_tasks.py')
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  gin.clear_config()
  try:
    module.main([*demo_flags(workspace / 'unused', workspace / 'cache_vocab.model', 1),
                 f'--output_dir={workspace / "cache"}'])
  finally:
    gin.clear_config()
  return workspace


def cached(workspace: pathlib.Path, flags: list[str]) -> list[str]:
  """A run's flags, reading the workspace's task cache."""
  return [*flags, f"--gin.CACHED_TASKS_DIR='{workspace / 'cache'}'"]


def without_tensorflow(num_processes: int, commands: dict[str, list[str]], *flags: str
                       ) -> dict[str, list[subprocess.CompletedProcess]]:
  """run_commands in processes that cannot import TensorFlow, seqio or TFDS."""
  return run_commands(num_processes, commands, '--without_tensorflow', *flags)


# Imported where installed, and done without otherwise (each in a try): jax's export
# serialization, its compilation cache's compression and lock, grain's attrs support.
OPTIONAL_IMPORTS = {'flatbuffers', 'zstandard', 'filelock', 'attrs'}


def installed_with(requirements: pathlib.Path) -> set[str]:
  """The distributions `pip install -r requirements` installs: those it names and,
  recursively, what they require (without extras), as this environment has them."""
  named = [line.split(';')[0].strip() for line in requirements.read_text().splitlines()
           if line.strip() and not line.startswith(('#', '-'))]
  todo = [re.split(r'[<>=!~\[ ]', line, maxsplit=1)[0] for line in named]
  found: set[str] = set()
  while todo:
    name = canonical(todo.pop())
    if name in found:
      continue
    found.add(name)
    for requirement in _requirements(name):
      if 'extra ==' not in requirement:
        todo.append(re.split(r'[<>=!~\[ ;(]', requirement, maxsplit=1)[0])
  return found


def _requirements(name: str) -> list[str]:
  """What installed distribution `name` requires; nothing if it is not installed here."""
  for spelling in (name, name.replace('-', '_')):
    try:
      return importlib.metadata.requires(spelling) or []
    except importlib.metadata.PackageNotFoundError:
      continue
  return []


def canonical(name: str) -> str:
  return re.sub(r'[-_.]+', '-', name).lower()


SENTENCES = ['Good morning.', 'Monday', 'Thank you very much.', 'Tuesday', 'Where is it?',
             'Friday']
DECODING = ['--src_lang=eng_Latn', '--tgt_lang=fra_Latn', '--beam_size=1', '--batch_size=4']


@pytest.fixture(scope='module')
def two_processes(workspace) -> tuple[pathlib.Path, list]:
  """Two processes with two devices each, stopped at HALF (two_process_commands trains
  the rest): the run and what each process printed. The module's first run: both
  processes build its vocabulary, the same file, written whole."""
  model_dir = workspace / 'two'
  finished = without_tensorflow(2, {'two': ['train.py', *cached(workspace, demo_flags(
      model_dir, workspace / 'vocab.model', HALF))]})
  return model_dir, finished['two']


def lora_flags(workspace: pathlib.Path, name: str, *bindings: str) -> list[str]:
  """LoRA trained on the frozen reference run (the one process's) into run `name`."""
  return cached(workspace, demo_flags(
      workspace / name, workspace / 'vocab.model', HALF, 'LORA_RANK=4',
      f"training.TrainConfig.init_from='{workspace / 'one'}'", *bindings))


@pytest.fixture(scope='module')
def one_process_commands(workspace, two_processes
                         ) -> dict[str, list[subprocess.CompletedProcess]]:
  """In one process with four devices, one command after another: the reference run,
  reading the two input shards two processes read; the two processes' checkpoint resumed
  under another mesh; the reference run's translations of SENTENCES."""
  vocabulary = workspace / 'vocab.model'
  two_to_one = keep_until(two_processes[0], workspace / 'two_to_one', HALF)
  source = workspace / 'source.txt'
  source.write_text(''.join(line + '\n' for line in SENTENCES), encoding='utf-8')
  return without_tensorflow(1, {
      'one': ['train.py', *cached(workspace, demo_flags(workspace / 'one', vocabulary, STEPS,
                                                        'INPUT_SHARDS=2'))],
      # No INPUT_SHARDS given: the run keeps the two shards its checkpoint was read with.
      'two_to_one': ['train.py', *cached(workspace, demo_flags(
          two_to_one, vocabulary, STEPS, 'MESH_SHAPE=(2, 1, 2)'))],
      'translate': ['translate.py', f'--checkpoint_dir={workspace / "one"}',
                    f'--input={source}', *DECODING, f'--output={workspace / "one.txt"}'],
      # Every direction of the cached mixture, on its validation pairs.
      'evaluate_tasks': ['evaluate.py', f'--checkpoint_dir={workspace / "one"}',
                         f'--tasks={MIXTURE}', '--beam_size=1',
                         f'--output_json={workspace / "tasks.json"}'],
      'lora': ['train.py', *lora_flags(workspace, 'lora_one', 'INPUT_SHARDS=2')]},
      f'--record_distributions={workspace / "imported.json"}')


@pytest.fixture(scope='module')
def one_process(workspace, one_process_commands) -> pathlib.Path:
  """The reference run: one process with four devices."""
  del one_process_commands  # Trained it.
  return workspace / 'one'


@pytest.fixture(scope='module')
def reference(one_process) -> dict[int, float]:
  curve = losses(one_process)
  assert sorted(curve) == list(range(1, STEPS + 1))
  assert curve[STEPS] < curve[1] - 1.0  # It learns: equal curves are not constant.
  return curve


@pytest.fixture(scope='module')
def two_process_commands(workspace, one_process, two_processes
                         ) -> dict[str, list[subprocess.CompletedProcess]]:
  """In two processes with two devices each, one command after another: the two
  processes' run resumed to its end on a hybrid mesh, the one process's checkpoint under
  another mesh, and each command that decodes, on the reference run and SENTENCES."""
  vocabulary, source = workspace / 'vocab.model', workspace / 'source.txt'
  one_to_two = keep_until(one_process, workspace / 'one_to_two', HALF)
  # Scores: two processes score the one process's translations as its references.
  shutil.copy(workspace / 'one.txt', workspace / 'references.txt')
  return without_tensorflow(2, {
      # On a hybrid mesh: 'fsdp' within each process, 'data' across the two, as across the
      # slices of a multi-slice TPU or the nodes of a GPU cluster.
      'two': ['train.py', *cached(workspace, demo_flags(
          two_processes[0], vocabulary, STEPS, 'MESH_SHAPE=(1, 2, 1)',
          'DCN_MESH_SHAPE=(2, 1, 1)'))],
      # Parameters and optimizer state sharded over 'fsdp' now, replicated before.
      'one_to_two': ['train.py', *cached(workspace, demo_flags(
          one_to_two, vocabulary, STEPS, 'MESH_SHAPE=(1, 2, 2)'))],
      'translate': ['translate.py', f'--checkpoint_dir={one_process}', f'--input={source}',
                    *DECODING, f'--output={workspace / "two.txt"}'],
      # Two copies of the run as an ensemble.
      'ensemble': ['translate.py', f'--ensemble={one_process},{one_process}:3',
                   f'--input={source}', *DECODING, f'--output={workspace / "ensemble.txt"}'],
      'evaluate': ['evaluate.py', f'--checkpoint_dir={one_process}', f'--src_file={source}',
                   f'--ref_file={workspace / "references.txt"}', *DECODING],
      # Forward translation into a corpus.
      'back_translate': [
          'back_translate.py', f'--checkpoint_dir={one_process}', '--lang=eng_Latn',
          '--into=fra_Latn', '--mode=ft', '--tag=none', f'--monolingual={source}',
          f'--output={workspace / "ft"}', '--beam_size=1', '--batch_size=4'],
      # LoRA on the reference run, its matrices and moments sharded over 'fsdp'.
      'lora': ['train.py', *lora_flags(workspace, 'lora_two', 'MESH_SHAPE=(1, 2, 2)')]})


def test_two_processes_stopped_and_resumed_train_as_one_process_with_as_many_devices(
    workspace, reference, two_processes, two_process_commands):
  model_dir, finished = two_processes
  assert_same_curve(model_dir, reference)
  # Process 0 writes the run's files and prints the scores; process 1 prints nothing: no
  # results, and none of the collectives' connection reports (test_user_messages shows
  # that what it does log names it).
  for printed in (finished, two_process_commands['two']):
    assert 'ALL' in printed[0].stdout
    assert (printed[1].stdout, printed[1].stderr) == ('', '')
  scores = json.loads((model_dir / 'eval' / f'step_{STEPS}.json').read_text())
  reference_scores = json.loads(
      (workspace / 'one' / 'eval' / f'step_{STEPS}.json').read_text())
  assert scores['average'] == reference_scores['average']


def test_processes_without_tensorflow_train_from_the_cache_and_evaluate_its_tasks(
    workspace, one_process, one_process_commands):
  # The run read its batches through Grain and saved their position with its checkpoints.
  assert sorted(path.name for path in (one_process / 'input_state').rglob('*.grain.json'))
  scores = json.loads((workspace / 'tasks.json').read_text())
  final = json.loads((one_process / 'eval' / f'step_{STEPS}.json').read_text())
  assert sorted(scores['directions']) == sorted(final['directions']) == [
      'eng_Latn-fra_Latn', 'hau_Latn-eng_Latn']
  assert scores['directions'] == final['directions']
  # The one install line for such hosts installs every distribution the commands used.
  used = {canonical(name) for name in json.loads((workspace / 'imported.json').read_text())}
  assert used & {'jax', 'grain', 'orbax-checkpoint', 'sentencepiece'} == {
      'jax', 'grain', 'orbax-checkpoint', 'sentencepiece'}
  missing = used - installed_with(REPO / 'requirements-cached.txt') - OPTIONAL_IMPORTS
  assert not missing, f'requirements-cached.txt lacks {sorted(missing)}'
  assert not used & {'tensorflow', 'seqio', 'tensorflow-datasets', 'tensorflow-text'}


def test_checkpoint_of_two_processes_resumes_in_one_under_another_mesh(workspace, reference,
                                                                       one_process_commands):
  assert_same_curve(workspace / 'two_to_one', reference)


def test_checkpoint_of_one_process_resumes_in_two_under_another_mesh(workspace, reference,
                                                                     two_process_commands):
  assert_same_curve(workspace / 'one_to_two', reference)


def test_lora_on_two_processes_trains_as_on_one_and_saves_lora_alone(workspace,
                                                                     one_process_commands,
                                                                     two_process_commands):
  assert_same_curve(workspace / 'lora_two', losses(workspace / 'lora_one'))
  for run in ('lora_one', 'lora_two'):
    assert json.loads((workspace / run / 'base_run.json').read_text()) == {
        'run': str(workspace / 'one'), 'step': STEPS}
    run_checkpoints = checkpoints.RunCheckpoints(str(workspace / run), read_only=True)
    try:
      saved = run_checkpoints._manager.item_metadata(HALF)['params']  # pylint: disable=protected-access
    finally:
      run_checkpoints.close()
    paths = [path for path, leaf in jax.tree_util.tree_leaves_with_path(saved)
             if hasattr(leaf, 'shape')]
    assert paths and all(parameter_layout.is_lora_path(path) for path in paths)


def test_commands_that_decode_split_the_work_and_write_once(workspace, one_process_commands,
                                                            two_process_commands):
  expected = (workspace / 'one.txt').read_text(encoding='utf-8').splitlines()
  assert len(expected) == len(SENTENCES) and any(expected)
  assert (workspace / 'two.txt').read_text(encoding='utf-8').splitlines() == expected
  assert two_process_commands['translate'][1].stdout == ''
  # An ensemble decodes on several processes as a single run does: two copies of the run
  # give the run's translations.
  assert (workspace / 'ensemble.txt').read_text(encoding='utf-8').splitlines() == expected
  # Scores: two processes score the one process's translations as its references, once.
  finished = two_process_commands['evaluate']
  scores = json.loads(finished[0].stdout)
  assert finished[1].stdout == '' and scores['n'] == len(SENTENCES)
  assert scores['chrf'] == pytest.approx(100.0)
  # Forward translation into a corpus: the synthetic side is what translate.py gave.
  finished = two_process_commands['back_translate']
  job = back_translation.Job('eng_Latn', 'fra_Latn', mode='ft', tag='none')
  assert read_pairs(workspace / 'ft', job) == [
      pair for pair in zip(SENTENCES, expected) if pair[1].strip()]
  assert json.loads(finished[0].stdout.splitlines()[-1])['translated_now'] == len(SENTENCES)
  assert finished[1].stdout == ''


def test_sigterm_to_one_process_saves_the_same_step_on_both_and_both_exit_0(workspace):
  """A preemption notice reaches one worker: JAX's notifier tells the others, and every
  process saves the step its sync point names and exits 0."""
  model_dir = workspace / 'preempted'
  env = dict(os.environ, XLA_FLAGS=xla_flags(2))
  port = free_port()
  started = [subprocess.Popen(
      [sys.executable, 'launch/train.py',
       *demo_flags(model_dir, workspace / 'vocab.model', 1000, 'CHECKPOINT_EVERY_STEPS=1000'),
       f'--coordinator_address=127.0.0.1:{port}', '--num_processes=2', f'--process_id={index}'],
      cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
      for index in range(2)]
  metrics = model_dir / 'metrics.jsonl'
  for _ in range(1200):
    if metrics.exists() and len(metrics.read_text().splitlines()) >= 3:
      break
    assert all(process.poll() is None for process in started)
    time.sleep(0.2)
  started[1].send_signal(signal.SIGTERM)
  finished = [process.communicate(timeout=180) for process in started]
  assert [process.returncode for process in started] == [0, 0], finished[1][1][-2000:]
  step = losses(model_dir) and max(losses(model_dir))
  assert f'at step {step}: saved checkpoint {step} and stopped' in finished[0][1]
  assert sorted(p.name for p in (model_dir / 'checkpoints').iterdir()) == [str(step)]
