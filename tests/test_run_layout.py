"""Tests for t5x_mt.runs.run_layout: the names a run folder's writers and readers share."""

import json
import pathlib
import time

import tensorflow as tf

from t5x_mt.training import actions
from t5x_mt.evaluation import scoring
from t5x_mt.core import files
from t5x_mt.runs import run_layout

from conftest import TINY_RUN_CHECKPOINT_EVERY
from conftest import TINY_RUN_STEPS as TRAIN_STEPS
import fake_object_store
from fake_object_store import gcs_bucket  # pylint: disable=unused-import


def test_a_trained_run_holds_exactly_the_files_its_layout_names(trained_run):
  layout = run_layout.RunLayout(trained_run)
  named = {layout.config, layout.vocabulary, layout.directions, layout.metrics,
           layout.tensorboard, layout.checkpoints, layout.input_state, layout.eval_dir()}
  assert set(trained_run.iterdir()) == named
  assert sorted(path.name for path in named) == [
      'checkpoints', 'config.gin', 'directions.json', 'eval', 'input_state', 'metrics.jsonl',
      'tensorboard', 'vocab.model']
  saved_steps = list(range(TINY_RUN_CHECKPOINT_EVERY, TRAIN_STEPS + 1,
                           TINY_RUN_CHECKPOINT_EVERY))
  assert sorted(int(path.name) for path in layout.checkpoints.iterdir()) == saved_steps
  for step in saved_steps:
    prefix = pathlib.Path(layout.host_state_prefix(step))
    assert list(prefix.parent.glob(prefix.name + '*'))
  assert list(layout.eval_dir().iterdir()) == [layout.eval_record(TRAIN_STEPS)]
  assert layout.trained_directions() == ['eng_Latn-hau_Latn']


def test_scores_on_a_split_other_than_validation_go_to_its_own_eval_folder(tmp_path):
  layout = run_layout.RunLayout(tmp_path)
  summary = scoring.summarize(3, {'eng_Latn-hau_Latn': {
      'bleu': 1.0, 'chrf': 2.0, 'spbleu': None, 'n': 4}})
  assert scoring.write_eval_json(tmp_path, summary, 'test') == layout.eval_record(3, 'test')
  assert scoring.write_eval_json(tmp_path, summary) == layout.eval_record(3)
  assert layout.eval_record(3, 'test') == tmp_path / 'test' / 'eval' / 'step_3.json'
  assert layout.eval_record(3) == tmp_path / 'eval' / 'step_3.json'


def test_recorded_directions_read_back_sorted_once_each(tmp_path):
  layout = run_layout.RunLayout(tmp_path)
  assert layout.trained_directions() is None
  layout.write_directions(['hau_Latn-eng_Latn', 'eng_Latn-hau_Latn', 'hau_Latn-eng_Latn'])
  assert layout.trained_directions() == ['eng_Latn-hau_Latn', 'hau_Latn-eng_Latn']
  assert layout.directions.read_text() == (
      '{\n  "directions": [\n    "eng_Latn-hau_Latn",\n    "hau_Latn-eng_Latn"\n  ]\n}\n')


def test_a_run_folder_on_gs_keeps_its_scheme_in_every_path():
  layout = run_layout.RunLayout('gs://bucket/run')
  paths = {name: str(getattr(layout, name)) for name in (
      'config', 'vocabulary', 'directions', 'metrics', 'tensorboard', 'best', 'dro_groups',
      'checkpoints', 'input_state')}
  assert paths == {
      'config': 'gs://bucket/run/config.gin', 'vocabulary': 'gs://bucket/run/vocab.model',
      'directions': 'gs://bucket/run/directions.json',
      'metrics': 'gs://bucket/run/metrics.jsonl', 'tensorboard': 'gs://bucket/run/tensorboard',
      'best': 'gs://bucket/run/best.json', 'dro_groups': 'gs://bucket/run/dro_groups.json',
      'checkpoints': 'gs://bucket/run/checkpoints', 'input_state': 'gs://bucket/run/input_state'}
  assert layout.host_state_prefix(5) == 'gs://bucket/run/input_state/step_5/state'
  assert str(layout.eval_record(3, 'test')) == 'gs://bucket/run/test/eval/step_3.json'
  # What Orbax is given: pathlib's absolute() would make it ./gs:/bucket/run/checkpoints.
  assert str(files.absolute(layout.checkpoints)) == 'gs://bucket/run/checkpoints'


def _logged_scalars(event_folder: str, count: int) -> list[tuple[int, str, float]]:
  """(step, tag, value) of the scalars in the event files of `event_folder`, once `count`
  are there: tensorboardX hands events to a thread of its own, which its flush does not
  wait for."""
  deadline = time.monotonic() + 30
  while True:
    scalars = [(event.step, value.tag, round(value.simple_value, 4))
               for name in tf.io.gfile.listdir(event_folder)
               for event in tf.compat.v1.train.summary_iterator(
                   fake_object_store.in_ram(f'{event_folder}/{name}'))
               for value in event.summary.value]
    if len(scalars) >= count or time.monotonic() > deadline:
      return scalars
    time.sleep(0.05)


def test_a_run_on_gs_writes_its_files_into_the_store_and_reads_them_back(gcs_bucket):
  layout = run_layout.RunLayout(f'{gcs_bucket}/run')
  layout.write_directions(['hau_Latn-eng_Latn', 'eng_Latn-hau_Latn'])
  assert layout.trained_directions() == ['eng_Latn-hau_Latn', 'hau_Latn-eng_Latn']
  log = actions.MetricsLog(layout, resume_step=0)
  for step, loss in ((1, 2.5), (2, 2.0)):
    log.write({'step': step, 'loss': loss})
  assert _logged_scalars(str(layout.tensorboard), 2) == [(1, 'loss', 2.5), (2, 'loss', 2.0)]
  resumed = actions.MetricsLog(layout, resume_step=1)  # Drops step 2, then logs it again.
  resumed.write({'step': 2, 'loss': 1.75})
  assert files.read_json_lines(layout.metrics) == [{'loss': 2.5, 'step': 1},
                                                   {'loss': 1.75, 'step': 2}]
  summary = scoring.summarize(3, {'eng_Latn-hau_Latn': {
      'bleu': 1.0, 'chrf': 2.0, 'spbleu': None, 'n': 4}})
  written = scoring.write_eval_json(layout.root, summary)
  assert str(written) == f'{gcs_bucket}/run/eval/step_3.json'
  assert json.loads(tf.io.gfile.GFile(fake_object_store.in_ram(str(written))).read()) == summary


def _scalars_tensorboard_shows(event_folder: pathlib.Path) -> list[tuple[int, str, float]]:
  """(step, tag, value) of the scalars TensorBoard shows from `event_folder`: it reads the
  event files in name order, and a session start at step s hides every scalar read
  before it from step s on."""
  shown = []
  for name in sorted(path.name for path in event_folder.iterdir()):
    for event in tf.compat.v1.train.summary_iterator(str(event_folder / name)):
      if event.session_log.status == tf.compat.v1.SessionLog.START:
        shown = [scalar for scalar in shown if scalar[0] < event.step]
      shown.extend((event.step, value.tag, round(value.simple_value, 4))
                   for value in event.summary.value)
  return shown


def test_a_resumed_run_shows_each_step_once_in_tensorboard(tmp_path):
  layout = run_layout.RunLayout(tmp_path / 'run')
  killed = actions.MetricsLog(layout, resume_step=0)
  for step, loss in ((1, 2.5), (2, 2.0), (3, 1.5)):
    killed.write({'step': step, 'loss': loss})
  # Its writer's thread puts every event on disk once closed (a run's, at its exit).
  killed._tensorboard.close()  # pylint: disable=protected-access
  # Event files are named by the second they were opened in.
  opened = int(time.time())
  while int(time.time()) == opened:
    time.sleep(0.01)
  resumed = actions.MetricsLog(layout, resume_step=1)  # Logs steps 2 and 3 again.
  for step, loss in ((2, 1.75), (3, 1.25)):
    resumed.write({'step': step, 'loss': loss})
  resumed._tensorboard.close()  # pylint: disable=protected-access
  assert len(list(layout.tensorboard.iterdir())) == 2
  assert _scalars_tensorboard_shows(layout.tensorboard) == [
      (1, 'loss', 2.5), (2, 'loss', 1.75), (3, 'loss', 1.25)]
  assert files.read_json_lines(layout.metrics) == [
      {'loss': 2.5, 'step': 1}, {'loss': 1.75, 'step': 2}, {'loss': 1.25, 'step': 3}]
