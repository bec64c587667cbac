"""Tests for launch/translate.py and launch/evaluate.py against a real tiny run.

Two commands run as subprocesses, as a user runs them (each pays ~10 s of TensorFlow and
JAX imports); the rest call the scripts' `main` through `cli.run` in this process, which
exercises the same flag parsing, error lines and exit codes.
"""

import argparse
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from t5x_mt.core import cli
from t5x_mt.config import decoding_flags
from t5x_mt.evaluation import scoring
from t5x_mt.config import gin_utils
from t5x_mt.core.errors import UserError
from conftest import TINY_RUN_STEPS as TRAIN_STEPS
from conftest import xla_flags

LAUNCH = gin_utils.REPO_ROOT / 'launch'
DECODING_FLAGS = ['--beam_size=2', '--batch_size=4']


def command_environment() -> dict[str, str]:
  """A user's environment: one CPU device (the run trained on eight: loading reshards) and
  TensorFlow's logging at its default, not the level this test session sets."""
  env = {name: value for name, value in os.environ.items() if name != 'TF_CPP_MIN_LOG_LEVEL'}
  env['XLA_FLAGS'] = xla_flags(1)
  return env


def run_command(script: str, *flags: str) -> subprocess.CompletedProcess:
  """Runs launch/<script> as a user does."""
  return subprocess.run([sys.executable, str(LAUNCH / script), *flags], capture_output=True,
                        text=True, env=command_environment(), timeout=300, check=False)


def run_in_process(script: str, argv: list[str], monkeypatch, capsys) -> tuple[int, str, str]:
  """(exit code, stdout, stderr) of launch/<script> run through cli.run in this process."""
  spec = importlib.util.spec_from_file_location(f'launch_{script[:-3]}', LAUNCH / script)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  monkeypatch.setattr(sys, 'argv', [script, *argv])
  capsys.readouterr()
  with pytest.raises(SystemExit) as exit_info:
    cli.run(module.main)
  out, err = capsys.readouterr()
  return exit_info.value.code, out, err


def error_lines(stderr: str) -> list[str]:
  return [line for line in stderr.splitlines() if line.startswith('error: ')]


@pytest.mark.slow
def test_translate_then_evaluate_files_agree_with_score_direction(trained_run, tmp_path):
  src_file = tmp_path / 'src.eng'
  src_file.write_text('Monday\n\n10 kilometres\n', encoding='utf-8')
  translated = run_command('translate.py', f'--checkpoint_dir={trained_run}',
                           '--src_lang=eng_Latn', '--tgt_lang=hau_Latn', f'--input={src_file}',
                           *DECODING_FLAGS)
  assert translated.returncode == 0, translated.stderr
  # Nothing on stderr but the command's progress bar: no TensorFlow or XLA start-up lines.
  assert all(update.startswith('eng_Latn-hau_Latn: ')
             for update in re.split('[\r\n]', translated.stderr) if update), translated.stderr
  hypotheses = translated.stdout.split('\n')
  assert len(hypotheses) == 4 and hypotheses[3] == ''  # Three lines, each ending in '\n'.
  hypotheses = hypotheses[:3]
  assert hypotheses[1] == ''

  # References that share text with the hypotheses, so chrF is not trivially zero.
  references = [f'{hypotheses[0]} Litinin', 'babu', f'kilomita 10 {hypotheses[2]}']
  ref_file = tmp_path / 'ref.hau'
  ref_file.write_text(''.join(line + '\n' for line in references), encoding='utf-8')
  output_json = tmp_path / 'scores.json'
  evaluated = run_command('evaluate.py', f'--checkpoint_dir={trained_run}',
                          '--src_lang=eng_Latn', '--tgt_lang=hau_Latn', f'--src_file={src_file}',
                          f'--ref_file={ref_file}', f'--output_json={output_json}',
                          '--baseline=copy', *DECODING_FLAGS)
  assert evaluated.returncode == 0, evaluated.stderr
  printed = json.loads(evaluated.stdout)
  assert set(printed) == {'bleu', 'chrf', 'spbleu', 'n', 'looping', 'copy'}
  assert printed['n'] == 3 and printed['spbleu'] is None
  expected = scoring.score_direction(hypotheses, references)
  assert printed['chrf'] == pytest.approx(expected['chrf'], abs=1e-9)
  assert printed['bleu'] == pytest.approx(expected['bleu'], abs=1e-9)
  assert printed['looping'] == scoring.looping_share(hypotheses)
  copied = scoring.score_direction(['Monday', '', '10 kilometres'], references)
  assert printed['copy'] == pytest.approx(copied)
  assert json.loads(output_json.read_text()) == printed


def test_evaluate_tasks_writes_eval_json_for_the_checkpoint_step(trained_run, monkeypatch,
                                                                 capsys, tmp_path):
  # The tiny run learned eng->hau only; a copy that did not record its directions
  # translates into English too.
  run = tmp_path / 'run'
  shutil.copytree(trained_run, run)
  (run / 'directions.json').unlink()
  code, out, err = run_in_process(
      'evaluate.py', [f'--checkpoint_dir={run}', '--beam_size=1',
                      '--tasks=cldr_eng_Latn.hau_Latn, cldr_hau_Latn.eng_Latn'],
      monkeypatch, capsys)
  assert code == 0, err
  summary = json.loads((run / 'eval' / f'step_{TRAIN_STEPS}.json').read_text())
  assert summary['step'] == TRAIN_STEPS and summary['split'] == 'validation'
  assert sorted(summary['directions']) == ['eng_Latn-hau_Latn', 'hau_Latn-eng_Latn']
  # max_sentences comes from the run's config.gin (4), not evaluate_directions' default.
  assert [d['n'] for d in summary['directions'].values()] == [4, 4]
  assert sorted(summary['categories']) == ['ALL', 'ENG-X', 'X-ENG']
  assert summary['categories']['ALL']['chrf'] == pytest.approx(
      (summary['directions']['eng_Latn-hau_Latn']['chrf']
       + summary['directions']['hau_Latn-eng_Latn']['chrf']) / 2)
  assert out.startswith('validation split of cldr_eng_Latn.hau_Latn, cldr_hau_Latn.eng_Latn '
                        f'at step {TRAIN_STEPS}\n') and 'hau_Latn-eng_Latn' in out


def test_evaluate_tasks_on_another_corpus(trained_run, monkeypatch, capsys, tmp_path):
  """--corpus scores the CLDR task's direction on FLORES-200 dev: 6 sentences, more than
  the CLDR validation split has for it."""
  run = tmp_path / 'run'
  shutil.copytree(trained_run, run)
  code, _, err = run_in_process(
      'evaluate.py', [f'--checkpoint_dir={run}', '--beam_size=1', '--max_sentences=6',
                      '--tasks=cldr_eng_Latn.hau_Latn', '--corpus=flores200'],
      monkeypatch, capsys)
  assert code == 0, err
  summary = json.loads((run / 'eval' / f'step_{TRAIN_STEPS}.json').read_text())
  assert list(summary['directions']) == ['eng_Latn-hau_Latn']
  assert summary['directions']['eng_Latn-hau_Latn']['n'] == 6
  # With --output_json, the scores of other settings leave the run's record alone.
  record = run / 'eval' / f'step_{TRAIN_STEPS}.json'
  output = tmp_path / 'scores.json'
  code, _, err = run_in_process(
      'evaluate.py', [f'--checkpoint_dir={run}', '--beam_size=1', '--max_sentences=3',
                      '--tasks=cldr_eng_Latn.hau_Latn', '--corpus=flores200',
                      f'--output_json={output}'], monkeypatch, capsys)
  assert code == 0, err
  assert json.loads(record.read_text()) == summary
  assert json.loads(output.read_text())['directions']['eng_Latn-hau_Latn']['n'] == 3


def test_unknown_evaluation_corpus_is_named_before_translating(trained_run, monkeypatch,
                                                               capsys):
  code, out, err = run_in_process(
      'evaluate.py', [f'--checkpoint_dir={trained_run}', '--tasks=cldr_eng_Latn.hau_Latn',
                      '--corpus=flores'], monkeypatch, capsys)
  assert code == 2 and out == ''
  lines = error_lines(err)
  assert len(lines) == 1 and lines[0].startswith("error: --corpus: unknown corpus 'flores'")
  assert 'flores200' in lines[0]


def test_bad_src_lang_is_one_line_suggesting_the_flores_code(monkeypatch, capsys, tmp_path):
  code, out, err = run_in_process(
      'translate.py', [f'--checkpoint_dir={tmp_path}', '--src_lang=hau', '--tgt_lang=eng_Latn'],
      monkeypatch, capsys)
  assert code == 2 and out == ''
  assert len(err.strip().splitlines()) == 1
  assert err.startswith("error: --src_lang: 'hau' is not a FLORES-200 language code")
  assert "did you mean 'hau_Latn'?" in err


def test_missing_checkpoint_dir_is_named(monkeypatch, capsys, tmp_path):
  missing = tmp_path / 'no_run'
  src_file = tmp_path / 'src.txt'
  src_file.write_text('hello\n', encoding='utf-8')
  code, out, err = run_in_process(
      'evaluate.py', [f'--checkpoint_dir={missing}', '--src_lang=eng_Latn',
                      '--tgt_lang=hau_Latn', f'--src_file={src_file}', f'--ref_file={src_file}'],
      monkeypatch, capsys)
  assert code == 2 and out == ''
  assert error_lines(err) == [f'error: --checkpoint_dir: {missing} is not a directory']


def test_evaluate_names_both_files_when_line_counts_differ(monkeypatch, capsys, tmp_path):
  src_file, ref_file = tmp_path / 'src.txt', tmp_path / 'ref.txt'
  src_file.write_text('one\ntwo\nthree\n', encoding='utf-8')
  ref_file.write_text('een\ntwee\n', encoding='utf-8')
  code, _, err = run_in_process(
      'evaluate.py', [f'--checkpoint_dir={tmp_path}', '--src_lang=eng_Latn',
                      '--tgt_lang=hau_Latn', f'--src_file={src_file}', f'--ref_file={ref_file}'],
      monkeypatch, capsys)
  assert code == 2
  assert error_lines(err) == [f'error: {src_file} has 3 lines but {ref_file} has 2: '
                              '--src_file and --ref_file must be line-aligned']


def test_failed_translation_leaves_no_output_file(trained_run, monkeypatch, capsys, tmp_path):
  src_file = tmp_path / 'src.txt'
  src_file.write_text('Monday\n', encoding='utf-8')
  output = tmp_path / 'out' / 'hyp.hau'
  code, out, err = run_in_process(
      'translate.py', [f'--checkpoint_dir={trained_run}', '--src_lang=eng_Latn',
                       '--tgt_lang=hau_Latn', f'--input={src_file}', f'--output={output}',
                       '--step=3'],
      monkeypatch, capsys)
  assert code == 2 and out == ''
  assert len(error_lines(err)) == 1 and '--step:' in err and 'no checkpoint 3' in err
  assert not output.exists()
  assert sorted(p.name for p in tmp_path.rglob('*')) == ['src.txt']


def _overrides(run_dir, *flags: str) -> dict:
  """decoding_flags.decoding_overrides of a decoding command's flags for the run `run_dir`."""
  parser = argparse.ArgumentParser()
  decoding_flags.add_decoding_flags(parser)
  return decoding_flags.decoding_overrides(
      parser.parse_args([f'--checkpoint_dir={run_dir}', *flags]))


def test_pivot_flag_pivots_every_direction_through_a_checked_language(tmp_path):
  overrides = _overrides(tmp_path, '--pivot_via=eng_Latn')
  assert overrides['pivot_language'] == 'eng_Latn' and overrides['pivot_directions'] == ('*',)
  with pytest.raises(UserError, match='--pivot_via'):
    _overrides(tmp_path, '--pivot_via=english')


def test_parallel_batches_flag_reaches_the_translator_only_when_given(tmp_path):
  assert _overrides(tmp_path, '--parallel_batches=3')['parallel_batches'] == 3
  assert 'parallel_batches' not in _overrides(tmp_path)
  with pytest.raises(UserError, match='--parallel_batches: must be >= 1, got 0'):
    _overrides(tmp_path, '--parallel_batches=0')


def test_output_limit_flags_reach_the_translator_only_when_given(tmp_path):
  given = _overrides(tmp_path, '--no_repeat_ngram_size=3', '--max_length_ratio=1.5',
                     '--max_length_offset=4')
  assert (given['no_repeat_ngram_size'], given['max_length_ratio'],
          given['max_length_offset']) == (3, 1.5, 4)
  unset = _overrides(tmp_path)
  assert not {'no_repeat_ngram_size', 'max_length_ratio', 'max_length_offset'} & set(unset)
  with pytest.raises(UserError, match='--max_length_ratio: must be >= 0, got -1.0'):
    _overrides(tmp_path, '--max_length_ratio=-1')


def test_a_hypothesis_file_scores_as_evaluate_scores_the_translations(
    trained_run, monkeypatch, capsys, tmp_path):
  """translate.py's output scored with --hyp_file gives exactly the scores evaluate.py
  gives when it translates the same lines itself: the same JSON, printed and written."""
  src_file, hyp_file = tmp_path / 'src.eng', tmp_path / 'hyp.hau'
  src_file.write_text('Monday\n\n10 kilometres\nTuesday, 3 March 2015\n', encoding='utf-8')
  code, _, err = run_in_process(
      'translate.py', [f'--checkpoint_dir={trained_run}', '--src_lang=eng_Latn',
                       '--tgt_lang=hau_Latn', f'--input={src_file}', f'--output={hyp_file}',
                       *DECODING_FLAGS], monkeypatch, capsys)
  assert code == 0, err
  hypotheses = hyp_file.read_text(encoding='utf-8').splitlines()
  ref_file = tmp_path / 'ref.hau'
  ref_file.write_text(f'{hypotheses[0]} Litinin\nbabu\nkilomita 10\n{hypotheses[3]}\n',
                      encoding='utf-8')
  scoring_flags = [f'--ref_file={ref_file}', f'--src_file={src_file}', '--baseline=copy',
                   f'--spm_model={trained_run / "vocab.model"}']
  printed = {}
  for name, flags in (('model', [f'--checkpoint_dir={trained_run}', '--src_lang=eng_Latn',
                                 '--tgt_lang=hau_Latn', *DECODING_FLAGS]),
                      ('file', [f'--hyp_file={hyp_file}'])):
    output_json = tmp_path / f'{name}.json'
    code, out, err = run_in_process('evaluate.py', [*flags, *scoring_flags,
                                                    f'--output_json={output_json}'],
                                    monkeypatch, capsys)
    assert code == 0, err
    printed[name] = json.loads(out)
    assert json.loads(output_json.read_text()) == printed[name]
  assert printed['file'] == printed['model']
  assert printed['file']['n'] == 4 and printed['file']['chrf'] > 0
  assert printed['file']['spbleu'] is not None and 'copy' in printed['file']
