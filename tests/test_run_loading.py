"""Tests for t5x_mt.config.run_loading: a real tiny run's MODEL_DIR back as a Translator.

The session fixture `trained_run` (tests/conftest.py) trains a tiny model for four steps
through gin/runs/demo.gin on one CLDR direction, once per session; the launch tests use
the same run.
"""

import dataclasses
import pathlib
import re
import shutil

import gin
import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

from t5x_mt.config import run_loading
from t5x_mt.decoding import line_streaming
from t5x_mt.data import tags
from t5x_mt.core.directions import Direction
from t5x_mt.core.errors import UserError

from conftest import TINY_RUN_CHECKPOINT_EVERY
from conftest import TINY_RUN_STEPS as TRAIN_STEPS
from test_launch_translate_evaluate import error_lines
from test_launch_translate_evaluate import run_in_process


def saved_params(run_dir: pathlib.Path, step: int) -> dict:
  """The 'params' item of a checkpoint, read with Orbax directly (no target tree)."""
  path = (run_dir / 'checkpoints' / str(step) / 'params').absolute()
  return ocp.StandardCheckpointer().restore(path)


def assert_trees_bitwise_equal(actual, expected) -> None:
  assert jax.tree_util.tree_structure(actual) == jax.tree_util.tree_structure(expected)
  for a, e in zip(jax.tree_util.tree_leaves(actual), jax.tree_util.tree_leaves(expected)):
    assert a.dtype == e.dtype and a.shape == e.shape
    np.testing.assert_array_equal(np.asarray(a), np.asarray(e))


def test_load_translator_restores_latest_checkpoint_params_bitwise(trained_run):
  translator = run_loading.load_translator(str(trained_run))
  assert_trees_bitwise_equal(translator.params, saved_params(trained_run, TRAIN_STEPS))
  # The shapes came from config.gin and vocab.model: 700 pieces pad to 768 embedding rows.
  assert translator.params['shared_embedding']['embedding'].shape == (768, 32)
  assert translator.params['encoder']['layers_0']['mlp']['wi']['kernel'].shape == (32, 64)
  assert 'layers_1' not in translator.params['decoder']


def test_load_translator_restores_the_step_asked_for(trained_run):
  early = run_loading.load_translator(str(trained_run), step=TINY_RUN_CHECKPOINT_EVERY)
  assert_trees_bitwise_equal(early.params, saved_params(trained_run, TINY_RUN_CHECKPOINT_EVERY))
  late = saved_params(trained_run, TRAIN_STEPS)
  differs = [not np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(
      jax.tree_util.tree_leaves(early.params), jax.tree_util.tree_leaves(late))]
  assert any(differs), 'two more training steps should have moved the parameters'


def test_run_config_applies_and_decoding_overrides_win(trained_run):
  gin.bind_parameter('decoding.DecodeSettings.alpha', 0.25)  # Replaced by the run's config.
  translator = run_loading.load_translator(str(trained_run), batch_size=16)
  assert translator.settings.beam_size == 1  # config.gin
  assert translator.settings.alpha == 1.0  # config.gin, not the binding made before loading
  assert translator.max_decode_length == 8  # config.gin
  assert translator.batch_size == 16  # override
  assert translator.tag_strategy == 't_enc_t_dec'
  overridden = run_loading.load_translator(str(trained_run), beam_size=3, alpha=0.5)
  assert (overridden.settings.beam_size, overridden.settings.alpha) == (3, 0.5)


def test_checkpoint_step_is_latest_unless_given(trained_run):
  assert run_loading.checkpoint_step(str(trained_run)) == TRAIN_STEPS
  assert run_loading.checkpoint_step(str(trained_run), 2) == 2
  with pytest.raises(UserError, match=r'--step: .*checkpoints has no checkpoint 3 \(it has 2, 4\)'):
    run_loading.checkpoint_step(str(trained_run), 3)


def test_missing_run_folder_names_it(tmp_path):
  missing = tmp_path / 'no_such_run'
  with pytest.raises(UserError, match=re.escape(f'--checkpoint_dir: {missing} is not a directory')):
    run_loading.load_translator(str(missing))


def test_folder_without_config_names_config_gin(tmp_path):
  with pytest.raises(UserError, match=re.escape(f'{tmp_path / "config.gin"}: not found')):
    run_loading.load_translator(str(tmp_path))


def test_run_without_checkpoints_names_checkpoint_folder(trained_run, tmp_path):
  shutil.copy(trained_run / 'config.gin', tmp_path / 'config.gin')
  shutil.copy(trained_run / 'vocab.model', tmp_path / 'vocab.model')
  expected = f'no checkpoints found (expected {tmp_path / "checkpoints"})'
  with pytest.raises(UserError, match=re.escape(expected)):
    run_loading.load_translator(str(tmp_path))


class RecordingTranslator:
  """Stands in for inference.Translator: uppercases, and records what reached it."""

  batch_size = 1

  def __init__(self):
    self.calls = []

  def translate(self, sentences, src_lang, tgt_lang, on_batch=None):
    self.calls.append((list(sentences), src_lang, tgt_lang))
    on_batch(len(sentences))
    return [s.upper() + ('\nsecond line' if s == 'two lines' else '') for s in sentences]

  def check_direction(self, src_lang, tgt_lang):
    del src_lang, tgt_lang  # Translates any direction.

  def legs(self, src_lang, tgt_lang):
    return [(src_lang, tgt_lang)]

  def overlong(self, sentences, src_lang, tgt_lang):
    del src_lang, tgt_lang
    return [i for i, s in enumerate(sentences) if len(s) > 20]


def test_translate_lines_keeps_empty_lines_out_of_the_model():
  translator = RecordingTranslator()
  lines = ['a', '', 'b', '   ', 'two lines']
  outputs = line_streaming.translate_lines(translator, lines, 'eng_Latn', 'hau_Latn')
  assert outputs == ['A', '', 'B', '', 'TWO LINES second line']
  assert translator.calls == [(['a', 'b', 'two lines'], 'eng_Latn', 'hau_Latn')]


def test_translate_lines_hands_over_chunks_of_batches():
  translator = RecordingTranslator()
  lines = [f's{i}' for i in range(40)]
  outputs = line_streaming.translate_lines(translator, lines, 'eng_Latn', 'hau_Latn')
  chunk = line_streaming.TRANSLATE_CHUNK_BATCHES  # batch_size 1
  assert [len(call[0]) for call in translator.calls] == [chunk, chunk, 40 - 2 * chunk]
  assert outputs == [f'S{i}' for i in range(40)]


@pytest.mark.parametrize('strategy, encoder_tag, decoder_tag', [
    ('t_enc', '<2hau_Latn>', None),
    ('s_enc_t_dec', '<2eng_Latn>', '<2hau_Latn>'),
    ('t_enc_t_dec', '<2hau_Latn>', '<2hau_Latn>'),
])
def test_translation_tags_the_encoder_and_forces_the_decoder_tag(trained_run, strategy,
                                                                  encoder_tag, decoder_tag):
  translator = run_loading.load_translator(str(trained_run))
  translator.tag_strategy = strategy
  seen = []
  run_batch = translator._run_batch  # pylint: disable=protected-access

  def recording_run_batch(encoder_ids, prefix_ids, directions):
    generated = run_batch(encoder_ids, prefix_ids, directions)
    seen.append((encoder_ids, prefix_ids, generated))
    return generated
  translator._run_batch = recording_run_batch  # pylint: disable=protected-access
  translator.translate(['the cat sleeps', 'two dogs'], 'eng_Latn', 'hau_Latn')
  (encoder_ids, prefix_ids, generated), = seen
  prefix_id, = set(prefix_ids)
  tag_id = translator._tag_id  # pylint: disable=protected-access
  assert all(ids[0] == tag_id(encoder_tag) and ids[-1] == 1 for ids in encoder_ids)
  if decoder_tag is None:
    assert prefix_id is None
  else:
    assert prefix_id == tag_id(decoder_tag)
    assert (np.asarray(generated)[:, 0] == prefix_id).all()


def test_pivoted_direction_goes_through_the_pivot_language(trained_run):
  # The tiny run learned hau_Latn only: the legs' routing is what is tested here.
  translator = run_loading.load_translator(str(trained_run), beam_size=1,
                                           target_languages=None)
  sentences = ['the cat sleeps', 'two dogs']
  via = translator.translate(sentences, 'hau_Latn', 'eng_Latn')
  expected = translator.translate(via, 'eng_Latn', 'fra_Latn')
  legs = []
  translate_directly = translator.translate_directly

  def recording(batch, src_lang, tgt_lang, on_batch=None):
    legs.append((src_lang, tgt_lang))
    return translate_directly(batch, src_lang, tgt_lang, on_batch)
  translator.translate_directly = recording
  translator.settings = dataclasses.replace(translator.settings,
                                            pivot_directions=('hau_Latn-fra_Latn',))
  assert translator.translate(sentences, 'hau_Latn', 'fra_Latn') == expected
  assert translator.translate(sentences, 'fra_Latn', 'hau_Latn') is not None
  assert legs == [('hau_Latn', 'eng_Latn'), ('eng_Latn', 'fra_Latn'), ('fra_Latn', 'hau_Latn')]
  translator.settings = dataclasses.replace(translator.settings, pivot_directions=('*',))
  assert translator.pivots('zul_Latn', 'hau_Latn') and not translator.pivots('eng_Latn',
                                                                              'hau_Latn')


def test_padded_embedding_rows_are_never_generated(trained_run):
  # The embedding has more rows than the vocabulary has pieces. Rows r and -r, scaled up,
  # give one padded id a larger logit than any piece whatever the decoder state; decoding
  # must still emit pieces only (an untrained model otherwise crashes detokenisation).
  translator = run_loading.load_translator(str(trained_run), beam_size=1)
  pieces = translator.tokenizer.get_piece_size()
  embedding = np.array(translator.params['shared_embedding']['embedding'])
  assert embedding.shape[0] > pieces + 1
  embedding[pieces] = 1e3 * np.abs(embedding).max(axis=0)
  embedding[pieces + 1] = -embedding[pieces]
  translator.params = {**translator.params, 'shared_embedding': {'embedding': embedding}}
  encoder_ids = [translator.encode_source('Monday', tags.tags_for(
      translator.tag_strategy, 'eng_Latn', 'hau_Latn'))]
  prefix = translator._tag_id('<2hau_Latn>')  # pylint: disable=protected-access
  generated = translator._run_batch(  # pylint: disable=protected-access
      encoder_ids, [prefix], [Direction('eng_Latn', 'hau_Latn').id])
  assert generated.max() < pieces
  assert isinstance(translator.translate(['Monday'], 'eng_Latn', 'hau_Latn')[0], str)


def _with_a_cut_checkpoint(trained_run: pathlib.Path, copy: pathlib.Path) -> pathlib.Path:
  """A copy of the run whose last checkpoint lost the end of its largest parameter file
  (a copy or a disk that filled up mid-write)."""
  shutil.copytree(trained_run, copy)
  data = max((copy / 'checkpoints' / str(TRAIN_STEPS) / 'params').rglob('d/*'),
             key=lambda path: path.stat().st_size)
  data.write_bytes(data.read_bytes()[:100])
  return copy


def test_a_cut_checkpoint_is_one_line_naming_it(trained_run, tmp_path):
  run = _with_a_cut_checkpoint(trained_run, tmp_path / 'run')
  message = rf'{run}/checkpoints/{TRAIN_STEPS}: cannot be read, the checkpoint is damaged'
  with pytest.raises(UserError, match=message) as error:
    run_loading.load_translator(str(run))
  assert '\n' not in str(error.value)
  with pytest.raises(UserError, match=message):
    run_loading.average_checkpoints(str(run), [TRAIN_STEPS - 2, TRAIN_STEPS],
                                    str(tmp_path / 'averaged'))
  assert not (tmp_path / 'averaged').exists()
  # The step before it is whole and still loads.
  assert run_loading.load_translator(str(run), step=TRAIN_STEPS - 2).settings.beam_size >= 1


def test_translating_with_a_cut_checkpoint_prints_one_line(trained_run, tmp_path, monkeypatch,
                                                           capsys):
  run = _with_a_cut_checkpoint(trained_run, tmp_path / 'run')
  source = tmp_path / 'source.txt'
  source.write_text('Monday\n', encoding='utf-8')
  code, stdout, stderr = run_in_process('translate.py', [
      f'--checkpoint_dir={run}', '--src_lang=eng_Latn', '--tgt_lang=hau_Latn',
      f'--input={source}'], monkeypatch, capsys)
  assert code == 2 and stdout == ''
  assert stderr.startswith(f'error: {run}/checkpoints/{TRAIN_STEPS}: cannot be read')
  assert error_lines(stderr) == [stderr.splitlines()[0]]


def test_a_target_the_model_never_learned_is_refused_with_those_it_knows(trained_run, tmp_path,
                                                                         monkeypatch, capsys):
  assert (trained_run / 'directions.json').read_text().split() == [
      '{', '"directions":', '[', '"eng_Latn-hau_Latn"', ']', '}']
  source = tmp_path / 'source.txt'
  source.write_text('Monday\n', encoding='utf-8')
  code, _, stderr = run_in_process('translate.py', [
      f'--checkpoint_dir={trained_run}', '--src_lang=eng_Latn', '--tgt_lang=fra_Latn',
      f'--input={source}', f'--output={tmp_path / "out.txt"}'], monkeypatch, capsys)
  assert code == 2 and stderr.splitlines() == [
      'error: fra_Latn: the model was never trained to translate into it; it translates '
      'into hau_Latn']
  assert not (tmp_path / 'out.txt').exists()


def test_a_line_longer_than_the_input_is_named_and_translated_from_its_start(trained_run,
                                                                           caplog):
  translator = run_loading.load_translator(str(trained_run), beam_size=1, batch_size=4)
  long_line = ' '.join(['Monday'] * 5000)
  outputs = line_streaming.translate_lines(translator, ['Monday', '', long_line], 'eng_Latn',
                                        'hau_Latn', source_name='days.txt')
  assert len(outputs) == 3 and outputs[1] == ''
  warnings = [r.getMessage() for r in caplog.records if 'longer than' in r.getMessage()]
  assert warnings == ["days.txt:3: longer than the model's input; only its start is translated"]
