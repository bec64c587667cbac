"""A run folder saved by an earlier version of t5x_mt (tests/fixtures/run_46d74df, written
before the library moved into packages and its gin bindings were renamed) still loads,
translates, resumes and fine-tunes."""

import pathlib
import shutil

import gin
import numpy as np
import pytest

from conftest import configure_tiny_run, saved_params, train_configured
from test_launch_translate_evaluate import run_in_process
from t5x_mt.config import configurables
from t5x_mt.config import gin_utils
from t5x_mt.config import run_loading

SAVED_RUN = pathlib.Path(__file__).parent / 'fixtures' / 'run_46d74df'
SAVED_STEP = 2
TASK = 'cldr_eng_Latn.hau_Latn'


@pytest.fixture
def saved_run(tmp_path) -> pathlib.Path:
  """A copy of the saved run, which the test may write into."""
  run = tmp_path / 'saved_run'
  shutil.copytree(SAVED_RUN, run)
  return run


def test_the_saved_config_still_begins_with_the_old_import():
  # What makes this fixture worth keeping: it is the old version's operative config.
  text = (SAVED_RUN / 'config.gin').read_text()
  assert text.splitlines()[1] == 'import t5x_mt.configurables'
  assert '\ntrain.batch_size = %BATCH_SIZE' in text
  assert '\nTranslator.beam_size = 1' in text


def test_the_old_binding_names_set_todays_settings():
  gin_utils.parse_gin(['gin/runs/demo.gin'], [
      'train_loop.train.batch_size = 3', 'inference.Translator.beam_size = 2',
      'train_loop.evaluate_directions.max_sentences = 5',
      'train_loop.build_vocabulary.vocab_size = 900'])
  assert configurables.train_config().batch_size == 3
  assert configurables.decode_settings().beam_size == 2
  assert configurables.eval_config().max_sentences == 5
  assert configurables.vocabulary_config().vocab_size == 900
  # The operative config speaks today's names only.
  assert 'TrainConfig.batch_size = 3' in gin.config_str()


def test_reading_a_saved_run_leaves_the_process_gin_config_as_it_was():
  gin_utils.parse_gin(['gin/runs/demo.gin'], ['decoding.DecodeSettings.beam_size = 7'])
  before = gin.config_str()
  run = run_loading.read_run(str(SAVED_RUN))
  assert run.decode.beam_size == 1 and run.decode.max_decode_length == 8  # The run's own.
  assert run.model.emb_dim == 32 and run.data.tag_strategy == 't_enc_t_dec'
  assert gin.config_str() == before
  assert configurables.decode_settings().beam_size == 7


def test_a_saved_run_translates_with_the_translate_command(saved_run, tmp_path, monkeypatch,
                                                          capsys):
  source = tmp_path / 'source.txt'
  source.write_text('Monday\nthree days\n')
  output = tmp_path / 'output.txt'
  code, _, stderr = run_in_process('translate.py', [
      f'--checkpoint_dir={saved_run}', '--src_lang=eng_Latn', '--tgt_lang=hau_Latn',
      f'--input={source}', f'--output={output}', '--beam_size=2'], monkeypatch, capsys)
  assert code == 0, stderr
  lines = output.read_text().splitlines()
  assert len(lines) == 2 and all(lines)  # Two steps of training: something, not nothing.


@pytest.mark.slow
def test_a_saved_run_resumes_from_its_own_config(saved_run):
  configure_tiny_run(saved_run, saved_run / 'vocab.model', TASK, SAVED_STEP + 2)
  before = saved_params(saved_run, SAVED_STEP)
  metrics = train_configured()
  assert metrics['step'] == SAVED_STEP + 2
  after = saved_params(saved_run, SAVED_STEP + 2)
  assert any(not np.array_equal(a, b) for a, b in zip(before, after))
  steps = [line for line in (saved_run / 'metrics.jsonl').read_text().splitlines()]
  assert len(steps) == SAVED_STEP + 2  # Steps 1-2 saved then, 3-4 appended now.


@pytest.mark.slow
def test_a_saved_run_is_fine_tuned_from(saved_run, tmp_path):
  configure_tiny_run(tmp_path / 'ft', saved_run / 'vocab.model', TASK, 1, **{
      'train_loop.train.init_from': repr(str(saved_run)),
      'train_loop.train.learning_rate_schedule': '@trainer.constant_schedule()',
      'trainer.constant_schedule.learning_rate': '0.0'})
  train_configured()
  for child, parent in zip(saved_params(tmp_path / 'ft', 1), saved_params(saved_run, 2)):
    np.testing.assert_array_equal(child, parent)
