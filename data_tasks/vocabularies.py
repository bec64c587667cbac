"""The vocabularies every registered task shares (`VOCABULARY`, `SOURCE_VOCABULARY`), the
choice of their file (`use_vocabulary`), and the features a task's examples hold in them
(`output_features`)."""

from collections.abc import Callable
import dataclasses
import os

import seqio
import tensorflow as tf
import tensorflow_text as tf_text

from data_tasks.run_settings import configure
from data_tasks.run_settings import settings
from t5x_mt.core import files
from t5x_mt.core.errors import UserError
from t5x_mt.data import vocab


class SharedVocabulary(seqio.Vocabulary):
  """The SentencePiece vocabulary of every registered task, resolved when first used.

  Tasks are registered at import, before a program says which vocabulary it uses, so
  they share this one object: it reads the settings' `vocabulary_path` (chosen with
  `use_vocabulary` or `configure`), or for the `source` side their
  `source_vocabulary_path` where they have one. seqio's interface is answered by that
  file's `seqio.SentencePieceVocabulary`, but for text to ids, which are
  `vocab.PieceTableProcessor`'s, in Python and in TensorFlow alike: they differ from
  SentencePiece's where a model has unused pieces (an imported Marian model's).
  """

  def __init__(self, source: bool = False):
    super().__init__(extra_ids=0)
    self._source = source
    self._loaded: tuple[seqio.SentencePieceVocabulary, vocab.PieceTableProcessor] | None = None

  @property
  def sentencepiece_model_file(self) -> str:
    if self._source and settings().source_vocabulary_path:
      return settings().source_vocabulary_path
    return settings().vocabulary_path

  def _load(self) -> tuple[seqio.SentencePieceVocabulary, vocab.PieceTableProcessor]:
    """The file in use, read once for each file the settings choose."""
    path = self.sentencepiece_model_file
    if self._loaded is None or self._loaded[0].sentencepiece_model_file != path:
      if not tf.io.gfile.exists(path):
        raise UserError(f'{path}: vocabulary file not found (build it with '
                        'launch/build_vocab.py, let launch/train.py build it, or choose '
                        'one with data_tasks.use_vocabulary)')
      loaded = seqio.SentencePieceVocabulary(path)
      self._loaded = loaded, vocab.PieceTableProcessor(model_proto=loaded.sp_model)
    return self._loaded

  @property
  def sentencepiece(self) -> seqio.SentencePieceVocabulary:
    """The seqio vocabulary of the file in use."""
    return self._load()[0]

  @property
  def pieces(self) -> vocab.PieceTableProcessor:
    """The file in use as the processor that turns text into ids."""
    return self._load()[1]

  def tokenizer_tf(self, nbest_size: int = 0, alpha: float = 1.0
                   ) -> Callable[[tf.Tensor], tf.Tensor | tf.RaggedTensor]:
    """Text to ids in TensorFlow as `pieces` encodes it, or sampling a segmentation as
    SentencePiece does with `nbest_size` and `alpha` (0: the best one)."""
    model = self.sentencepiece.sp_model
    if not self.pieces.has_unused_pieces:
      return tf_text.SentencepieceTokenizer(model=model, out_type=tf.int32,
                                            nbest_size=nbest_size, alpha=alpha).tokenize
    pieces = tf_text.SentencepieceTokenizer(model=model, out_type=tf.string,
                                            nbest_size=nbest_size, alpha=alpha)
    return lambda text: pieces.string_to_id(pieces.tokenize(text))

  @property
  def eos_id(self) -> int | None:
    return self.sentencepiece.eos_id

  @property
  def unk_id(self) -> int | None:
    return self.sentencepiece.unk_id

  @property
  def _base_vocab_size(self) -> int:
    return self.sentencepiece.vocab_size

  def _encode(self, s):
    return self.pieces.encode(s)

  def _decode(self, ids):
    return self.sentencepiece.decode(ids)

  def _encode_tf(self, s):
    return self.tokenizer_tf()(s)

  def _decode_tf(self, ids):
    return self.sentencepiece.decode_tf(ids)

  def __str__(self) -> str:
    return str(self.sentencepiece)


VOCABULARY = SharedVocabulary()
# The inputs': VOCABULARY's file unless the settings segment sources with a model of their
# own (imported Marian models), which numbers its pieces as VOCABULARY's does.
SOURCE_VOCABULARY = SharedVocabulary(source=True)


def use_vocabulary(path: str | os.PathLike[str]) -> None:
  """Makes the SentencePiece model at `path` the vocabulary of every registered task.

  This is how a program that reuses the registry chooses its vocabulary without gin; the
  choice holds for the rest of the process, or until `configure` chooses again.
  """
  path = files.expand(path)
  if not tf.io.gfile.exists(path):
    raise UserError(f'{path}: vocabulary file not found (build it with '
                    'launch/build_vocab.py)')
  configure(dataclasses.replace(settings(), vocabulary_path=path))


def output_features() -> dict[str, seqio.Feature]:
  """Shared-vocabulary inputs and targets ending in EOS, and the targets' direction ids."""
  return {
      'inputs': seqio.Feature(vocabulary=SOURCE_VOCABULARY, add_eos=True, required=True),
      'targets': seqio.Feature(vocabulary=VOCABULARY, add_eos=True),
      'targets_direction': seqio.Feature(vocabulary=seqio.PassThroughVocabulary(size=0),
                                         add_eos=False, required=False),
  }
