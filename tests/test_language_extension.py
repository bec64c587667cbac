"""Adding a language to a run (launch/extend_vocab.py, t5x_mt.runs.language_extension):
the tiny imported NLLB-200 of tests/checkpoints/huggingface grown by Amharic text from
CLDR under a code it lacks. Its vocabulary has no Ethiopic character, so every piece of
that text is new to it."""

import json
import pathlib

import gin
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import regex
import sentencepiece as spm
from flax import traverse_util

from conftest import tiny_run_bindings
from conftest import train_configured

from t5x_mt.config import decoding_flags
from t5x_mt.config import gin_utils
from t5x_mt.config import run_loading
from t5x_mt.core import languages
from t5x_mt.core.directions import Direction
from t5x_mt.core.errors import UserError
from t5x_mt.core.registry import Registry
from t5x_mt.data import corpora
from t5x_mt.data import readers
from t5x_mt.data import tags
from t5x_mt.data import vocab_merge
from t5x_mt.model import parameter_layout as layout
from t5x_mt.pretrained import huggingface
from t5x_mt.runs import checkpoints
from t5x_mt.runs import language_extension
from t5x_mt.runs import run_layout
from test_launch_translate_evaluate import run_in_process

NLLB = pathlib.Path(__file__).parent / 'checkpoints' / 'huggingface' / 'nllb'
NEW = 'xyz_Ethi'
NEW_PIECES = 250
# Old languages whose FLORES-200 dev text the old and grown vocabularies segment.
OLD_LANGUAGES = ('eng_Latn', 'fra_Latn', 'hau_Latn', 'yor_Latn', 'swh_Latn')


def _new_language_text() -> list[str]:
  return corpora.get_corpus('cldr').sentences('train', 'amh_Ethi')


@pytest.fixture(scope='module')
def runs(tmp_path_factory) -> dict:
  """The imported tiny NLLB, the same grown by NEW, and what the extension reported."""
  root = tmp_path_factory.mktemp('extension')
  huggingface.import_checkpoint(str(NLLB), str(root / 'nllb'))
  extension = language_extension.extend_run(str(root / 'nllb'), NEW, _new_language_text(),
                                            str(root / 'extended'), NEW_PIECES)
  return {'nllb': root / 'nllb', 'extended': root / 'extended', 'extension': extension}


def _model(run: pathlib.Path):
  return vocab_merge.load_model(run / 'vocab.model', str(run))


def _params(run: pathlib.Path) -> dict:
  saved = checkpoints.RunCheckpoints(str(run), read_only=True)
  try:
    return traverse_util.flatten_dict(saved.restore_saved_params(saved.latest_step()))
  finally:
    saved.close()


def _old_text() -> dict[str, list[str]]:
  """The fixture's own sentences, and FLORES-200 dev lines of OLD_LANGUAGES where the
  shared data folder holds them."""
  expected = json.loads((NLLB / 'expected.json').read_text(encoding='utf-8'))
  text = {'fixture': expected['sources'] + expected['targets']}
  root = readers.shared_data_dir()
  for lang in OLD_LANGUAGES:
    path = root / 'flores200' / 'dev' / f'{lang}.dev' if root else None
    if path and path.is_file():
      text[lang] = readers.read_lines(path)
  return text


def test_the_vocabulary_grows_by_new_pieces_and_the_tag_and_keeps_every_old_one(runs):
  old, grown, extension = _model(runs['nllb']), _model(runs['extended']), runs['extension']
  assert vocab_merge.extends(old.SerializeToString(), grown.SerializeToString())
  added = grown.pieces[len(old.pieces):]
  assert len(added) == extension.pieces + 1 == NEW_PIECES + 1  # Ethiopic offers plenty.
  assert added[-1].piece == '<2xyz_Ethi>' == languages.language_tag(NEW)
  assert added[-1].type == added[-1].USER_DEFINED and extension.tag_id == len(grown.pieces) - 1
  spelling = {piece.piece for piece in old.pieces if piece.type in (
      piece.NORMAL, piece.USER_DEFINED)}
  assert not any(vocab_merge.spellable(piece.piece, spelling, max(map(len, spelling)))
                 for piece in added[:-1])
  ethiopic = [piece.piece for piece in added[:-1] if regex.search(r'\p{Ethi}', piece.piece)]
  assert len(ethiopic) > 0.8 * NEW_PIECES  # And digits, which the tiny model lacks.
  assert extension.rows == (512, 768) and extension.step == 0
  assert tags.tag_languages(grown.SerializeToString())[-1] == NEW


def test_old_text_segments_as_before_and_the_new_text_with_new_pieces(runs):
  old = spm.SentencePieceProcessor(model_file=str(runs['nllb'] / 'vocab.model'))
  grown = spm.SentencePieceProcessor(model_file=str(runs['extended'] / 'vocab.model'))
  for name, lines in _old_text().items():
    covered, changed = vocab_merge.changed_segmentations(old, grown, lines)
    assert changed == 0 and covered >= 0.6 * len(lines), name
  new_text = _new_language_text()
  assert vocab_merge.changed_segmentations(old, grown, new_text)[0] == 0  # Never covered.
  unknown = [grown.is_unknown(i) for ids in grown.encode(new_text) for i in ids]
  assert sum(unknown) < 0.01 * len(unknown)


def test_new_rows_are_means_of_the_old_rows_and_old_rows_are_unchanged(runs):
  old, grown = _model(runs['nllb']), _model(runs['extended'])
  before, after = _params(runs['nllb']), _params(runs['extended'])
  path = (layout.DECODER_EMBEDDING, layout.EMBEDDING_TABLE)
  table, rows = np.asarray(before[path]), np.asarray(after[path])
  np.testing.assert_array_equal(rows[:len(old.pieces)], table[:len(old.pieces)])
  for other in set(before) - {path}:
    np.testing.assert_array_equal(np.asarray(after[other]), np.asarray(before[other]))
  ids = {piece.piece: i for i, piece in enumerate(grown.pieces)}
  tag_rows = [i for i, piece in enumerate(old.pieces) if languages.tagged_language(piece.piece)]
  assert len(tag_rows) == 202  # NLLB-200's languages, FLORES-200 codes all.
  np.testing.assert_allclose(rows[ids['<2xyz_Ethi>']], table[tag_rows].mean(0), rtol=1e-6)
  # '▁' and the unknown piece spell '▁' and an Ethiopic letter; the unknown piece alone
  # the letter.
  unknown = ids['<unk>']
  new = [piece for piece in ids if ids[piece] >= len(old.pieces)]
  word_initial = next(piece for piece in new if regex.fullmatch(r'▁\p{Ethi}', piece))
  np.testing.assert_allclose(rows[ids[word_initial]], table[[ids['▁'], unknown]].mean(0),
                             rtol=1e-6)
  letter = next(piece for piece in new if regex.fullmatch(r'\p{Ethi}', piece))
  np.testing.assert_array_equal(rows[ids[letter]], table[unknown])
  assert runs['extension'].unknown > 0.5 * NEW_PIECES


def test_an_output_projection_of_its_own_and_the_logits_bias_grow_as_the_embedding():
  rng = np.random.default_rng(0)
  embedding, kernel, bias = (rng.normal(size=shape).astype(np.float32)
                             for shape in ((6, 4), (4, 6), (6,)))
  params = {layout.DECODER_EMBEDDING: {layout.EMBEDDING_TABLE: embedding},
            'decoder': {layout.OUTPUT_PROJECTION: {layout.KERNEL: kernel},
                        layout.LOGITS_BIAS: bias}}
  grown = language_extension.grown_params(params, 8, [[1, 2], [3]], first=5)
  table = np.asarray(grown[layout.DECODER_EMBEDDING][layout.EMBEDDING_TABLE])
  columns = np.asarray(grown['decoder'][layout.OUTPUT_PROJECTION][layout.KERNEL])
  logits_bias = np.asarray(grown['decoder'][layout.LOGITS_BIAS])
  assert table.shape == (8, 4) and columns.shape == (4, 8) and logits_bias.shape == (8,)
  np.testing.assert_array_equal(table[:5], embedding[:5])  # Row 5 was padding: now a token.
  np.testing.assert_array_equal(columns[:, :5], kernel[:, :5])
  np.testing.assert_allclose(table[5:7], [embedding[1:3].mean(0), embedding[3]])
  np.testing.assert_allclose(columns[:, 5:7].T, [kernel[:, 1:3].mean(1), kernel[:, 3]])
  np.testing.assert_allclose(logits_bias[5:], [bias[1:3].mean(), bias[3], 0.0])


@pytest.fixture(scope='module')
def translators(runs) -> tuple:
  """Greedy translators of the imported run and of the extended one."""
  return tuple(run_loading.load_translator(str(runs[name]), search='greedy',
                                           max_decode_length=12, batch_size=64)
               for name in ('nllb', 'extended'))


def test_old_tokens_get_the_same_logits(translators):
  before, after = translators
  expected = json.loads((NLLB / 'expected.json').read_text(encoding='utf-8'))
  checkpoint_ids = huggingface.vocabulary_of(NLLB, huggingface.read_config(NLLB)).checkpoint_ids
  ours = np.vectorize({int(c): i for i, c in enumerate(checkpoint_ids)}.__getitem__)
  inputs, targets = ours(np.array(expected['input_ids'])), ours(np.array(expected['labels']))
  decoder_inputs = np.pad(targets[:, :-1], ((0, 0), (1, 0)))
  logits = [np.asarray(jax.jit(translator.model.module.apply)(
      {'params': translator.params}, jnp.asarray(inputs), jnp.asarray(decoder_inputs),
      jnp.asarray(targets))) for translator in (before, after)]
  old_tokens = before.tokenizer.get_piece_size()
  np.testing.assert_array_equal(logits[1][..., :old_tokens], logits[0][..., :old_tokens])


def test_old_languages_get_the_same_greedy_translations(translators):
  before, after = translators
  # The lines the old vocabulary covers, of every old language, given to both runs as one
  # direction: one batch, one compilation per run.
  tokenizer = before.tokenizer
  lines = [line for name, text in _old_text().items() for line in text[:12]
           if tokenizer.unk_id() not in tokenizer.encode(line)]
  assert after.translate(lines, 'eng_Latn', 'hau_Latn') == before.translate(
      lines, 'eng_Latn', 'hau_Latn')


def test_commands_that_read_the_run_know_its_new_language(runs, monkeypatch, tmp_path):
  monkeypatch.setattr(languages, 'ADDED_LANGUAGES', Registry('added language'))
  with pytest.raises(UserError, match=r"^--tgt_lang: 'xyz_Ethi' is not a FLORES-200 .*; a "
                     r"language launch/extend_vocab.py added is known where its run's "
                     r'vocabulary is read$'):
    languages.check_language(NEW, '--tgt_lang')
  args = decoding_flags.argparse.Namespace(
      checkpoint_dir=str(runs['extended']), ensemble=None, family_models=None,
      ensemble_combination='mean_log_prob')
  decoding_flags.add_model_languages(args)
  assert languages.check_language(NEW, '--tgt_lang') == NEW
  assert languages.language_index(NEW) == len(languages.FLORES200_CODES)
  direction = Direction('eng_Latn', NEW)
  assert Direction.from_id(direction.id) == direction
  # The old run copies its files but the vocabulary, and names the new one.
  config = (runs['extended'] / 'config.gin').read_text(encoding='utf-8')
  assert f"VOCABULARY_PATH = '{runs['extended'] / 'vocab.model'}'" in config
  assert config.replace(str(runs['extended']), str(runs['nllb'])) == (
      runs['nllb'] / 'config.gin').read_text(encoding='utf-8')
  assert sorted(path.name for path in runs['extended'].iterdir()) == [
      'checkpoints', 'config.gin', 'vocab.model']


def _fine_tuning_bindings(extended: pathlib.Path, run_dir: pathlib.Path, pairs,
                          train_steps: int, lora_rank: int) -> list[str]:
  """The tiny run of conftest trained eng_Latn -> NEW on `pairs`, from `extended`, whose
  config.gin gives the model and vocabulary."""
  for lang, lines in (('eng', [p[0] for p in pairs]), ('new', [p[1] for p in pairs])):
    (run_dir.parent / f'train.{lang}').write_text('\n'.join(lines) + '\n', encoding='utf-8')
  bindings = tiny_run_bindings(run_dir, extended / 'vocab.model', 'new_language', train_steps,
                               LEARNING_RATE='1e-2', WARMUP_STEPS='10', EVAL_EVERY_STEPS='0',
                               CHECKPOINT_EVERY_STEPS=str(train_steps))
  files_corpus = {'new_language': {
      'languages': ['eng_Latn', NEW], 'validation_lines': 4,
      'train': [str(run_dir.parent / 'train.eng'), str(run_dir.parent / 'train.new')]}}
  return [binding for binding in bindings
          if not binding.startswith(('network.TransformerConfig.', 'VOCABULARY_PATH'))] + [
              f'training.TrainConfig.init_from = {str(extended)!r}',
              f'data_tasks.register_from_config.corpora_files = {files_corpus!r}',
              "data_tasks.register_from_config.mixtures = {'new_language': ['new_language']}",
              f'LORA_RANK = {lora_rank}']


@pytest.mark.slow  # A fine-tune each: about 40 s.
@pytest.mark.parametrize('lora_rank, train_steps', [(0, 120), (4, 2)])
def test_a_fine_tune_into_the_new_language_writes_it_with_new_pieces(
    runs, tmp_path, monkeypatch, capsys, lora_rank, train_steps):
  # A model whose embedding was resized for a new language token (transformers' NLLB
  # resize_token_embeddings) translated into it with empty outputs: here, the tag and the
  # pieces start from rows the model reads, and a short fine-tune writes the language.
  pairs = [pair for pair in corpora.get_corpus('cldr').pairs('train', 'eng_Latn', 'amh_Ethi')
           if len(pair[0]) < 40 and not regex.search(r'\d', pair[1])][:400]
  run_dir = tmp_path / 'run' / 'finetuned'
  run_dir.parent.mkdir()
  gin.clear_config()
  gin_utils.parse_gin(['gin/runs/demo.gin', str(runs['extended'] / 'config.gin')],
                      _fine_tuning_bindings(runs['extended'], run_dir, pairs, train_steps,
                                            lora_rank))
  train_configured()
  assert run_layout.RunLayout(run_dir).trained_directions() == [f'eng_Latn-{NEW}']
  source = tmp_path / 'source.eng'
  source.write_text('\n'.join(pair[0] for pair in pairs[:8]) + '\n', encoding='utf-8')
  code, out, err = run_in_process('translate.py', [
      f'--checkpoint_dir={run_dir}', '--src_lang=eng_Latn', f'--tgt_lang={NEW}',
      f'--input={source}', '--search=greedy', '--max_length_ratio=2'], monkeypatch, capsys)
  assert code == 0, err
  outputs = out.splitlines()
  assert len(outputs) == 8 and all(line.strip() for line in outputs)
  if lora_rank:  # The extended run is the frozen base, new rows included.
    assert json.loads((run_dir / 'base_run.json').read_text())['run'] == str(runs['extended'])
    return
  assert sum(bool(regex.search(r'\p{Ethi}', line)) for line in outputs) >= 6, outputs
