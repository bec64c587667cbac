"""seqio Tasks and Mixtures for every registered corpus.

`import data_tasks` registers one Task per translation direction of the embedded CLDR
corpus, named `<corpus>_<src>.<tgt>` with FLORES-200 codes (seqio allows no '-' in task
names, so the direction's `<src>-<tgt>` is written with a dot here), and the named mixtures
below. Directions of other registered corpora (NTREX-128, FLORES-200, a user's files)
are registered by `get_mixture_or_task` when first named, since listing their languages
means reading their folders. Other projects import this module to reuse the registry, and
register mixtures over their own corpora with `register_mixture`. Every Task carries the
postprocessing and metric function of `data_tasks.metrics`, so seqio's Evaluator (and
T5X's, built on it) scores sacreBLEU BLEU and chrF++ on it.

The registry's run-level settings are one `DataSettings` value, taken when a dataset is
built, not when tasks are registered, so that one registry serves every run. A program
that reuses the registry chooses the vocabulary of every task with `use_vocabulary(path)`;
nothing else needs choosing, since the other settings have defaults. `configure(settings)`
chooses them all at once: t5x_mt's launch layer builds the settings from its gin bindings
and passes them here (`data_tasks.from_gin`). The t5x_mt library never imports this
package: it looks registered tasks up by name through seqio (`t5x_mt.data.mixtures`), so
every name it is handed must be registered first (`get_mixture_or_task` registers those
this registry registers on demand).
"""

from collections.abc import Iterable
from collections.abc import Mapping
from collections.abc import Sequence
import dataclasses
import functools
import itertools
import os
import re

import seqio
import tensorflow as tf
import tensorflow_text as tf_text

from data_tasks import metrics
from t5x_mt.core import files
from t5x_mt.core import languages
from t5x_mt.core import validation
from t5x_mt.data import cldr
from t5x_mt.data import corpora
from t5x_mt.data import corpus_types
from t5x_mt.data import mixtures
from t5x_mt.data import streamed
from t5x_mt.data import streamed_pipeline
from t5x_mt.data import tags
from t5x_mt.data import wmt22
from t5x_mt.core.directions import Direction
from t5x_mt.data.mixtures import MixtureView
from t5x_mt.data.mixtures import TaskSource
from t5x_mt.data.settings import DataSettings
from t5x_mt.core.errors import UserError

# The directions of the embedded CLDR demo: English-centric both ways, French-centric
# and non-English pairs, so every evaluation category (X-ENG, ENG-X, X-FRA, FRA-X, X-X)
# is present. Sizes differ by language as CLDR's coverage does.
CLDR_DEMO_LANGUAGES = ('hau_Latn', 'swh_Latn', 'zul_Latn', 'amh_Ethi', 'yor_Latn')
CLDR_DEMO_DIRECTIONS = tuple(
    [(x, y) for lang in ('fra_Latn',) + CLDR_DEMO_LANGUAGES
     for x, y in (('eng_Latn', lang), (lang, 'eng_Latn'))]
    + [(x, y) for lang in ('hau_Latn', 'swh_Latn')
       for x, y in (('fra_Latn', lang), (lang, 'fra_Latn'))]
    + [('hau_Latn', 'swh_Latn'), ('swh_Latn', 'hau_Latn'), ('zul_Latn', 'amh_Ethi'),
       ('amh_Ethi', 'zul_Latn')])

# NTREX-128 is multi-way parallel; the default run trains these English-centric
# directions and validates on FLORES-200 dev.
NTREX_DIRECTIONS = tuple(
    (x, y) for lang in ('fra_Latn', 'hau_Latn', 'swh_Latn', 'zul_Latn', 'afr_Latn')
    for x, y in (('eng_Latn', lang), (lang, 'eng_Latn')))


_SETTINGS = DataSettings()


def configure(data_settings: DataSettings) -> None:
  """Makes `data_settings` the registry's settings for the rest of the process."""
  global _SETTINGS
  _SETTINGS = data_settings


def settings() -> DataSettings:
  """The registry's settings: those last given to `configure`, else the defaults."""
  return _SETTINGS


def temperature_rate(task: seqio.Task, mixture_tasks: Sequence[str] = ()) -> float:
  """Mixing rate of a task: p_i = |D_i|^(1/tau) / sum_j |D_j|^(1/tau).

  Temperature sampling (docs/methods.md#temperature-sampling): D_i is the task's
  direction, summed over the mixture's tasks of that direction (the same language pair
  from several corpora, genuine and back-translated), which share the direction's rate
  in proportion to their sizes. tau is `settings().temperature`.
  """
  temperature = _SETTINGS.temperature
  direction = mixtures.task_source(task.name).direction
  siblings = [name for name in mixture_tasks
              if mixtures.task_source(name).direction == direction]
  direction_pairs = sum(mixtures.num_train_pairs(name) for name in siblings or [task.name])
  if not direction_pairs:
    return 0.0
  return (direction_pairs ** (1.0 / temperature) * mixtures.num_train_pairs(task.name)
          / direction_pairs)


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
  sides = _SETTINGS.sampling_sides
  side = sides.get(direction, sides.get('*', 'none'))
  return SubwordSampling(side in ('source', 'both'), side == 'both', _SETTINGS.sampling_alpha,
                         _SETTINGS.sampling_nbest_size)


def _subword_sampler(sampling: SubwordSampling, vocabulary: 'SharedVocabulary'):
  """A TF SentencePiece tokenizer of `vocabulary` that samples as `sampling` says."""
  return tf_text.SentencepieceTokenizer(
      model=vocabulary.sentencepiece.sp_model, out_type=tf.int32,
      nbest_size=sampling.nbest_size, alpha=sampling.alpha)


class SharedVocabulary(seqio.Vocabulary):
  """The SentencePiece vocabulary of every registered task, resolved when first used.

  Tasks are registered at import, before a program says which vocabulary it uses, so
  they share this one object: it reads the settings' `vocabulary_path` (chosen with
  `use_vocabulary` or `configure`), or for the `source` side their
  `source_vocabulary_path` where they have one. seqio's interface is answered by that
  file's `seqio.SentencePieceVocabulary`.
  """

  def __init__(self, source: bool = False):
    super().__init__(extra_ids=0)
    self._source = source
    self._loaded: seqio.SentencePieceVocabulary | None = None

  @property
  def sentencepiece_model_file(self) -> str:
    if self._source and _SETTINGS.source_vocabulary_path:
      return _SETTINGS.source_vocabulary_path
    return _SETTINGS.vocabulary_path

  @property
  def sentencepiece(self) -> seqio.SentencePieceVocabulary:
    """The seqio vocabulary of the file in use."""
    path = self.sentencepiece_model_file
    if self._loaded is None or self._loaded.sentencepiece_model_file != path:
      if not tf.io.gfile.exists(path):
        raise UserError(f'{path}: vocabulary file not found (build it with '
                        'launch/build_vocab.py, let launch/train.py build it, or choose '
                        'one with data_tasks.use_vocabulary)')
      self._loaded = seqio.SentencePieceVocabulary(path)
    return self._loaded

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
    return self.sentencepiece.encode(s)

  def _decode(self, ids):
    return self.sentencepiece.decode(ids)

  def _encode_tf(self, s):
    return self.sentencepiece.encode_tf(s)

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
  configure(dataclasses.replace(_SETTINGS, vocabulary_path=path))


def output_features() -> dict[str, seqio.Feature]:
  """Shared-vocabulary inputs and targets ending in EOS, and the targets' direction ids."""
  return {
      'inputs': seqio.Feature(vocabulary=SOURCE_VOCABULARY, add_eos=True, required=True),
      'targets': seqio.Feature(vocabulary=VOCABULARY, add_eos=True),
      'targets_direction': seqio.Feature(vocabulary=seqio.PassThroughVocabulary(size=0),
                                         add_eos=False, required=False),
  }


def task_name(corpus: str, src_lang: str, tgt_lang: str) -> str:
  """`<corpus>_<src>.<tgt>`."""
  return f'{corpus}_{src_lang}.{tgt_lang}'


class _PairsSource(seqio.FunctionDataSource):
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


def _to_inputs_targets(dataset: tf.data.Dataset) -> tf.data.Dataset:
  return dataset.map(lambda ex: {'inputs': ex['source'], 'targets': ex['target'],
                                 'is_training': ex['is_training']},
                     num_parallel_calls=tf.data.AUTOTUNE)


def _tokenize(dataset: tf.data.Dataset, direction: str) -> tf.data.Dataset:
  """Text to ids (keeping the text as `<feature>_pretokenized`, as seqio does); the sides
  `subword_sampling` names are sampled in training examples."""
  sampling = subword_sampling(direction)
  sides = (('inputs', sampling.source, SOURCE_VOCABULARY),
           ('targets', sampling.target, VOCABULARY))
  samplers = {feature: _subword_sampler(sampling, vocabulary)
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
                                     sampler.tokenize(text),
                                     lambda best=best: best)
      else:
        tokenized[feature] = best
    return tokenized

  return dataset.map(tokenize, num_parallel_calls=tf.data.AUTOTUNE)


def _reverse_targets(dataset: tf.data.Dataset) -> tf.data.Dataset:
  """Each target's pieces in reverse order where the settings say `reverse_target` (a
  right-to-left model), before the tags and EOS go on: the decoder still starts from its
  tag and ends with EOS."""
  if not _SETTINGS.reverse_target:
    return dataset
  return dataset.map(lambda example: {**example, 'targets': tf.reverse(example['targets'], [0])},
                     num_parallel_calls=tf.data.AUTOTUNE)


def _tag_id(tag: str) -> int:
  return tags.tag_piece_id(VOCABULARY.sentencepiece.tokenizer, tag,
                           VOCABULARY.sentencepiece_model_file)


def _tag_ids(*pieces: str | None) -> tf.Tensor:
  """The ids of the given tag pieces (None skipped), as a constant to concatenate."""
  return tf.constant([_tag_id(piece) for piece in pieces if piece], tf.int32)


def _add_tags(dataset: tf.data.Dataset, source: TaskSource) -> tf.data.Dataset:
  """Prepends the tag ids of the run's tag strategy to inputs and (if any) targets, and
  adds the synthetic-data tags of a back-translated corpus (`tags.synthetic_tags`).

  Tags are added as ids, not text, so the tag is one piece whatever SentencePiece
  would do with the text around it.
  """
  src_lang, tgt_lang = source.direction
  direction_tags = tags.tags_for(_SETTINGS.tag_strategy, src_lang, tgt_lang)
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


def _add_direction(dataset: tf.data.Dataset, direction: int) -> tf.data.Dataset:
  """`targets_direction`: the direction id on every target token (packed with targets)."""

  def add(example):
    example = dict(example)
    example['targets_direction'] = tf.fill(tf.shape(example['targets']), direction)
    return example

  return dataset.map(add, num_parallel_calls=tf.data.AUTOTUNE)


def _preprocessors(source: TaskSource, to_examples, add_tags) -> list:
  """A Task's preprocessors: `to_examples` makes text inputs and targets of the source's
  records, which are tokenised (`targets` reversed for a right-to-left model), tagged by
  `add_tags`, ended with EOS and marked with their direction."""
  return [to_examples, functools.partial(_tokenize, direction=source.direction.name),
          _reverse_targets, add_tags, seqio.preprocessors.append_eos_after_trim,
          functools.partial(_add_direction, direction=source.direction.id)]


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
    data_source = _PairsSource(source)
  seqio.TaskRegistry.add(
      name,
      source=data_source,
      # A streamed corpus shuffles itself, and its position is saved with its stream.
      shuffle_buffer_size=None if corpora.is_streamed(corpus) else seqio.SHUFFLE_BUFFER_SIZE,
      preprocessors=_preprocessors(source, _to_inputs_targets,
                                   functools.partial(_add_tags, source=source)),
      output_features=output_features(),
      postprocess_fn=metrics.postprocess_translation,
      metric_fns=[metrics.translation_metrics])
  return name


def language_model_task_name(corpus: str, lang: str) -> str:
  """`<corpus>.<lang>`: the corpus's text in one language."""
  return f'{corpus}.{lang}'


def _to_language_model_examples(dataset: tf.data.Dataset) -> tf.data.Dataset:
  """The target side alone: a language model reads no source."""
  return dataset.map(lambda ex: {'inputs': tf.constant(''), 'targets': ex['target'],
                                 'is_training': ex['is_training']},
                     num_parallel_calls=tf.data.AUTOTUNE)


def _add_language_model_tag(dataset: tf.data.Dataset, lang: str) -> tf.data.Dataset:
  """The language's tag before each text (`tags.language_model_tags`)."""
  prefix = _tag_ids(tags.language_model_tags(lang).decoder_tag)
  return dataset.map(lambda ex: {**ex, 'targets': tf.concat([prefix, ex['targets']], axis=0)},
                     num_parallel_calls=tf.data.AUTOTUNE)


def register_language_model_task(corpus: str, lang: str) -> str:
  """Registers (once) the Task of a language model over the `lang` text of a registered
  multi-way corpus (e.g. `target_side_corpus`): each sentence is a target, tagged with its
  language, and the input is empty. Its direction is `lang`-`lang`, so that sampling
  rates, per-direction losses and the run's directions.json treat it as any direction."""
  name = language_model_task_name(corpus, lang)
  if name in seqio.TaskRegistry.names():
    return name
  languages.check_language(lang, f'{name}: language')
  source = TaskSource(corpus, Direction(lang, lang))
  seqio.TaskRegistry.add(
      name,
      source=_PairsSource(source),
      preprocessors=_preprocessors(source, _to_language_model_examples,
                                   functools.partial(_add_language_model_tag, lang=lang)),
      output_features=output_features())
  return name


def target_side_corpus(name: str, mixture_or_task_name: str) -> corpus_types.MultiwayCorpus:
  """The target-language text of a translation mixture (or task) as a corpus named
  `name`: per split its corpora hold, each distinct target sentence of each direction
  once, a row of its own ({target language: sentence}), in the mixture's order."""
  rows: dict[str, dict[tuple[str, str], None]] = {}
  for member in mixture_view(mixture_or_task_name).members:
    corpus = corpora.get_corpus(member.corpus)
    for split in corpus.splits():
      targets = rows.setdefault(split, {})
      for _, target in corpus.pairs(split, *member.direction):
        targets[(member.direction.tgt_lang, target)] = None
  return corpus_types.MultiwayCorpus(name, {
      split: [{lang: text} for lang, text in targets] for split, targets in rows.items()})


def register_language_model_mixture(name: str, mixture_or_task_name: str) -> str:
  """Registers corpus `name`, the target side of a translation mixture or task
  (`target_side_corpus`, read on first use), and mixture `name`: a language model's Task
  per target language over it, temperature-sampled as translation mixtures are."""
  corpora.register_corpus(name, lambda: target_side_corpus(name, mixture_or_task_name),
                          overwrite=True)
  target_languages = sorted({mixtures.task_source(task).direction.tgt_lang
                             for task in member_tasks(mixture_or_task_name)})
  return register_task_mixture(
      name, [register_language_model_task(name, lang) for lang in target_languages],
      overwrite=True)


def register_mixture(name: str, corpus: str,
                     corpus_directions: Iterable[tuple[str, str]]) -> str:
  """Registers a temperature-sampled mixture over directions of one corpus."""
  return register_task_mixture(
      name, [register_direction_task(corpus, src, tgt) for src, tgt in corpus_directions])


def register_task_mixture(name: str, task_names: Sequence[str], *,
                          overwrite: bool = False) -> str:
  """Registers a temperature-sampled mixture over registered direction Tasks of any corpora."""
  if not task_names:
    raise UserError(f'mixture {name!r}: no tasks')
  if overwrite and name in seqio.MixtureRegistry.names():
    seqio.MixtureRegistry.remove(name)
  seqio.MixtureRegistry.add(name, list(task_names), default_rate=functools.partial(
      temperature_rate, mixture_tasks=tuple(task_names)))
  return name


def member_tasks(member: str, mixture: str | None = None) -> list[str]:
  """The direction Tasks a mixture member names: a registered mixture (its tasks), a Task
  (`<corpus>_<src>.<tgt>`), or a corpus that records its directions (a launch/clean.py or
  launch/back_translate.py folder: every direction it holds; files of one pair: their
  source -> target direction; a streamed corpus: both directions of its pair). A member
  named as the `mixture` it joins is the corpus of that name, so a mixture over one corpus
  may take the corpus's name."""
  if member in corpora.registered_corpora() and (
      member == mixture or member not in seqio.MixtureRegistry.names()):
    corpus = corpora.get_corpus(member)
    if isinstance(corpus, streamed.StreamedCorpus):
      return [register_direction_task(member, *direction)
              for direction in (corpus.languages(), corpus.languages()[::-1])]
    if not isinstance(corpus, (corpus_types.PairsCorpus, corpus_types.ParallelCorpus)):
      raise UserError(f'mixture member {member!r}: corpus {member!r} pairs any two of its '
                      'languages; name its directions as tasks, <corpus>_<src>.<tgt>')
    return [register_direction_task(member, src, tgt) for src, tgt in corpus.directions()]
  provider = get_mixture_or_task(member)
  return [task.name for task in provider.tasks] if isinstance(provider, seqio.Mixture) else [
      provider.name]


def _check_spec_keys(spec: Mapping, known: Sequence[str], where: str) -> None:
  """A UserError unless `spec` is a dict of `known` keys (the two it needs first)."""
  if not isinstance(spec, Mapping):
    raise UserError(f'{where}: expected a dict with {known[0]} and {known[1]}')
  unknown = sorted(set(spec) - set(known))
  if unknown:
    raise UserError(f'{where}: unknown keys {unknown} (known: {", ".join(known)})')


def _spec_pair(spec: Mapping, key: str, default: Sequence | None, where: str) -> Sequence:
  """The spec's two-item [source, target] setting `key`."""
  value = spec.get(key, default)
  if not isinstance(value, Sequence) or isinstance(value, str) or len(value) != 2:
    raise UserError(f'{where}: {key} must be a list of two, [source, target]')
  return value


def _spec_columns(spec: Mapping, where: str) -> tuple[int, int]:
  src_column, tgt_column = _spec_pair(spec, 'columns', (0, 1), where)
  if not all(isinstance(column, int) and column >= 0 for column in (src_column, tgt_column)):
    raise UserError(f'{where}: columns must be two column numbers from 0')
  return src_column, tgt_column


_STREAMED_SPEC_KEYS = ('languages', 'files', 'columns') + tuple(
    field.name for field in dataclasses.fields(streamed.StreamSettings))


def register_streamed_corpus(name: str, spec: Mapping, where: str) -> None:
  """Registers a streamed TSV corpus from its spec: {'languages': [src, tgt], 'files':
  [paths or globs], and optionally 'columns': [src, tgt] (default [0, 1]) and the
  `streamed.StreamSettings` fields}; errors name `where`."""
  _check_spec_keys(spec, _STREAMED_SPEC_KEYS, where)
  languages_pair = _spec_pair(spec, 'languages', None, where)
  src_column, tgt_column = _spec_columns(spec, where)
  settings = streamed.StreamSettings(**{key: value for key, value in spec.items()
                                        if key not in ('languages', 'files', 'columns')})
  corpora.register_streamed_tsv(name, *languages_pair, spec.get('files'),
                                src_column=src_column, tgt_column=tgt_column,
                                settings=settings, overwrite=True)


_FILES_SPEC_KEYS = ('languages',) + corpora.FILE_SPLITS + ('columns', 'validation_lines')


def _split_files(files, where: str) -> corpus_types.PairFiles:
  if isinstance(files, str):
    return files
  if isinstance(files, (list, tuple)) and len(files) == 2 and all(
      isinstance(path, str) for path in files):
    return tuple(files)
  raise UserError(f'{where}: expected [source file, target file] or one TSV file, '
                  f'got {files!r}')


def register_files_corpus(name: str, spec: Mapping, where: str) -> None:
  """Registers a corpus of one language pair read from files, from its spec:
  {'languages': [src, tgt], 'train': files, and optionally 'validation' and 'test' (files),
  'validation_lines' (the last that many lines of the train files held out as the
  validation split, never trained on) and 'columns' (of TSV files, default [0, 1])}, where
  files are [source file, target file], line-aligned, or one TSV file; errors name `where`."""
  _check_spec_keys(spec, _FILES_SPEC_KEYS, where)
  src_lang, tgt_lang = _spec_pair(spec, 'languages', None, where)
  languages.check_language(src_lang, f'{where}: source language')
  languages.check_language(tgt_lang, f'{where}: target language')
  splits = corpora.file_splits(spec)
  if 'train' not in splits:
    raise UserError(f"{where}: no train files (give 'train': [source file, target file], "
                    'or one TSV file)')
  corpora.register_files(
      name, src_lang, tgt_lang,
      {split: _split_files(spec[split], f'{where}: {split}') for split in splits},
      columns=_spec_columns(spec, where), overwrite=True,
      validation_lines=validation.integer(f'{where}: validation_lines',
                                          spec.get('validation_lines', 0), minimum=0))


def register_corpora_and_mixtures(corpora_dirs: Mapping[str, str] | None = None,
                                  mixtures: Mapping[str, Sequence[str]] | None = None,
                                  streamed_corpora: Mapping[str, Mapping] | None = None,
                                  corpora_files: Mapping[str, Mapping] | None = None,
                                  language_models: Mapping[str, str] | None = None
                                  ) -> None:
  """Registers corpus folders, corpora of files, streamed corpora, mixtures over them and
  language models' mixtures (those a run's config names).

  `corpora_dirs` maps a corpus name to a folder written by launch/clean.py or
  launch/back_translate.py; `corpora_files` maps a corpus name to the spec of its files
  (`register_files_corpus`); `streamed_corpora` maps a corpus name to the spec of TSV files
  read by streaming (`register_streamed_corpus`); `mixtures` maps a mixture name to its
  members (see `member_tasks`), e.g. {'ntrex128_bt': ['ntrex128', 'bt_round1']};
  `language_models` maps a mixture name to the translation mixture whose target side it
  reads (`register_language_model_mixture`), e.g. {'ntrex128_lm': 'ntrex128'}. Safe to
  call again: the same names are registered anew.
  """
  for name, directory in (corpora_dirs or {}).items():
    corpora.register_dir(name, files.expand(directory), overwrite=True)
  for name, spec in (corpora_files or {}).items():
    register_files_corpus(
        name, spec, f'data_tasks.register_from_config.corpora_files[{name!r}]')
  for name, spec in (streamed_corpora or {}).items():
    register_streamed_corpus(
        name, spec, f'data_tasks.register_from_config.streamed_corpora[{name!r}]')
  for name, members in (mixtures or {}).items():
    tasks = list(dict.fromkeys(task for member in members
                               for task in member_tasks(member, mixture=name)))
    register_task_mixture(name, tasks, overwrite=True)
  for name, translation_mixture in (language_models or {}).items():
    register_language_model_mixture(name, translation_mixture)


def mixture_view(mixture_or_task_name: str) -> MixtureView:
  """`mixtures.mixture_view` of a name this registry knows, registered first if it is one
  of those registered on first use (`get_mixture_or_task`)."""
  get_mixture_or_task(mixture_or_task_name)
  return mixtures.mixture_view(mixture_or_task_name)


_TASK_NAME = re.compile(r'^(?P<corpus>\w+?)_(?P<src>[a-z]{3}_[A-Z][a-z]{3})'
                        r'\.(?P<tgt>[a-z]{3}_[A-Z][a-z]{3})$')


def pair_groups() -> dict[str, tuple[Direction, ...]]:
  """The WMT22 pair groups: the built-in ones and the settings' `extra_pair_groups`."""
  return wmt22.pair_groups(_SETTINGS.extra_pair_groups)


def wmt22_mixture_names() -> tuple[str, ...]:
  """wmt22_base, wmt22_large, wmt22_eval, wmt22_eval_english, wmt22_<pair group> and
  wmt22_lfg<1..5>, registered on first use over the settings' `wmt22_corpora`."""
  return (('wmt22_base', 'wmt22_large', 'wmt22_eval', 'wmt22_eval_english')
          + tuple(f'wmt22_{group.lower()}' for group in pair_groups())
          + tuple(f'wmt22_lfg{group}' for group in wmt22.FAMILY_GROUPS))


def _wmt22_candidates(name: str) -> tuple[Direction, ...]:
  """The directions a WMT22 mixture may hold (those with data make it)."""
  groups = {f'wmt22_{group.lower()}': d for group, d in pair_groups().items()}
  if name in groups:
    return groups[name]
  evaluated = wmt22.evaluated_directions(groups.values())
  if name == 'wmt22_eval':
    return evaluated
  if name == 'wmt22_eval_english':
    return tuple(dict.fromkeys(evaluated + wmt22.english_centric()))
  if name.startswith('wmt22_lfg'):
    return wmt22.family_directions(int(name.removeprefix('wmt22_lfg')),
                                   wmt22.all_directions())
  return wmt22.all_directions()  # wmt22_base, wmt22_large.


def _has_train_pairs(corpus_name: str, src_lang: str, tgt_lang: str) -> bool:
  corpus = corpora.get_corpus(corpus_name)
  if 'train' not in corpus.splits() or not {src_lang, tgt_lang} <= set(corpus.languages()):
    return False
  try:
    return bool(corpora.train_pair_count(corpus_name, src_lang, tgt_lang))
  except UserError:  # A pairs corpus that holds both languages, but not together.
    return False


def register_wmt22_mixture(name: str) -> str:
  """Registers one of `wmt22_mixture_names()`: a task per candidate direction and corpus
  with training pairs; a UserError if none has any."""
  sources = _SETTINGS.wmt22_corpora + (
      _SETTINGS.wmt22_synthetic if name == 'wmt22_large' else ())
  candidates = _wmt22_candidates(name)
  tasks = [register_direction_task(corpus, src, tgt) for src, tgt in candidates
           for corpus in sources if _has_train_pairs(corpus, src, tgt)]
  if not tasks:
    raise UserError(f'{name}: none of its {len(candidates)} directions has training pairs in '
                    f'{", ".join(sources)} (choose corpora with wmt22_corpora.names)')
  return register_task_mixture(name, tasks, overwrite=True)


def get_mixture_or_task(name: str) -> seqio.Task | seqio.Mixture:
  """seqio's lookup; `<corpus>_<src>.<tgt>` of any registered corpus and the WMT22 mixtures
  are registered on demand.

  Unknown names raise a UserError naming the registered choices.
  """
  match = _TASK_NAME.match(name)
  if (name not in seqio.TaskRegistry.names() and match
      and match['corpus'] in corpora.registered_corpora()):
    register_direction_task(match['corpus'], match['src'], match['tgt'])
  if name not in seqio.MixtureRegistry.names() and name in wmt22_mixture_names():
    register_wmt22_mixture(name)
  try:
    return seqio.get_mixture_or_task(name)
  except ValueError:
    raise UserError(f'MIXTURE_OR_TASK_NAME: unknown mixture or task {name!r}; registered '
                    f'mixtures: {", ".join(sorted(seqio.MixtureRegistry.names()))}, '
                    f'{", ".join(wmt22_mixture_names())} (and one '
                    'task per direction of each registered corpus, <corpus>_<src>.<tgt>, '
                    f'corpora: {", ".join(corpora.registered_corpora())})') from None


def _register_builtins() -> None:
  """Every direction of the embedded CLDR corpus, and the named mixtures."""
  for src_lang, tgt_lang in itertools.permutations(cldr.CLDR_LANGUAGES, 2):
    register_direction_task('cldr', src_lang, tgt_lang)
  register_mixture('cldr_demo', 'cldr', CLDR_DEMO_DIRECTIONS)
  register_mixture('ntrex128', 'ntrex128', NTREX_DIRECTIONS)
  register_mixture('flores200', 'flores200', NTREX_DIRECTIONS)
  register_language_model_mixture('cldr_demo_lm', 'cldr_demo')


_register_builtins()
