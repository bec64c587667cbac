"""A run's SentencePiece vocabulary: built from its mixture when missing, kept with the run.

A copy lives in MODEL_DIR so that translation needs only the checkpoint directory. A
resumed run may switch to a grown version of its vocabulary (old pieces unchanged, new
ones appended); any other change is an error.
"""

import dataclasses
import logging
import pathlib

import sentencepiece as spm
from t5x_mt.core import files
from t5x_mt.core import validation
from t5x_mt.data import mixtures
from t5x_mt.data import vocab
from t5x_mt.data import vocab_merge
from t5x_mt.core.errors import UserError


@dataclasses.dataclass(frozen=True)
class VocabularyConfig:
  """How a missing vocabulary is trained: `vocab_size` pieces at most, languages sampled
  with p ∝ n^alpha over at most `num_sentences` sentences; `model_type` 'unigram'
  (subwords) or 'char' (one piece per character: vocab.train_sentencepiece)."""
  vocab_size: int = 8000
  alpha: float = 0.3
  num_sentences: int = 1_000_000
  seed: int = 0
  model_type: str = 'unigram'

  def __post_init__(self):
    validation.integer('runs.VocabularyConfig.vocab_size (VOCAB_SIZE)', self.vocab_size,
                       minimum=1)
    validation.number('runs.VocabularyConfig.alpha', self.alpha, at_least=0.0)
    validation.integer('runs.VocabularyConfig.num_sentences', self.num_sentences,
                       minimum=1)
    validation.choice('runs.VocabularyConfig.model_type', self.model_type,
                      vocab.MODEL_TYPES)


def build_vocabulary(config: VocabularyConfig, mixture: mixtures.MixtureView,
                     output_path: str) -> str:
  """Trains the SentencePiece model on the training side of the mixture."""
  sentences = mixtures.training_sentences(mixture)
  return vocab.train_sentencepiece(sentences, output_path, vocab_size=config.vocab_size,
                                   alpha=config.alpha, num_sentences=config.num_sentences,
                                   seed=config.seed, model_type=config.model_type)


def padded_vocab_size(num_pieces: int, multiple: int = 128) -> int:
  """Embedding rows: the vocabulary rounded up so the 'vocab' axis shards evenly."""
  return -(-num_pieces // multiple) * multiple


def num_pieces(model: bytes) -> int:
  return spm.SentencePieceProcessor(model_proto=model).get_piece_size()


def run_vocabulary(path: str, mixture: mixtures.MixtureView, config: VocabularyConfig,
                   local_copy: pathlib.Path | None) -> bytes:
  """The SentencePiece model at `path` (VOCABULARY_PATH), built from the mixture if it does
  not exist yet, checked against the run's `local_copy` from an earlier start (if any)."""
  if not files.path(path).exists():
    logging.info('Vocabulary %s not found: building it from %s', path, mixture.name)
    build_vocabulary(config, mixture, path)
  configured = files.path(path).read_bytes()
  if local_copy is not None and local_copy.exists() and local_copy.read_bytes() != configured:
    if not vocab_merge.extends(local_copy.read_bytes(), configured):
      raise UserError(f'VOCABULARY_PATH: {path} differs from the vocabulary this run was '
                      f'trained with ({local_copy}) and does not extend it (launch/'
                      'merge_vocab.py grows a vocabulary; a new vocabulary needs a new MODEL_DIR)')
    logging.info('Vocabulary grown: %s extends %s; new embedding rows are initialised',
                 path, local_copy)
  return configured
