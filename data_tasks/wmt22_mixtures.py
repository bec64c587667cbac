"""The WMT22 mixtures: one per pair group, the evaluated directions, the language-family
groups and all directions, over the corpora the settings name (`wmt22_corpora`).

Which directions make a mixture depends on the settings and on which corpora hold training
pairs for them, so each mixture is registered when first named (`get_mixture_or_task`).
"""

from data_tasks.run_settings import settings
from data_tasks.task_mixtures import register_task_mixture
from data_tasks.tasks import register_direction_task
from t5x_mt.data import corpora
from t5x_mt.data import wmt22
from t5x_mt.core.directions import Direction
from t5x_mt.core.errors import UserError


def pair_groups() -> dict[str, tuple[Direction, ...]]:
  """The WMT22 pair groups: the built-in ones and the settings' `extra_pair_groups`."""
  return wmt22.pair_groups(settings().extra_pair_groups)


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
  sources = settings().wmt22_corpora + (
      settings().wmt22_synthetic if name == 'wmt22_large' else ())
  candidates = _wmt22_candidates(name)
  tasks = [register_direction_task(corpus, src, tgt) for src, tgt in candidates
           for corpus in sources if _has_train_pairs(corpus, src, tgt)]
  if not tasks:
    raise UserError(f'{name}: none of its {len(candidates)} directions has training pairs in '
                    f'{", ".join(sources)} (choose corpora with wmt22_corpora.names)')
  return register_task_mixture(name, tasks, overwrite=True)
