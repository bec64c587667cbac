"""Filters decide a batch of pairs as they decide each pair alone, whatever its neighbours."""

from collections import Counter

import numpy as np
import pytest

from t5x_mt.data.cleaning import pipeline
from t5x_mt.data.cleaning.batches import PairBatch
from t5x_mt.data.cleaning.batches import Texts
from t5x_mt.data.cleaning.io import Record
from t5x_mt.data.cleaning.steps import Pair
from t5x_mt.data.cleaning.steps import STEPS
from t5x_mt.data.cleaning.steps import build_step

RULE_FILTERS = sorted(name for name, cls in STEPS.items() if cls.kind == 'filter'
                      and name not in ('language_id', 'mdl_repeat', 'decontaminate'))

# Neighbours that could leak into each other's decisions: text ends that continue a
# repeat in the next text, marks at text ends, line breaks inside texts, empty texts,
# characters outside the Basic Multilingual Plane, a lone surrogate.
PAIRS = [Pair(*texts) for texts in [
    ('abcab', 'cabcab'), ('xyzxyzxy', 'zxyzxyz'), ('Sooo', 'oo good'), ('hahaha', 'ha'),
    ('Are you there?', '"Tu es là ?"'), ('Wait...', 'Attends…'), ('Note:', 'Remarque'),
    ('', 'vide'), ('  ', ' \t'), ('line one\nline two', 'ligne un\nligne deux'),
    ('😀😀😀😀😀', 'emoji'), ('a😀b😀a😀b😀a😀b😀', 'x'), ('bad \ud800 half', 'mauvais'),
    ('In 2017 we had 3 cats', 'En 2017 nous avions 4 chats'), ('Paid 1,000', 'Payé 1 000'),
    ('See www.example.org', 'Voir'), ('mail a@b.example', 'courrier'),
    ('if (x == 1) return;', 'si x vaut 1'), ('std::vector', 'vecteur'),
    ('Nairobi (Kenya)', 'Nairobi'), ('Hello World', 'hello  world'), ('STRASSE', 'straße'),
    ('a' * 101, 'b'), ('word ' * 30, 'mot ' * 30), ('!!! ??? ...', 'Quoi'),
    ('Привет мир and', 'Bonjour'), ('x' * 70, 'y' * 10), ('one two three', 'un'),
    ('buy now buy now buy now buy now', 'achetez'), ('The end.', 'La fin.'),
    ('The meeting starts at 9 tomorrow.', 'Taron zai fara da karfe 9 gobe.'),
    ('z' * 501, 'long'),
]]


@pytest.mark.parametrize('name', RULE_FILTERS)
@pytest.mark.parametrize('langs', [('eng_Latn', 'fra_Latn'), ('eng_Latn', 'jpn_Jpan')])
def test_a_batch_is_decided_as_each_pair_alone(name, langs):
  step = build_step(name)
  alone = [step.bind(*langs)(pair) for pair in PAIRS]
  together = step.bind_batch(*langs)(PairBatch(PAIRS))
  assert together.tolist() == alone
  assert not all(alone) or name == 'mined_scores'  # Every rule drops one of PAIRS.


def test_repeats_are_found_within_texts_and_never_across_them():
  texts = Texts(['abcab', 'cabcab', 'xx', 'xxx', 'Soooo', 'Sooooo', 'ab' * 4, 'ab' * 3 + 'a',
                 'x😀y' * 3, 'x😀y' * 2])
  units = [(1, 4), (2, 6), (3, 6)]  # 5 equal characters, 4 pairs, 3 copies of 3.
  assert texts.repeating(units).tolist() == [False, False, False, False, False, True, True,
                                             False, True, False]


def test_per_text_values_match_python_string_methods():
  texts = ['', ' a  bb\tccc ', 'x\u3000y\u00a0z', 'one', '\n\n', 'naïve café 3']
  values = Texts(texts)
  assert values.words.tolist() == [len(text.split()) for text in texts]
  assert values.nonspace.tolist() == [len(''.join(text.split())) for text in texts]
  assert values.longest_word().tolist() == [max(map(len, text.split()), default=0)
                                            for text in texts]
  assert values.containing('a').tolist() == ['a' in text for text in texts]


def _outcomes(batch_pairs):
  records = [Record(index, pair, pair[:2]) for index, pair in enumerate(PAIRS * 3)]
  cleaner = pipeline.PairCleaner(pipeline.resolve_specs(['whitespace', *RULE_FILTERS]),
                                 'eng_Latn', 'fra_Latn', batch_pairs=batch_pairs)
  rewritten = Counter()
  return [(record.index, pair, step) for record, pair, step in
          cleaner.clean(records, rewritten)], rewritten


@pytest.mark.parametrize('batch_pairs', [2, 7, 1000])
def test_the_cleaner_decides_alike_whatever_the_batch_size(batch_pairs):
  one_by_one, rewritten = _outcomes(batch_pairs=1)
  assert _outcomes(batch_pairs) == (one_by_one, rewritten)
  assert rewritten == {'whitespace': 3 * 4}
  kept = [index for index, pair, step in one_by_one if step is None]
  assert kept == [30, 62, 94]  # The Hausa pair with the same number survives, 3 times.
  assert Counter(step for _, _, step in one_by_one) == {
      None: 3, 'min_chars': 51, 'char_ratio': 18, 'end_punctuation_mismatch': 6,
      'identical': 6, 'empty': 3, 'invalid_unicode': 3, 'repeated_units': 3,
      'foreign_script': 3}


def test_rows_left_by_a_filter_keep_their_values():
  batch = PairBatch(PAIRS)
  first = batch.select(np.arange(len(PAIRS)) % 3 != 0)   # A view of two thirds.
  second = first.select(np.arange(len(first)) % 2 == 0)  # Under half: a batch of its own.
  expected = [pair for number, pair in enumerate(PAIRS) if number % 3 == 1]
  assert second.pairs == expected
  assert second.src.lengths.tolist() == [len(pair.src) for pair in expected]
  assert second.tgt.words.tolist() == [len(pair.tgt.split()) for pair in expected]
