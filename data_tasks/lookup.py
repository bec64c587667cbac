"""Names looked up in the registry, registering those it registers on first use.

Directions of corpora other than the embedded CLDR one (NTREX-128, FLORES-200, a user's
files) are registered when first named, since listing their languages means reading their
folders, and so are the WMT22 mixtures, whose directions depend on the settings. Every
name handed to the t5x_mt library, which looks tasks up through seqio alone, goes through
here first.
"""

import re

import seqio

from data_tasks.tasks import register_direction_task
from data_tasks.wmt22_mixtures import register_wmt22_mixture
from data_tasks.wmt22_mixtures import wmt22_mixture_names
from t5x_mt.data import corpora
from t5x_mt.data import corpus_types
from t5x_mt.data import mixtures
from t5x_mt.data import streamed
from t5x_mt.data.mixtures import MixtureView
from t5x_mt.core.errors import UserError

_TASK_NAME = re.compile(r'^(?P<corpus>\w+?)_(?P<src>[a-z]{3}_[A-Z][a-z]{3})'
                        r'\.(?P<tgt>[a-z]{3}_[A-Z][a-z]{3})$')


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


def mixture_view(mixture_or_task_name: str) -> MixtureView:
  """`mixtures.mixture_view` of a name this registry knows, registered first if it is one
  of those registered on first use (`get_mixture_or_task`)."""
  get_mixture_or_task(mixture_or_task_name)
  return mixtures.mixture_view(mixture_or_task_name)


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
