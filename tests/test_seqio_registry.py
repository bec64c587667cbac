"""The seqio registry reused by another program: vocabulary chosen without gin, seqio's own
feature converter, the same ids as t5x_mt's input pipeline, and seqio's own Evaluator
scoring BLEU and chrF++ with the Tasks' postprocessing and metric function."""

import json
import os
import subprocess
import sys

import gin
import numpy as np
import pytest
import sacrebleu
import sentencepiece as spm

import data_tasks
from data_tasks import from_gin
from t5x_mt.data import corpora
from t5x_mt.data import input_pipeline
from t5x_mt.data import mixtures
from t5x_mt.data import vocab

MIXTURE = 'cldr_demo'
TASK = 'cldr_eng_Latn.hau_Latn'  # One of the mixture's tasks.
LENGTHS = {'inputs': 64, 'targets': 64}
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

EVALUATED_EXAMPLES = 12
# Runs in a fresh interpreter: imports only the registry (never launch code or a gin file),
# chooses the vocabulary with the documented call, and reads the mixture through seqio.
# Then, as a T5X program would, it runs seqio's own Evaluator over TASK with a predict_fn
# that answers each example with its reference's pieces (the last one dropped on odd
# examples) wrapped in the pieces a model may emit that are no text: the forced decoder
# tag first, then <BT>, <DA> or a spare TBD piece at the start and in the middle.
_OTHER_PROGRAM = """
import json, sys
import seqio
import tensorflow as tf
import data_tasks

data_tasks.use_vocabulary(sys.argv[1])
mixture = seqio.get_mixture_or_task('cldr_demo')
vocabulary = mixture.tasks[0].output_features['inputs'].vocabulary


def pairs(name):
  dataset = seqio.get_dataset(
      name, task_feature_lengths={'inputs': 64, 'targets': 64}, dataset_split='validation',
      shuffle=False, num_epochs=1, seed=0,
      feature_converter=seqio.EncDecFeatureConverter(pack=False))
  return [[[int(i) for i in ex['encoder_input_tokens'] if i],
           [int(i) for i in ex['decoder_target_tokens'] if i]]
          for ex in dataset.as_numpy_iterator()]


reserved = [vocabulary.sentencepiece.tokenizer.piece_to_id(piece)
            for piece in ('<BT>', '<DA>', 'TBD7')]


def predict_fn(dataset):
  predictions = []
  for index, features in dataset.as_numpy_iterator():
    tag, *pieces, eos = [int(i) for i in features['decoder_target_tokens'] if i]
    pieces = pieces[:-1] if index % 2 else pieces
    middle = len(pieces) // 2
    ids = ([tag, reserved[index % 3]] + pieces[:middle] + [reserved[(index + 1) % 3]]
           + pieces[middle:] + [eos])
    predictions.append((index, ids + [0] * (80 - len(ids))))
  return predictions


# seqio's Evaluator measures every Task feature: the direction ids t5x_mt's losses use
# are passed through.
converter = seqio.EncDecFeatureConverter(pack=False, passthrough_features={
    'targets_direction': seqio.FeatureConverter.FeatureSpec(dtype=tf.int32)})
evaluator = seqio.Evaluator(sys.argv[2], feature_converter=converter, eval_split='validation',
                            num_examples=int(sys.argv[3]), async_compute_metrics=False)
metrics, _ = evaluator.evaluate(compute_metrics=True, predict_fn=predict_fn)
launch = sorted(name for name in sys.modules
                if name.startswith(('launch', 't5x_mt.training.train_loop', 't5x_mt.config.configurables')))
print(json.dumps({'vocabulary': str(vocabulary), 'vocab_size': vocabulary.vocab_size,
                  'hello': vocabulary.encode('hello'), 'mixture': pairs('cldr_demo'),
                  'task': pairs(sys.argv[2]), 'launch_modules': launch,
                  'metrics': {task: {name: float(value) for name, value in scores.items()}
                              for task, scores in metrics.result().items()}}))
"""


@pytest.fixture(scope='module')
def model_path(tmp_path_factory) -> str:
  return vocab.train_sentencepiece(mixtures.training_sentences(data_tasks.mixture_view(MIXTURE)),
                                   str(tmp_path_factory.mktemp('spm') / 'cldr.model'),
                                   vocab_size=1000)


def _unpacked(batch: dict[str, np.ndarray]) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
  """The (input ids, target ids) of each pair packed into a batch's rows."""
  pairs = []
  for row in range(batch['encoder_segment_ids'].shape[0]):
    encoder, decoder = batch['encoder_segment_ids'][row], batch['decoder_segment_ids'][row]
    for segment in range(1, int(encoder.max()) + 1):
      pairs.append((tuple(batch['encoder_input_tokens'][row][encoder == segment].tolist()),
                    tuple(batch['decoder_target_tokens'][row][decoder == segment].tolist())))
  return pairs


def _pipeline_pairs(task: str) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
  """A task's validation pairs in order, as t5x_mt's own input pipeline packs them."""
  return [pair for batch in input_pipeline.one_pass_batches(
              task, batch_size=8, inputs_length=LENGTHS['inputs'],
              targets_length=LENGTHS['targets'], split='validation')
          for pair in _unpacked(batch)]


def _as_tuples(pairs: list) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
  return [(tuple(inputs), tuple(targets)) for inputs, targets in pairs]


@pytest.fixture(scope='module')
def other_program(model_path) -> dict:
  """What _OTHER_PROGRAM found, run once for the tests of this module."""
  result = subprocess.run(
      [sys.executable, '-c', _OTHER_PROGRAM, model_path, TASK, str(EVALUATED_EXAMPLES)],
      cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
  assert result.returncode == 0, result.stderr[-3000:]
  found = json.loads(result.stdout.strip().splitlines()[-1])
  assert found['launch_modules'] == []
  return found


@pytest.mark.slow
def test_another_program_reads_a_mixture_with_the_vocabulary_it_chose(model_path,
                                                                       other_program):
  found = other_program
  assert found['vocabulary'].startswith(f'SentencePieceVocabulary(file={model_path},')
  assert found['vocab_size'] == 1000

  gin.bind_parameter('vocabulary_path.path', model_path)  # The launch layer's way.
  from_gin.configure_data()
  assert found['hello'] == data_tasks.VOCABULARY.encode('hello')
  task_pairs = _pipeline_pairs(TASK)
  assert len(task_pairs) >= 10
  assert _as_tuples(found['task']) == task_pairs
  # seqio's mixture sampler stops with its first exhausted task, so it yields a part of
  # the mixture's validation rows, each with exactly the ids the pipeline gives that row.
  members = data_tasks.mixture_view(MIXTURE).members
  assert TASK in {member.task for member in members}
  expected = {pair for member in members  # TASK's pairs are read above already.
              for pair in (task_pairs if member.task == TASK else _pipeline_pairs(member.task))}
  mixture_pairs = _as_tuples(found['mixture'])
  assert len(mixture_pairs) >= 20
  assert set(mixture_pairs) <= expected


@pytest.mark.slow
def test_seqio_evaluator_scores_bleu_and_chrf_without_the_tags(model_path, other_program):
  tokenizer = spm.SentencePieceProcessor(model_file=model_path)
  references = [target for _, target in
                corpora.get_corpus('cldr').pairs('validation', 'eng_Latn', 'hau_Latn')
                ][:EVALUATED_EXAMPLES]
  pieces = [tokenizer.encode(reference) for reference in references]
  hypotheses = [tokenizer.decode(ids[:-1] if index % 2 else ids)
                for index, ids in enumerate(pieces)]
  expected = {'bleu': sacrebleu.BLEU().corpus_score(hypotheses, [references]).score,
              'chrf': sacrebleu.CHRF(word_order=2).corpus_score(hypotheses, [references]).score}
  assert other_program['metrics'] == {TASK: pytest.approx(expected, abs=1e-9)}
  assert 40 < expected['bleu'] < 100 and 60 < expected['chrf'] < 100
  # The tags left in would have cost points: the postprocessing is what the scores show.
  tag = tokenizer.piece_to_id('<2hau_Latn>')
  tagged = [tokenizer.decode([tag] + ids) for ids in pieces]
  assert sacrebleu.BLEU().corpus_score(tagged, [references]).score < 95


def test_postprocessing_drops_reserved_pieces_of_predictions_only():
  decoded = '<2hau_Latn><BT> Sa<DA>nnu da  zuwaTBD12 \u2047 '
  assert data_tasks.metrics.postprocess_translation(decoded) == 'Sannu da zuwa'
  assert data_tasks.metrics.postprocess_translation(decoded, is_target=True) == decoded
  sentence = 'Sannu da zuwa gida yau'
  assert data_tasks.metrics.translation_metrics([sentence], [sentence]) == pytest.approx(
      {'bleu': 100.0, 'chrf': 100.0})
