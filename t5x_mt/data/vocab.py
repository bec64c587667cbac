"""Shared SentencePiece unigram vocabulary for many languages.

Languages differ in size by orders of magnitude; training the tokenizer on raw text would
leave the small ones with character-level pieces. Following docs/methods.md#vocabulary, each
language's sentences are sampled with probability proportional to n_l^alpha (alpha = 0.3),
so small languages are upsampled and large ones downsampled before SentencePiece sees them.
"""

from collections.abc import Mapping, Sequence
import dataclasses
import functools
import io
import logging
import os

import numpy as np
import sentencepiece as spm

from t5x_mt.core import files
from t5x_mt.data import tags
from t5x_mt.core.errors import UserError

PAD_ID, EOS_ID, UNK_ID = 0, 1, 2
# SentencePiece splits the E-step over threads and sums their float statistics, so the
# pieces and scores depend on the thread count: a fixed count (not the machine's cores)
# makes the model file the same on every machine.
NUM_THREADS = 16
# Upper bound on the sample, relative to the distinct lines available: enough to upsample
# small languages without SentencePiece reading millions of copies of a tiny corpus.
MAX_UPSAMPLING = 4
# SentencePiece model types: subword pieces, or one piece per character.
MODEL_TYPES = ('unigram', 'char')
# A character vocabulary reads normalised (NFKC) text one piece per character: no dummy
# space before a line, runs of spaces kept, a piece for every character of the text and
# no byte pieces.
_CHARACTER_OPTIONS = dict(character_coverage=1.0, byte_fallback=False,
                          add_dummy_prefix=False, remove_extra_whitespaces=False)


def language_sampling_probabilities(sizes: Mapping[str, int], alpha: float) -> dict[str, float]:
  """p_l = n_l^alpha / sum_k n_k^alpha over languages with at least one sentence."""
  kept = {lang: n for lang, n in sizes.items() if n > 0}
  if not kept:
    raise UserError('vocabulary: the training side of the mixture has no sentences')
  weights = {lang: float(n) ** alpha for lang, n in kept.items()}
  total = sum(weights.values())
  return {lang: w / total for lang, w in sorted(weights.items())}


def sample_size(sentences: Mapping[str, Sequence[str]], num_sentences: int) -> int:
  """Lines SentencePiece is trained on: `num_sentences`, at most MAX_UPSAMPLING x the text."""
  total_lines = sum(len(lines) for lines in sentences.values())
  return min(num_sentences, max(total_lines, 1) * MAX_UPSAMPLING)


def _draw_line_counts(probabilities: Mapping[str, float], num_sentences: int,
                      rng: np.random.Generator) -> dict[str, int]:
  langs = list(probabilities)
  counts = rng.multinomial(num_sentences, [probabilities[lang] for lang in langs])
  return {lang: int(count) for lang, count in zip(langs, counts)}


def sampled_line_counts(sentences: Mapping[str, Sequence[str]], *, alpha: float,
                        num_sentences: int, seed: int) -> dict[str, int]:
  """Lines per language that `sample_training_text` draws with the same arguments."""
  probabilities = language_sampling_probabilities(
      {lang: len(lines) for lang, lines in sentences.items()}, alpha)
  return _draw_line_counts(probabilities, num_sentences, np.random.default_rng(seed))


def sample_training_text(sentences: Mapping[str, Sequence[str]], *, alpha: float,
                         num_sentences: int, seed: int) -> list[str]:
  """Draws `num_sentences` lines, language l with probability p_l, uniformly within l.

  Lines are drawn with replacement, so a small language can contribute more lines than
  it has; the expected count for l is num_sentences * p_l.
  """
  probabilities = language_sampling_probabilities(
      {lang: len(lines) for lang, lines in sentences.items()}, alpha)
  rng = np.random.default_rng(seed)
  sample = []
  for lang, count in _draw_line_counts(probabilities, num_sentences, rng).items():
    lines = sentences[lang]
    sample.extend(lines[i] for i in rng.integers(0, len(lines), size=count))
  rng.shuffle(sample)
  return sample


def train_sentencepiece(sentences: Mapping[str, Sequence[str]], output_path: str, *,
                        vocab_size: int, alpha: float = 0.3, num_sentences: int = 1_000_000,
                        character_coverage: float = 0.9995, seed: int = 0,
                        num_threads: int = NUM_THREADS, model_type: str = 'unigram') -> str:
  """Trains a unigram (or character) model on language-balanced text and writes
  `output_path`.

  The model reserves pad=0, eos=1, unk=2 (seqio's convention, no BOS), holds every
  language tag, `<BT>`, `<DA>` and `TBD0..TBD31` as single pieces, and falls back to
  bytes for characters it has not seen. `vocab_size` is an upper bound: for small corpora
  SentencePiece stops at the number of pieces the text supports (it must still exceed the
  ~500 pieces that symbols, bytes and characters need). The same arguments give the same
  file bytes on any machine: training runs in memory (no temporary paths recorded in the
  model) with a fixed thread count. The file appears only when complete.

  `model_type='char'` makes a character vocabulary (`_CHARACTER_OPTIONS`) of every line of
  every language, unsampled: it needs every character, not a balance of languages;
  'bpe' a BPE model, whose pieces grow a BPE vocabulary (`vocab_merge`).
  """
  if model_type == 'char':
    sample = [line for lines in sentences.values() for line in lines]
    options = _CHARACTER_OPTIONS
  else:
    sample = sample_training_text(sentences, alpha=alpha,
                                  num_sentences=sample_size(sentences, num_sentences),
                                  seed=seed)
    options = dict(character_coverage=character_coverage, byte_fallback=True)
  model = io.BytesIO()
  spm.set_random_generator_seed(seed)
  try:
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter([line.replace('\n', ' ') for line in sample]),
        model_writer=model, model_type=model_type, vocab_size=vocab_size,
        hard_vocab_limit=False, **options, pad_id=PAD_ID, eos_id=EOS_ID, unk_id=UNK_ID,
        bos_id=-1, user_defined_symbols=tags.special_symbols(), input_sentence_size=0,
        shuffle_input_sentence=False, num_threads=num_threads, minloglevel=2)
  except RuntimeError as error:
    raise UserError(f'build_vocabulary: SentencePiece cannot train on this text with '
                    f'vocab_size={vocab_size}: {str(error).splitlines()[0]}') from None
  output = files.write_bytes_atomically(output_path, model.getvalue())
  logging.info('Wrote %s from %d sampled lines of %d languages', output, len(sample),
               len(sentences))
  return str(output)


def pieces_per_word(processor: spm.SentencePieceProcessor, lines: Sequence[str]) -> float:
  """SentencePiece pieces per whitespace-separated word.

  1.0 means whole words; higher means the language is fragmented, which is what sampling
  with alpha < 1 is meant to even out across languages.
  """
  words = sum(len(line.split()) for line in lines)
  pieces = sum(len(ids) for ids in processor.encode(list(lines)))
  return pieces / max(words, 1)


@dataclasses.dataclass(frozen=True)
class LanguageReport:
  """How one language fared in the vocabulary: its data, its share, its segmentation."""
  language: str
  sentences: int
  sampled_share: float
  pieces_per_word: float


@dataclasses.dataclass(frozen=True)
class VocabularyReport:
  """The model's size and what it gives each language."""
  num_pieces: int
  languages: tuple[LanguageReport, ...]


class PieceTableProcessor(spm.SentencePieceProcessor):
  """SentencePiece's processor whose ids are the pieces it cuts, looked up in the model's
  table of pieces, as Marian's tokenizer numbers them.

  The two differ only where SentencePiece meets characters its model has no piece for:
  it cuts each run of them as one piece that spells the run, and numbers it <unk>. An
  imported Marian (OPUS-MT) model segments each side with a SentencePiece model of its
  own and numbers the pieces of both in one table, so a run that one side's model lacks
  but the other side's has as a piece (a comma, in an English model trained on text
  without one) is that piece to Marian, not <unk>. In t5x_mt's form of those models the
  other side's pieces are unused pieces (`pretrained.hf_vocabulary`): this processor's
  `encode` gives such a run their id. A model without unused pieces, as every vocabulary
  t5x_mt trains is, encodes exactly as SentencePiece does.
  """

  def Encode(self, input, out_type=int, **options):  # pylint: disable=invalid-name,redefined-builtin
    out_type = options.pop('return_type', None) or out_type
    if out_type is not int or not self.has_unused_pieces:
      return super().Encode(input, out_type=out_type, **options)
    pieces = super().Encode(input, out_type=str, **options)
    if isinstance(input, list):
      return [self.piece_to_id(row) for row in pieces]
    return self.piece_to_id(pieces)

  encode = Encode

  @functools.cached_property
  def has_unused_pieces(self) -> bool:
    return any(self.is_unused(i) for i in range(self.get_piece_size()))


def sentencepiece_processor(model_path: str | os.PathLike) -> PieceTableProcessor:
  """The SentencePiece model at `model_path`, a local file (opened by name, so a file that
  is no model is named in the error) or one on an object store (gs://), which
  SentencePiece cannot open itself."""
  if not files.on_object_store(model_path):
    return PieceTableProcessor(model_file=str(model_path))
  return PieceTableProcessor(model_proto=files.path(model_path).read_bytes())


def vocabulary_report(model_path: str, sentences: Mapping[str, Sequence[str]], *,
                      alpha: float, num_sentences: int, seed: int) -> VocabularyReport:
  """What a trained vocabulary gives each language, for `launch/build_vocab.py` to print.

  Per language (sorted): its share of the lines the model was trained on (pass the
  arguments given to train_sentencepiece) and its pieces per word on `sentences`.
  """
  processor = spm.SentencePieceProcessor(model_file=model_path)
  counts = sampled_line_counts(sentences, alpha=alpha,
                               num_sentences=sample_size(sentences, num_sentences), seed=seed)
  total = max(sum(counts.values()), 1)
  return VocabularyReport(
      num_pieces=processor.get_piece_size(),
      languages=tuple(
          LanguageReport(language=lang, sentences=len(sentences[lang]),
                         sampled_share=counts[lang] / total,
                         pieces_per_word=pieces_per_word(processor, sentences[lang]))
          for lang in sorted(counts)))


def format_report(report: VocabularyReport) -> str:
  """A table: one row per language, then the number of pieces."""
  rows = [f'{"language":<10} {"sentences":>10} {"sampled":>8} {"pieces/word":>12}']
  rows += [f'{r.language:<10} {r.sentences:>10d} {r.sampled_share:>8.1%} '
           f'{r.pieces_per_word:>12.2f}' for r in report.languages]
  rows.append(f'pieces: {report.num_pieces}')
  return '\n'.join(rows)
