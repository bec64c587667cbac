"""Tests for the decoding flags of the commands that decode (translate.py, evaluate.py,
back_translate.py, distill.py): a flag replaces the run's decoding setting only when given."""

import argparse
import importlib.util
import pathlib
import shutil
from typing import Any

import pytest

from t5x_mt.config import decoding_flags
from t5x_mt.config import run_loading
from t5x_mt.core.errors import UserError
from test_launch_translate_evaluate import LAUNCH

# Decoding settings of the run under test, none of them a flag's old fixed default.
RUN_BEAM_SIZE, RUN_ALPHA, RUN_BATCH_SIZE = 3, 0.6, 12


@pytest.fixture(name='run_with_decoding_settings')
def fixture_run_with_decoding_settings(trained_run, tmp_path) -> pathlib.Path:
  """A copy of trained_run whose config.gin binds its own beam size, alpha and batch size."""
  run = tmp_path / 'run'
  shutil.copytree(trained_run, run)
  with open(run / 'config.gin', 'a', encoding='utf-8') as config:
    config.write(f'\ndecoding.DecodeSettings.beam_size = {RUN_BEAM_SIZE}\n'
                 f'decoding.DecodeSettings.alpha = {RUN_ALPHA}\n'
                 f'decoding.DecodeSettings.batch_size = {RUN_BATCH_SIZE}\n')
  return run


def evaluate_flags(argv: list[str]) -> tuple[argparse.Namespace, dict[str, Any]]:
  """The decoding overrides launch/evaluate.py makes of `argv`, through its own parser."""
  spec = importlib.util.spec_from_file_location('launch_evaluate', LAUNCH / 'evaluate.py')
  evaluate = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(evaluate)
  args = evaluate.parse_flags([*argv, '--tasks=cldr_eng_Latn.hau_Latn'])
  return args, decoding_flags.decoding_overrides(args)


def decode_settings(translator) -> tuple[int, float, int]:
  return (translator.settings.beam_size, translator.settings.alpha,
          translator.settings.batch_size)


def test_a_run_decodes_with_its_own_settings_unless_a_flag_is_given(run_with_decoding_settings):
  run = str(run_with_decoding_settings)
  args, overrides = evaluate_flags([f'--checkpoint_dir={run}'])
  translator = run_loading.load_model(run, decoding_flags.family_models(args), args.step, overrides)
  assert decode_settings(translator) == (RUN_BEAM_SIZE, RUN_ALPHA, RUN_BATCH_SIZE)

  args, overrides = evaluate_flags([f'--checkpoint_dir={run}', '--beam_size=2',
                                    '--alpha=0.8', '--batch_size=4'])
  translator = run_loading.load_model(run, decoding_flags.family_models(args), args.step, overrides)
  assert decode_settings(translator) == (2, 0.8, 4)


def test_family_models_read_lines_in_batches_of_the_runs_size_unless_given(
    run_with_decoding_settings):
  run = str(run_with_decoding_settings)
  for flags, batch_size in (([], RUN_BATCH_SIZE), (['--batch_size=4'], 4)):
    args, overrides = evaluate_flags([f'--family_models=4={run}', *flags])
    router = run_loading.load_model(None, decoding_flags.family_models(args), None, overrides)
    assert router.batch_size == batch_size


@pytest.mark.parametrize('flag', ['--beam_size=0', '--batch_size=0'])
def test_a_given_decoding_flag_below_one_is_refused(flag):
  with pytest.raises(UserError, match=f'{flag.partition("=")[0]}: must be >= 1, got 0'):
    evaluate_flags(['--checkpoint_dir=d', flag])


@pytest.mark.parametrize('text, members', [
    ('gs://bucket/run', [('gs://bucket/run', 1.0)]),
    ('gs://bucket/run:2,/data/a:b:0.5', [('gs://bucket/run', 2.0), ('/data/a:b', 0.5)]),
    ('hdfs://host:8020/run, runs/x', [('hdfs://host:8020/run', 1.0), ('runs/x', 1.0)]),
])
def test_an_ensemble_weight_follows_the_last_colon_unless_a_path_does(text, members):
  assert decoding_flags.parse_ensemble(text) == members


@pytest.mark.parametrize('text, error', [
    ('RUN:abc', "--ensemble: RUN:abc: 'abc' is not a weight (a number > 0)"),
    ('a,b:0', "--ensemble: b:0: '0' is not a weight (a number > 0)"),
    ('gs://bucket/run:nan', "--ensemble: gs://bucket/run:nan: 'nan' is not a weight "
     '(a number > 0)'),
    (':2', "--ensemble: ':2' names no run (RUN[:WEIGHT])"),
])
def test_an_ensemble_weight_that_is_no_number_above_zero_is_named(text, error):
  with pytest.raises(UserError) as refused:
    decoding_flags.parse_ensemble(text)
  assert str(refused.value) == error
