"""Cached tasks: launch/cache_tasks.py writes each task's seqio examples, and the Grain
pipeline feeds training the rows seqio's would, resumes exactly and refuses a cache that
does not fit the run."""

import dataclasses
import importlib.util
import json
import pathlib
import shutil

import gin
import numpy as np
import pytest
import seqio

import data_tasks

from conftest import tiny_run_bindings
from conftest import tiny_run_flags
from t5x_mt.config import configurables
from t5x_mt.config import gin_utils
from t5x_mt.core.errors import UserError
from t5x_mt.data import corpora
from t5x_mt.data import grain_pipeline
from t5x_mt.data import mixtures
from t5x_mt.data import packing
from t5x_mt.data import task_cache
from t5x_mt.data.feature_converters import DirectionEncDecFeatureConverter
from t5x_mt.data.settings import DataSettings
from t5x_mt.training import dro
from t5x_mt.training import train_loop

REPO = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES_PER_SHARD = 16  # The 60 training pairs of a direction in 4 shards.


def cache_tasks_main():
  spec = importlib.util.spec_from_file_location('launch_cache_tasks',
                                                REPO / 'launch' / 'cache_tasks.py')
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.main


@pytest.fixture(scope='module')
def cached(tiny_mixture, tmp_path_factory) -> pathlib.Path:
  """A folder with vocab.model and cache/, the tiny mixture cached with that vocabulary."""
  root = tmp_path_factory.mktemp('cached')
  gin.clear_config()
  try:
    cache_tasks_main()([*tiny_run_flags(root / 'run', root / 'vocab.model', tiny_mixture, 4),
                        f'--output_dir={root / "cache"}',
                        f'--examples_per_shard={EXAMPLES_PER_SHARD}'])
  finally:
    gin.clear_config()
  return root


@pytest.fixture(autouse=True)
def registry_reads_the_cached_vocabulary(cached):
  """seqio's tasks segment with the vocabulary the cache was made with."""
  data_tasks.use_vocabulary(str(cached / 'vocab.model'))


def seqio_examples(task: str, split: str, **options) -> list[dict]:
  dataset = seqio.get_mixture_or_task(task).get_dataset(
      split=split, shuffle=False, num_epochs=1, **options)
  return list(dataset.as_numpy_iterator())


def assert_same_example(cached: dict, expected: dict) -> None:
  assert set(cached) == set(expected)
  for name, value in expected.items():
    if isinstance(value, bytes):
      assert cached[name] == value, name
    else:
      np.testing.assert_array_equal(cached[name], value, err_msg=name)


def test_cache_holds_each_tasks_examples_token_for_token_in_order(cached, tiny_mixture):
  cache = task_cache.TaskCache(str(cached / 'cache'))
  view = mixtures.mixture_view(tiny_mixture)
  assert sorted(cache.tasks) == sorted(member.task for member in view.members)
  for member in view.members:
    for split, shards in (('train', 4), ('validation', 1), ('test', 1)):
      expected = seqio_examples(member.task, split, sequence_length=None)
      examples = task_cache.CachedExamples(cache, member.task, split)
      assert len(cache.split(member.task, split).shards) == shards
      assert len(examples) == len(expected) == {'train': 60}.get(split, 4)
      for index, example in enumerate(expected):
        assert_same_example(examples[index], example)
      stats = json.loads((cached / 'cache' / task_cache.stats_file(member.task, split))
                         .read_text())
      assert stats['examples'] == len(expected)
      assert stats['targets_tokens'] == sum(len(e['targets']) for e in expected)
      assert stats['inputs_max_length'] == max(len(e['inputs']) for e in expected)


def test_cached_mixture_is_the_registered_one(cached, tiny_mixture):
  cache = task_cache.TaskCache(str(cached / 'cache'))
  assert cache.mixture_view(tiny_mixture) == mixtures.mixture_view(tiny_mixture)
  assert cache.vocabulary() == (cached / 'vocab.model').read_bytes()


@pytest.mark.parametrize('pack', [True, False])
@pytest.mark.parametrize('inputs_length,targets_length', [(4, 3), (32, 24)])
def test_rows_are_seqios_for_the_same_examples(cached, tiny_mixture, pack, inputs_length,
                                               targets_length):
  task = mixtures.mixture_view(tiny_mixture).members[0].task
  lengths = packing.feature_lengths(inputs_length, targets_length)
  expected = list(seqio.get_dataset(
      task, task_feature_lengths=lengths, dataset_split='train', shuffle=False, num_epochs=1,
      feature_converter=DirectionEncDecFeatureConverter(pack=pack)).as_numpy_iterator())
  cache = task_cache.TaskCache(str(cached / 'cache'))
  examples = task_cache.CachedExamples(cache, task, 'train')
  size = packing.chunk_size(lengths, pack)
  rows = [row for start in range(0, len(examples), size) for row in packing.chunk_rows(
      [examples[i] for i in range(start, min(start + size, len(examples)))], lengths, pack)]
  assert len(rows) == len(expected)
  if inputs_length == 4:  # Examples trimmed, keeping their EOS.
    assert any(len(examples[i]['inputs']) > 4 for i in range(len(examples)))
  for row, reference in zip(rows, expected):
    assert_same_example(row, reference)


def stream(cached: pathlib.Path, mixture: mixtures.MixtureView, **overrides):
  settings = dict(shard_index=0, num_shards=1, rows=4, inputs_length=32, targets_length=32,
                  seed=3, pack=True)
  return grain_pipeline.CachedTrainStream(task_cache.TaskCache(str(cached / 'cache')),
                                          mixture, **{**settings, **overrides})


def test_each_task_gets_its_share_of_examples_by_rate(cached, tiny_mixture):
  view = task_cache.TaskCache(str(cached / 'cache')).mixture_view(tiny_mixture)
  rated = mixtures.MixtureView('skewed', tuple(
      mixtures.MixtureMember(m.task, m.corpus, m.direction, rate, m.pairs)
      for m, rate in zip(view.members, (0.8, 0.2))))
  examples = stream(cached, rated, pack=False, rows=50)
  first = np.concatenate([next(examples)['decoder_direction_ids'][:, 0] for _ in range(8)])
  share = np.mean(first == rated.members[0].direction.id)
  # 400 examples: the binomial standard deviation of a 0.8 share is 0.02.
  assert abs(share - 0.8) < 0.06
  assert set(first) == {m.direction.id for m in rated.members}


def test_input_shards_read_disjoint_examples_each_epoch_a_permutation(cached, tiny_mixture):
  cache = task_cache.TaskCache(str(cached / 'cache'))
  task = mixtures.mixture_view(tiny_mixture).members[0].task
  alone = cache.mixture_view(task)
  examples = task_cache.CachedExamples(cache, task, 'train')
  lengths = packing.feature_lengths(32, 32)
  for shard in (0, 1):
    reader = stream(cached, alone, shard_index=shard, num_shards=2, rows=30, pack=False)
    epochs = [next(reader)['encoder_input_tokens'] for _ in range(2)]
    expected = sorted(packing.padded_row(packing.trimmed(examples[i], lengths), lengths)[
        'inputs'].tolist() for i in range(shard, 60, 2))
    assert [sorted(epoch.tolist()) for epoch in epochs] == [expected, expected]
    assert epochs[0].tolist() != epochs[1].tolist()  # Each epoch shuffled anew.


def test_resumed_stream_continues_exactly(cached, tiny_mixture, tmp_path):
  view = task_cache.TaskCache(str(cached / 'cache')).mixture_view(tiny_mixture)
  straight = [next(reader) for reader in [stream(cached, view)] for _ in range(9)]
  first = stream(cached, view)
  for _ in range(4):
    next(first)
  first.write_state(str(tmp_path / 'input'))
  saved = json.loads((tmp_path / f'input{grain_pipeline.STATE_SUFFIX}').read_text())
  assert set(saved) == {'chunk', 'row', 'settings'} and saved['row'] > 0  # Mid-chunk.
  resumed = stream(cached, view)
  resumed.read_state(str(tmp_path / 'input'))
  for expected in straight[4:]:
    assert_same_example(next(resumed), expected)
  other_seed = stream(cached, view, seed=4)
  with pytest.raises(UserError, match=r'input\.grain\.json: .*seed: saved 3, now 4'):
    other_seed.read_state(str(tmp_path / 'input'))


def test_a_damaged_shard_is_named(cached, tiny_mixture, tmp_path):
  damaged = tmp_path / 'cache'
  shutil.copytree(cached / 'cache', damaged)
  view = task_cache.TaskCache(str(damaged)).mixture_view(tiny_mixture)
  task = view.members[1].task
  shards = sorted((damaged / task).glob('train-*.array_record'))
  shards[0].write_bytes(b'not an ArrayRecord file' * 4096)
  with pytest.raises(UserError, match=rf'^{shards[0]}: not a readable ArrayRecord shard'):
    grain_pipeline.CachedTrainStream(
        task_cache.TaskCache(str(damaged)), view, shard_index=0, num_shards=1, rows=4,
        inputs_length=32, targets_length=32, seed=0)
  shutil.copy(damaged / task / 'validation-00000-of-00001.array_record', shards[0])
  with pytest.raises(UserError, match=rf'^{shards[0]}: holds 4 examples, the cache says 15'):
    task_cache.CachedExamples(task_cache.TaskCache(str(damaged)), task, 'train')


def test_a_cache_that_does_not_fit_the_run_is_refused(cached, tiny_mixture):
  cache = task_cache.TaskCache(str(cached / 'cache'))
  vocabulary = (cached / 'vocab.model').read_bytes()
  cache.check_made_for(DataSettings(), vocabulary, None)
  with pytest.raises(UserError, match=r"another vocabulary than the run's VOCABULARY_PATH"):
    cache.check_made_for(DataSettings(), vocabulary + b'\n', None)
  with pytest.raises(UserError, match=r"cached with tag_strategy = 't_enc_t_dec', the run "
                     r"sets 't_enc'"):
    cache.check_made_for(DataSettings(tag_strategy='t_enc'), vocabulary, None)
  with pytest.raises(UserError, match=r"holds no task 'cldr_eng_Latn\.hau_Latn'"):
    task_cache.CachedExamples(cache, 'cldr_eng_Latn.hau_Latn', 'train')
  with pytest.raises(UserError, match=rf"MIXTURE_OR_TASK_NAME: 'cldr_demo' is not in the "
                     rf"task cache .*mixtures {tiny_mixture}\)"):
    cache.mixture_view('cldr_demo')
  with pytest.raises(UserError, match=r'holds no cache_info\.json: not a finished task cache'):
    task_cache.TaskCache(str(cached))


def test_cached_corpus_gives_the_registered_pairs(cached, tiny_mixture):
  cache = task_cache.TaskCache(str(cached / 'cache'))
  member = mixtures.mixture_view(tiny_mixture).members[0]
  registered = corpora.get_corpus(member.corpus)
  corpus = task_cache.CachedCorpus(cache, member.corpus)
  assert corpus.splits() == ('train', 'validation', 'test')
  for split in corpus.splits():
    assert corpus.pairs(split, *member.direction) == registered.pairs(split, *member.direction)
  with pytest.raises(UserError, match=r'holds no validation pairs of fra_Latn-eng_Latn'):
    corpus.pairs('validation', 'fra_Latn', 'eng_Latn')


def test_what_a_cache_cannot_feed_is_refused_in_one_line(cached, tiny_mixture, tmp_path):
  flags = tiny_run_flags(tmp_path / 'run', cached / 'vocab.model', tiny_mixture, 4)
  foreign = tmp_path / 'mine'
  foreign.mkdir()
  (foreign / 'notes.txt').write_text('mine')
  with pytest.raises(UserError, match=r'--output_dir: .*mine is not empty and holds no '
                     r'cache_info\.json'):
    cache_tasks_main()([*flags, f'--output_dir={foreign}'])
  assert (foreign / 'notes.txt').read_text() == 'mine'
  gin.clear_config()
  with pytest.raises(UserError, match=r"subword_sampling\.sides: \{'\*': 'both'\} samples a "
                     r'segmentation every epoch, and a cache holds one'):
    cache_tasks_main()([*flags, "--gin.data_tasks.subword_sampling.sides={'*': 'both'}",
                        f'--output_dir={tmp_path / "sampled"}'])
  assert not (tmp_path / 'sampled').exists()
  gin.clear_config()
  gin_utils.parse_gin(['gin/runs/demo.gin'], [
      *tiny_run_bindings(tmp_path / 'run', cached / 'vocab.model', tiny_mixture, 4),
      f"CACHED_TASKS_DIR = '{cached / 'cache'}'"])
  spec = configurables.run_spec()
  robust = dataclasses.replace(spec, train=dataclasses.replace(
      spec.train, dro=dro.DroConfig(baselines='unused.json')))
  with pytest.raises(UserError, match=r"^CACHED_TASKS_DIR: DRO's sampling mode"):
    train_loop.build_run(robust)
  language_model = dataclasses.replace(spec, model=dataclasses.replace(
      spec.model, decoder_only=True, num_encoder_layers=0))
  with pytest.raises(UserError, match=r'^CACHED_TASKS_DIR: a language model'):
    train_loop.build_run(language_model)
  assert not (tmp_path / 'run').exists()
