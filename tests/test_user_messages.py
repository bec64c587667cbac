"""What a user reads: inputs the commands name instead of failing on quietly, warnings only
where there is something to act on, and output that is legible (whole column names, a
legend beside the bars, a preemption line of its own, a finished run's scores at once)."""

import fcntl
import io
import json
import logging
import os
import pty
import shutil
import signal
import struct
import subprocess
import sys
import termios

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.transforms import Bbox
import pytest
import tqdm

from conftest import TINY_RUN_STEPS
from conftest import configure_tiny_run
from conftest import train_configured
from conftest import xla_flags
from data_tasks import from_gin
from t5x_mt.training import actions
from t5x_mt.core import charts
from t5x_mt.config import configurables
from t5x_mt.evaluation import scoring
from t5x_mt.config import gin_utils
from t5x_mt.core import processes
from t5x_mt.training import train_loop
from t5x_mt.data import cldr
from t5x_mt.data import readers
from t5x_mt.data import sampling
from t5x_mt.data.cleaning import pipeline
from t5x_mt.core.directions import Direction
from t5x_mt.core.directions import untrained_warnings
from test_launch_translate_evaluate import error_lines
from test_launch_translate_evaluate import run_in_process

BOM = '\ufeff'


def test_evaluate_names_a_split_no_corpus_has_and_the_splits_there_are(trained_run, monkeypatch,
                                                                       capsys):
  code, out, err = run_in_process(
      'evaluate.py', [f'--checkpoint_dir={trained_run}', '--tasks=cldr_eng_Latn.hau_Latn',
                      '--split=dev'], monkeypatch, capsys)
  assert code == 2 and out == ''
  assert err.splitlines() == ["error: --split: cldr_eng_Latn.hau_Latn has no 'dev' split "
                              '(it has: train, validation, test, long)']
  assert not (trained_run / 'dev').exists()


def _evaluate_files(checkpoint_dir, directory, sources: str, references: str, monkeypatch,
                    capsys, *flags: str) -> tuple[int, str, str]:
  """(exit code, stdout, stderr) of evaluate.py on files of `sources` and `references`
  (eng_Latn -> hau_Latn), written as src.eng and ref.hau in `directory`."""
  (directory / 'src.eng').write_text(sources, encoding='utf-8')
  (directory / 'ref.hau').write_text(references, encoding='utf-8')
  return run_in_process(
      'evaluate.py', [f'--checkpoint_dir={checkpoint_dir}', '--src_lang=eng_Latn',
                      '--tgt_lang=hau_Latn', f'--src_file={directory / "src.eng"}',
                      f'--ref_file={directory / "ref.hau"}', *flags], monkeypatch, capsys)


def test_evaluate_names_the_empty_files(monkeypatch, capsys, tmp_path):
  # Checked before any run loads: the folder need not hold one.
  code, _, err = _evaluate_files(tmp_path, tmp_path, '', '', monkeypatch, capsys)
  assert code == 2
  assert error_lines(err) == [f'error: {tmp_path / "src.eng"} and {tmp_path / "ref.hau"} are '
                              'empty: no sentences to score']


def test_a_byte_order_mark_is_no_part_of_the_first_line(tmp_path):
  path = tmp_path / 'ref.hau'
  path.write_text(f'{BOM}Litinin\nTalata\n', encoding='utf-8')
  assert readers.read_lines(path) == ['Litinin', 'Talata']
  assert list(readers.iter_lines(path)) == ['Litinin', 'Talata']
  # Inside a line it is text (a zero-width no-break space) and stays.
  path.write_text(f'Litinin\n{BOM}Talata\n', encoding='utf-8')
  assert readers.read_lines(path) == ['Litinin', f'{BOM}Talata']


def test_evaluate_scores_a_reference_with_a_byte_order_mark_as_without(trained_run, monkeypatch,
                                                                       capsys, tmp_path):
  # The sources copied unchanged score 100 against the same text, BOM or not.
  lines = 'Monday, 3 January 2022\nten kilometres per hour today\n'
  code, out, err = _evaluate_files(trained_run, tmp_path, lines, BOM + lines, monkeypatch,
                                   capsys, '--baseline=copy', '--beam_size=1')
  assert code == 0, err
  copy = json.loads(out)['copy']
  assert (copy['chrf'], copy['bleu'], copy['n']) == (100.0, pytest.approx(100.0), 2)


def test_directions_a_run_did_not_train_on_are_named():
  trained = ['eng_Latn-hau_Latn', 'fra_Latn-eng_Latn']
  def warned(*legs):
    return untrained_warnings([Direction(*leg) for leg in legs], trained)
  assert warned(('eng_Latn', 'hau_Latn')) == []
  assert warned(('hau_Latn', 'hau_Latn')) == [
      'hau_Latn-hau_Latn: source and target are the same language, which the run never '
      'trained to copy; expect a rewording, not the input']
  assert warned(('swh_Latn', 'eng_Latn')) == [
      'swh_Latn-eng_Latn: the run never trained on swh_Latn as a source (it trained on '
      'eng_Latn, fra_Latn); expect poor translations']
  assert warned(('fra_Latn', 'hau_Latn')) == [
      'fra_Latn-hau_Latn: a zero-shot direction, which the run never trained on (it knows '
      'fra_Latn as a source and hau_Latn as a target); expect weaker translations']
  # Pivoted through English, each leg was trained.
  assert warned(('fra_Latn', 'eng_Latn'), ('eng_Latn', 'hau_Latn')) == []
  # Into a language the run never learned: the translator's error says it, not a warning.
  assert warned(('eng_Latn', 'swh_Latn')) == []


def test_translate_warns_of_a_copy_direction_and_still_translates(trained_run, monkeypatch,
                                                                  capsys, caplog, tmp_path):
  # The tiny run trained eng_Latn -> hau_Latn alone.
  input_file, output_file = tmp_path / 'in.hau', tmp_path / 'out.hau'
  input_file.write_text('Litinin\n', encoding='utf-8')
  with caplog.at_level(logging.WARNING):
    code, _, err = run_in_process(
        'translate.py', [f'--checkpoint_dir={trained_run}', '--src_lang=hau_Latn',
                         '--tgt_lang=hau_Latn', f'--input={input_file}',
                         f'--output={output_file}', '--beam_size=1'], monkeypatch, capsys)
  assert code == 0, err
  assert len(output_file.read_text(encoding='utf-8').splitlines()) == 1
  warnings = [record.getMessage() for record in caplog.records
              if record.levelno >= logging.WARNING]
  assert len(warnings) == 1 and warnings[0].startswith(
      'hau_Latn-hau_Latn: source and target are the same language')


def test_the_languages_cldr_lacks_are_no_warning(caplog):
  with caplog.at_level(logging.DEBUG):
    cldr._locales.__wrapped__()  # pylint: disable=protected-access  (uncached)
  assert not [record for record in caplog.records if record.levelno >= logging.WARNING]
  assert [record.getMessage() for record in caplog.records
          if record.name == 'root' and 'umb_Latn' in record.getMessage()]


def test_native_output_is_prefixed_and_gloo_connection_reports_are_dropped():
  native_output = processes._NativeOutput()  # pylint: disable=protected-access
  native_output.prefix = b'[process 1] '
  sink = io.BytesIO()
  native_output.copy(io.BytesIO(
      b'[Gloo] Rank 1 is connected to 1 peer ranks. Expected number of connected peer '
      b'ranks is : 1\nNCCL INFO ring 0\n'
      # Two devices' threads reporting at once, as a process with two devices prints them.
      b'[Gloo] Rank [Gloo] Rank 3 is connected to 3 peer ranks. Expected number of '
      b'connected peer ranks is : 3\n2 is connected to 3 peer ranks. Expected number of '
      b'connected peer ranks is : 3\n2 peer ranks left\n'
      # A rank number that the other thread's newline left on a line of its own.
      b'3\n'), sink)
  assert sink.getvalue() == b'[process 1] NCCL INFO ring 0\n[process 1] 2 peer ranks left\n'


JOIN_TWO_PROCESSES = '''
import logging, os, sys
logging.basicConfig(level=logging.WARNING, format='%(levelname)s %(name)s: %(message)s')
from t5x_mt.core import processes
import jax, jax.numpy as jnp
from jax.experimental import multihost_utils
processes.initialize(sys.argv[1], 2, int(sys.argv[2]), None)
print(multihost_utils.process_allgather(jnp.float32(jax.process_index())).tolist())
logging.warning('joined')
'''


@pytest.mark.slow
@pytest.mark.multiprocess
def test_two_processes_print_no_gloo_chatter_and_every_line_names_its_process():
  from test_multiprocess import free_port  # pylint: disable=g-import-not-at-top
  address = f'127.0.0.1:{free_port()}'
  started = [subprocess.Popen([sys.executable, '-c', JOIN_TWO_PROCESSES, address, str(index)],
                              cwd=gin_utils.REPO_ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True,
                              env=dict(os.environ, XLA_FLAGS=xla_flags(1)))
             for index in range(2)]
  (out_0, err_0), (out_1, err_1) = [process.communicate(timeout=120) for process in started]
  assert [process.returncode for process in started] == [0, 0], err_0 + err_1
  assert out_0 == '[0.0, 1.0]\n' and out_1 == ''
  assert '[Gloo]' not in err_0 + err_1
  assert err_0.splitlines() == ['WARNING root: joined']
  assert err_1.splitlines() == ['[process 1] WARNING root: joined']


REPORT = {
    'directions': {'eng_Latn-hau_Latn': {'pairs_in': 8, 'pairs_out': 3, 'dropped': {
        'url_or_email': 1, 'number_mismatch': 1, 'conflicting_translations': 2,
        'duplicates': 1}}},
    'total': {'pairs_in': 8, 'pairs_out': 3, 'dropped': {
        'url_or_email': 1, 'number_mismatch': 1, 'conflicting_translations': 2,
        'duplicates': 1}}}


def test_the_cleaning_table_shows_whole_step_names():
  header, rule, row, total = pipeline.format_report(REPORT).splitlines()
  assert header.split() == ['direction', 'in', 'out', 'url_or_email', 'number_mismatch',
                            'conflicting_translations', 'duplicates']
  assert row.split() == ['eng_Latn-hau_Latn', '8', '3', '1', '1', '2', '1']
  assert total.split() == ['total', '8', '3', '1', '1', '2', '1']
  # Each count sits under the end of its column's name.
  assert row.index('2') + 1 == header.index('conflicting_translations') + len(
      'conflicting_translations')
  assert len(rule) == len(header)


def _legend_and_bars(draw, monkeypatch) -> tuple[Bbox, list[Bbox]]:
  """The legend's box and the visible part of each bar of the one chart `draw()` renders
  to PNG, in the rendered figure's pixels."""
  figures = []
  render = charts.png_bytes
  def keep_and_render(figure):
    figures.append(figure)
    return render(figure)
  monkeypatch.setattr(charts, 'png_bytes', keep_and_render)
  assert draw().startswith(b'\x89PNG')
  (figure,) = figures
  renderer = FigureCanvasAgg(figure).get_renderer()  # Closed: a new canvas, same layout.
  (axes,) = figure.axes
  visible = [Bbox.intersection(patch.get_window_extent(renderer), axes.bbox)
             for patch in axes.patches]
  bars = [box for box in visible if box is not None and box.width > 0 and box.height > 0]
  return axes.get_legend().get_window_extent(renderer), bars


def test_the_cleaning_chart_legend_covers_no_bar(monkeypatch):
  legend, bars = _legend_and_bars(lambda: pipeline.removal_chart(REPORT), monkeypatch)
  assert len(bars) == 4
  assert not [bar for bar in bars if legend.overlaps(bar)]


def test_the_sampling_chart_legend_covers_no_bar(monkeypatch):
  # Every other language large: tall bars across the whole width leave no corner free.
  names = ('eng_Latn', 'fra_Latn', 'hau_Latn', 'swh_Latn', 'amh_Ethi', 'zul_Latn',
           'yor_Latn', 'ibo_Latn')
  pairs = [30000 if number % 2 == 0 else 300 for number in range(len(names))]
  shares = [sampling.Share(name, count, count / sum(pairs), count / sum(pairs))
            for name, count in zip(names, pairs)]
  legend, bars = _legend_and_bars(lambda: sampling.shares_chart(shares, 'eight languages'),
                                  monkeypatch)
  assert len(bars) == 16
  assert not [bar for bar in bars if legend.overlaps(bar)]


def _copy_of_finished_run(trained_run, tmp_path, train_steps=TINY_RUN_STEPS):
  """A copy of the tiny run, configured as it trained but for `train_steps`."""
  run = tmp_path / 'run'
  shutil.copytree(trained_run, run)
  configure_tiny_run(run, trained_run.parent / 'vocab' / 'eng_hau.model',
                     'cldr_eng_Latn.hau_Latn', train_steps)
  return run


def test_a_finished_run_run_again_prints_its_scores_without_evaluating(trained_run, tmp_path,
                                                                      capsys):
  run = _copy_of_finished_run(trained_run, tmp_path)
  record = run / 'eval' / f'step_{TINY_RUN_STEPS}.json'
  written = record.stat().st_mtime_ns
  capsys.readouterr()
  assert train_configured() == {}
  out = capsys.readouterr().out
  summary = json.loads(record.read_text())
  assert out == (f'{run}: finished at step {TINY_RUN_STEPS} (TRAIN_STEPS); its scores:\n'
                 f'{scoring.format_table(summary)}\n')
  assert record.stat().st_mtime_ns == written
  assert sorted(path.name for path in (run / 'checkpoints').iterdir()) == ['2', '4']


def test_a_run_stopped_before_its_final_evaluation_is_not_finished(trained_run, tmp_path):
  run = _copy_of_finished_run(trained_run, tmp_path)
  (run / 'eval' / f'step_{TINY_RUN_STEPS}.json').unlink()
  spec = configurables.run_spec()
  assert not train_loop.run_lib.report_if_finished(spec.train)


def _read_all(terminal: int) -> bytes:
  """What was written to a pseudo-terminal whose other end is closed, then closes it. The
  kernel hands the bytes over in pieces; EIO says there are no more."""
  chunks = []
  while True:
    try:
      chunk = os.read(terminal, 1 << 16)
    except OSError:
      break
    if not chunk:
      break
    chunks.append(chunk)
  os.close(terminal)
  return b''.join(chunks)


@pytest.mark.slow
def test_the_preemption_line_starts_a_line_of_its_own_below_the_bar(trained_run, tmp_path,
                                                                    monkeypatch):
  # One more step than the tiny run trained, with the training bar on a terminal.
  run_dir = _copy_of_finished_run(trained_run, tmp_path, TINY_RUN_STEPS + 1)
  terminal, screen = pty.openpty()
  # A terminal of 24 rows of 80 columns (tqdm draws nothing on one of no size).
  fcntl.ioctl(screen, termios.TIOCSWINSZ, struct.pack('HHHH', 24, 80, 0, 0))
  with os.fdopen(screen, 'w', buffering=1, encoding='utf-8') as stderr:
    monkeypatch.setattr(sys, 'stderr', stderr)
    run, _ = train_loop.build_run(from_gin.run_spec())
    run.progress = tqdm.tqdm(total=TINY_RUN_STEPS + 1, initial=TINY_RUN_STEPS,
                             file=sys.stderr, desc='train', unit='step')
    preemption = actions.SaveOnPreemption()
    with preemption.listening():
      signal.raise_signal(signal.SIGINT)
      train_loop.run_steps(run, [preemption])
    run.progress.close()
    run.checkpoints.close()
  shown = _read_all(terminal).decode()
  step = TINY_RUN_STEPS + 1
  message = (f'SIGINT at step {step}: saved checkpoint {step} and stopped; run the same '
             'command to resume')
  assert 'train:' in shown
  # What the terminal shows on the message's line once the carriage returns are done.
  (line,) = [line for line in shown.split('\n') if message in line]
  assert line.rstrip('\r').split('\r')[-1].strip() == message
  assert (run_dir / 'checkpoints' / str(step)).is_dir()
