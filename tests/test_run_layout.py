"""Tests for t5x_mt.run_layout: the names a run folder's writers and readers share."""

import pathlib

from t5x_mt import evaluation
from t5x_mt import run_layout

from conftest import TINY_RUN_CHECKPOINT_EVERY
from conftest import TINY_RUN_STEPS as TRAIN_STEPS


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
  summary = evaluation.summarize(3, {'eng_Latn-hau_Latn': {
      'bleu': 1.0, 'chrf': 2.0, 'spbleu': None, 'n': 4}})
  assert evaluation.write_eval_json(tmp_path, summary, 'test') == layout.eval_record(3, 'test')
  assert evaluation.write_eval_json(tmp_path, summary) == layout.eval_record(3)
  assert layout.eval_record(3, 'test') == tmp_path / 'test' / 'eval' / 'step_3.json'
  assert layout.eval_record(3) == tmp_path / 'eval' / 'step_3.json'


def test_recorded_directions_read_back_sorted_once_each(tmp_path):
  layout = run_layout.RunLayout(tmp_path)
  assert layout.trained_directions() is None
  layout.write_directions(['hau_Latn-eng_Latn', 'eng_Latn-hau_Latn', 'hau_Latn-eng_Latn'])
  assert layout.trained_directions() == ['eng_Latn-hau_Latn', 'hau_Latn-eng_Latn']
  assert layout.directions.read_text() == (
      '{\n  "directions": [\n    "eng_Latn-hau_Latn",\n    "hau_Latn-eng_Latn"\n  ]\n}\n')
