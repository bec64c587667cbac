"""Language models' Tasks and mixtures (e.g. a target-side model for n-best reranking):
the target side of a translation mixture, one Task per target language, each read as a
translation Task is but with an empty input.
"""

import functools

import seqio

from data_tasks.lookup import member_tasks
from data_tasks.lookup import mixture_view
from data_tasks.preprocessors import add_language_model_tag
from data_tasks.preprocessors import task_preprocessors
from data_tasks.preprocessors import to_language_model_examples
from data_tasks.task_mixtures import register_task_mixture
from data_tasks.tasks import PairsSource
from data_tasks.vocabularies import output_features
from t5x_mt.core import languages
from t5x_mt.data import corpora
from t5x_mt.data import corpus_types
from t5x_mt.data import mixtures
from t5x_mt.core.directions import Direction
from t5x_mt.data.mixtures import TaskSource


def language_model_task_name(corpus: str, lang: str) -> str:
  """`<corpus>.<lang>`: the corpus's text in one language."""
  return f'{corpus}.{lang}'


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
      source=PairsSource(source),
      preprocessors=task_preprocessors(source, to_language_model_examples,
                                       functools.partial(add_language_model_tag, lang=lang)),
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
