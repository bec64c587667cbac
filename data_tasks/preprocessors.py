"""The tf.data steps that make a Task's examples of a corpus's records: text to ids, with
the sampled segmentation, the reversed targets, the tags and the direction ids a run's
settings ask for.

A translation Task and a language model's Task differ only in how records become text
examples and which tags they carry; `task_preprocessors` chains the rest the same way for
both.
"""

import dataclasses
import functools

import seqio
import tensorflow as tf

from data_tasks.run_settings import settings
from data_tasks.vocabularies import SOURCE_VOCABULARY
from data_tasks.vocabularies import VOCABULARY
from t5x_mt.data import corpora
from t5x_mt.data import corpus_types
from t5x_mt.data import tags
from t5x_mt.data.mixtures import TaskSource


@dataclasses.dataclass(frozen=True)
class SubwordSampling:
  """How a direction's training examples are segmented: whether each side samples, and
  SentencePiece's smoothing `alpha` and `nbest_size` where it does."""
  source: bool
  target: bool
  alpha: float
  nbest_size: int


def subword_sampling(direction: str) -> SubwordSampling:
  """Which sides of a direction's training examples sample their segmentation, and how.

  Subword regularisation (docs/methods.md#subword-regularisation): SentencePiece samples a
  segmentation of each training sentence (`nbest_size` candidates, -1 for all, smoothed
  by `alpha`) instead of always taking the best one. The settings' `sampling_sides` maps a
  direction ('eng_Latn-hau_Latn') or '*' (every other direction) to 'none', 'source' (the
  usual choice for high-resource directions) or 'both' (low-resource ones). Off by
  default. Validation, test and inference always segment deterministically. SentencePiece
  draws from its own random source, so a run that samples does not resume bit for bit.
  """
  sides = settings().sampling_sides
  side = sides.get(direction, sides.get('*', 'none'))
  return SubwordSampling(side in ('source', 'both'), side == 'both', settings().sampling_alpha,
                         settings().sampling_nbest_size)


def to_inputs_targets(dataset: tf.data.Dataset) -> tf.data.Dataset:
  """A translation example: the source as inputs, the target as targets."""
  return dataset.map(lambda ex: {'inputs': ex['source'], 'targets': ex['target'],
                                 'is_training': ex['is_training']},
                     num_parallel_calls=tf.data.AUTOTUNE)


def to_language_model_examples(dataset: tf.data.Dataset) -> tf.data.Dataset:
  """The target side alone: a language model reads no source."""
  return dataset.map(lambda ex: {'inputs': tf.constant(''), 'targets': ex['target'],
                                 'is_training': ex['is_training']},
                     num_parallel_calls=tf.data.AUTOTUNE)


def _tokenize(dataset: tf.data.Dataset, direction: str) -> tf.data.Dataset:
  """Text to ids (keeping the text as `<feature>_pretokenized`, as seqio does); the sides
  `subword_sampling` names are sampled in training examples."""
  sampling = subword_sampling(direction)
  sides = (('inputs', sampling.source, SOURCE_VOCABULARY),
           ('targets', sampling.target, VOCABULARY))
  samplers = {feature: vocabulary.tokenizer_tf(sampling.nbest_size, sampling.alpha)
              for feature, sample, vocabulary in sides if sample}

  def tokenize(example):
    tokenized = {}
    for feature, sample, vocabulary in sides:
      text = example[feature]
      tokenized[f'{feature}_pretokenized'] = text
      best = vocabulary.encode_tf(text)
      if sample:
        tokenized[feature] = tf.cond(example['is_training'],
                                     lambda text=text, sampler=samplers[feature]:
                                     sampler(text),
                                     lambda best=best: best)
      else:
        tokenized[feature] = best
    return tokenized

  return dataset.map(tokenize, num_parallel_calls=tf.data.AUTOTUNE)


def _reverse_targets(dataset: tf.data.Dataset) -> tf.data.Dataset:
  """Each target's pieces in reverse order where the settings say `reverse_target` (a
  right-to-left model), before the tags and EOS go on: the decoder still starts from its
  tag and ends with EOS."""
  if not settings().reverse_target:
    return dataset
  return dataset.map(lambda example: {**example, 'targets': tf.reverse(example['targets'], [0])},
                     num_parallel_calls=tf.data.AUTOTUNE)


def _tag_id(tag: str) -> int:
  return tags.tag_piece_id(VOCABULARY.sentencepiece.tokenizer, tag,
                           VOCABULARY.sentencepiece_model_file)


def _tag_ids(*pieces: str | None) -> tf.Tensor:
  """The ids of the given tag pieces (None skipped), as a constant to concatenate."""
  return tf.constant([_tag_id(piece) for piece in pieces if piece], tf.int32)


def add_tags(dataset: tf.data.Dataset, source: TaskSource) -> tf.data.Dataset:
  """Prepends the tag ids of the run's tag strategy to inputs and (if any) targets, and
  adds the synthetic-data tags of a back-translated corpus (`tags.synthetic_tags`).

  Tags are added as ids, not text, so the tag is one piece whatever SentencePiece
  would do with the text around it.
  """
  src_lang, tgt_lang = source.direction
  direction_tags = tags.tags_for(settings().tag_strategy, src_lang, tgt_lang)
  synthetic = corpus_types.synthetic_tags(corpora.get_corpus(source.corpus), src_lang,
                                          tgt_lang)
  encoder_prefix = _tag_ids(direction_tags.encoder_tag, synthetic.source_prefix)
  encoder_suffix = _tag_ids(synthetic.source_suffix)
  decoder_prefix = _tag_ids(direction_tags.decoder_tag)
  decoder_suffix = _tag_ids(synthetic.target_suffix)

  def add(example):
    example = dict(example)
    example['inputs'] = tf.concat([encoder_prefix, example['inputs'], encoder_suffix], axis=0)
    example['targets'] = tf.concat([decoder_prefix, example['targets'], decoder_suffix],
                                   axis=0)
    return example

  return dataset.map(add, num_parallel_calls=tf.data.AUTOTUNE)


def add_language_model_tag(dataset: tf.data.Dataset, lang: str) -> tf.data.Dataset:
  """The language's tag before each text (`tags.language_model_tags`)."""
  prefix = _tag_ids(tags.language_model_tags(lang).decoder_tag)
  return dataset.map(lambda ex: {**ex, 'targets': tf.concat([prefix, ex['targets']], axis=0)},
                     num_parallel_calls=tf.data.AUTOTUNE)


def _add_direction(dataset: tf.data.Dataset, direction: int) -> tf.data.Dataset:
  """`targets_direction`: the direction id on every target token (packed with targets)."""

  def add(example):
    example = dict(example)
    example['targets_direction'] = tf.fill(tf.shape(example['targets']), direction)
    return example

  return dataset.map(add, num_parallel_calls=tf.data.AUTOTUNE)


def task_preprocessors(source: TaskSource, to_examples, add_task_tags) -> list:
  """A Task's preprocessors: `to_examples` makes text inputs and targets of the source's
  records, which are tokenised (`targets` reversed for a right-to-left model), tagged by
  `add_task_tags`, ended with EOS and marked with their direction."""
  return [to_examples, functools.partial(_tokenize, direction=source.direction.name),
          _reverse_targets, add_task_tags, seqio.preprocessors.append_eos_after_trim,
          functools.partial(_add_direction, direction=source.direction.id)]
