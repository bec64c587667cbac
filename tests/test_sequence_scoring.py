"""Tests for t5x_mt.sequence_scoring: trained runs as scorers of given sentence pairs.

The session's tiny eng->hau run (tests/conftest.py's `trained_run`) is the scored model;
scores are checked against log-probabilities read off the model's own logits.
"""

import jax
import numpy as np
import pytest
import scipy

from t5x_mt import sequence_scoring
from t5x_mt.data import tags
from t5x_mt.data import vocab
from t5x_mt.errors import UserError

PAIRS = [('Monday', 'Litinin'), ('January and February', 'Janairu da Fabrairu'),
         ('the year 2024', 'shekarar 2024')]
LONGER_PAIRS = [(f'{src} and {src}', f'{tgt} da {tgt}') for src, tgt in PAIRS] * 3


@pytest.fixture(scope='module')
def scorer(trained_run):
  return sequence_scoring.RunScorer.load(str(trained_run), batch_size=8)


def logit_log_probability(translator, source: str, target: str) -> float:
  """log p(target | source) summed from log-softmax of the model's teacher-forced logits,
  tagged as the run's t_enc_t_dec strategy tags eng->hau (the decoder's tag not scored)."""
  assert translator.tag_strategy == tags.T_ENC_T_DEC
  tokenizer = translator.tokenizer
  tag = tokenizer.piece_to_id('<2hau_Latn>')
  encoder_ids = [tag] + tokenizer.encode(source) + [vocab.EOS_ID]
  target_ids = [tag] + tokenizer.encode(target) + [vocab.EOS_ID]
  logits = jax.jit(translator.model.module.apply)(
      {'params': translator.params}, np.array([encoder_ids]),
      np.array([[0] + target_ids[:-1]]), np.array([target_ids]))
  log_probs = scipy.special.log_softmax(np.asarray(logits[0], np.float64), axis=-1)
  return float(sum(log_probs[position, token]
                   for position, token in enumerate(target_ids) if position > 0))


def test_scores_are_the_models_log_probabilities_of_pieces_and_eos(scorer):
  sources, targets = zip(*PAIRS)
  scores = scorer.score(sources, targets, 'eng_Latn', 'hau_Latn')
  expected = [logit_log_probability(scorer.translator, s, t) for s, t in PAIRS]
  assert scorer.kind == 'translation'
  assert scores.shape == (3,) and scores.dtype == np.float32
  np.testing.assert_allclose(scores, expected, rtol=1e-5, atol=1e-4)
  # A four-step model is far from certain: each pair costs nats per piece.
  assert all(score < -5 for score in scores)


def test_a_pairs_score_does_not_depend_on_its_batch(scorer):
  sources, targets = zip(*PAIRS)
  alone = [scorer.score([s], [t], 'eng_Latn', 'hau_Latn')[0] for s, t in PAIRS]
  # Among longer pairs, in two batches of eight, the short ones padded to longer buckets.
  mixed_sources, mixed_targets = zip(*(LONGER_PAIRS[:4] + PAIRS + LONGER_PAIRS[4:]))
  mixed = scorer.score(mixed_sources, mixed_targets, 'eng_Latn', 'hau_Latn')
  assert len(mixed) == 12
  np.testing.assert_allclose(mixed[4:7], alone, atol=1e-5, rtol=1e-6)
  np.testing.assert_allclose(np.delete(mixed, [4, 5, 6]),
                             scorer.score(*zip(*LONGER_PAIRS), 'eng_Latn', 'hau_Latn'),
                             atol=1e-5, rtol=1e-6)


def test_refuses_what_it_cannot_score(scorer):
  with pytest.raises(UserError, match='fra_Latn: the model was never trained to translate'):
    scorer.score(['Monday'], ['lundi'], 'eng_Latn', 'fra_Latn')
  with pytest.raises(UserError, match=r"target 2: \d+ pieces do not fit the model's 256"):
    scorer.score(['a', 'b'], ['Litinin', ' '.join(['2024'] * 300)], 'eng_Latn', 'hau_Latn')
