"""A run end to end: outputs in MODEL_DIR, resume after a stop, bad input."""

import dataclasses
import json
import pathlib
import shutil

import gin
import jax
import numpy as np
import pytest

import data_tasks

from conftest import configure_tiny_run, train_configured

from t5x_mt.training import actions
from t5x_mt.runs import checkpoints
from t5x_mt.core import files
from t5x_mt.config import gin_utils
from t5x_mt.decoding import inference
from t5x_mt.model import network
from t5x_mt.training import run_config
from t5x_mt.runs import run_layout
from t5x_mt.config import run_loading
from t5x_mt.runs import run_vocabulary
from t5x_mt.training import train_loop
from t5x_mt.training import trainer
from t5x_mt.data import corpora
from t5x_mt.data import vocab
from t5x_mt.data import vocab_merge
from t5x_mt.core.errors import UserError
from t5x_mt.evaluation import per_direction


def configure(model_dir: pathlib.Path, vocabulary: pathlib.Path, mixture: str,
              train_steps: int) -> None:
  configure_tiny_run(model_dir, vocabulary, mixture, train_steps, CHECKPOINT_EVERY_STEPS='3',
                     INPUTS_LENGTH='16', TARGETS_LENGTH='16')


@pytest.fixture(scope='module')
def runs(tiny_mixture, tmp_path_factory) -> pathlib.Path:
  """A folder of `configure`'s runs that several tests compare with or start from, trained
  once over its vocabulary.model: straight/, uninterrupted for 9 steps (checkpoints 3, 6
  and 9; a run's losses do not depend on TRAIN_STEPS), and three_steps/, stopped after 3.
  Tests that change a run work on a copy (`copy_run`)."""
  root = tmp_path_factory.mktemp('runs')
  for name, steps in (('straight', 9), ('three_steps', 3)):
    configure(root / name, root / 'vocab.model', tiny_mixture, train_steps=steps)
    try:
      train_configured()
    finally:
      gin.clear_config()
  return root


def copy_run(runs: pathlib.Path, name: str, to: pathlib.Path) -> pathlib.Path:
  """A copy of the shared run `name` at `to`, to resume or change."""
  shutil.copytree(runs / name, to)
  return to


def logged_steps(run: pathlib.Path) -> dict[int, dict]:
  """The run's metrics.jsonl records by step."""
  return {record['step']: record for record in files.read_json_lines(run / 'metrics.jsonl')}


@pytest.mark.slow
def test_resume_continues_loss_curve(tiny_mixture, runs, tmp_path):
  vocabulary = runs / 'vocab.model'
  straight = logged_steps(runs / 'straight')[6]  # What a run of 6 steps ends with.
  stopped = copy_run(runs, 'three_steps', tmp_path / 'stopped')
  with (stopped / 'metrics.jsonl').open('a') as metrics:
    metrics.write('{"step": 4, "loss": 1.2')  # Killed while appending a record.
  configure(stopped, vocabulary, tiny_mixture, train_steps=6)
  resumed = train_configured()
  assert resumed['step'] == straight['step'] == 6
  assert resumed['loss'] == pytest.approx(straight['loss'], rel=1e-5)
  # The resumed run's log holds each step once, and equals the uninterrupted log.
  logged = [json.loads(line) for line in (stopped / 'metrics.jsonl').open()]
  expected = [json.loads(line) for line in (runs / 'straight' / 'metrics.jsonl').open()]
  assert [r['step'] for r in logged] == [1, 2, 3, 4, 5, 6]
  for got, want in zip(logged, expected):
    assert got['loss'] == pytest.approx(want['loss'], rel=1e-5)


@pytest.mark.slow
def test_a_damaged_latest_checkpoint_is_set_aside_and_the_run_resumes_from_the_one_before(
    tiny_mixture, runs, tmp_path, caplog):
  vocabulary = runs / 'vocab.model'
  run = tmp_path / 'cut'
  configure(run, vocabulary, tiny_mixture, train_steps=6)
  train_configured()
  # The last checkpoint lost the end of its largest file (a disk that filled up), and a
  # later save was killed before Orbax committed it.
  data = max((run / 'checkpoints' / '6' / 'params').rglob('d/*'),
             key=lambda path: path.stat().st_size)
  data.write_bytes(data.read_bytes()[:100])
  uncommitted = run / 'checkpoints' / '9.orbax-checkpoint-tmp'
  (uncommitted / 'params').mkdir(parents=True)
  configure(run, vocabulary, tiny_mixture, train_steps=9)
  train_configured()
  assert f'{run}/checkpoints/6: cannot be read, the checkpoint is damaged' in caplog.text
  assert f'set aside in {run}/damaged/6, resuming from the checkpoint before it' in caplog.text
  assert (run / 'damaged' / '6' / 'checkpoint').is_dir()
  assert (run / 'damaged' / '6' / 'input_state').is_dir()
  assert not uncommitted.exists()
  assert sorted(int(p.name) for p in (run / 'checkpoints').iterdir()) == [3, 6, 9]
  # Steps 4-9 trained again from checkpoint 3: the uninterrupted run's curve, each step once.
  logged = files.read_json_lines(run / 'metrics.jsonl')
  expected = files.read_json_lines(runs / 'straight' / 'metrics.jsonl')
  assert [r['step'] for r in logged] == list(range(1, 10))
  for got, want in zip(logged, expected):
    assert got['loss'] == pytest.approx(want['loss'], rel=1e-5)


def test_a_damaged_metrics_record_before_the_last_is_named(tmp_path, caplog):
  path = tmp_path / 'metrics.jsonl'
  path.write_text('{"step": 1}\n{"step": 2, "lo\n{"step": 3}\n')
  with pytest.raises(UserError, match=r'metrics.jsonl:2: not a JSON record'):
    actions.MetricsLog(run_layout.RunLayout(tmp_path), resume_step=3)
  path.write_text('{"step": 1}\n{"step": 2}\n{"step": 3, "lo')
  actions.MetricsLog(run_layout.RunLayout(tmp_path), resume_step=3)
  assert path.read_text() == '{"step": 1}\n{"step": 2}\n'
  assert 'metrics.jsonl:3: dropping an incomplete last record' in caplog.text


@pytest.mark.slow
def test_resume_with_a_grown_vocabulary_keeps_training_the_old_model(tiny_mixture, runs,
                                                                   tmp_path):
  vocabulary = runs / 'vocab.model'
  copy_run(runs, 'three_steps', tmp_path / 'run')
  before = logged_steps(tmp_path / 'run')[3]
  amh = corpora.get_corpus('cldr').sentences('train', 'amh_Ethi')
  amh_model = vocab.train_sentencepiece({'amh_Ethi': amh}, str(tmp_path / 'amh.model'),
                                        vocab_size=900, num_sentences=5_000)
  grown = tmp_path / 'grown.model'
  summary = vocab_merge.merge_files(str(vocabulary), amh_model, str(grown))
  old_rows = run_vocabulary.padded_vocab_size(summary.old_pieces)
  new_rows = run_vocabulary.padded_vocab_size(summary.old_pieces + summary.appended)
  assert new_rows > old_rows
  configure(tmp_path / 'run', grown, tiny_mixture, train_steps=5)
  after = train_configured()
  assert after['step'] == 5 and before['loss'] > 0 and 0 < after['loss'] < before['loss'] * 2
  assert (tmp_path / 'run' / 'vocab.model').read_bytes() == grown.read_bytes()
  run = checkpoints.RunCheckpoints(str(tmp_path / 'run'), read_only=True)
  assert run.saved_shapes(3)[('shared_embedding', 'embedding')][0] == old_rows
  assert run.saved_shapes(5)[('shared_embedding', 'embedding')][0] == new_rows


@pytest.mark.slow
def test_run_writes_its_outputs(runs):
  run = runs / 'three_steps'
  assert (run / 'config.gin').read_text().count('MIXTURE_OR_TASK_NAME') >= 1
  assert (run / 'vocab.model').read_bytes() == (runs / 'vocab.model').read_bytes()
  record = json.loads((run / 'metrics.jsonl').read_text().splitlines()[-1])
  assert {'step', 'loss', 'learning_rate', 'tokens_per_second',
          'loss/eng_Latn-fra_Latn', 'loss/hau_Latn-eng_Latn'} <= set(record)
  summary = json.loads((run / 'eval' / 'step_3.json').read_text())
  assert set(summary['directions']) == {'eng_Latn-fra_Latn', 'hau_Latn-eng_Latn'}
  assert {'X-ENG', 'ENG-X', 'X-FRA', 'ALL'} <= set(summary['categories'])
  assert sorted(p.name for p in (run / 'checkpoints').iterdir()) == ['3']


def test_unwritable_model_dir_is_named(tiny_mixture, tmp_path):
  blocker = tmp_path / 'file'
  blocker.write_text('')
  configure(blocker / 'run', tmp_path / 'vocab.model', tiny_mixture, train_steps=1)
  with pytest.raises(UserError, match='MODEL_DIR'):
    train_configured()


def test_unknown_mixture_is_named(tmp_path):
  configure(tmp_path / 'run', tmp_path / 'vocab.model', 'no_such_mixture', train_steps=1)
  with pytest.raises(UserError, match='no_such_mixture'):
    train_configured()


@pytest.mark.parametrize('binding, value, message', [
    ('TRAIN_STEPS', '0', r'TRAIN_STEPS \(training.TrainConfig.train_steps\): must be >= 1, got 0'),
    ('TRAIN_STEPS', '-5', 'TRAIN_STEPS .*: must be >= 1, got -5'),
    ('LOG_EVERY_STEPS', '0', 'LOG_EVERY_STEPS .*: must be >= 1'),
    ('network.TransformerConfig.mlp_activation', "'gelu2'",
     "mlp_activation: 'gelu2' is not one of 'gelu', 'relu', 'swish'"),
    ('network.TransformerConfig.attention_implementation', "'flash'",
     "attention_implementation: 'flash' is not one of 'auto', 'cudnn', 'pallas', "
     "'pallas_tpu', 'xla'"),
    ('network.TransformerConfig.position_embedding', "'rope'",
     "position_embedding: 'rope' is not one of 'learned', 'relative', 'sinusoidal', "
     "'sinusoidal_vaswani'"),
    ('LEARNING_RATE', "'fast'", r"peak_learning_rate \(LEARNING_RATE\): must be a number, "
     "got 'fast'"),
    ('TAG_STRATEGY', "'none'", r"TAG_STRATEGY .*: 'none' tags no language, and the mixture "
     r'translates into 2 \(eng_Latn, fra_Latn\)'),
])
def test_bad_settings_are_named_before_model_dir_exists(tiny_mixture, tmp_path, binding, value,
                                                         message):
  configure_tiny_run(tmp_path / 'run', tmp_path / 'vocab.model', tiny_mixture, 3,
                     **{binding: value})
  with pytest.raises(UserError, match=message):
    train_configured()
  assert not (tmp_path / 'run').exists() and not (tmp_path / 'vocab.model').exists()


@pytest.mark.slow
def test_resuming_with_another_model_shape_leaves_the_run_as_it_was(tiny_mixture, runs,
                                                                    tmp_path):
  copy_run(runs, 'three_steps', tmp_path / 'run')
  config = (tmp_path / 'run' / 'config.gin').read_bytes()
  configure_tiny_run(tmp_path / 'run', runs / 'vocab.model', tiny_mixture, 6,
                     **{'network.TransformerConfig.mlp_dim': '48'})
  with pytest.raises(UserError, match=r"checkpoints/3: params .*\['mlp'\].* was saved with "
                     r"shape \(64,\) but the model has \(48,\)"):
    train_configured()
  assert (tmp_path / 'run' / 'config.gin').read_bytes() == config


def test_gin_typo_names_the_binding():
  gin.clear_config()
  with pytest.raises(UserError, match='TRAIN_STEPZ|train_stepz'):
    gin_utils.parse_gin(['gin/runs/demo.gin'], ['train_loop.train.train_stepz = 3'])


class _StopAfter(actions.Action):
  """Records each step's mean loss and asks the loop to stop after `steps` steps."""

  def __init__(self, steps: int):
    self.steps = steps
    self.losses: dict[int, float] = {}

  def after_step(self, run, step, metrics):
    self.losses[step] = float(metrics['loss_sum']) / float(metrics['tokens'])

  def stop_requested(self):
    return len(self.losses) >= self.steps


def _tiny_spec(model_dir: pathlib.Path, vocabulary: pathlib.Path,
               mixture: str) -> run_config.RunSpec:
  """The tiny run `configure` describes in gin (demo.gin shrunk), built from objects."""
  return run_config.RunSpec(
      train=run_config.TrainConfig(
          model_dir=str(model_dir), train_steps=6, batch_size=8, mixture_or_task_name=mixture,
          inputs_length=16, targets_length=16, checkpoint_every_steps=3,
          evaluate_test_split=False, progress_bar=False,
          learning_rate_schedule=trainer.inverse_sqrt_schedule(3e-3, warmup_steps=5)),
      model=network.TransformerConfig(vocab_size=1, emb_dim=32, num_heads=2, head_dim=16,
                                      mlp_dim=64, num_encoder_layers=1, num_decoder_layers=1,
                                      dropout_rate=0.1, max_length=256),
      data=data_tasks.DataSettings(vocabulary_path=str(vocabulary)),
      vocabulary=run_vocabulary.VocabularyConfig(vocab_size=700),
      evaluation=per_direction.EvalConfig(max_sentences=4),
      decode=inference.DecodeSettings(beam_size=1, batch_size=8, max_decode_length=8))


@pytest.mark.slow
def test_a_run_built_from_objects_calls_its_actions_and_resumes_where_they_stopped(
    tiny_mixture, runs, tmp_path):
  spec = _tiny_spec(tmp_path / 'run', runs / 'vocab.model', tiny_mixture)
  data_tasks.configure(spec.data)  # The registry reads with the run's vocabulary and tags.
  run, update_dro = train_loop.build_run(spec)
  assert update_dro is None and run.start_step == 0
  first = _StopAfter(2)
  assert train_loop.run_steps(run, [first]) == 2
  assert sorted(first.losses) == [1, 2] and int(run.state.step) == 2
  run.save(2)
  run.checkpoints.close()
  resumed, _ = train_loop.build_run(spec)
  assert resumed.start_step == 2
  for got, want in zip(jax.tree_util.tree_leaves(resumed.state.params),
                       jax.tree_util.tree_leaves(run.state.params)):
    np.testing.assert_array_equal(got, want)
  rest = _StopAfter(10)
  assert train_loop.run_steps(resumed, [rest]) == 6  # TRAIN_STEPS ends it.
  resumed.checkpoints.close()
  # Its config.gin describes it: translation loads the same model and decoding settings.
  loaded = run_loading.load_translator(str(tmp_path / 'run'))
  assert dataclasses.replace(loaded.model.config, dtype=None) == dataclasses.replace(
      resumed.model.config, dtype=None)
  assert loaded.model.config.dtype == 'float32' and loaded.settings == spec.decode
  # The same run from gin, uninterrupted, takes the same losses at steps 3-6.
  logged = {step: r['loss'] for step, r in logged_steps(runs / 'straight').items()}
  for step, loss in rest.losses.items():
    assert loss == pytest.approx(logged[step], rel=1e-5), step
