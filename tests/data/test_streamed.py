"""Streamed corpora: shards that share out every pair, counts without loading, positions
that resume exactly, and temperature sampling and DRO's sampler across them."""

import gzip
import itertools
import json
import time

import numpy as np
import pytest
import seqio

import data_tasks
from t5x_mt.runs import run_vocabulary
from t5x_mt.data import corpora
from t5x_mt.data import group_sampler
from t5x_mt.data import input_pipeline
from t5x_mt.data import mixtures
from t5x_mt.data import streamed
from t5x_mt.data import streamed_pipeline
from t5x_mt.data.streaming import StreamingShuffle
from t5x_mt.core.errors import UserError
from t5x_mt.data.input_pipeline import DatasetStream

SMALL = streamed.StreamSettings(buffer_size=50, num_pointers=4, chunk_bytes=600)


def write_tsv(path, first, count, blank_every=0):
  """`count` pairs numbered from `first`; every `blank_every`-th has an empty target."""
  lines = [f'one {n} two\t{"" if blank_every and n % blank_every == 0 else f"uno {n} dos"}\n'
           for n in range(first, first + count)]
  opener = gzip.open if str(path).endswith('.gz') else open
  with opener(path, 'wt', encoding='utf-8') as f:
    f.writelines(lines)
  return str(path)


def test_shards_share_out_every_line_once_per_epoch(tmp_path):
  path = write_tsv(tmp_path / 'a.tsv', 0, 900)
  per_shard = []
  for index in range(3):
    shuffle = StreamingShuffle([path], seed=5, num_pointers=4, buffer_size=30,
                               chunk_bytes=500, shard_index=index, num_shards=3)
    epoch = len(shuffle._chunks)  # pylint: disable=protected-access
    lines = list(itertools.islice(iter(shuffle), 2000))
    first_repeat = next(i for i, line in enumerate(lines) if line in lines[:i])
    per_shard.append(lines[:first_repeat])
    assert epoch > 1
  everything = [line for lines in per_shard for line in lines]
  assert sorted(everything) == sorted(open(path, encoding='utf-8').read().splitlines())


def test_gzipped_file_is_one_chunk_read_whole(tmp_path):
  files = [write_tsv(tmp_path / f'{n}.tsv.gz', 100 * n, 100) for n in range(2)]
  shards = [StreamingShuffle(files, seed=1, buffer_size=20, shard_index=index, num_shards=2)
            for index in range(2)]
  firsts = [list(itertools.islice(iter(shuffle), 100)) for shuffle in shards]
  assert {int(line.split()[1]) // 100 for line in firsts[0]} == {0}
  assert {int(line.split()[1]) // 100 for line in firsts[1]} == {1}
  assert sorted(firsts[0] + firsts[1]) == sorted(
      line for path in files for line in gzip.open(path, 'rt').read().splitlines())
  with pytest.raises(UserError, match='none for input shard 2 of 3.*split the corpus'):
    StreamingShuffle(files, shard_index=2, num_shards=3)


def test_open_files_stay_within_the_pointers(tmp_path):
  files = [write_tsv(tmp_path / f'{n}.tsv.gz', 10 * n, 10) for n in range(40)]
  shuffle = StreamingShuffle(files, num_pointers=4, buffer_size=5)
  most_open = 0
  for _ in itertools.islice(iter(shuffle), 800):
    most_open = max(most_open, len(shuffle._handles))  # pylint: disable=protected-access
  assert most_open <= 4


def test_gzipped_state_restores_mid_file(tmp_path):
  files = [write_tsv(tmp_path / f'{n}.tsv.gz', 100 * n, 100) for n in range(3)]
  straight = list(itertools.islice(iter(StreamingShuffle(files, buffer_size=10)), 500))
  stopped = StreamingShuffle(files, buffer_size=10)
  head = list(itertools.islice(iter(stopped), 123))
  resumed = StreamingShuffle(files, buffer_size=10)
  resumed.restore(json.loads(json.dumps(stopped.state())))
  assert head + list(itertools.islice(iter(resumed), 500 - 123)) == straight


def test_corpus_counts_pairs_without_blank_sides_and_names_a_bad_line(tmp_path):
  corpus = streamed.StreamedCorpus(
      'web', 'eng_Latn', 'hau_Latn',
      [write_tsv(tmp_path / 'a.tsv', 0, 30, blank_every=10),
       write_tsv(tmp_path / 'b.tsv.gz', 30, 20)])
  assert corpus.num_pairs('train', 'hau_Latn', 'eng_Latn') == 27 + 20
  with pytest.raises(UserError, match='streamed.*never read into memory'):
    corpus.pairs('train', 'eng_Latn', 'hau_Latn')
  sample = corpus.sample_pairs('hau_Latn', 'eng_Latn', limit=10)
  assert len(sample) == 10 and sample[0] == ('uno 1 dos', 'one 1 two')
  assert sample[1] == ('uno 6 dos', 'one 6 two')  # Every 5th of the 47 pairs.
  bad = tmp_path / 'bad.tsv'
  bad.write_text('a\tb\nno tab here\n')
  with pytest.raises(UserError, match=r'bad.tsv:2: fewer than 2 tab-separated columns'):
    streamed.StreamedCorpus('bad', 'eng_Latn', 'hau_Latn', [str(bad)])


def test_register_from_spec_names_what_is_wrong(tmp_path):
  write_tsv(tmp_path / 'part1.tsv', 0, 10)
  write_tsv(tmp_path / 'part2.tsv', 10, 10)
  where = 'streamed_corpora[x]'
  data_tasks.register_streamed_corpus(
      'test_streamed_spec', {'languages': ['eng_Latn', 'hau_Latn'],
                             'files': [str(tmp_path / 'part*.tsv')], 'buffer_size': 5}, where)
  corpus = corpora.get_corpus('test_streamed_spec')
  assert corpus.num_pairs('train', 'eng_Latn', 'hau_Latn') == 20
  assert corpus.settings.buffer_size == 5 and len(corpus.paths) == 2
  for spec, message in (
      ({'languages': ['eng_Latn'], 'files': ['x']}, 'languages must be a list of two'),
      ({'languages': ['eng_Latn', 'hau_Latn'], 'files': [str(tmp_path / 'none*.tsv')]},
       'none\\*.tsv: no such file'),
      ({'languages': ['eng_Latn', 'hau_Latn'], 'files': 'a.tsv'}, 'give a list of files'),
      ({'languages': ['eng_Latn', 'hau_Latn'], 'files': ['x'], 'bufer_size': 3},
       "unknown keys \\['bufer_size'\\]"),
      ({'languages': ['eng_Latn', 'hau_Latn'], 'files': ['x'], 'buffer_size': 0},
       'buffer_size: 0 is not a positive integer')):
    with pytest.raises(UserError, match=message):
      data_tasks.register_streamed_corpus('test_streamed_bad', spec, where)


def test_a_block_is_the_same_whatever_was_asked_before(tmp_path):
  corpus = streamed.StreamedCorpus('web', 'eng_Latn', 'hau_Latn',
                                   [write_tsv(tmp_path / 'a.tsv', 0, 2000)], settings=SMALL)

  def stream():
    return corpus.open_stream('eng_Latn', 'hau_Latn', seed=[3], shard_index=0,
                              num_shards=1, key='k')

  sequential = stream()
  in_order = [sequential.block(k) for k in range(12)]
  jumping = stream()
  assert [jumping.block(k) for k in (7, 2, 11, 3)] == [in_order[k] for k in (7, 2, 11, 3)]
  restored = stream()
  restored.restore(json.loads(json.dumps(sequential_state_at(stream(), 5))))
  assert restored.block(4) == []  # Before the restored position: an old iterator's ask.
  assert [restored.block(k) for k in (5, 9, 6)] == [in_order[k] for k in (5, 9, 6)]


def sequential_state_at(stream, block):
  for k in range(block):
    stream.block(k)
  return stream.state()


@pytest.fixture
def streamed_mixture(tmp_path):
  """A streamed eng-hau corpus of 600 pairs in three files and in-memory CLDR eng->fra;
  the vocabulary built from the mixture (the streamed side sampled)."""
  files = [write_tsv(tmp_path / f'{n}.tsv', 200 * n, 200) for n in range(3)]
  corpora.register_streamed_tsv('test_streamed_web', 'eng_Latn', 'hau_Latn', files,
                                settings=SMALL, overwrite=True)
  name = data_tasks.register_task_mixture(
      'test_streamed_mix', [data_tasks.register_direction_task('test_streamed_web', *d)
                            for d in (('eng_Latn', 'hau_Latn'), ('hau_Latn', 'eng_Latn'))]
      + ['cldr_eng_Latn.fra_Latn'], overwrite=True)
  vocabulary = tmp_path / 'vocab.model'
  run_vocabulary.build_vocabulary(run_vocabulary.VocabularyConfig(vocab_size=700),
                                  data_tasks.mixture_view(name),
                                  str(vocabulary))
  data_tasks.use_vocabulary(vocabulary)
  return name


def test_temperature_rates_count_the_streamed_pairs(streamed_mixture):
  view = data_tasks.mixture_view(streamed_mixture)
  pairs = {member.task: member.pairs for member in view.members}
  cldr_pairs = mixtures.num_train_pairs('cldr_eng_Latn.fra_Latn')
  assert pairs == {'test_streamed_web_eng_Latn.hau_Latn': 600,
                   'test_streamed_web_hau_Latn.eng_Latn': 600,
                   'cldr_eng_Latn.fra_Latn': cldr_pairs}
  rates = {member.task: member.rate for member in view.members}
  assert rates['test_streamed_web_eng_Latn.hau_Latn'] == pytest.approx(600 ** (1 / 5))
  assert rates['cldr_eng_Latn.fra_Latn'] == pytest.approx(cldr_pairs ** (1 / 5))


def blocks_read_once_prefetching_stops(streams, quiet_seconds=0.5):
  """Each stream's blocks read, once tf.data's threads have filled their buffers and stopped
  reading: how far they get meanwhile depends on the machine's load."""
  counts = None
  while counts != (counts := [stream.blocks_read for stream in streams]):
    time.sleep(quiet_seconds)
  return counts


def batches_of(stream, count):
  return [next(stream) for _ in range(count)]


def test_packed_pipeline_resumes_exactly(streamed_mixture, tmp_path, monkeypatch):
  monkeypatch.setattr(streamed, 'BLOCK_LINES', 8)  # Many blocks in a small corpus.
  def open_stream():
    with streamed_pipeline.opened_streams() as streams:
      dataset = input_pipeline.train_dataset(
          streamed_mixture, batch_size=4, inputs_length=32, targets_length=32, seed=7,
          shard=seqio.ShardInfo(1, 2))
    assert [stream.key.split('/')[1] for stream in streams] == ['shard_1_of_2'] * 2
    return DatasetStream(dataset, streams)

  straight = open_stream()
  head = batches_of(straight, 30)  # Past the end of the shard's first epoch.
  prefix = str(tmp_path / 'input')
  straight.write_state(prefix)
  tail = batches_of(straight, 20)
  saved_blocks = [state['block'] for state in json.loads(open(prefix + '.streams.json').read())]
  resumed = open_stream()
  batches_of(resumed, 3)  # Prefetching from the start when the position arrives.
  streams = resumed._streams  # pylint: disable=protected-access
  read_before = blocks_read_once_prefetching_stops(streams)
  resumed.read_state(prefix)
  for expected, got in zip(tail, batches_of(resumed, 20)):
    for name in expected:
      np.testing.assert_array_equal(expected[name], got[name])
  for stream, before, saved in zip(streams, read_before, saved_blocks):
    # It read on from the saved position, not its way there again from the start.
    assert stream.blocks_read - before <= stream.state()['block'] - saved + 1
  assert any(not np.array_equal(a['encoder_input_tokens'], b['encoder_input_tokens'])
             for a, b in zip(head, tail))


@pytest.mark.slow  # Opens a sampler over streamed corpora three times.
def test_dro_sampler_resumes_exactly_across_streamed_corpora(streamed_mixture, tmp_path):
  def sampler():
    return group_sampler.GroupSampler(
        data_tasks.mixture_view(streamed_mixture), grouping='direction', batch_size=4,
        inputs_length=32, targets_length=32, seed=2)

  straight = sampler()
  straight.set_weights([0.2, 0.5, 0.3])
  batches_of(straight, 10)
  straight.write_state(str(tmp_path / 'dro'))
  assert json.loads((tmp_path / 'dro.streams.json').read_text())[0]['block'] > 0
  tail = batches_of(straight, 10)
  resumed = sampler()
  batches_of(resumed, 2)
  resumed.read_state(str(tmp_path / 'dro'))
  for expected, got in zip(tail, batches_of(resumed, 10)):
    np.testing.assert_array_equal(expected['decoder_target_tokens'],
                                  got['decoder_target_tokens'])


def test_position_saved_without_streams_is_refused(streamed_mixture, tmp_path):
  with streamed_pipeline.opened_streams() as streams:
    input_pipeline.train_dataset(streamed_mixture, batch_size=4, inputs_length=32,
                                 targets_length=32, seed=7)
  with pytest.raises(UserError, match='saved without the positions of the streamed'):
    streamed_pipeline.read_states(streams, str(tmp_path / 'nothing'))
