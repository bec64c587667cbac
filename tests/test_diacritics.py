"""Tests for t5x_mt.decoding.diacritics and launch/restore_diacritics.py against a tiny restoration run
on a few marked Yoruba lines, and on the same model with random parameters: the
constrained search must keep every letter of its input, whatever the model prefers."""

import dataclasses
import pathlib
import shutil

import gin
import jax
import numpy as np
import pytest

from conftest import configure_tiny_run
from data_tasks import from_gin
from t5x_mt.decoding import diacritics
from t5x_mt.decoding import inference
from t5x_mt.model import models
from t5x_mt.config import run_loading
from t5x_mt.training import train_loop
from t5x_mt.data import corpora
from t5x_mt.data.yoruba import marking_corpus
from t5x_mt.data.yoruba import marking_lexicon
from t5x_mt.data.yoruba import yoruba_marks
from t5x_mt.core.errors import UserError
from test_launch_translate_evaluate import error_lines
from test_launch_translate_evaluate import run_in_process

CORPUS = 'test_yoruba_restoration'
TRAIN_LINES = ['Ẹ kú àárọ̀', 'Ọmọ náà ń ṣeré', 'Ilé wa tóbi', 'Ẹ ṣé púpọ̀', 'Òjò ń rọ̀',
               'Ọjà ti kún', 'Wọ́n lọ sí ọjà', 'Àwọn ọmọdé ń kọrin', 'Báwo ni o ṣe wà']
VALIDATION_LINES = ['Ẹ kú alẹ́', 'Ó dàbọ̀']
# The run reads at most 12 pieces: a tag, 10 characters and EOS. Longer lines are
# restored in pieces.
MAX_CHUNK = 10
# Every letter a restorer decides (markable), upper and lower case, with others that take
# no mark, a letter a combining stroke follows, a character no vocabulary piece spells
# and a line longer than the model reads.
LINES = ['sasasasasa', 'OMO NAA N SERE', 'e\u0335 ni a b', 'Zu\u0308rich ẞ 7',
         'oko oju omi ti de ebute Eko']


@pytest.fixture(scope='module')
def run(tmp_path_factory) -> pathlib.Path:
  """A restoration run on TRAIN_LINES over a character vocabulary, saved at its start:
  what a model knows is beside the point here, and a checkpoint of step 0 loads as any."""
  if CORPUS not in corpora.registered_corpora():
    corpora.register_corpus(CORPUS, lambda: marking_corpus.marking_corpus(
        CORPUS, TRAIN_LINES, VALIDATION_LINES))
  root = tmp_path_factory.mktemp('restoration')
  configure_tiny_run(root / 'run', root / 'chars.model', f'{CORPUS}_yor_Latn.yor_Latn', 2, **{
      'runs.VocabularyConfig.model_type': "'char'", 'INPUTS_LENGTH': '12',
      'TARGETS_LENGTH': '12', 'decoding.DecodeSettings.max_input_length': str(MAX_CHUNK + 2)})
  try:
    started, _ = train_loop.build_run(from_gin.run_spec())
    started.save(0)
    started.checkpoints.close()
  finally:
    gin.clear_config()
  return root / 'run'


@pytest.fixture(scope='module')
def restorer(run) -> diacritics.Restorer:
  return run_loading.load_restorer(str(run))


@pytest.fixture(scope='module')
def random_restorer(restorer) -> diacritics.Restorer:
  """The run's model alone (no lexicon) with random parameters of unit scale: its
  preferences are strong and arbitrary, forbidden markings and letters included."""
  translator = restorer.translator
  leaves, structure = jax.tree.flatten(translator.params)
  keys = jax.random.split(jax.random.key(7), len(leaves))
  params = structure.unflatten([
      jax.device_put(jax.random.normal(key, leaf.shape, leaf.dtype), leaf.sharding)
      for key, leaf in zip(keys, leaves)])
  return dataclasses.replace(restorer, lexicon=None, unknown_words='model',
                             translator=inference.Translator(
      translator.model, params, translator.vocabulary_file, translator.tag_strategy,
      translator.settings, mesh=translator.mesh, rules=translator.rules))


def assert_marks_only_where_allowed(restored: str, line: str) -> None:
  stripped, marks = yoruba_marks.split_marks(restored)
  assert stripped == line
  for char_marks, allowed in zip(marks, yoruba_marks.allowed_markings(line)):
    assert yoruba_marks.MARKINGS.index(char_marks) in allowed


def test_restored_lines_strip_back_to_their_input_whatever_the_model_prefers(random_restorer):
  restored = diacritics.restore_lines(random_restorer, LINES)
  for line, output in zip(LINES, restored):
    assert_marks_only_where_allowed(output, line)
  marked = sum(mark != '' for output in restored for mark in yoruba_marks.split_marks(output)[1])
  markable = sum(len(markings) > 1 for line in LINES
                 for markings in yoruba_marks.allowed_markings(line))
  assert markable == 38 and marked >= 10  # The random model does mark, where it may.


def test_greedy_choice_is_the_models_best_allowed_form_given_what_came_before(
    random_restorer):
  # At each step the random model's favourite piece is mostly no form of the character at
  # all; the output must be its best allowed form, step by step.
  line = LINES[0]
  [restored] = diacritics.restore_lines(random_restorer, [line])
  stripped, target = yoruba_marks.decoder_target(restored)
  decoder_targets = [random_restorer.decoder_tag, *random_restorer.character_ids(target)]
  encoder_tokens = [random_restorer.encoder_tag, *random_restorer.character_ids(stripped), 1]
  translator = random_restorer.translator
  logits = np.asarray(jax.jit(translator.model.module.apply)(
      {'params': translator.params}, **models.model_kwargs({
          'encoder_input_tokens': np.asarray([encoder_tokens]),
          'decoder_input_tokens': np.asarray([[0] + decoder_targets[:-1]]),
          'decoder_target_tokens': np.asarray([decoder_targets])}))[0])
  forbidden_favourites = 0
  for position, (char, allowed) in enumerate(zip(stripped,
                                                 yoruba_marks.allowed_markings(stripped))):
    step = position + 1  # After the decoder tag.
    forms = random_restorer.character_ids(''.join(
        yoruba_marks.decoder_letter(char, marking) for marking in allowed))
    assert decoder_targets[step] == max(forms, key=lambda piece: logits[step, piece])
    forbidden_favourites += int(np.argmax(logits[step])) not in forms
  assert forbidden_favourites >= len(line) // 2


def test_a_heavy_lexicon_gives_known_words_their_seen_marking_and_leaves_others_bare(
    random_restorer):
  lexicon = marking_lexicon.MarkingLexicon.from_lines(TRAIN_LINES)
  leaning = dataclasses.replace(random_restorer, lexicon=lexicon, lexicon_weight=1e4,
                                unknown_words='bare')
  # 'omo', 'naa' and 'n' were seen once each, as Ọmọ, náà and ń; 'oyinbo' never.
  line = 'omo naa n oyinbo'
  assert diacritics.restore_lines(leaning, [line]) == ['ọmọ náà ń oyinbo']
  # The random model alone marks the unknown word and the known ones otherwise.
  [alone] = diacritics.restore_lines(random_restorer, [line])
  unknown_word = lambda restored: restored.split()[-1]
  assert yoruba_marks.has_marks(unknown_word(alone)) and not alone.startswith('ọmọ náà ń ')
  # With unknown words left to the model, they get its marks; known ones stay as seen.
  [modelled] = diacritics.restore_lines(dataclasses.replace(leaning, unknown_words='model'),
                                        [line])
  assert modelled.startswith('ọmọ náà ń ') and yoruba_marks.has_marks(unknown_word(modelled))


def test_marked_and_empty_lines_come_back_unchanged(restorer):
  lines = ['Ọmọ naa', '', '   ', 'a\u0304 b', 'e\u0323']
  assert diacritics.restore_lines(restorer, lines) == lines


def test_command_restores_a_file_line_for_line(run, tmp_path, monkeypatch, capsys):
  source = tmp_path / 'unmarked.yor'
  lines = ['omo naa n sere lonii', '', 'Ọmọ', 'ile wa']
  source.write_text(''.join(line + '\n' for line in lines), encoding='utf-8')
  code, out, err = run_in_process('restore_diacritics.py', [
      f'--checkpoint_dir={run}', f'--input={source}', '--batch_size=8'], monkeypatch, capsys)
  assert (code, err) == (0, '')
  restored = out.split('\n')
  assert len(restored) == 5 and restored[4] == ''
  assert restored[1:3] == ['', 'Ọmọ']
  for line, output in zip(lines, restored):
    assert yoruba_marks.strip_marks(output) == yoruba_marks.strip_marks(line)


def test_command_refuses_a_missing_folder_and_a_translation_run(trained_run, tmp_path,
                                                                 monkeypatch, capsys):
  missing = tmp_path / 'missing'
  code, _, err = run_in_process('restore_diacritics.py', [f'--checkpoint_dir={missing}'],
                                monkeypatch, capsys)
  assert (code, error_lines(err)) == (
      2, [f'error: --checkpoint_dir: {missing} is not a directory'])
  code, _, err = run_in_process('restore_diacritics.py', [f'--checkpoint_dir={trained_run}'],
                                monkeypatch, capsys)
  assert code == 2 and error_lines(err) == [
      f'error: --checkpoint_dir: {trained_run} is not a Yoruba diacritics run (it trained '
      'eng_Latn-hau_Latn, not yor_Latn-yor_Latn; train one with '
      'gin/runs/yoruba_diacritics.gin)']
  code, _, err = run_in_process('restore_diacritics.py', [
      f'--checkpoint_dir={trained_run}', '--batch_size=0'], monkeypatch, capsys)
  assert (code, error_lines(err)) == (2, ['error: --batch_size: must be >= 1, got 0'])


LINES_INTO_YORUBA = ['omo naa', 'ile wa tobi', 'e ku', 'ojo n ro']


@pytest.fixture(scope='module')
def decoded_yoruba(run) -> list[str]:
  """What the untrained restoration run, as a yor_Latn -> yor_Latn translation run,
  writes for LINES_INTO_YORUBA."""
  plain = run_loading.load_model(str(run), None, None, {'beam_size': 1})
  return plain.translate(LINES_INTO_YORUBA, 'yor_Latn', 'yor_Latn')


@pytest.fixture(scope='module')
def knowing_run(run, decoded_yoruba, tmp_path_factory) -> pathlib.Path:
  """The restoration run with a lexicon that has seen every word the untrained model
  writes, each with its letters' first marking: restoring its output marks them."""
  copy = tmp_path_factory.mktemp('knowing') / 'run'
  shutil.copytree(run, copy)
  marked = [yoruba_marks.apply_markings(line, [
      markings[1] if len(markings) > 1 else 0
      for markings in yoruba_marks.allowed_markings(line)]) for line in decoded_yoruba]
  (copy / marking_lexicon.FILE_NAME).write_text(
      marking_lexicon.MarkingLexicon.from_lines(marked).to_json(), encoding='utf-8')
  return copy


@pytest.fixture(scope='module')
def switched_run(run, knowing_run, tmp_path_factory) -> pathlib.Path:
  """The restoration run as a translation run whose config.gin turns restoration on with
  `knowing_run` (the gin switch)."""
  copy = tmp_path_factory.mktemp('switched') / 'run'
  shutil.copytree(run, copy)
  with open(copy / 'config.gin', 'a', encoding='utf-8') as config:
    config.write(f"\ndecoding.DecodeSettings.yoruba_diacritics = '{knowing_run}'\n")
  return copy


def test_translation_into_yoruba_restores_unmarked_outputs_by_flag_and_by_gin_switch(
    run, knowing_run, switched_run, decoded_yoruba):
  expected = diacritics.restore_lines(run_loading.load_restorer(str(knowing_run)),
                                      decoded_yoruba)
  assert expected != decoded_yoruba  # The untrained model writes some lines without marks.
  def load(run_dir, overrides):
    return run_loading.load_model(str(run_dir), None, None, overrides)

  gin.parse_config('decoding.DecodeSettings.beam_size = 3')  # The command's own config.
  before = gin.config_str()
  by_flag = load(run, {'beam_size': 1, 'yoruba_diacritics': str(knowing_run)})
  by_switch = load(switched_run, {'beam_size': 1})
  for translator in (by_flag, by_switch):
    assert isinstance(translator, diacritics.MarkRestoringTranslator)
    assert translator.translate(LINES_INTO_YORUBA, 'yor_Latn', 'yor_Latn') == expected
  [[best]] = by_flag.translate_nbest(LINES_INTO_YORUBA[:1], 'yor_Latn', 'yor_Latn', 1)
  assert best.text == expected[0]
  # Loading the runs (model and restorer) left the process's gin config as it was.
  assert gin.config_str() == before


def test_outputs_into_other_languages_are_left_as_decoded(trained_run, restorer):
  restorer = dataclasses.replace(restorer, unknown_words='model')
  hausa = run_loading.load_translator(str(trained_run), beam_size=1)
  lines = ['Monday', 'Tuesday', 'January']
  decoded = hausa.translate(lines, 'eng_Latn', 'hau_Latn')
  assert diacritics.restore_lines(restorer, decoded) != decoded  # Restoring would mark them.
  restoring = diacritics.MarkRestoringTranslator(hausa, restorer)
  assert restoring.translate(lines, 'eng_Latn', 'hau_Latn') == decoded


def test_translate_command_restores_yoruba_and_refuses_a_run_that_is_no_restorer(
    run, knowing_run, trained_run, tmp_path, monkeypatch, capsys):
  source = tmp_path / 'source.yor'
  source.write_text(''.join(line + '\n' for line in LINES_INTO_YORUBA), encoding='utf-8')
  flags = [f'--checkpoint_dir={run}', '--src_lang=yor_Latn', '--tgt_lang=yor_Latn',
           f'--input={source}', '--beam_size=1']
  code, decoded, _ = run_in_process('translate.py', flags, monkeypatch, capsys)
  code_restored, restored, _ = run_in_process(
      'translate.py', flags + [f'--yoruba_diacritics={knowing_run}'], monkeypatch, capsys)
  restorer = run_loading.load_restorer(str(knowing_run))
  assert (code, code_restored) == (0, 0) and restored != decoded
  assert restored.splitlines() == diacritics.restore_lines(restorer, decoded.splitlines())
  code, _, err = run_in_process('translate.py', flags + [
      f'--yoruba_diacritics={trained_run}'], monkeypatch, capsys)
  assert code == 2 and error_lines(err) == [
      f'error: --yoruba_diacritics: {trained_run} is not a Yoruba diacritics run (it '
      'trained eng_Latn-hau_Latn, not yor_Latn-yor_Latn; train one with '
      'gin/runs/yoruba_diacritics.gin)']


def test_a_run_keeps_its_lexicon_and_one_without_it_restores_by_its_model_alone(
    run, tmp_path):
  kept = marking_lexicon.MarkingLexicon.from_json(
      (run / marking_lexicon.FILE_NAME).read_text(encoding='utf-8'), 'kept')
  assert kept.most_frequent('omo') == ('\u0323', '', '\u0323')  # Ọmọ, as TRAIN_LINES have it.
  bare = tmp_path / 'run'
  shutil.copytree(run, bare, ignore=shutil.ignore_patterns(marking_lexicon.FILE_NAME))
  with pytest.raises(UserError, match=f'^--checkpoint_dir: {bare} has no marking_lexicon.json'):
    run_loading.load_restorer(str(bare))
  alone = run_loading.load_restorer(str(bare), lexicon_weight=0, unknown_words='model')
  assert alone.lexicon is None
  with pytest.raises(UserError, match="^--unknown_words: 'some' is not one of 'bare', 'model'"):
    run_loading.load_restorer(str(run), unknown_words='some')
