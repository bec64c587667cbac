"""What a registered mixture is to its readers: its translation tasks as plain values.

The library looks a mixture or Task up by name through seqio, as T5X does; whoever owns
the registry has registered it before handing the name over. A translation Task's seqio
data source records what it reads (`ReadsCorpus`), so `mixture_view` needs nothing but
seqio's objects to list a mixture's members with their directions, rates and sizes.
Samplers, DRO's group shares, plots and training take the `MixtureView` as an argument,
and a task cache gives one of its own (`task_cache`): seqio is imported only where a name
is looked up in its registry, so a process that trains from cached tasks never imports it
(nor TensorFlow).
"""

import dataclasses
from typing import NamedTuple, Protocol, runtime_checkable

from t5x_mt.core import files
from t5x_mt.data import corpora
from t5x_mt.core.directions import Direction
from t5x_mt.core.errors import UserError


class TaskSource(NamedTuple):
  """What a translation Task reads: one direction of one registered corpus."""
  corpus: str
  direction: Direction


@runtime_checkable
class ReadsCorpus(Protocol):
  """A seqio data source of one corpus direction, which says which one."""
  task_source: TaskSource


@dataclasses.dataclass(frozen=True)
class MixtureMember:
  """One task of a mixture: the corpus direction it reads, its sampling rate in the
  mixture, and its training pairs."""
  task: str
  corpus: str
  direction: Direction
  rate: float
  pairs: int


@dataclasses.dataclass(frozen=True)
class MixtureView:
  """A mixture's (or a single task's) members, in the mixture's task order."""
  name: str
  members: tuple[MixtureMember, ...]

  def directions(self) -> tuple[Direction, ...]:
    """Each direction once, in id order: the order of per-direction losses and metrics."""
    return tuple(sorted({member.direction for member in self.members},
                        key=lambda direction: direction.id))

  def total_pairs(self) -> int:
    return sum(member.pairs for member in self.members)

  def group_shares(self, grouping: str, by: str) -> dict[str, float]:
    """Each group's share of the training data: of its pairs (`by='pairs'`, the p_g
    of docs/methods.md#dro), or of the mixture's sampling rates (`by='rates'`)."""
    if by not in ('pairs', 'rates'):
      raise UserError(f'DRO proportions: {by!r} is not pairs or rates')
    sizes = {group: sum(member.pairs if by == 'pairs' else member.rate for member in members)
             for group, members in self.groups(grouping).items()}
    total = sum(sizes.values())
    return {group: size / total for group, size in sizes.items()}

  def groups(self, grouping: str) -> dict[str, tuple[MixtureMember, ...]]:
    """The members by their direction's key under `grouping` (directions.GROUPINGS), in
    sorted group order."""
    groups: dict[str, list[MixtureMember]] = {}
    for member in self.members:
      groups.setdefault(member.direction.key(grouping), []).append(member)
    return {group: tuple(groups[group]) for group in sorted(groups)}


def _seqio():
  import seqio  # pylint: disable=g-import-not-at-top  (imports TensorFlow)
  return seqio


def get_mixture_or_task(name: str):
  """seqio's registered mixture or Task `name`; a UserError naming the registered mixtures
  if there is none."""
  seqio = _seqio()
  try:
    return seqio.get_mixture_or_task(name)
  except ValueError:
    raise UserError(f'MIXTURE_OR_TASK_NAME: unknown mixture or task {name!r}; registered '
                    f'mixtures: {", ".join(sorted(seqio.MixtureRegistry.names()))} (and '
                    'the registered tasks)') from None


def task_source(task_name: str) -> TaskSource:
  """What the registered translation Task `task_name` reads, as its data source records it."""
  source = getattr(get_mixture_or_task(task_name), 'source', None)
  if not isinstance(source, ReadsCorpus):
    raise UserError(f'{task_name}: not a translation task over a registered corpus (its '
                    'seqio data source records no task_source)')
  return source.task_source


def num_train_pairs(task_name: str) -> int:
  """Training pairs of a registered translation Task's direction."""
  corpus, direction = task_source(task_name)
  return corpora.train_pair_count(corpus, *direction)


def mixture_view(mixture_or_task_name: str) -> MixtureView:
  """A registered mixture's (or translation Task's) members with their directions,
  sampling rates (1 for a Task) and training pairs."""
  provider = get_mixture_or_task(mixture_or_task_name)
  if isinstance(provider, _seqio().Mixture):
    rated = [(task.name, float(provider.get_rate(task))) for task in provider.tasks]
  else:
    rated = [(provider.name, 1.0)]
  return MixtureView(mixture_or_task_name, tuple(
      MixtureMember(task, *task_source(task), rate=rate, pairs=num_train_pairs(task))
      for task, rate in rated))


def run_files(mixture: MixtureView) -> dict[str, bytes]:
  """{file name: content} that the mixture's corpora keep with every run trained on them:
  what a corpus's optional `run_files()` gives (a Yoruba diacritics corpus's marking
  lexicon, which restoration reads beside the model)."""
  kept: dict[str, bytes] = {}
  for corpus in sorted({member.corpus for member in mixture.members}):
    kept.update(getattr(corpora.get_corpus(corpus), 'run_files', dict)())
  return kept


def check_train_examples(mixture: MixtureView) -> int:
  """Training pairs of a mixture or task; a UserError if it has none to sample from."""
  if not mixture.total_pairs():
    raise UserError(f'MIXTURE_OR_TASK_NAME: {mixture.name!r} has no training '
                    'examples (its tasks: ' + ', '.join(
                        f'{m.corpus} {m.direction.name}' for m in mixture.members) + ')')
  return mixture.total_pairs()


def check_vocabulary(mixture_or_task_name: str, vocabulary_path: str,
                     source_vocabulary_path: str | None = None) -> None:
  """A UserError unless every task of the mixture encodes its targets (and inputs) with the
  SentencePiece model at `vocabulary_path`, the one a model of the run reads and writes,
  and its inputs with `source_vocabulary_path` where the run has one."""
  wanted = {'inputs': files.expand(source_vocabulary_path or vocabulary_path),
            'targets': files.expand(vocabulary_path)}
  provider = get_mixture_or_task(mixture_or_task_name)
  for task in provider.tasks if isinstance(provider, _seqio().Mixture) else [provider]:
    for feature, path in wanted.items():
      used = getattr(task.output_features[feature].vocabulary, 'sentencepiece_model_file',
                     None)
      if used is None or files.expand(used) != path:
        raise UserError(f'{task.name}: its {feature} are encoded with {used}, not with the '
                        f"run's vocabulary {path}; set the task registry up with the "
                        "run's data settings first")


def training_sentences(mixture: MixtureView) -> dict[str, list[str]]:
  """Every distinct training sentence per language on either side of the mixture (of a
  streamed corpus, of `corpora.STREAMED_VOCABULARY_SAMPLE` pairs per direction)."""
  per_language: dict[str, dict[str, None]] = {}
  for member in mixture.members:
    src_lang, tgt_lang = member.direction
    for src, tgt in corpora.training_pairs(member.corpus, src_lang, tgt_lang):
      per_language.setdefault(src_lang, {})[src] = None
      per_language.setdefault(tgt_lang, {})[tgt] = None
  return {lang: list(lines) for lang, lines in per_language.items()}
