"""Tests for t5x_mt.evaluation.diacritic_accuracy: letter and word accuracy of restored Yoruba, and the
identity and dictionary baselines, on an example counted by hand."""

import pytest

from t5x_mt.evaluation import diacritic_accuracy
from t5x_mt.data.yoruba import yoruba_marks
from t5x_mt.core.errors import UserError

# 'Ọmọ' twice dotted and once bare, 'náà' once, 'wa' bare once.
TRAINING = ['Ọmọ náà lọ', 'ọmọ rẹ̀', 'Omo wa']
REFERENCE = 'Ọmọ náà wá.'
STRIPPED = 'Omo naa wa.'


def test_baselines_score_as_counted_by_hand():
  # Markable letters: O m o, n a a, a (w and the full stop take no mark): 7; words: 3.
  # Identity leaves all bare: right where the reference is bare too (m, n): 2 of 7 letters,
  # no word. The dictionary marks 'omo' as seen most (dotted) and 'naa' as 'náà', and
  # leaves 'wa' bare as seen: every letter but the last a, the first two words.
  identity = diacritic_accuracy.accuracy(diacritic_accuracy.identity([STRIPPED]), [REFERENCE])
  assert identity == diacritic_accuracy.Accuracy(letters=7, right_letters=2, words=3,
                                                 right_words=0)
  dictionary = diacritic_accuracy.Dictionary(TRAINING)
  assert dictionary.restore(STRIPPED) == 'Ọmọ náà wa.'
  scores = diacritic_accuracy.accuracy(dictionary.restore_lines([STRIPPED]), [REFERENCE])
  assert (scores.char_accuracy, scores.word_accuracy) == (pytest.approx(6 / 7),
                                                          pytest.approx(2 / 3))
  assert (identity.char_accuracy, identity.word_accuracy) == (pytest.approx(2 / 7), 0.0)


def test_accuracy_sums_lines_and_reads_any_normal_form():
  decomposed = 'O\u0323mo\u0323 na\u0301a\u0300 wa\u0301.'
  both = diacritic_accuracy.accuracy([decomposed, STRIPPED], [REFERENCE, REFERENCE])
  assert both == diacritic_accuracy.Accuracy(letters=14, right_letters=9, words=6,
                                             right_words=3)


def test_a_restoration_that_changes_letters_is_refused():
  with pytest.raises(UserError, match='line 2: the restored line does not strip'):
    diacritic_accuracy.accuracy([STRIPPED, 'Omo naa wo.'], [REFERENCE, REFERENCE])
  with pytest.raises(UserError, match='1 restored lines for 2 references'):
    diacritic_accuracy.accuracy([STRIPPED], [REFERENCE, REFERENCE])


def test_dictionary_keys_words_lower_cased_and_marks_them_as_written():
  dictionary = diacritic_accuracy.Dictionary(TRAINING)
  assert len(dictionary) == 5  # omo, naa, lo, re, wa.
  assert dictionary.restore('OMO') == '\u1eccM\u1ecc'  # ỌMỌ
  assert yoruba_marks.strip_marks(dictionary.restore(STRIPPED)) == STRIPPED
