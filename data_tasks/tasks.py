"""One seqio Task per translation direction of a registered corpus, `<corpus>_<src>.<tgt>`.

seqio allows no '-' in task names, so the direction's `<src>-<tgt>` is written with a dot.
Every Task carries the postprocessing and metric function of `data_tasks.metrics`, so
seqio's Evaluator (and T5X's, built on it) scores sacreBLEU BLEU and chrF++ on it.
"""

import functools

import seqio
import tensorflow as tf

from data_tasks.metrics import postprocess_translation
from data_tasks.metrics import translation_metrics
from data_tasks.preprocessors import add_tags
from data_tasks.preprocessors import task_preprocessors
from data_tasks.preprocessors import to_inputs_targets
from data_tasks.vocabularies import output_features
from t5x_mt.core import languages
from t5x_mt.data import corpora
from t5x_mt.data import streamed_pipeline
from t5x_mt.core.directions import Direction
from t5x_mt.data.mixtures import TaskSource
from t5x_mt.core.errors import UserError


def task_name(corpus: str, src_lang: str, tgt_lang: str) -> str:
  """`<corpus>_<src>.<tgt>`."""
  return f'{corpus}_{src_lang}.{tgt_lang}'


class PairsSource(seqio.FunctionDataSource):
  """seqio's view of one direction of an in-memory corpus (`task_source`), every split."""

  def __init__(self, task_source: TaskSource):
    super().__init__(functools.partial(_pairs_dataset, task_source),
                     splits=('train', 'validation', 'test'))
    self.task_source = task_source


def _pairs_dataset(source: TaskSource, split: str, shuffle_files: bool,
                   seed: int | None = None) -> tf.data.Dataset:
  """The direction's pairs as an in-memory, checkpointable tf.data source."""
  del shuffle_files, seed  # One in-memory shard; examples are shuffled by seqio.
  pairs = corpora.get_corpus(source.corpus).pairs(split, *source.direction)
  if not pairs:
    raise UserError(f'{source.corpus}: no {split} pairs for {source.direction.name}')
  sources, targets = zip(*pairs)
  return tf.data.Dataset.from_tensor_slices({
      'source': list(sources), 'target': list(targets),
      'is_training': [split == 'train'] * len(sources)})


def register_direction_task(corpus: str, src_lang: str, tgt_lang: str) -> str:
  """Registers (once) the Task reading one direction of a registered corpus."""
  name = task_name(corpus, src_lang, tgt_lang)
  if name in seqio.TaskRegistry.names():
    return name
  languages.check_language(src_lang, f'{name}: source language')
  languages.check_language(tgt_lang, f'{name}: target language')
  source = TaskSource(corpus, Direction(src_lang, tgt_lang))
  if corpora.is_streamed(corpus):
    data_source = streamed_pipeline.StreamedPairsSource(
        functools.partial(corpora.get_corpus, corpus), source, name)
  else:
    data_source = PairsSource(source)
  seqio.TaskRegistry.add(
      name,
      source=data_source,
      # A streamed corpus shuffles itself, and its position is saved with its stream.
      shuffle_buffer_size=None if corpora.is_streamed(corpus) else seqio.SHUFFLE_BUFFER_SIZE,
      preprocessors=task_preprocessors(source, to_inputs_targets,
                                       functools.partial(add_tags, source=source)),
      output_features=output_features(),
      postprocess_fn=postprocess_translation,
      metric_fns=[translation_metrics])
  return name
