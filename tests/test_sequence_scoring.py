"""Tests for t5x_mt.decoding.sequence_scoring: trained runs as scorers of given sentence pairs.

The session's tiny eng->hau run (tests/conftest.py's `trained_run`) is the scored model;
scores are checked against log-probabilities read off the model's own logits.
"""

import shutil

import jax
import numpy as np
import pytest
import scipy

import data_tasks
from t5x_mt.config import run_loading
from t5x_mt.data import input_pipeline
from t5x_mt.data import vocab
from t5x_mt.data.settings import DataSettings
from t5x_mt.data.vocab import sentencepiece_processor
from t5x_mt.core.errors import UserError
from t5x_mt.export import ctranslate2_export

PAIRS = [('Monday', 'Litinin'), ('January and February', 'Janairu da Fabrairu'),
         ('the year 2024', 'shekarar 2024')]
LONGER_PAIRS = [(f'{src} and {src}', f'{tgt} da {tgt}') for src, tgt in PAIRS] * 3


@pytest.fixture(scope='module')
def scorer(trained_run):
  return run_loading.load_scorer(str(trained_run), batch_size=8)


def logit_log_probability(translator, source: str, target: str, reverse: bool = False
                          ) -> float:
  """log p(target | source) summed from log-softmax of the model's teacher-forced logits,
  tagged as the run's t_enc_t_dec strategy tags eng->hau (the decoder's tag not scored);
  with `reverse`, of the target's pieces in reverse order."""
  assert translator.tag_strategy == 't_enc_t_dec'
  tokenizer = translator.tokenizer
  tag = tokenizer.piece_to_id('<2hau_Latn>')
  encoder_ids = [tag] + tokenizer.encode(source) + [vocab.EOS_ID]
  pieces = tokenizer.encode(target)
  target_ids = [tag] + (pieces[::-1] if reverse else pieces) + [vocab.EOS_ID]
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


def segments(batch: dict, row: int) -> list[list[int]]:
  """The packed target sequences of one row of a training batch."""
  tokens, segment_ids = batch['decoder_target_tokens'][row], batch['decoder_segment_ids'][row]
  return [list(tokens[segment_ids == segment]) for segment in range(1, segment_ids.max() + 1)]


def test_right_to_left_training_targets_hold_the_pieces_reversed(trained_run):
  batches = {}
  for reverse in (False, True):
    data_tasks.configure(DataSettings(vocabulary_path=str(trained_run / 'vocab.model'),
                                      reverse_target=reverse))
    batches[reverse] = next(input_pipeline.one_pass_batches(
        'cldr_eng_Latn.hau_Latn', batch_size=2, inputs_length=32, targets_length=32))
  normal, reversed_ = batches[False], batches[True]
  np.testing.assert_array_equal(normal['encoder_input_tokens'],
                                reversed_['encoder_input_tokens'])
  tag = sentencepiece_processor(trained_run / 'vocab.model').piece_to_id('<2hau_Latn>')
  for row in range(2):
    for forward, backward in zip(segments(normal, row), segments(reversed_, row),
                                 strict=True):
      assert forward[0] == backward[0] == tag and forward[-1] == backward[-1] == vocab.EOS_ID
      assert len(forward) > 3 and backward[1:-1] == forward[-2:0:-1]
  # The decoder reads the reversed targets, shifted right, as it reads normal ones.
  shifted = reversed_['decoder_input_tokens'][:, 1:]
  targets = reversed_['decoder_target_tokens'][:, :-1]
  inside = reversed_['decoder_segment_ids'][:, 1:] == reversed_['decoder_segment_ids'][:, :-1]
  np.testing.assert_array_equal(shifted[inside], targets[inside])


@pytest.fixture
def right_to_left_run(trained_run, tmp_path):
  """The session's tiny run, its config marked as trained with REVERSE_TARGET: its model
  writes what the left-to-right run writes, which is then read right to left."""
  run = tmp_path / 'r2l'
  shutil.copytree(trained_run, run)
  with open(run / 'config.gin', 'a', encoding='utf-8') as config:
    config.write('\ndata_tasks.reverse_target.enabled = True\n')
  return run


def test_right_to_left_runs_translate_into_reading_order(trained_run, right_to_left_run):
  forward = run_loading.load_translator(str(trained_run))
  backward = run_loading.load_translator(str(right_to_left_run))
  tokenizer = backward.tokenizer
  pieces = tokenizer.encode('Litinin da Talata')
  assert len(pieces) > 2
  tag = tokenizer.piece_to_id('<2hau_Latn>')
  # What a search generates (the forced tag, the pieces, EOS, padding) becomes the text.
  assert forward.decode_target([tag, *pieces, vocab.EOS_ID, 0, 0]) == 'Litinin da Talata'
  assert backward.decode_target([tag, *pieces[::-1], vocab.EOS_ID, 0, 0]) == (
      'Litinin da Talata')
  assert (forward.reverse_target, backward.reverse_target) == (False, True)


def test_right_to_left_runs_score_the_pieces_reversed(trained_run, right_to_left_run):
  scorer = run_loading.load_scorer(str(right_to_left_run), batch_size=8)
  assert scorer.kind == 'right_to_left'
  sources, targets = zip(*PAIRS)
  np.testing.assert_allclose(
      scorer.score(sources, targets, 'eng_Latn', 'hau_Latn'),
      [logit_log_probability(scorer.translator, s, t, reverse=True) for s, t in PAIRS],
      rtol=1e-5, atol=1e-4)


def test_right_to_left_runs_are_not_exported_for_serving(right_to_left_run, tmp_path):
  with pytest.raises(UserError, match=r'writes its targets right to left \(REVERSE_TARGET\)'):
    ctranslate2_export.export_run(str(right_to_left_run), str(tmp_path / 'ct2'), 'float32')
  assert not (tmp_path / 'ct2').exists()
