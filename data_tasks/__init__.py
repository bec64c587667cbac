"""seqio Tasks and Mixtures for every registered corpus.

`import data_tasks` registers one Task per translation direction of the embedded CLDR
corpus, named `<corpus>_<src>.<tgt>` with FLORES-200 codes, and the named mixtures below.
Directions of other registered corpora (NTREX-128, FLORES-200, a user's files) and the
WMT22 mixtures are registered by `get_mixture_or_task` when first named. Other projects
import this package to reuse the registry, and register mixtures over their own corpora
with `register_mixture`; the names they use are re-exported here.

The registry's run-level settings are one `DataSettings` value, taken when a dataset is
built, not when tasks are registered, so that one registry serves every run. A program
that reuses the registry chooses the vocabulary of every task with `use_vocabulary(path)`;
nothing else needs choosing, since the other settings have defaults. `configure(settings)`
chooses them all at once: t5x_mt's launch layer builds the settings from its gin bindings
and passes them here (`data_tasks.from_gin`). The t5x_mt library never imports this
package: it looks registered tasks up by name through seqio (`t5x_mt.data.mixtures`), so
every name it is handed must be registered first (`get_mixture_or_task` registers those
this registry registers on demand).

Modules, each importing only those before it:
  run_settings          the registry's settings value (`configure`, `settings`)
  vocabularies          the vocabularies every task shares and the features they encode
  preprocessors         the tf.data steps from a corpus's records to a Task's examples
  metrics               what seqio's Evaluator computes on a translation Task
  tasks                 one Task per direction of a registered corpus
  task_mixtures         temperature-sampled mixtures of registered Tasks
  wmt22_mixtures        the WMT22 mixtures, registered on first use
  lookup                names looked up, registering those registered on first use
  language_models       language models' Tasks and mixtures over a translation mixture
  corpora_and_mixtures  the corpora and mixtures a recipe declares, from their specs
  from_gin              the registry set up as a recipe's gin bindings say
"""

import itertools

from data_tasks.corpora_and_mixtures import register_corpora_and_mixtures
from data_tasks.corpora_and_mixtures import register_streamed_corpus
from data_tasks.language_models import register_language_model_mixture
from data_tasks.lookup import get_mixture_or_task
from data_tasks.lookup import mixture_view
from data_tasks.run_settings import configure
from data_tasks.run_settings import settings
from data_tasks.task_mixtures import register_mixture
from data_tasks.task_mixtures import register_task_mixture
from data_tasks.task_mixtures import temperature_rate
from data_tasks.tasks import register_direction_task
from data_tasks.tasks import task_name
from data_tasks.vocabularies import VOCABULARY
from data_tasks.vocabularies import use_vocabulary
from data_tasks.wmt22_mixtures import pair_groups
from data_tasks.wmt22_mixtures import register_wmt22_mixture
from data_tasks.wmt22_mixtures import wmt22_mixture_names
from t5x_mt.data import cldr
from t5x_mt.data.settings import DataSettings

__all__ = ['DataSettings', 'VOCABULARY', 'configure', 'get_mixture_or_task', 'mixture_view',
           'pair_groups', 'register_corpora_and_mixtures', 'register_direction_task',
           'register_language_model_mixture', 'register_mixture', 'register_streamed_corpus',
           'register_task_mixture', 'register_wmt22_mixture', 'settings', 'task_name',
           'temperature_rate', 'use_vocabulary', 'wmt22_mixture_names']

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


def _register_builtins() -> None:
  """Every direction of the embedded CLDR corpus, and the named mixtures."""
  for src_lang, tgt_lang in itertools.permutations(cldr.CLDR_LANGUAGES, 2):
    register_direction_task('cldr', src_lang, tgt_lang)
  register_mixture('cldr_demo', 'cldr', CLDR_DEMO_DIRECTIONS)
  register_mixture('ntrex128', 'ntrex128', NTREX_DIRECTIONS)
  register_mixture('flores200', 'flores200', NTREX_DIRECTIONS)
  register_language_model_mixture('cldr_demo_lm', 'cldr_demo')


_register_builtins()
