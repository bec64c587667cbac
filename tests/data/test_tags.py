"""Tests for t5x_mt.data.tags: where each strategy puts the tags, down to the token ids."""

import dataclasses

import pytest
import seqio
import sentencepiece as spm

import data_tasks
from t5x_mt.data import corpora
from t5x_mt.data import corpus_types
from t5x_mt.data import tags
from t5x_mt.data import vocab
from t5x_mt.core.errors import UserError

CORPUS = 'test_tags'
ROWS = [{'eng_Latn': f'the cat number {i} sleeps', 'hau_Latn': f'kyanwa na {i} yana barci'}
        for i in range(8)]
# Tag ids follow pad, eos, unk in the order of tags.special_symbols() (FLORES-200 order).
ENG_TAG_ID, HAU_TAG_ID = 51, 70
ENG_HAU_DIRECTION_ID = 48 * 256 + 67 + 1  # language_index: eng_Latn 48, hau_Latn 67.
LENGTHS = {'inputs': 64, 'targets': 64}  # Long enough that nothing is trimmed.


@pytest.fixture(scope='module')
def model_path(tmp_path_factory) -> str:
  corpora.register_corpus(CORPUS, lambda: corpus_types.MultiwayCorpus(CORPUS, {'train': ROWS}),
                          overwrite=True)
  data_tasks.register_direction_task(CORPUS, 'eng_Latn', 'hau_Latn')
  sentences = {lang: [row[lang] for row in ROWS] for lang in ('eng_Latn', 'hau_Latn')}
  return vocab.train_sentencepiece(sentences, str(tmp_path_factory.mktemp('spm') / 't.model'),
                                   vocab_size=1000)


@pytest.fixture(autouse=True)
def run_config(model_path):
  """The run's vocabulary; conftest's default_data_settings resets it after each test."""
  data_tasks.use_vocabulary(model_path)


def _first_example(strategy: str) -> dict:
  data_tasks.configure(dataclasses.replace(data_tasks.settings(), tag_strategy=strategy))
  task = seqio.get_mixture_or_task(data_tasks.task_name(CORPUS, 'eng_Latn', 'hau_Latn'))
  dataset = task.get_dataset(sequence_length=LENGTHS, split='train', shuffle=False)
  return next(dataset.as_numpy_iterator())


def test_tags_for_each_strategy():
  assert tags.tags_for('t_enc', 'eng_Latn', 'hau_Latn') == tags.Tags('<2hau_Latn>', None)
  assert tags.tags_for('s_enc_t_dec', 'eng_Latn', 'hau_Latn') == tags.Tags(
      '<2eng_Latn>', '<2hau_Latn>')
  assert tags.tags_for('t_enc_t_dec', 'eng_Latn', 'hau_Latn') == tags.Tags(
      '<2hau_Latn>', '<2hau_Latn>')
  assert tags.DEFAULT_TAG_STRATEGY == 't_enc_t_dec'


@pytest.mark.parametrize('strategy, encoder_tag, decoder_tags', [
    ('t_enc', HAU_TAG_ID, []),
    ('s_enc_t_dec', ENG_TAG_ID, [HAU_TAG_ID]),
    ('t_enc_t_dec', HAU_TAG_ID, [HAU_TAG_ID]),
])
def test_token_ids_fed_to_encoder_and_decoder(model_path, strategy, encoder_tag, decoder_tags):
  processor = spm.SentencePieceProcessor(model_file=model_path)
  assert processor.piece_to_id('<2eng_Latn>') == ENG_TAG_ID
  assert processor.piece_to_id('<2hau_Latn>') == HAU_TAG_ID
  example = _first_example(strategy)
  source_ids = processor.encode('the cat number 0 sleeps')
  target_ids = processor.encode('kyanwa na 0 yana barci')
  assert example['inputs'].tolist() == [encoder_tag] + source_ids + [1]
  assert example['targets'].tolist() == decoder_tags + target_ids + [1]
  assert example['targets_direction'].tolist() == [ENG_HAU_DIRECTION_ID] * (
      len(decoder_tags) + len(target_ids) + 1)


def test_default_strategy_tags_both_sides():
  example = _first_example(tags.DEFAULT_TAG_STRATEGY)
  assert example['inputs'][0] == example['targets'][0] == HAU_TAG_ID


def test_unknown_strategy_names_the_gin_parameter():
  with pytest.raises(UserError, match=r"tag_strategy\.strategy: unknown tag strategy 'tenc'"):
    _first_example('tenc')
  with pytest.raises(UserError, match='choose one of t_enc, s_enc_t_dec, t_enc_t_dec'):
    tags.tags_for('tenc', 'eng_Latn', 'hau_Latn')


def test_vocabulary_without_tags_is_refused(tmp_path):
  # A model trained without the user-defined symbols (e.g. someone else's SentencePiece
  # file) would map every tag to <unk>.
  prefix = str(tmp_path / 'plain')
  spm.SentencePieceTrainer.train(
      sentence_iterator=iter([row['eng_Latn'] for row in ROWS] * 20), model_prefix=prefix,
      vocab_size=40, hard_vocab_limit=False, pad_id=0, eos_id=1, unk_id=2, bos_id=-1,
      minloglevel=2)
  data_tasks.use_vocabulary(prefix + '.model')
  with pytest.raises(UserError, match='plain.model: the vocabulary has no piece <2hau_Latn>'):
    _first_example('t_enc')


def test_special_symbols_hold_every_language_tag_then_bt_da_and_spares():
  symbols = tags.special_symbols()
  assert len(symbols) == 238 and len(set(symbols)) == 238
  assert symbols[:2] == ['<2ace_Arab>', '<2ace_Latn>']
  assert symbols[204:208] == ['<BT>', '<DA>', 'TBD0', 'TBD1']
  assert symbols[-1] == 'TBD31'
  assert tags.special_symbols(num_spare=2)[-2:] == ['TBD0', 'TBD1']


BT_TAG_ID, DA_TAG_ID = 207, 208  # special_symbols()[204:206], after pad, eos and unk.


def _synthetic_example(scheme: str, src_lang: str, tgt_lang: str) -> dict:
  """The first s_enc_t_dec example of a back-translated eng->hau corpus (eng synthetic)."""
  name = f'test_tags_synthetic_{scheme}'
  pairs = [(row['eng_Latn'], row['hau_Latn']) for row in ROWS]
  corpora.register_corpus(name, lambda: corpus_types.SyntheticCorpus(
      name, 'train', {('eng_Latn', 'hau_Latn'): pairs},
      {('eng_Latn', 'hau_Latn'): ('eng_Latn', scheme)}), overwrite=True)
  task = data_tasks.register_direction_task(name, src_lang, tgt_lang)
  data_tasks.configure(dataclasses.replace(data_tasks.settings(), tag_strategy='s_enc_t_dec'))
  dataset = seqio.get_mixture_or_task(task).get_dataset(sequence_length=LENGTHS, split='train',
                                                        shuffle=False)
  return next(dataset.as_numpy_iterator())


@pytest.mark.parametrize('scheme, src_lang, tgt_lang, inputs, targets', [
    # Caswell: <BT> after the language tag, before the (synthetic) source.
    ('bt', 'eng_Latn', 'hau_Latn', [ENG_TAG_ID, BT_TAG_ID, 'eng', 1], [HAU_TAG_ID, 'hau', 1]),
    # Tencent: the synthetic side ends in <DA>, source [x'; <DA>] or target [y'; <DA>].
    ('da', 'eng_Latn', 'hau_Latn', [ENG_TAG_ID, 'eng', DA_TAG_ID, 1], [HAU_TAG_ID, 'hau', 1]),
    ('da', 'hau_Latn', 'eng_Latn', [HAU_TAG_ID, 'hau', 1], [ENG_TAG_ID, 'eng', DA_TAG_ID, 1]),
    # Reversed, the pair is still synthetic: <BT> still marks the source.
    ('bt', 'hau_Latn', 'eng_Latn', [HAU_TAG_ID, BT_TAG_ID, 'hau', 1], [ENG_TAG_ID, 'eng', 1]),
    ('none', 'eng_Latn', 'hau_Latn', [ENG_TAG_ID, 'eng', 1], [HAU_TAG_ID, 'hau', 1]),
])
def test_synthetic_pairs_carry_their_scheme_tags(model_path, scheme, src_lang, tgt_lang,
                                                 inputs, targets):
  processor = spm.SentencePieceProcessor(model_file=model_path)
  assert processor.piece_to_id('<BT>') == BT_TAG_ID and processor.piece_to_id('<DA>') == DA_TAG_ID
  text = {'eng': processor.encode(ROWS[0]['eng_Latn']),
          'hau': processor.encode(ROWS[0]['hau_Latn'])}

  def expand(ids):
    return [i for item in ids for i in (text[item] if isinstance(item, str) else [item])]

  example = _synthetic_example(scheme, src_lang, tgt_lang)
  assert example['inputs'].tolist() == expand(inputs)
  assert example['targets'].tolist() == expand(targets)


def test_unknown_synthetic_scheme_is_named():
  with pytest.raises(UserError, match=r"--tag: unknown synthetic-data tag scheme 'caswell'; "
                     'choose one of bt, da, none'):
    tags.check_synthetic_tag_scheme('caswell', '--tag')
