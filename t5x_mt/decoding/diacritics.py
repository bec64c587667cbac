"""Restoring Yoruba tone marks and underdots with a trained run of the restoration recipe.

The run (gin/runs/yoruba_diacritics.gin) is a Transformer of this codebase over a
character vocabulary: its encoder reads a stripped line one character per token, and its
decoder writes the marked line one character per input character
(`yoruba_marks.decoder_target`). Restoring decodes greedily, step i choosing among the
forms of input character i alone: the character itself, or for a letter that takes marks
one of its marked forms (`yoruba_marks.allowed_markings`), by the model's logit plus the
weighted log-prior of the run's marking lexicon (`marking_lexicon`): the model reads the
whole chunk, the lexicon remembers how each training word was marked, and words it never
saw stay bare. The output always strips back to exactly its input, whatever the model
prefers. A line that already carries a Yoruba mark, or holds no text, is returned as it is.

`run_loading.load_restorer(checkpoint_dir)` reads the run into a `Restorer`;
`restore_lines(restorer, lines)` restores; `MarkRestoringTranslator` restores a
translator's outputs into yor_Latn.
"""

from collections.abc import Callable, Sequence
import contextlib
import dataclasses
import functools
from typing import Any

import jax
from jax import lax
import jax.numpy as jnp
import numpy as np

from t5x_mt.decoding.search import common
from t5x_mt.decoding import inference
from t5x_mt.model import models
from t5x_mt.core import partitioning
from t5x_mt.data.yoruba import marking_lexicon
from t5x_mt.data import tags
from t5x_mt.data import vocab
from t5x_mt.data.yoruba import yoruba_marks
from t5x_mt.core.directions import Direction

DIRECTION = Direction(yoruba_marks.LANGUAGE, yoruba_marks.LANGUAGE)


# How strongly a word seen in training leans to the markings it was seen with: the weight
# of the lexicon's log-prior beside the model's logits, tuned on the run's validation lines.
LEXICON_WEIGHT = 8.0
# What becomes of words the training lines never held (names and loanwords, mostly, which
# Yoruba writes bare): 'bare' leaves them unmarked, 'model' lets the model mark them.
UNKNOWN_WORDS = ('bare', 'model')


@dataclasses.dataclass(frozen=True)
class Restorer:
  """A restoration run's model and parameters, the tags its lines start with, and the
  marking lexicon of its training lines with how it is used.

  Attributes:
    translator: the run as `run_loading.load_translator` reads it: model, parameters,
      vocabulary, mesh, batch size and input length.
    encoder_tag: the piece id that starts every encoder input.
    decoder_tag: the piece id forced as the first output, None where the run's tag
      strategy puts none on the decoder.
    lexicon: the run's `marking_lexicon.MarkingLexicon`; None restores with the model alone.
    lexicon_weight: the weight of the lexicon's log-prior beside the model's logits.
    unknown_words: one of UNKNOWN_WORDS, for the words the lexicon lacks.
  """
  translator: inference.Translator
  encoder_tag: int
  decoder_tag: int | None
  lexicon: marking_lexicon.MarkingLexicon | None = None
  lexicon_weight: float = LEXICON_WEIGHT
  unknown_words: str = 'bare'

  @property
  def max_chunk_chars(self) -> int:
    """The most characters one input holds beside its tag and EOS."""
    return self.translator.max_source_pieces

  def character_ids(self, text: str) -> list[int]:
    """One piece id per character of `text` (a space is SentencePiece's '▁'; a character
    the vocabulary lacks is its unknown piece), exactly as the run's data encoded it."""
    tokenizer = self.translator.tokenizer
    return [tokenizer.piece_to_id('\u2581' if char == ' ' else char) for char in text]

  @classmethod
  def of_translator(cls, translator: inference.Translator,
                    lexicon: marking_lexicon.MarkingLexicon | None,
                    lexicon_weight: float = LEXICON_WEIGHT,
                    unknown_words: str = 'bare') -> 'Restorer':
    """The restorer of a restoration run's translator, with the tags its lines start with."""
    direction_tags = tags.tags_for(translator.tag_strategy, *DIRECTION)
    encoder_tag = tags.tag_piece_id(translator.tokenizer, direction_tags.encoder_tag,
                                    translator.vocabulary_file)
    return cls(translator, encoder_tag, translator.forced_tag_id(direction_tags), lexicon,
               lexicon_weight, unknown_words)


def restore_lines(restorer: Restorer, lines: Sequence[str]) -> list[str]:
  """`lines` with their marks restored, line for line; a line that already carries a
  Yoruba mark, or holds no text, comes back unchanged. A line longer than the model's
  input is restored a chunk at a time, cut after a space where it has one."""
  chunks = [yoruba_marks.chunks(line, restorer.max_chunk_chars)
            if line.strip() and not yoruba_marks.has_marks(line) else [] for line in lines]
  restored = iter(_restore_chunks(restorer, [chunk for pieces in chunks for chunk in pieces]))
  return [''.join(next(restored) for _ in pieces) if pieces else line
          for line, pieces in zip(lines, chunks)]


class MarkRestoringTranslator:
  """A translator (`inference.Translator`, an ensemble's or a family router) whose outputs
  into yor_Latn come with their marks restored, as VolcTrans restored the tone marks its
  model dropped; outputs that already carry a Yoruba mark, and every other target, are
  left as decoded. It answers everything else as its translator does."""

  def __init__(self, translator: Any, restorer: Restorer):
    self.translator = translator
    self.restorer = restorer

  def __getattr__(self, name: str) -> Any:
    return getattr(self.translator, name)

  def translate(self, sentences: Sequence[str], src_lang: str, tgt_lang: str,
                on_batch: Callable[[int], None] | None = None) -> list[str]:
    translations = self.translator.translate(sentences, src_lang, tgt_lang, on_batch)
    return self._restored(translations, tgt_lang)

  def translate_nbest(self, sentences: Sequence[str], src_lang: str, tgt_lang: str,
                      nbest: int, on_batch: Callable[[int], None] | None = None
                      ) -> list[list[inference.Hypothesis]]:
    """Each hypothesis restored, its scores those of the decoded (unmarked) text."""
    lists = self.translator.translate_nbest(sentences, src_lang, tgt_lang, nbest, on_batch)
    texts = iter(self._restored([h.text for hypotheses in lists for h in hypotheses],
                                tgt_lang))
    return [[h._replace(text=next(texts)) for h in hypotheses] for hypotheses in lists]

  def _restored(self, outputs: list[str], tgt_lang: str) -> list[str]:
    if tgt_lang != yoruba_marks.LANGUAGE:
      return outputs
    return restore_lines(self.restorer, outputs)


def _restore_chunks(restorer: Restorer, chunks: Sequence[str]) -> list[str]:
  """Each chunk with its markings, decoded in batches of similar lengths."""
  translator = restorer.translator
  order = sorted(range(len(chunks)), key=lambda i: len(chunks[i]))
  restored = [''] * len(chunks)
  for start in range(0, len(order), translator.batch_size):
    rows = order[start:start + translator.batch_size]
    markings = _decode_batch(restorer, [chunks[i] for i in rows])
    for row, index in enumerate(rows):
      restored[index] = yoruba_marks.apply_markings(chunks[index], markings[row])
  return restored


def _decode_batch(restorer: Restorer, chunks: Sequence[str]) -> list[list[int]]:
  """The marking index of every character of each chunk, decoded in one batch whose rows
  and lengths are the translator's buckets (few shapes to compile)."""
  translator = restorer.translator
  encoder_ids = [[restorer.encoder_tag, *restorer.character_ids(chunk), vocab.EOS_ID]
                 for chunk in chunks]
  length, _ = translator.batch_lengths(encoder_ids)
  rows = translator._batch_rows(len(chunks))  # pylint: disable=protected-access
  prefix = [] if restorer.decoder_tag is None else [restorer.decoder_tag]
  steps = len(prefix) + length - 2
  tokens = np.zeros((rows, length), np.int32)
  candidates = np.full((rows, steps, len(yoruba_marks.MARKINGS)), vocab.EOS_ID, np.int32)
  allowed = np.zeros(candidates.shape, bool)
  prior = np.zeros(candidates.shape, np.float32)
  allowed[:, :, yoruba_marks.NO_MARK] = True
  for row in range(rows):
    # Rows beyond the chunks repeat the last one, as the translator's batches do.
    index = min(row, len(chunks) - 1)
    tokens[row, :len(encoder_ids[index])] = encoder_ids[index]
    candidates[row, :len(prefix), yoruba_marks.NO_MARK] = prefix
    row_candidates, row_allowed = _candidates(restorer, chunks[index])
    candidates[row, len(prefix):len(prefix) + len(row_candidates)] = row_candidates
    allowed[row, len(prefix):len(prefix) + len(row_allowed)] = row_allowed
    if restorer.lexicon is not None:
      _lean_to_lexicon(restorer, chunks[index],
                       allowed[row, len(prefix):len(prefix) + len(chunks[index])],
                       prior[row, len(prefix):len(prefix) + len(chunks[index])])
  with contextlib.ExitStack() as stack:
    if translator.mesh is not None:
      stack.enter_context(partitioning.activation_sharding(translator.mesh, translator.rules))
    choices = np.asarray(jax.device_get(_constrained_greedy(
        translator.model, translator.params, tokens, candidates, allowed, prior,
        DIRECTION.id)))
  return [choices[row, len(prefix):len(prefix) + len(chunk)].tolist()
          for row, chunk in enumerate(chunks)]


def _candidates(restorer: Restorer, chunk: str) -> tuple[np.ndarray, np.ndarray]:
  """(the piece of each marking of each character [characters, markings], whether the
  decoder may write it): the character itself without a mark, and the marked forms it
  takes (`yoruba_marks.allowed_markings`) that the vocabulary holds."""
  tokenizer = restorer.translator.tokenizer
  shape = (len(chunk), len(yoruba_marks.MARKINGS))
  candidates, allowed = np.full(shape, vocab.EOS_ID, np.int32), np.zeros(shape, bool)
  for position, (char, piece, markings) in enumerate(zip(
      chunk, restorer.character_ids(chunk), yoruba_marks.allowed_markings(chunk))):
    candidates[position, yoruba_marks.NO_MARK] = piece
    allowed[position, yoruba_marks.NO_MARK] = True
    for marking in markings[1:]:
      marked = tokenizer.piece_to_id(yoruba_marks.decoder_letter(char, marking))
      candidates[position, marking] = marked
      allowed[position, marking] = marked != tokenizer.unk_id()
  return candidates, allowed


def _lean_to_lexicon(restorer: Restorer, chunk: str, allowed: np.ndarray,
                     prior: np.ndarray) -> None:
  """Writes into `prior` [characters, markings] the lexicon's weighted log-prior of the
  chunk's markings, and with unknown words 'bare' allows their letters no mark (in
  `allowed`)."""
  prior[:] = restorer.lexicon_weight * restorer.lexicon.log_prior(chunk)
  if restorer.unknown_words == 'bare':
    allowed[restorer.lexicon.unknown_letters(chunk), yoruba_marks.NO_MARK + 1:] = False


@functools.partial(jax.jit, static_argnames=('model', 'direction'))
def _constrained_greedy(model: models.TranslationModel, params: Any, encoder_tokens: jax.Array,
                        candidates: jax.Array, allowed: jax.Array, prior: jax.Array,
                        direction: int) -> jax.Array:
  """The marking each decoder step chooses [B, steps]: step t outputs the best of its
  `candidates[:, t]` [B, markings] that are `allowed`, by the model's logit plus `prior`
  (a log-prior, 0 for none), which is the decoder's next input."""
  batch, steps = candidates.shape[:2]
  direction = jnp.full((batch,), direction, jnp.int32)
  encoded = model.encode(params, encoder_tokens, direction,
                         padded_length=encoder_tokens.shape[1])
  step, cache = model.start_decoding(params, encoded, encoder_tokens, direction, steps)

  def advance(carry, step_inputs):
    token, cache = carry
    candidates_here, allowed_here, prior_here = step_inputs
    logits, cache = step(token, cache)
    scores = jnp.take_along_axis(logits, candidates_here, axis=1) + prior_here
    choice = jnp.argmax(jnp.where(allowed_here, scores, common.NEG_INF), axis=-1)
    output = jnp.take_along_axis(candidates_here, choice[:, None], axis=1)
    return (output, cache), choice.astype(jnp.int32)

  first = jnp.zeros((batch, 1), jnp.int32)  # The decoder's first input (BOS is 0).
  _, choices = lax.scan(advance, (first, cache),
                        tuple(jnp.swapaxes(array, 0, 1) for array in (candidates, allowed, prior)))
  return choices.T
