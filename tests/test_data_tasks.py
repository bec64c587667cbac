"""Tests for data_tasks (registry, temperature-sampled mixtures, run vocabulary) and for
t5x_mt.data.input_pipeline, which turns a registered mixture into packed batches."""

import collections
import dataclasses
import json

import numpy as np
import pytest
import seqio
import tensorflow as tf

import data_tasks
from t5x_mt.data import corpora
from t5x_mt.data import corpus_types
from t5x_mt.core.directions import Direction
from t5x_mt.data import input_pipeline
from t5x_mt.data import mixtures
from t5x_mt.data import vocab
from t5x_mt.core.errors import UserError

CORPUS = 'test_data_tasks'
MIXTURE = 'test_data_tasks_mix'
# English rows: all 100 have French, the first 20 Hausa, the first 4 Swahili, so the three
# directions below have 100, 20 and 4 training pairs.
ROWS = [{'eng_Latn': f'the report {i} is ready', 'fra_Latn': f'le rapport {i} est prêt',
         'hau_Latn': f'rahoto {i} ya shirya' if i < 20 else '',
         'swh_Latn': f'ripoti {i} iko tayari' if i < 4 else ''} for i in range(100)]
MIXTURE_DIRECTIONS = (('eng_Latn', 'fra_Latn'), ('eng_Latn', 'hau_Latn'),
                      ('eng_Latn', 'swh_Latn'))
SIZES = {Direction(*pair).id: n for pair, n in zip(MIXTURE_DIRECTIONS, (100, 20, 4))}
LENGTHS = {'inputs': 32, 'targets': 32}


@pytest.fixture(scope='module')
def model_path(tmp_path_factory) -> str:
  corpora.register_corpus(CORPUS, lambda: corpus_types.MultiwayCorpus(CORPUS, {'train': ROWS}),
                          overwrite=True)
  if MIXTURE not in seqio.MixtureRegistry.names():
    data_tasks.register_mixture(MIXTURE, CORPUS, MIXTURE_DIRECTIONS)
  return vocab.train_sentencepiece(mixtures.training_sentences(data_tasks.mixture_view(MIXTURE)),
                                   str(tmp_path_factory.mktemp('spm') / 'mix.model'),
                                   vocab_size=1000)


@pytest.fixture(autouse=True)
def run_config(model_path):
  """The run's vocabulary; conftest's default_data_settings resets it after each test."""
  data_tasks.use_vocabulary(model_path)


def _configure(**settings) -> None:
  """The current data settings with `settings` replaced."""
  data_tasks.configure(dataclasses.replace(data_tasks.settings(), **settings))


def test_registry_names_tasks_by_corpus_and_direction():
  assert [m.direction.name for m in data_tasks.mixture_view(MIXTURE).members] == [
      'eng_Latn-fra_Latn', 'eng_Latn-hau_Latn', 'eng_Latn-swh_Latn']
  task = data_tasks.task_name(CORPUS, 'eng_Latn', 'hau_Latn')
  assert task == 'test_data_tasks_eng_Latn.hau_Latn'
  assert mixtures.num_train_pairs(task) == 20
  assert data_tasks.mixture_view(task).members == (mixtures.MixtureMember(
      task, CORPUS, Direction('eng_Latn', 'hau_Latn'), rate=1.0, pairs=20),)
  # Registering the same direction again returns the existing task.
  assert data_tasks.register_direction_task(CORPUS, 'eng_Latn', 'hau_Latn') == task


def test_training_sentences_are_distinct_per_language():
  sentences = mixtures.training_sentences(data_tasks.mixture_view(MIXTURE))
  assert {lang: len(lines) for lang, lines in sentences.items()} == {
      'eng_Latn': 100, 'fra_Latn': 100, 'hau_Latn': 20, 'swh_Latn': 4}
  assert sentences['swh_Latn'][3] == 'ripoti 3 iko tayari'


def test_unknown_name_lists_registered_mixtures():
  with pytest.raises(UserError, match="unknown mixture or task 'nope'") as error:
    data_tasks.get_mixture_or_task('nope')
  assert 'MIXTURE_OR_TASK_NAME' in str(error.value)
  assert 'cldr_demo' in str(error.value) and MIXTURE in str(error.value)


def test_missing_vocabulary_file_is_named(tmp_path):
  _configure(vocabulary_path=str(tmp_path / 'absent.model'))
  with pytest.raises(UserError, match='absent.model: vocabulary file not found'):
    _ = data_tasks.VOCABULARY.vocab_size


def test_vocabulary_follows_the_settings(model_path):
  assert data_tasks.VOCABULARY.sentencepiece_model_file == model_path
  assert data_tasks.VOCABULARY.sentencepiece.tokenizer.piece_to_id('<2hau_Latn>') == 70


def _observed_shares(num_examples: int) -> dict[int, float]:
  dataset = seqio.get_mixture_or_task(MIXTURE).get_dataset(
      LENGTHS, split='train', shuffle=True, seed=0, num_epochs=None)
  counts = collections.Counter(
      int(example['targets_direction'][0])
      for example in dataset.take(num_examples).as_numpy_iterator())
  return {direction: counts[direction] / num_examples for direction in SIZES}


@pytest.mark.parametrize('tau, expected', [
    # n^(1/5) = 2.5119, 1.8206, 1.3195 over their sum 5.6520.
    (5.0, {100: 0.444428, 20: 0.322112, 4: 0.233460}),
    # tau = 1 samples in proportion to the data: 100, 20, 4 of 124.
    (1.0, {100: 100 / 124, 20: 20 / 124, 4: 4 / 124}),
])
def test_temperature_sampling_rates_and_frequencies(tau, expected):
  _configure(temperature=tau)
  mixture = seqio.get_mixture_or_task(MIXTURE)
  rates = {Direction(*pair).id: mixture.get_rate(seqio.get_mixture_or_task(
      data_tasks.task_name(CORPUS, *pair))) for pair in MIXTURE_DIRECTIONS}
  assert rates == pytest.approx({d: n ** (1 / tau) for d, n in SIZES.items()})
  total = sum(rates.values())
  probabilities = {SIZES[d]: rate / total for d, rate in rates.items()}
  assert probabilities == pytest.approx(expected, abs=1e-6)
  # 3000 draws: the standard deviation of a share is at most 0.009.
  observed = {SIZES[d]: share for d, share in _observed_shares(3000).items()}
  assert observed == pytest.approx(expected, abs=0.03)


def test_default_temperature_is_five():
  mixture = seqio.get_mixture_or_task(MIXTURE)
  task = seqio.get_mixture_or_task(data_tasks.task_name(CORPUS, 'eng_Latn', 'swh_Latn'))
  assert mixture.get_rate(task) == pytest.approx(4 ** 0.2)


def test_nonpositive_temperature_names_the_gin_parameter():
  with pytest.raises(UserError, match=r'temperature_rate\.temperature: must be > 0'):
    data_tasks.DataSettings(temperature=0.0)


SYNTHETIC = 'test_data_tasks_bt'
# 60 back-translated eng-hau pairs beside the 20 genuine ones, and a direction only they have.
BT_PAIRS = {('eng_Latn', 'hau_Latn'): [(f'synthetic {i}', f'rahoto {i}') for i in range(60)],
            ('eng_Latn', 'zul_Latn'): [(f'synthetic {i}', f'umbiko {i}') for i in range(5)]}


def _register_synthetic(tmp_path) -> None:
  """SYNTHETIC as a launch/back_translate.py folder, and a mixture of it with MIXTURE."""
  manifest = {'directions': {}}
  for (src, tgt), pairs in BT_PAIRS.items():
    for side, lang in enumerate((src, tgt)):
      (tmp_path / f'{src}-{tgt}.{lang}').write_text(
          ''.join(pair[side] + '\n' for pair in pairs), encoding='utf-8')
    manifest['directions'][f'{src}-{tgt}'] = {'synthetic_lang': src, 'tag': 'bt'}
  (tmp_path / 'synthetic.json').write_text(json.dumps(manifest), encoding='utf-8')
  data_tasks.register_corpora_and_mixtures(
      corpora_dirs={SYNTHETIC: str(tmp_path)},
      mixtures={'test_data_tasks_with_bt': [MIXTURE, SYNTHETIC]})


def test_mixture_over_corpora_shares_each_direction_rate_by_size(tmp_path):
  _register_synthetic(tmp_path)
  mixture = seqio.get_mixture_or_task('test_data_tasks_with_bt')
  assert len(mixture.tasks) == 5
  rates = {task.name: mixture.get_rate(task) for task in mixture.tasks}
  # eng-hau has 20 genuine + 60 synthetic pairs: 80^(1/5) = 2.4022, split 1:3.
  assert rates[f'{CORPUS}_eng_Latn.hau_Latn'] == pytest.approx(80 ** 0.2 * 20 / 80)
  assert rates[f'{SYNTHETIC}_eng_Latn.hau_Latn'] == pytest.approx(80 ** 0.2 * 60 / 80)
  # Directions from one corpus keep |D|^(1/5).
  assert rates[f'{CORPUS}_eng_Latn.fra_Latn'] == pytest.approx(100 ** 0.2)
  assert rates[f'{SYNTHETIC}_eng_Latn.zul_Latn'] == pytest.approx(5 ** 0.2)
  assert mixtures.check_train_examples(data_tasks.mixture_view('test_data_tasks_with_bt')) == 100 + 20 + 4 + 60 + 5


def test_mixture_member_must_name_a_mixture_task_or_directed_corpus():
  with pytest.raises(UserError, match=f"mixture member '{CORPUS}': corpus '{CORPUS}' pairs "
                     'any two of its languages'):
    data_tasks.register_corpora_and_mixtures(mixtures={'test_bad_members': [CORPUS]})


def test_mixture_over_zero_examples_is_refused():
  name = 'test_data_tasks_empty'
  corpora.register_corpus(name, lambda: corpus_types.PairsCorpus(
      name, 'train', {('eng_Latn', 'hau_Latn'): []}), overwrite=True)
  data_tasks.register_task_mixture(
      name, [data_tasks.register_direction_task(name, 'eng_Latn', 'hau_Latn')], overwrite=True)
  with pytest.raises(UserError, match=f"'{name}' has no training examples .*eng_Latn-hau_Latn"):
    mixtures.check_train_examples(data_tasks.mixture_view(name))


# input_pipeline: from the mixture to packed batches.

BATCH_FEATURES = ('encoder_input_tokens', 'encoder_segment_ids', 'encoder_positions',
                  'decoder_target_tokens', 'decoder_input_tokens', 'decoder_loss_weights',
                  'decoder_segment_ids', 'decoder_positions', 'decoder_direction_ids')


INPUTS_LENGTH, TARGETS_LENGTH = 40, 36  # Room for two or three pairs per row.


def _train_dataset(seed: int) -> tf.data.Dataset:
  return input_pipeline.train_dataset(MIXTURE, batch_size=4,
                                      inputs_length=INPUTS_LENGTH,
                                      targets_length=TARGETS_LENGTH, seed=seed)


def _next_batches(iterator, count: int) -> list[dict[str, np.ndarray]]:
  return [{name: value.numpy() for name, value in next(iterator).items()} for _ in range(count)]


def _assert_same_batch(batch: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> None:
  assert sorted(batch) == sorted(expected)
  for name in expected:
    np.testing.assert_array_equal(batch[name], expected[name], err_msg=name)


@pytest.fixture(scope='module')
def seed0_batches(model_path) -> list[dict[str, np.ndarray]]:
  """The first three batches of seed 0 (each dataset takes seconds to build)."""
  data_tasks.use_vocabulary(model_path)  # Set up before run_config.
  return _next_batches(iter(_train_dataset(seed=0)), 3)


def test_train_batches_are_packed_rows_of_the_run_shape(seed0_batches):
  batch = seed0_batches[0]
  assert sorted(batch) == sorted(BATCH_FEATURES)
  for name, value in batch.items():
    length = INPUTS_LENGTH if name.startswith('encoder') else TARGETS_LENGTH
    assert value.shape == (4, length), name
  # Packing: some row holds two or more sentence pairs.
  assert batch['decoder_segment_ids'].max() >= 2
  # Every real target token carries a direction of the mixture; padding carries 0.
  real = batch['decoder_segment_ids'] > 0
  assert set(np.unique(batch['decoder_direction_ids'][real])) <= set(SIZES)
  assert (batch['decoder_direction_ids'][~real] == 0).all()
  assert (batch['decoder_loss_weights'] == real).all()


def test_iterator_checkpoint_restores_the_next_batch(seed0_batches, tmp_path):
  iterator = iter(_train_dataset(seed=0))
  for batch, expected in zip(_next_batches(iterator, 2), seed0_batches[:2]):
    _assert_same_batch(batch, expected)  # Same seed, same batches.
  path = tf.train.Checkpoint(iterator=iterator).write(str(tmp_path / 'input'))
  _assert_same_batch(_next_batches(iterator, 1)[0], seed0_batches[2])
  resumed = iter(_train_dataset(seed=0))
  tf.train.Checkpoint(iterator=resumed).read(path).assert_consumed()
  restored = _next_batches(resumed, 1)[0]
  _assert_same_batch(restored, seed0_batches[2])
  # Not trivially so: a fresh iterator would have started over.
  assert not np.array_equal(restored['encoder_input_tokens'],
                            seed0_batches[0]['encoder_input_tokens'])


def test_other_seed_gives_other_batches(seed0_batches):
  other = _next_batches(iter(_train_dataset(seed=1)), 3)
  assert all(not np.array_equal(a['encoder_input_tokens'], b['encoder_input_tokens'])
             for a, b in zip(seed0_batches, other))


def test_every_cldr_direction_is_registered_and_other_corpora_on_demand():
  from t5x_mt.data import cldr  # pylint: disable=g-import-not-at-top
  names = set(seqio.TaskRegistry.names())
  count = len(cldr.CLDR_LANGUAGES)
  assert sum(mixtures.task_source(name).corpus == 'cldr' for name in names
             if name.startswith('cldr_')) == count * (count - 1)
  task = data_tasks.get_mixture_or_task('flores200_eng_Latn.zul_Latn')
  assert mixtures.task_source(task.name) == mixtures.TaskSource(
      'flores200', Direction('eng_Latn', 'zul_Latn'))
