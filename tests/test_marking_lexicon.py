"""Tests for t5x_mt.data.yoruba.marking_lexicon: word spans, the counts of markings per word, the
log-prior a restorer adds to its model, and the lexicon's JSON, on examples counted by hand."""

import numpy as np
import pytest

from t5x_mt.data.yoruba import marking_lexicon
from t5x_mt.data.yoruba import yoruba_marks
from t5x_mt.core.errors import UserError

ACUTE = yoruba_marks.MARKINGS.index(yoruba_marks.ACUTE)
GRAVE = yoruba_marks.MARKINGS.index(yoruba_marks.GRAVE)
DOT = yoruba_marks.MARKINGS.index(yoruba_marks.DOT_BELOW)
# 'ni' seen as 'ní' three times and bare once; 'o' as 'ó' and as 'ọ'.
TRAINING = ['ó ní', 'ní ọ', 'Ní', 'ni']


def test_words_are_runs_of_letters():
  assert [range(0, 3), range(4, 7), range(9, 11)] == marking_lexicon.words('Omo naa, wa')
  assert marking_lexicon.words('e\u0335 12 b') == [range(0, 2), range(6, 7)]


def test_the_prior_is_the_smoothed_share_of_each_marking_a_letter_takes():
  lexicon = marking_lexicon.MarkingLexicon.from_lines(TRAINING)
  assert lexicon.most_frequent('NI') == ('', yoruba_marks.ACUTE)
  assert lexicon.most_frequent('wa') is None
  prior = lexicon.log_prior('ni wa')
  # 'i' takes 4 markings (bare, three tones): acute 3 + 0.5, bare 1 + 0.5, the other two
  # 0.5 each, over 4 + 4 * 0.5 = 6.
  i_row = np.exp(prior[1, [0, ACUTE, GRAVE, 3]])
  np.testing.assert_allclose(i_row, [1.5 / 6, 3.5 / 6, 0.5 / 6, 0.5 / 6], rtol=1e-6)
  # 'n' was always bare: 4.5 over 4 + 4 * 0.5 (n takes the tones, not the dot).
  np.testing.assert_allclose(np.exp(prior[0, 0]), 4.5 / 6, rtol=1e-6)
  # Markings a letter cannot take, the space and the unknown word get no prior.
  assert prior[1, DOT] == 0 and not prior[2:].any()


def test_a_lexicon_reads_back_what_it_wrote_and_refuses_anything_else():
  lexicon = marking_lexicon.MarkingLexicon.from_lines(TRAINING)
  again = marking_lexicon.MarkingLexicon.from_json(lexicon.to_json(), 'lexicon.json')
  np.testing.assert_array_equal(again.log_prior('o ni'), lexicon.log_prior('o ni'))
  assert len(again) == len(lexicon) == 2  # ni, and o (as ó and as ọ).
  with pytest.raises(UserError, match='^lexicon.json: not a marking lexicon'):
    marking_lexicon.MarkingLexicon.from_json('[1, 2]', 'lexicon.json')
