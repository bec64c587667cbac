"""In-domain selection: each scorer ranks the in-domain half of a two-domain mix above the
other, the n-gram model's probabilities are Witten-Bell's, and thresholds nest."""

import math

import numpy as np
import pytest

from t5x_mt.data.selection import scorers
from t5x_mt.core.errors import UserError

MEDICINE = ['patient', 'dose', 'tablet', 'fever', 'clinic', 'nurse', 'infection', 'vaccine']
FOOTBALL = ['goal', 'striker', 'referee', 'match', 'penalty', 'keeper', 'league', 'corner']


def _pairs(words, count, seed):
  rng = np.random.default_rng(seed)
  pairs = []
  for _ in range(count):
    chosen = rng.choice(words, 3, replace=False)
    source = f'the {chosen[0]} and the {chosen[1]} after the {chosen[2]}'
    target = f'le {chosen[0]}s et la {chosen[1]}s apres {chosen[2]}s'
    pairs.append((source, target))
  return pairs


def _in_domain_half_ranks_first(scores, half):
  """The probability that a random in-domain candidate outscores a random other (AUC)."""
  inside, outside = scores[:half], scores[half:]
  return np.mean(inside[:, None] > outside[None, :])


@pytest.fixture(scope='module')
def mix():
  candidates = _pairs(MEDICINE, 60, seed=1) + _pairs(FOOTBALL, 60, seed=2)
  return _pairs(MEDICINE, 20, seed=3), candidates


@pytest.mark.parametrize('scorer', [scorers.CrossEntropyDifference,
                                    scorers.DomainClassifier])
def test_each_scorer_ranks_the_in_domain_half_above_the_other(mix, scorer):
  sample, candidates = mix
  scores = scorer.train(sample, candidates).scores(candidates)
  assert _in_domain_half_ranks_first(scores, 60) > 0.98


def test_witten_bell_probabilities_by_hand():
  model = scorers.CharNgramModel.train(['ab'], order=2)
  # Unigram: a, b and the end once each (3 tokens, 3 types); the uniform floor is 1/4.
  unigram_b = (1 + 3 * 0.25) / (3 + 3)
  assert model.probability('', 'b') == pytest.approx(unigram_b)
  # After 'a': b once (1 token, 1 type), interpolated with the unigram.
  assert model.probability('a', 'b') == pytest.approx((1 + unigram_b) / 2)
  unseen = 3 * 0.25 / 6
  assert model.probability('a', 'z') == pytest.approx(unseen / 2)
  bits = -(math.log2(model.probability('\x02', 'a')) + math.log2(model.probability('a', 'b'))
           + math.log2(model.probability('b', '\x03'))) / 3
  assert model.cross_entropy('ab') == pytest.approx(bits)


def test_thresholds_give_nested_selections_that_shrink(mix):
  sample, candidates = mix
  scores = scorers.DomainClassifier.train(sample, candidates).scores(candidates)
  chosen = scorers.selections(scores, [0.3, 0.5, 0.7, 0.9])
  sizes = [len(indices) for indices in chosen]
  assert sizes == sorted(sizes, reverse=True) and sizes[0] > sizes[-1]
  for wider, narrower in zip(chosen, chosen[1:]):
    assert set(narrower) <= set(wider)
  ranks = scorers.percentile_ranks(np.asarray([3.0, 1.0, 2.0, 2.0]))
  np.testing.assert_allclose(ranks, [1.0, 0.0, 1 / 3, 1 / 3])


def test_an_empty_sample_or_descending_thresholds_are_refused(mix):
  _, candidates = mix
  with pytest.raises(UserError, match='the in-domain sample is empty'):
    scorers.DomainClassifier.train([('', ' ')], candidates)
  with pytest.raises(UserError, match='thresholds must ascend'):
    scorers.selections(np.zeros(3), [0.9, 0.7])


def test_classifier_features_count_each_sides_ngrams_apart_by_hand():
  # ' ab ' gives ' ' twice and a, b, ' a', 'ab', 'b ' once; ' c ' gives ' ' twice and c,
  # ' c', 'c ' once. Sides hashed together would count ' ' four times.
  features = scorers._features([('ab', 'c')], 1 << 18, (1, 2))  # pylint: disable=protected-access
  counts = np.asarray([2, 1, 1, 1, 1, 1, 2, 1, 1, 1])
  np.testing.assert_allclose(np.sort(features.data),
                             np.sort(counts / np.sqrt(np.sum(counts ** 2))))
  assert features.shape == (1, 1 << 18)


def test_percentile_ranks_place_other_scores_on_the_candidates_scale():
  candidates = np.asarray([1.0, 2.0, 3.0])
  np.testing.assert_allclose(scorers.percentile_ranks(np.asarray([0.5, 2.0, 2.5, 9.0]),
                                                        among=candidates),
                             [0.0, 0.5, 1.0, 1.0])


def test_the_models_memory_of_ngrams_stays_bounded_and_changes_no_score(monkeypatch):
  lines = ['the dose of the tablet', 'the nurse and the patient']
  unbounded = scorers.CharNgramModel.train(lines).cross_entropy('the dose of the vaccine')
  monkeypatch.setattr(scorers, '_MEMORY_LIMIT', 5)
  model = scorers.CharNgramModel.train(lines)
  assert model.cross_entropy('the dose of the vaccine') == pytest.approx(unbounded)
  assert len(model._memory) <= 5  # pylint: disable=protected-access
