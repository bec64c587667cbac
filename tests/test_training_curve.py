"""A run's learning curve: losses, evaluations with their copy floor, epochs per direction,
and launch/plot_training.py over a trained run."""

import json

import pytest
import sentencepiece

from test_launch_translate_evaluate import error_lines
from test_launch_translate_evaluate import run_command
from test_launch_translate_evaluate import run_in_process

from t5x_mt.core import files
from t5x_mt.runs import run_layout
from t5x_mt.runs import training_curve
from t5x_mt.data import corpora


def _eval_record(step: int, chrf: float, copy: float | None) -> dict:
  means = {'bleu': 1.0, 'chrf': chrf, 'spbleu': None, 'n': 2}
  if copy is not None:
    means['copy'] = {'chrf': copy}
  return {'step': step, 'directions': {}, 'categories': {'ALL': means},
          'average': {'bleu': 1.0, 'chrf': chrf}}


def test_losses_skip_windows_of_nonfinite_steps():
  records = [{'step': 50, 'loss': 6.5}, {'step': 100, 'loss': None}, {'step': 150, 'loss': 4}]
  assert training_curve.loss_points(records) == ([50, 150], [6.5, 4.0])


def test_evaluations_read_by_step_with_their_copy_floor(tmp_path):
  layout = run_layout.RunLayout(tmp_path)
  layout.eval_dir().mkdir(parents=True)
  for step, chrf in ((1000, 31.5), (200, 12.25)):  # Numeric order, not the names' order.
    layout.eval_record(step).write_text(json.dumps(_eval_record(step, chrf, 21.75)))
  (layout.eval_dir() / 'step_300.json.tmp').write_text('{')  # A write in flight is skipped.
  assert training_curve.evaluations(layout) == [
      training_curve.Evaluation(200, 12.25, 21.75), training_curve.Evaluation(1000, 31.5, 21.75)]
  layout.eval_record(200).write_text(json.dumps(_eval_record(200, 12.25, None)))
  assert training_curve.evaluations(layout)[0].copy_chrf is None


def test_epochs_are_trained_tokens_over_one_pass():
  records = [{'step': 50, 'tokens/eng_Latn-hau_Latn': 300.0, 'tokens/hau_Latn-eng_Latn': 90.0},
             {'step': 100, 'tokens/eng_Latn-hau_Latn': 500.0, 'loss': 3.0}]
  trained = training_curve.trained_tokens(records)
  assert trained == {'eng_Latn-hau_Latn': 800.0, 'hau_Latn-eng_Latn': 90.0}
  assert training_curve.epochs(trained, {'eng_Latn-hau_Latn': 400.0}) == {
      'eng_Latn-hau_Latn': 2.0}


def test_one_pass_counts_eos_and_cuts_at_the_targets_length():
  def encode(sentences):
    return [sentence.split() for sentence in sentences]
  # 3 + 1, 1 + 1, and 9 + 1 cut to 6.
  assert training_curve.target_tokens(['a b c', 'd', 'e f g h i j k l m'], encode, 6) == 12


def test_plot_training_on_a_trained_run(trained_run, tmp_path, monkeypatch, capsys):
  output = tmp_path / 'curve.png'
  code, out, err = run_in_process('plot_training.py', [f'--model_dir={trained_run}',
                                                       f'--output={output}'],
                                  monkeypatch, capsys)
  assert code == 0, err
  assert output.read_bytes()[:4] == b'\x89PNG'
  records = files.read_json_lines(trained_run / 'metrics.jsonl')
  summary = json.loads((trained_run / 'eval' / 'step_4.json').read_text())
  lines = out.splitlines()
  assert lines[1].split() == ['4', f'{records[-1]["loss"]:.3f}',
                              f'{summary["average"]["chrf"]:.2f}', '-', '-']
  # One pass: every CLDR eng->hau target with its EOS, cut at TARGETS_LENGTH (32).
  processor = sentencepiece.SentencePieceProcessor(
      model_file=str(trained_run / 'vocab.model'))
  targets = [target for _, target in corpora.get_corpus('cldr').pairs(
      'train', 'eng_Latn', 'hau_Latn')]
  one_pass = sum(min(len(ids) + 1, 32) for ids in processor.encode(targets))
  trained = sum(record['tokens/eng_Latn-hau_Latn'] for record in records)
  assert 0 < trained <= 4 * 8 * 32  # 4 steps of 8 rows of 32 target slots.
  row = next(line.split() for line in lines if line.startswith('eng_Latn-hau_Latn'))
  assert row == ['eng_Latn-hau_Latn', str(one_pass), f'{trained:.0f}',
                 f'{trained / one_pass:.2f}']


@pytest.mark.slow  # A command of its own, with its imports.
def test_plot_training_run_as_a_command_hides_tensorflows_start_up_lines(trained_run, tmp_path):
  # Counting a pass loads TensorFlow, whose native start-up lines must not reach the user.
  done = run_command('plot_training.py', f'--model_dir={trained_run}',
                     f'--output={tmp_path / "curve.png"}')
  assert done.returncode == 0, done.stderr
  assert 'eng_Latn-hau_Latn' in done.stdout
  for start_up_line in ('absl::InitializeLog', 'oneDNN custom operations', 'cuda drivers'):
    assert start_up_line not in done.stderr


def test_plot_training_refuses_a_folder_without_metrics(tmp_path, monkeypatch, capsys):
  code, _, err = run_in_process('plot_training.py', [f'--model_dir={tmp_path}',
                                                     f'--output={tmp_path / "c.png"}'],
                                monkeypatch, capsys)
  assert code == 2 and 'metrics.jsonl not found' in error_lines(err)[0]
