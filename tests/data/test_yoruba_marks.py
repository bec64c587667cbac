"""Tests for t5x_mt.data.yoruba.yoruba_marks: stripping Yoruba marks, writing them one per letter,
the lines that train a restorer, and the character vocabulary it reads them with."""

import unicodedata

import pytest

from t5x_mt.runs import run_vocabulary
from t5x_mt.data import corpora
from t5x_mt.data.yoruba import marking_corpus
from t5x_mt.data import readers
from t5x_mt.data import vocab
from t5x_mt.data.yoruba import yoruba_marks
from t5x_mt.core.errors import UserError

ACUTE, GRAVE, MACRON, DOT = '\u0301', '\u0300', '\u0304', '\u0323'
# 'Ẹ̀kọ́' ("lesson") precomposed as far as Unicode goes (ẹ̀ and ọ́ have no single code
# point), fully decomposed, and decomposed with each letter's marks in the other order.
EKO_FORMS = ('\u1eb8\u0300k\u1ecd\u0301', f'E{DOT}{GRAVE}ko{DOT}{ACUTE}',
             f'E{GRAVE}{DOT}ko{ACUTE}{DOT}')


@pytest.mark.parametrize('marked', EKO_FORMS)
def test_split_marks_reads_each_letters_marks_whatever_the_normal_form(marked):
  assert yoruba_marks.split_marks(marked) == ('Eko', [DOT + GRAVE, '', DOT + ACUTE])
  assert yoruba_marks.strip_marks(marked) == 'Eko'
  assert yoruba_marks.has_marks(marked)


@pytest.mark.parametrize('marked, stripped', [
    ('\u1e63\u1ecd\u0301', 'so'),  # ṣọ́: precomposed dot, then ọ + a combining acute.
    ('\u0144 \u01f9 \u1e3f m\u0300', 'n n m m'),  # Syllabic nasals: ń ǹ ḿ m̀.
    ('\u0101 a\u0304', 'a a'),  # A macron, precomposed and combining.
    ('\u01d8', '\u00fc'),  # ǘ: the acute goes, the diaeresis stays, recomposed.
    ('\u00c0w\u1ecdn \u1eb9gb\u1eb9\u0301 il\u00e9', 'Awon egbe ile'),
])
def test_strip_marks_removes_yoruba_marks_only(marked, stripped):
  assert yoruba_marks.strip_marks(marked) == stripped


@pytest.mark.parametrize('text', [
    'Zürich façade', 'Zu\u0308rich',  # Other accents, precomposed or not, as they were.
    '한국어', 'e\u0335 \u00b4', 'plain text, 2 spaces  and a tab\t'])
def test_text_without_yoruba_marks_comes_back_exactly(text):
  assert not yoruba_marks.has_marks(text)
  assert yoruba_marks.strip_marks(text) == text
  assert yoruba_marks.split_marks(text) == (text, [''] * len(text))


def test_allowed_markings_follow_the_letter():
  all_markings = tuple(range(len(yoruba_marks.MARKINGS)))
  tones = (0, 1, 2, 3)
  dot = (0, 4)
  assert yoruba_marks.allowed_markings('aeEsnMb.') == [
      tones, all_markings, all_markings, dot, tones, tones, (0,), (0,)]
  # A letter with a combining character after it (a stroke) is left as it is.
  assert yoruba_marks.allowed_markings('e\u0335o') == [(0,), (0,), all_markings]


def test_apply_markings_composes_and_strips_back():
  marked = yoruba_marks.apply_markings('Eko', [6, 0, 5])  # Dot + grave, none, dot + acute.
  assert marked == EKO_FORMS[0] == unicodedata.normalize('NFC', marked)
  assert yoruba_marks.strip_marks(marked) == 'Eko'


@pytest.mark.parametrize('text, limit, pieces', [
    ('abc def ghi', 5, ['abc ', 'def ', 'ghi']),  # After the last space in reach.
    ('abcdefgh', 3, ['abc', 'def', 'gh']),  # No space: at the limit.
    ('abe\u0335cd', 3, ['ab', 'e\u0335c', 'd']),  # Never before a combining character.
    ('short', 62, ['short']),
])
def test_chunks_join_back_into_the_text(text, limit, pieces):
  assert yoruba_marks.chunks(text, limit) == pieces


def test_chunk_pairs_cut_the_target_where_the_line_is_cut():
  stripped, target = yoruba_marks.decoder_target('Ọmọ náà ń ṣeré ' * 5)
  pairs = marking_corpus.chunk_pairs(stripped, target)
  assert [len(chunk) for chunk, _ in pairs] == [60, 15]  # Four times 'Omo naa n sere ', one.
  assert pairs[1] == ('Omo naa n sere ', 'Ọmọ náà ń ṣeré ')
  assert ''.join(chunk_target for _, chunk_target in pairs) == target


def test_decoder_target_writes_one_character_per_character():
  # Ọmọ ṣé ń: every marked letter has a code point of its own.
  assert yoruba_marks.decoder_target('\u1eccm\u1ecd \u1e63\u00e9 \u0144') == (
      'Omo se n', '\u1eccm\u1ecd \u1e63\u00e9 \u0144')
  # Ẹ̀kọ́ m̀: those without one are private-use characters, one for each letter and marking.
  stripped, target = yoruba_marks.decoder_target(EKO_FORMS[1] + ' m\u0300')
  assert stripped == 'Eko m' and len(target) == len(stripped)
  assert [unicodedata.category(char) for char in target] == ['Co', 'Ll', 'Co', 'Zs', 'Co']
  assert len(set(target)) == 5
  written = {yoruba_marks.decoder_letter(letter, marking)
             for letter in 'aeiounmsAEIOUNMS'
             for marking in yoruba_marks.allowed_markings(letter)[0]}
  # Tones alone on a, i, u, n, m; tones and the dot on e, o; the dot alone on s.
  assert len(written) == 2 * (5 * 4 + 2 * 8 + 2) == 76
  assert yoruba_marks.decoder_letter('b', 0) == 'b'


@pytest.mark.parametrize('unwritable', [
    'e\u0301\u0301',  # A doubled accent.
    'a\u0300\u0301',  # Two tones.
    'b\u0301',  # A tone on a letter that takes none.
    '\u1ea1',  # ạ: a dot on a vowel that takes none.
    's\u0301',  # A tone on s.
])
def test_decoder_target_refuses_marks_a_restorer_cannot_write(unwritable):
  assert yoruba_marks.decoder_target(unwritable) is None


def test_training_examples_are_the_distinct_fully_marked_lines():
  marked = 'Ọmọ náà ń ṣeré'
  assert yoruba_marks.training_examples([
      marked, marked,
      'Awon omo naa',  # No tones: typed unmarked.
      'Ọmọ rẹ wa nile loni',  # Dots alone: 1 toned vowel of 8 is under the share.
      'TBD1 náà ń ṣeré',  # A reserved piece spelt out.
      'Ọmọ\tnáà',  # A control character.
      'ﬁ náà ń ṣeré',  # A character its normalisation changes.
      'é\u0301 náà',  # A mark the restorer cannot write.
  ]) == {marked: yoruba_marks.decoder_target(marked)}
  assert yoruba_marks.toned_vowel_share('Ọmọ rẹ wa nile loni') == pytest.approx(0.0)
  assert yoruba_marks.toned_vowel_share(marked) == pytest.approx(3 / 6)


def test_character_vocabulary_reads_one_piece_per_character(tmp_path):
  lines = ['Ọmọ náà ń ṣeré', 'Ilé wa tóbi púpọ̀']
  texts = [text for line in lines for text in yoruba_marks.decoder_target(line)]
  path = vocab.train_sentencepiece({'yor_Latn': texts}, str(tmp_path / 'chars.model'),
                                   vocab_size=1000, model_type='char')
  processor = vocab.sentencepiece_processor(path)
  for text in texts + ['  Omo  wa ']:
    pieces = processor.encode(text, out_type=str)
    assert pieces == ['\u2581' if char == ' ' else char for char in text]
  assert processor.piece_to_id('<2yor_Latn>') != processor.unk_id()


def test_vocabulary_config_names_an_unknown_model_type():
  with pytest.raises(UserError, match=r"runs\.VocabularyConfig\.model_type: 'bpe'"):
    run_vocabulary.VocabularyConfig(model_type='bpe')


def test_yoruba_diacritics_corpus_never_holds_flores_lines():
  if readers.shared_data_dir() is None:
    pytest.skip('the shared data folder is absent')
  corpus = corpora.get_corpus('yoruba_diacritics')
  train = corpus.sentences('train', 'yor_Latn')
  validation = corpus.sentences('validation', 'yor_Latn')
  flores = corpora.get_corpus('flores200').sentences('validation', 'yor_Latn')
  assert len(train) > 1000 and len(validation) > 100
  assert not set(flores) & (set(train) | set(validation))
  assert not set(train) & set(validation)
  # Each line is cut into the chunks a restorer reads, its target where its text is cut.
  for split, lines in (('train', train), ('validation', validation)):
    chunks = corpus.pairs(split, 'yor_Latn', 'yor_Latn')
    assert max(len(stripped) for stripped, _ in chunks) == yoruba_marks.CHUNK_CHARACTERS
    whole = [yoruba_marks.decoder_target(line) for line in lines]
    assert [''.join(text) for text in zip(*chunks)] == [''.join(text) for text in zip(*whole)]
  with pytest.raises(UserError, match='holds yor_Latn-yor_Latn'):
    corpus.pairs('train', 'eng_Latn', 'yor_Latn')
