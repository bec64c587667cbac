"""What a person sees while waiting and after: progress bars that move with each decoded
batch and end at their total, translations streamed chunk by chunk, evaluation tables
that name what they score, and evaluation scores in TensorBoard beside the losses.

Bars show only on a terminal, so the tests hand the commands a stderr that says it is one
(`Terminal`) and read back what real tqdm bars drew on it.
"""

import dataclasses
import io
import json
import logging
import os
import re
import sys
import threading
import types

import pytest
import tensorflow as tf
import tqdm

import data_tasks
from t5x_mt.core import cli
from t5x_mt.training import actions
from t5x_mt.evaluation import scoring
from t5x_mt.core import files
from t5x_mt.core import progress
from t5x_mt.runs import run_layout
from t5x_mt.config import run_loading
from t5x_mt.decoding import line_streaming
from t5x_mt.evaluation import per_direction
from test_launch_translate_evaluate import run_in_process

from conftest import TINY_RUN_STEPS as TRAIN_STEPS

TASK = 'cldr_eng_Latn.hau_Latn'


class Terminal(io.StringIO):
  """A stderr that is a terminal as far as tqdm can tell; what was drawn stays readable."""

  def isatty(self) -> bool:
    return True


def drawn_states(terminal: Terminal, desc: str) -> list[str]:
  """Each state of the bar named `desc` as it was drawn, in order."""
  return [update for update in re.split('[\r\n]', terminal.getvalue())
          if update.startswith(f'{desc}: ')]


@pytest.fixture
def bar_counts(monkeypatch) -> dict[str, list[int]]:
  """{bar name: its count after each update}, recorded from every real tqdm bar shown."""
  counts = {}
  update = tqdm.tqdm.update

  def recording_update(bar, n=1):
    drawn = update(bar, n)
    if not bar.disable:
      counts.setdefault(bar.desc, []).append(bar.n)
    return drawn
  monkeypatch.setattr(tqdm.tqdm, 'update', recording_update)
  return counts


def stderr_on_a_terminal(monkeypatch) -> Terminal:
  """Makes sys.stderr a Terminal for the rest of the test (set in the test's body: pytest
  sets its own capture again once the fixtures are made)."""
  stderr = Terminal()
  monkeypatch.setattr(sys, 'stderr', stderr)
  return stderr


def test_translate_bar_moves_per_batch_and_ends_at_the_line_count(
    trained_run, tmp_path, monkeypatch, capsys, bar_counts):
  terminal = stderr_on_a_terminal(monkeypatch)
  source = tmp_path / 'days.txt'
  source.write_text('Monday\n\n10 kilometres\n' * 7, encoding='utf-8')  # 21 lines, 7 empty.
  code, out, _ = run_in_process('translate.py', [
      f'--checkpoint_dir={trained_run}', '--src_lang=eng_Latn', '--tgt_lang=hau_Latn',
      f'--input={source}', '--beam_size=1', '--batch_size=8'], monkeypatch, capsys)
  assert code == 0 and len(out.splitlines()) == 21
  # The empty lines count at once, then each batch of 8 sentences as it is decoded.
  assert bar_counts['eng_Latn-hau_Latn'] == [7, 15, 21]
  assert ' 21/21 ' in drawn_states(terminal, 'eng_Latn-hau_Latn')[-1]


def test_evaluate_file_bar_ends_at_the_line_count(trained_run, tmp_path, monkeypatch, capsys):
  terminal = stderr_on_a_terminal(monkeypatch)
  source, reference = tmp_path / 'src.eng', tmp_path / 'ref.hau'
  source.write_text('Monday\n10 kilometres\nTuesday\n', encoding='utf-8')
  reference.write_text('Litinin\nkilomita 10\nTalata\n', encoding='utf-8')
  code, out, _ = run_in_process('evaluate.py', [
      f'--checkpoint_dir={trained_run}', '--src_lang=eng_Latn', '--tgt_lang=hau_Latn',
      f'--src_file={source}', f'--ref_file={reference}', '--beam_size=1'], monkeypatch, capsys)
  assert code == 0 and json.loads(out)['n'] == 3
  assert ' 3/3 ' in drawn_states(terminal, 'eng_Latn-hau_Latn')[-1]


def test_translator_reports_each_decoded_batch_in_each_leg(trained_run):
  translator = run_loading.load_translator(str(trained_run), beam_size=1, batch_size=8,
                                           target_languages=None)
  sizes = []
  translator.translate(['Monday'] * 20, 'eng_Latn', 'hau_Latn', on_batch=sizes.append)
  assert sizes == [8, 8, 4]
  translator.settings = dataclasses.replace(translator.settings,
                                            pivot_directions=('hau_Latn-fra_Latn',))
  sizes.clear()
  translator.translate(['Litinin'] * 3, 'hau_Latn', 'fra_Latn', on_batch=sizes.append)
  assert sizes == [3, 3]  # hau -> eng, then eng -> fra.


class LinesSeen(io.StringIO):
  """A stdout that says when it has been given `count` lines."""

  def __init__(self, count: int):
    super().__init__()
    self.count = count
    self.reached = threading.Event()

  def write(self, text: str) -> int:
    written = super().write(text)
    if self.getvalue().count('\n') >= self.count:
      self.reached.set()
    return written


def test_translate_writes_each_chunk_before_reading_the_rest(trained_run, tmp_path,
                                                             monkeypatch, capsys):
  # --batch_size=8 on the session's 8 devices: a chunk is 16 batches of 8 lines.
  chunk = 8 * line_streaming.TRANSLATE_CHUNK_BATCHES
  pipe = tmp_path / 'input'
  os.mkfifo(pipe)
  stdout = LinesSeen(chunk)
  monkeypatch.setattr(sys, 'stdout', stdout)
  chunk_out_before_the_input_ended = []

  def write_input():
    with open(pipe, 'w', encoding='utf-8') as source:
      source.write('Monday\n' * chunk)
      source.flush()
      # A translator that reads to the end first would wait here until the timeout.
      chunk_out_before_the_input_ended.append(stdout.reached.wait(timeout=120))
      source.write('Tuesday\n')
  writer = threading.Thread(target=write_input, daemon=True)
  writer.start()
  try:
    code, _, err = run_in_process('translate.py', [
        f'--checkpoint_dir={trained_run}', '--src_lang=eng_Latn', '--tgt_lang=hau_Latn',
        f'--input={pipe}', '--beam_size=1', '--batch_size=8'], monkeypatch, capsys)
  finally:
    os.close(os.open(pipe, os.O_RDONLY | os.O_NONBLOCK))  # Frees a writer left waiting.
    writer.join(timeout=130)
  assert code == 0, err
  assert chunk_out_before_the_input_ended == [True]
  translations = stdout.getvalue().splitlines()
  assert len(translations) == chunk + 1 and all(translations)
  assert len(set(translations[:chunk])) == 1  # The same line, translated alike.


def test_an_atomic_writer_shows_its_file_only_when_done(tmp_path):
  target = tmp_path / 'out.txt'
  with files.atomic_writer(target) as output:
    output.write(b'first chunk\n')
    output.flush()
    assert not target.exists()  # The first chunk sits in a temporary file beside it.
    output.write(b'second chunk\n')
  assert target.read_text() == 'first chunk\nsecond chunk\n'
  with pytest.raises(KeyboardInterrupt):
    with files.atomic_writer(target) as output:
      output.write(b'half of a new file')
      raise KeyboardInterrupt
  assert target.read_text() == 'first chunk\nsecond chunk\n'
  assert [path.name for path in tmp_path.iterdir()] == ['out.txt']


def test_evaluate_tasks_shows_a_bar_and_labels_its_table(trained_run, tmp_path, monkeypatch,
                                                        capsys):
  terminal = stderr_on_a_terminal(monkeypatch)
  code, out, _ = run_in_process('evaluate.py', [
      f'--checkpoint_dir={trained_run}', f'--tasks={TASK}', '--beam_size=1', '--split=test',
      '--baseline=copy', f'--output_json={tmp_path / "scores.json"}'], monkeypatch, capsys)
  assert code == 0
  # max_sentences is the run's: 4 sentences.
  assert ' 4/4 ' in drawn_states(terminal, f'{TASK} test')[-1]
  lines = out.splitlines()
  assert lines[0] == f'test split of {TASK} at step {TRAIN_STEPS}'
  assert lines[1].split() == ['direction', 'BLEU', 'chrF++', 'spBLEU', 'n', 'looping', 'copy',
                              'gain']
  scores = json.loads((tmp_path / 'scores.json').read_text())['directions']['eng_Latn-hau_Latn']
  row = next(line for line in lines if line.startswith('eng_Latn-hau_Latn')).split()
  assert row[5] == f'{100 * scores["looping"]:.1f}%'
  assert row[6] == f'{scores["copy"]["chrf"]:.2f}'


def _training_run(translator, layout: run_layout.RunLayout, progress_bar: bool):
  """What a run's evaluation reads of it: its translator, files and settings."""
  return types.SimpleNamespace(
      translator=translator, layout=layout, mixture=data_tasks.mixture_view(TASK),
      config=types.SimpleNamespace(mixture_or_task_name=TASK, progress_bar=progress_bar))


def _scalars(event_folder) -> dict[tuple[str, int], float]:
  return {(value.tag, event.step): value.simple_value
          for name in sorted(os.listdir(event_folder))
          for event in tf.compat.v1.train.summary_iterator(os.path.join(event_folder, name))
          for value in event.summary.value}


def test_a_runs_test_evaluation_shows_a_bar_labels_its_table_and_goes_to_tensorboard(
    trained_run, tmp_path, capsys, monkeypatch):
  terminal = stderr_on_a_terminal(monkeypatch)
  layout = run_layout.RunLayout(tmp_path / 'run')
  log = actions.MetricsLog(layout, resume_step=0)
  evaluate = actions.Evaluate(0, per_direction.EvalConfig(max_sentences=4), log)
  translator = run_loading.load_translator(str(trained_run))
  quiet = evaluate.evaluate(_training_run(translator, layout, progress_bar=False), 2,
                            split='test')
  assert terminal.getvalue() == ''  # progress_bar=False
  run = _training_run(translator, layout, progress_bar=True)
  summary = evaluate.evaluate(run, 2, split='test')
  assert summary['directions'] == quiet['directions']
  assert ' 4/4 ' in drawn_states(terminal, f'{TASK} test')[-1]
  monkeypatch.setattr(sys, 'stderr', io.StringIO())  # Not a terminal: no bar.
  evaluate.evaluate(run, 2, split='test')
  assert sys.stderr.getvalue() == ''

  capsys.readouterr()
  evaluate.write(run, summary, test=True)
  log.close()
  assert capsys.readouterr().out.splitlines()[0] == f'test split of {TASK} at step 2'
  assert (layout.root / 'test' / 'eval' / 'step_2.json').exists()
  chrf = summary['directions']['eng_Latn-hau_Latn']['chrf']
  assert _scalars(layout.tensorboard) == pytest.approx({
      ('test/chrf', 2): chrf, ('test/chrf/eng_Latn-hau_Latn', 2): chrf,
      ('test/bleu', 2): summary['average']['bleu'],
      ('test/bleu/eng_Latn-hau_Latn', 2): summary['average']['bleu']})


def test_a_trained_run_logs_its_validation_scores_beside_its_losses(trained_run):
  record = json.loads((trained_run / 'eval' / f'step_{TRAIN_STEPS}.json').read_text())
  scalars = _scalars(trained_run / 'tensorboard')
  assert ('loss', TRAIN_STEPS) in scalars
  assert scalars[('validation/chrf', TRAIN_STEPS)] == pytest.approx(record['average']['chrf'])
  assert scalars[('validation/bleu/eng_Latn-hau_Latn', TRAIN_STEPS)] == pytest.approx(
      record['directions']['eng_Latn-hau_Latn']['bleu'])


def test_a_table_names_its_split_and_task_and_shows_looping_and_copy():
  directions = {
      'eng_Latn-hau_Latn': {'bleu': 10.0, 'chrf': 30.0, 'spbleu': None, 'n': 4,
                            'looping': 0.25, 'copy': {'chrf': 20.0}},
      'hau_Latn-eng_Latn': {'bleu': 12.0, 'chrf': 40.0, 'spbleu': None, 'n': 4,
                            'looping': 0.0, 'copy': {'chrf': 25.0}}}
  summary = scoring.summarize(60, directions)
  summary.update(split='validation', task='cldr_demo')
  assert summary['categories']['ALL']['looping'] == 0.125
  lines = scoring.format_table(summary).splitlines()
  assert lines[0] == 'validation split of cldr_demo at step 60'
  assert lines[3].split() == ['eng_Latn-hau_Latn', '10.00', '30.00', '-', '4', '25.0%',
                              '20.00', '+10.00']
  assert next(line for line in lines if line.startswith('ALL')).split() == [
      'ALL', '11.00', '35.00', '-', '2', '12.5%', '22.50', '+12.50']
  assert len({len(line) for line in lines[1:] if line.startswith(('direction', 'eng', 'ALL'))}) == 1
  summary['step'] = None
  summary['split'] = 'test'
  assert scoring.format_table(summary).splitlines()[0] == (
      'test split of cldr_demo, family models')


class _Clock:
  """time.perf_counter that moves only when told."""

  def __init__(self):
    self.now = 0.0

  def perf_counter(self) -> float:
    return self.now


@pytest.mark.parametrize('bar_drawn', [False, True])
def test_a_run_without_a_bar_logs_its_progress_at_each_logged_step(bar_drawn, tmp_path,
                                                                   monkeypatch, caplog):
  """Step, loss, throughput and the time left at the window's pace, where no bar shows them
  (a log file, a pipe); a terminal has the bar instead."""
  clock = _Clock()
  monkeypatch.setattr(actions, 'time', clock)
  monkeypatch.setattr(sys, 'stderr', Terminal() if bar_drawn else io.StringIO())
  bar = progress.bar(total=4, desc='train', unit='step')
  run = types.SimpleNamespace(
      layout=run_layout.RunLayout(tmp_path), start_step=0, paused_seconds=0.0,
      config=types.SimpleNamespace(train_steps=4), schedule=lambda step: 1e-3,
      direction_names=['eng_Latn-hau_Latn'], progress=bar)
  log_metrics = actions.LogMetrics(run, every=2)
  # 100 target tokens a step at a loss of 2.5; 5 s a step, then 10.
  metrics = {'loss_sum': 250.0, 'tokens': 100.0, 'direction_loss_sums': [250.0],
             'direction_tokens': [100.0], 'grad_norm': 1.0, 'nonfinite': 0}
  with caplog.at_level(logging.INFO, logger=cli.PROGRESS_LOG):
    for step, now in ((1, 5.0), (2, 10.0), (3, 20.0), (4, 30.0)):
      clock.now = now
      log_metrics.after_step(run, step, metrics)
  bar.close()
  lines = [record.getMessage() for record in caplog.records if record.name == cli.PROGRESS_LOG]
  assert lines == ([] if bar_drawn else [
      'step 2/4: loss 2.500, 20 tokens/s, 00:10 left',
      'step 4/4: loss 2.500, 10 tokens/s, 00:00 left'])
