"""Tests for t5x_mt.data.vocab: alpha sampling across languages and the SentencePiece model."""

import pytest
import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2
import tensorflow as tf

from t5x_mt.data import tags
from t5x_mt.data import vocab
from t5x_mt.core.errors import UserError

from fake_object_store import gcs_bucket  # pylint: disable=unused-import

# Three languages of very different sizes, in the spirit of eng vs. a low-resource language.
SENTENCES = {
    'eng_Latn': [f'the cat number {i} sleeps on the warm mat' for i in range(60)],
    'hau_Latn': [f'kyanwa na {i} yana barci a kan tabarma' for i in range(12)],
    'swh_Latn': ['paka analala kwenye mkeka', 'mbwa anakimbia haraka'],
}
# Symbols, bytes and characters need ~500 pieces; hard_vocab_limit=False lets a tiny text
# stop below this bound.
VOCAB_SIZE = 1000


@pytest.fixture(scope='module')
def model_path(tmp_path_factory) -> str:
  return vocab.train_sentencepiece(SENTENCES, str(tmp_path_factory.mktemp('spm') / 'a.model'),
                                   vocab_size=VOCAB_SIZE, seed=0)


def test_sampling_probabilities_follow_n_to_the_alpha():
  probabilities = vocab.language_sampling_probabilities({'a': 1000, 'b': 10}, alpha=0.3)
  # 1000^0.3 = 7.94328, 10^0.3 = 1.99526: p_a = 7.94328 / 9.93855.
  assert probabilities == pytest.approx({'a': 0.799240, 'b': 0.200760}, abs=1e-6)
  assert vocab.language_sampling_probabilities({'a': 1000, 'b': 10}, alpha=1.0) == (
      pytest.approx({'a': 1000 / 1010, 'b': 10 / 1010}))


def test_sampling_skips_empty_languages_and_rejects_no_text():
  assert vocab.language_sampling_probabilities({'a': 4, 'b': 0}, alpha=0.3) == {'a': 1.0}
  with pytest.raises(UserError, match='no sentences'):
    vocab.language_sampling_probabilities({'a': 0}, alpha=0.3)


def test_sampled_text_upsamples_the_small_language():
  sentences = {'a': [f'a{i}' for i in range(1000)], 'b': [f'b{i}' for i in range(10)]}
  sample = vocab.sample_training_text(sentences, alpha=0.3, num_sentences=5000, seed=0)
  from_b = [line for line in sample if line.startswith('b')]
  assert len(sample) == 5000
  # Multinomial(5000, 0.2008): mean 1003.8, standard deviation 28.3.
  assert abs(len(from_b) - 1003.8) < 100
  assert set(from_b) == set(sentences['b'])  # 10 lines drawn ~100 times each.
  counts = vocab.sampled_line_counts(sentences, alpha=0.3, num_sentences=5000, seed=0)
  assert counts == {'a': 5000 - len(from_b), 'b': len(from_b)}


def test_sample_is_capped_at_four_copies_of_the_text():
  assert vocab.sample_size(SENTENCES, 1_000_000) == 4 * 74
  assert vocab.sample_size(SENTENCES, 100) == 100


def test_reserved_ids_and_every_special_symbol_is_one_piece(model_path):
  processor = spm.SentencePieceProcessor(model_file=model_path)
  assert (processor.pad_id(), processor.eos_id(), processor.unk_id(), processor.bos_id()) == (
      0, 1, 2, -1)
  symbols = tags.special_symbols()
  assert len(symbols) == 204 + 2 + 32
  assert '<2gaz_Latn>' in symbols and 'TBD31' in symbols
  for offset, symbol in enumerate(symbols):
    assert processor.piece_to_id(symbol) == 3 + offset  # Right after pad, eos, unk.
    pieces = processor.encode(f'x {symbol}y', out_type=str)
    assert symbol in pieces, (symbol, pieces)
  assert VOCAB_SIZE > processor.get_piece_size() > 3 + len(symbols) + 256  # + bytes.


def test_same_seed_gives_identical_model_bytes(model_path, tmp_path):
  again = vocab.train_sentencepiece(SENTENCES, str(tmp_path / 'b.model'),
                                    vocab_size=VOCAB_SIZE, seed=0)
  with open(model_path, 'rb') as f:
    first = f.read()
  with open(again, 'rb') as f:
    assert f.read() == first
  assert not [p.name for p in tmp_path.iterdir() if p.name != 'b.model']  # No temp files.


def test_model_records_no_temporary_path_and_a_fixed_thread_count(model_path):
  # SentencePiece sums per-thread statistics, so pieces and scores depend on the thread
  # count (on the CLDR demo text 1, 2 and 8 threads give three different models): it is a
  # constant, not the machine's cores, and training runs in memory, not from a temp file.
  proto = sentencepiece_model_pb2.ModelProto()
  with open(model_path, 'rb') as f:
    proto.ParseFromString(f.read())
  assert proto.trainer_spec.num_threads == vocab.NUM_THREADS == 16
  assert list(proto.trainer_spec.input) == []
  assert proto.trainer_spec.model_prefix == ''
  assert proto.trainer_spec.model_type == sentencepiece_model_pb2.TrainerSpec.UNIGRAM


def test_too_small_vocabulary_names_build_vocabulary(tmp_path):
  with pytest.raises(UserError, match='build_vocabulary: .*vocab_size=300'):
    vocab.train_sentencepiece(SENTENCES, str(tmp_path / 'small.model'), vocab_size=300)
  assert not list(tmp_path.iterdir())


class _FixedPieces:
  """Stands in for a SentencePieceProcessor: 'a b' -> 3 pieces, anything else -> 1."""

  def encode(self, lines):
    return [[7, 8, 9] if line == 'a b' else [7] for line in lines]


def test_pieces_per_word_counts_whitespace_words():
  assert vocab.pieces_per_word(_FixedPieces(), ['a b', 'c']) == pytest.approx(4 / 3)


def test_report_gives_sampled_shares_and_segmentation(model_path):
  report = vocab.vocabulary_report(model_path, SENTENCES, alpha=0.3, num_sentences=1_000_000,
                                   seed=0)
  counts = vocab.sampled_line_counts(SENTENCES, alpha=0.3, num_sentences=296, seed=0)
  assert report.num_pieces == spm.SentencePieceProcessor(model_file=model_path).get_piece_size()
  assert [r.language for r in report.languages] == ['eng_Latn', 'hau_Latn', 'swh_Latn']
  assert [r.sentences for r in report.languages] == [60, 12, 2]
  assert [r.sampled_share for r in report.languages] == [
      counts[lang] / 296 for lang in ('eng_Latn', 'hau_Latn', 'swh_Latn')]
  # p = n^0.3 / sum = 0.5057, 0.3120, 0.1823, within the sampling noise of 296 lines.
  probabilities = vocab.language_sampling_probabilities({'eng_Latn': 60, 'hau_Latn': 12,
                                                         'swh_Latn': 2}, alpha=0.3)
  assert probabilities == pytest.approx(
      {'eng_Latn': 0.505689, 'hau_Latn': 0.312027, 'swh_Latn': 0.182283}, abs=1e-6)
  for row in report.languages:
    assert row.sampled_share == pytest.approx(probabilities[row.language], abs=0.08)
    assert 1.0 <= row.pieces_per_word < 4.0
  table = vocab.format_report(report)
  assert table.splitlines()[-1] == f'pieces: {report.num_pieces}'
  assert len(table.splitlines()) == 5


def test_a_model_on_an_object_store_segments_as_the_local_file(model_path, gcs_bucket):
  remote = f'{gcs_bucket}/run/vocab.model'
  with open(model_path, 'rb') as local, tf.io.gfile.GFile(remote, 'wb') as copy:
    copy.write(local.read())
  text = SENTENCES['eng_Latn'][0]
  assert (vocab.sentencepiece_processor(remote).encode(text) ==
          spm.SentencePieceProcessor(model_file=model_path).encode(text))
