"""Subword regularisation: sampled segmentations in training only, on the configured sides."""

import pytest
import seqio
import sentencepiece as spm

import data_tasks
from t5x_mt.data import corpora
from t5x_mt.data import corpus_types
from t5x_mt.data import vocab
from t5x_mt.core.errors import UserError

CORPUS = 'test_sampling'
SENTENCES = {'eng_Latn': 'unbelievable international organisations reconsidered everything',
             'hau_Latn': 'kungiyoyin kasa da kasa sun sake duba komai gaba daya'}
ROWS = [dict(SENTENCES)] * 4
LENGTHS = {'inputs': 160, 'targets': 160}  # Sampled segmentations can be near characters.


@pytest.fixture(scope='module')
def model_path(tmp_path_factory) -> str:
  corpora.register_corpus(CORPUS, lambda: corpus_types.MultiwayCorpus(
      CORPUS, {'train': ROWS, 'validation': ROWS}), overwrite=True)
  data_tasks.register_direction_task(CORPUS, 'eng_Latn', 'hau_Latn')
  cldr = corpora.get_corpus('cldr')
  text = {lang: cldr.sentences('train', lang) + [sentence] for lang, sentence in SENTENCES.items()}
  return vocab.train_sentencepiece(text, str(tmp_path_factory.mktemp('spm') / 's.model'),
                                   vocab_size=1000)


def _segmentations(model_path, split, sides, epochs=12):
  """The distinct (inputs, targets) id sequences over `epochs` passes of the 4 rows."""
  data_tasks.configure(data_tasks.DataSettings(vocabulary_path=model_path,
                                                sampling_sides=sides, sampling_alpha=0.1))
  task = seqio.get_mixture_or_task(data_tasks.task_name(CORPUS, 'eng_Latn', 'hau_Latn'))
  dataset = task.get_dataset(sequence_length=LENGTHS, split=split, shuffle=False,
                             num_epochs=epochs)
  return [(tuple(ex['inputs'][1:-1]), tuple(ex['targets'][1:-1]))
          for ex in dataset.as_numpy_iterator()]


def test_training_samples_both_sides_and_every_sample_spells_the_sentence(model_path):
  examples = _segmentations(model_path, 'train', {'eng_Latn-hau_Latn': 'both'})
  processor = spm.SentencePieceProcessor(model_file=model_path)
  assert len({inputs for inputs, _ in examples}) > 3
  assert len({targets for _, targets in examples}) > 3
  for inputs, targets in examples:
    assert processor.decode(list(inputs)) == SENTENCES['eng_Latn']
    assert processor.decode(list(targets)) == SENTENCES['hau_Latn']


def test_source_only_keeps_targets_deterministic(model_path):
  examples = _segmentations(model_path, 'train', {'*': 'source'})
  processor = spm.SentencePieceProcessor(model_file=model_path)
  assert len({inputs for inputs, _ in examples}) > 3
  assert {targets for _, targets in examples} == {
      tuple(processor.encode(SENTENCES['hau_Latn']))}


def test_validation_and_unconfigured_directions_never_sample(model_path):
  processor = spm.SentencePieceProcessor(model_file=model_path)
  best = (tuple(processor.encode(SENTENCES['eng_Latn'])),
          tuple(processor.encode(SENTENCES['hau_Latn'])))
  assert set(_segmentations(model_path, 'validation', {'*': 'both'})) == {best}
  assert set(_segmentations(model_path, 'train', {'fra_Latn-eng_Latn': 'both'})) == {best}


def test_unknown_side_names_the_gin_parameter(model_path):
  with pytest.raises(UserError, match="subword_sampling.sides: 'target'"):
    _segmentations(model_path, 'train', {'*': 'target'}, epochs=1)
