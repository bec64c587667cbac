"""A trained run as a scorer of given sentence pairs: log p(target | source), teacher-forced.

Reranking an n-best list needs each hypothesis scored by other models than the one that
produced it: a backward model (a target->source run scores the source given the
hypothesis), a right-to-left model and a target-side language model. `RunScorer` loads
any of these from its run folder, as translation does, and scores pairs in length-sorted,
bucketed batches through `models.TranslationModel.score_batch`, compiled once per bucket.

A pair is tokenised as the run's training data was: the source as translation encodes it
(`inference.Translator.encode_source`: the encoder tag, its pieces cut to the model's
input, EOS) and the target as the decoder's tag (forced in translation, so not scored),
the target's pieces (in reverse order for a right-to-left run) and EOS. A language model
reads no source and starts every text with its language's tag
(`tags.language_model_tags`). A pair's score is the sum of the log-probabilities of the
target's pieces and EOS, the same whatever else shares its batch.
"""

from collections.abc import Sequence
import contextlib
import functools

import jax
import numpy as np

from t5x_mt.decoding import inference
from t5x_mt.core import partitioning
from t5x_mt.core import progress
from t5x_mt.data import tags
from t5x_mt.data import vocab
from t5x_mt.core.directions import Direction
from t5x_mt.core.errors import UserError

TRANSLATION = 'translation'
RIGHT_TO_LEFT = 'right_to_left'
LANGUAGE_MODEL = 'language_model'
KINDS = (TRANSLATION, RIGHT_TO_LEFT, LANGUAGE_MODEL)


# The model is static and hashed by its config: runs of one architecture share the trace.
@functools.partial(jax.jit, static_argnums=0)
def _score_batch(model, params, batch):
  return model.score_batch(params, batch)


class RunScorer:
  """Scores sentence pairs with a trained run's model (see the module docstring).

  Attributes:
    kind: what the run models, read from its config.gin: 'translation' (an ordinary
      encoder-decoder run), 'right_to_left' (one trained with REVERSE_TARGET, which
      scores each target's pieces in reverse order) or 'language_model' (a decoder
      alone, `network.TransformerConfig.decoder_only`, which scores p(target)).
    translator: the run loaded for translation; its tokenizer, tags and model are the
      scorer's.
  """

  def __init__(self, translator: inference.Translator):
    self.translator = translator
    if translator.model.config.decoder_only:
      self.kind = LANGUAGE_MODEL
    else:
      self.kind = RIGHT_TO_LEFT if translator.reverse_target else TRANSLATION

  def score(self, sources: Sequence[str] | None, targets: Sequence[str], src_lang: str,
            tgt_lang: str, *, progress_bar: bool = False) -> np.ndarray:
    """log p(target | source) [len(targets)] of each pair (float32), summed over the
    target's pieces and EOS, teacher-forced without dropout; a language model ignores
    `sources` (which may be None) and `src_lang`, and gives log p(target) in tgt_lang."""
    self.translator.check_target(tgt_lang)
    encoder_ids, direction_tags, direction = self._source_ids(sources, len(targets), src_lang,
                                                              tgt_lang)
    decoder_ids, scored_from = self._target_ids(targets, direction_tags)
    scores = np.zeros(len(targets), np.float32)
    order = sorted(range(len(targets)), key=lambda i: (len(decoder_ids[i]), len(encoder_ids[i])))
    with progress.bar(total=len(targets), desc=f'score {src_lang}-{tgt_lang}', unit='pair',
                      shown=progress_bar) as bar:
      for start in range(0, len(order), self.translator.batch_size):
        rows = order[start:start + self.translator.batch_size]
        batch = self._batch([encoder_ids[i] for i in rows], [decoder_ids[i] for i in rows],
                            scored_from, direction)
        scores[rows] = self._run(batch)[:len(rows)]
        bar.update(len(rows))
    return scores

  def _source_ids(self, sources: Sequence[str] | None, num_targets: int, src_lang: str,
                  tgt_lang: str) -> tuple[list[list[int]], tags.Tags, int]:
    """(encoder ids of each pair, the tags, the direction id) as training made them: a
    language model's input is EOS alone and its direction its language's own."""
    if self.kind == LANGUAGE_MODEL:
      return ([[vocab.EOS_ID]] * num_targets, tags.language_model_tags(tgt_lang),
              Direction(tgt_lang, tgt_lang).id)
    if sources is None or len(sources) != num_targets:
      raise ValueError(f'{0 if sources is None else len(sources)} sources for '
                       f'{num_targets} targets; give one source per target')
    direction_tags = tags.tags_for(self.translator.tag_strategy, src_lang, tgt_lang)
    return ([self.translator.encode_source(source, direction_tags) for source in sources],
            direction_tags, Direction(src_lang, tgt_lang).id)

  def _target_ids(self, targets: Sequence[str], direction_tags: tags.Tags
                  ) -> tuple[list[list[int]], int]:
    """(decoder target ids of each target, the position its scored tokens start at): the
    decoder tag where the run's tags put one, the pieces (reversed for a right-to-left
    run, as it trained), EOS."""
    prefix = []
    if direction_tags.decoder_tag:
      prefix = [tags.tag_piece_id(self.translator.tokenizer, direction_tags.decoder_tag,
                                  self.translator.vocabulary_file)]
    max_length = self.translator.model.config.max_length
    decoder_ids = []
    for index, pieces in enumerate(self.translator.tokenizer.encode(list(targets))):
      ids = prefix + (pieces[::-1] if self.translator.reverse_target else pieces) + [vocab.EOS_ID]
      if len(ids) > max_length:
        raise UserError(f'target {index + 1}: {len(pieces)} pieces do not fit the '
                        f"model's {max_length} decoder positions")
      decoder_ids.append(ids)
    return decoder_ids, len(prefix)

  def _batch(self, encoder_ids: list[list[int]], decoder_ids: list[list[int]],
             scored_from: int, direction: int) -> dict[str, np.ndarray]:
    """A batch of `batch_size` rows (those past the pairs repeat the last one), each side
    padded to its bucketed longest row."""
    rows = self.translator.batch_size
    encoder_length = inference.bucket_length(max(map(len, encoder_ids)),
                                             self.translator.max_input_length)
    decoder_length = inference.bucket_length(max(map(len, decoder_ids)),
                                             self.translator.model.config.max_length)
    batch = {name: np.zeros((rows, length), np.int32) for name, length in (
        ('encoder_input_tokens', encoder_length), ('decoder_input_tokens', decoder_length),
        ('decoder_target_tokens', decoder_length), ('decoder_loss_weights', decoder_length),
        ('decoder_direction_ids', decoder_length))}
    for row in range(rows):
      source, target = (ids[min(row, len(ids) - 1)] for ids in (encoder_ids, decoder_ids))
      batch['encoder_input_tokens'][row, :len(source)] = source
      batch['decoder_target_tokens'][row, :len(target)] = target
      batch['decoder_input_tokens'][row, 1:len(target)] = target[:-1]
      batch['decoder_loss_weights'][row, scored_from:len(target)] = 1
      batch['decoder_direction_ids'][row, :len(target)] = direction
    return batch

  def _run(self, batch: dict[str, np.ndarray]) -> np.ndarray:
    translator = self.translator
    with contextlib.ExitStack() as stack:
      if translator.mesh is not None:
        stack.enter_context(partitioning.activation_sharding(translator.mesh, translator.rules))
      return np.asarray(jax.device_get(_score_batch(translator.model, translator.params, batch)))
