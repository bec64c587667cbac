"""Gin only at the edge: no library module reads gin, and every name recipes bind still
reaches the library through t5x_mt.config.configurables."""

import ast
import pathlib

import gin
import pytest

import data_tasks
from data_tasks import from_gin
from t5x_mt.config import configurables
from t5x_mt.core import files
from t5x_mt.config import gin_utils
from t5x_mt.data.cleaning import pipeline
from t5x_mt.core.errors import UserError

REPO = pathlib.Path(__file__).resolve().parents[1]
# The edge: gin registration (the model's alone in gin_model.py), parsing, flags, and
# loading a run's config.gin.
# The gin edge: the config package, and the commands' shared edge that quiets gin's logging.
GIN_MODULES = {'t5x_mt/config/configurables.py', 't5x_mt/config/gin_model.py',
               't5x_mt/config/gin_utils.py', 't5x_mt/config/renamed.py',
               't5x_mt/config/run_loading.py', 't5x_mt/core/cli.py'}


def _imports_gin(path: pathlib.Path) -> bool:
  for node in ast.walk(ast.parse(path.read_text(encoding='utf-8'))):
    if isinstance(node, ast.Import) and any(
        alias.name.split('.')[0] == 'gin' for alias in node.names):
      return True
    if isinstance(node, ast.ImportFrom) and (node.module or '').split('.')[0] == 'gin':
      return True
  return False


def test_no_library_module_outside_the_edge_imports_gin():
  modules = [path for folder in ('t5x_mt', 'data_tasks') for path in (REPO / folder).rglob('*.py')]
  assert len(modules) > 20
  readers = {path.relative_to(REPO).as_posix() for path in modules if _imports_gin(path)}
  assert readers <= GIN_MODULES, sorted(readers - GIN_MODULES)


@pytest.mark.parametrize('binding, field, expected', [
    ("data_tasks.vocabulary_path.path = '~/v.model'", 'vocabulary_path',
     str(pathlib.Path('~/v.model').expanduser())),
    ("data_tasks.tag_strategy.strategy = 't_enc'", 'tag_strategy', 't_enc'),
    ('data_tasks.temperature_rate.temperature = 2.5', 'temperature', 2.5),
    ("subword_sampling.sides = {'*': 'source'}", 'sampling_sides', {'*': 'source'}),
    ('subword_sampling.alpha = 0.3', 'sampling_alpha', 0.3),
    ('subword_sampling.nbest_size = 8', 'sampling_nbest_size', 8),
    ("wmt22_corpora.names = ['salt']", 'wmt22_corpora', ('salt',)),
    ("data_tasks.wmt22_corpora.synthetic = ['bt']", 'wmt22_synthetic', ('bt',)),
    ("wmt22.pair_groups.extra = {'NGG': ['hau_Latn-yor_Latn']}", 'extra_pair_groups',
     {'NGG': ['hau_Latn-yor_Latn']}),
    ("pair_groups.extra = {'NGG': ['hau_Latn-yor_Latn']}", 'extra_pair_groups',
     {'NGG': ['hau_Latn-yor_Latn']}),
])
def test_each_data_binding_reaches_the_registry(binding, field, expected):
  gin.parse_config(binding)
  assert getattr(from_gin.configure_data(), field) == expected
  assert getattr(data_tasks.settings(), field) == expected


def test_a_bad_data_binding_names_the_gin_setting():
  gin.parse_config("data_tasks.tag_strategy.strategy = 'tenc'")
  with pytest.raises(UserError, match=r"^tag_strategy\.strategy: unknown tag "
                     "strategy 'tenc'"):
    configurables.data_settings()


def test_declared_corpora_and_mixtures_are_registered():
  gin.parse_config("data_tasks.register_from_config.mixtures = "
                   "{'test_gin_edge_mix': ['cldr_eng_Latn.hau_Latn', 'cldr_hau_Latn.eng_Latn']}")
  from_gin.configure_data()
  assert [member.task for member in data_tasks.mixture_view('test_gin_edge_mix').members] == [
      'cldr_eng_Latn.hau_Latn', 'cldr_hau_Latn.eng_Latn']


def test_cleaning_presets_and_step_parameters_reach_the_specs():
  gin.parse_config(pipeline.preset_file('nt5').read_text(encoding='utf-8'))
  gin.parse_config('cleaning.token_ratio.max_ratio = 2.5\nlong_word.max_chars = 35')
  names = configurables.cleaning_step_names()
  assert {'long_word', 'token_ratio'} <= set(names)
  params = {spec.name: dict(spec.params) for spec in configurables.cleaning_specs(names)}
  assert params['long_word']['max_chars'] == 35
  assert params['token_ratio']['max_ratio'] == 2.5
  defaults = {spec.name: dict(spec.params) for spec in pipeline.resolve_specs(names)}
  assert defaults['long_word']['max_chars'] != 35


RECIPES = sorted(str(path.relative_to(REPO)) for path in (REPO / 'gin').rglob('*.gin'))


@pytest.mark.parametrize('recipe', RECIPES)
def test_every_recipe_defines_only_macros_that_a_binding_reads(recipe):
  """Including the recipes whose parent's only reader of a macro is overridden
  (finetune/*.gin replace ntrex_flores.gin's corpora_dirs, which read GETTEXT_CLEAN_DIR)."""
  gin_utils.parse_gin([recipe], [])


@pytest.mark.parametrize('binding, macro, closest', [
    ('TRAIN_STEP = 5', 'TRAIN_STEP', 'TRAIN_STEPS'),
    ('train_steps = 5', 'train_steps', 'TRAIN_STEPS'),
    ("MODEL_DIRR = '/tmp/x'", 'MODEL_DIRR', 'MODEL_DIR'),
])
def test_a_macro_that_no_binding_reads_is_refused_naming_it_and_the_closest(binding, macro,
                                                                            closest):
  with pytest.raises(UserError) as refused:
    gin_utils.parse_gin(['gin/runs/demo.gin'], ['TRAIN_STEPS = 7', binding])
  assert str(refused.value) == (f'gin: binding {binding!r}: no binding reads the macro '
                                f'{macro} (did you mean {closest}?)')


def test_a_macro_in_a_file_that_no_binding_reads_names_the_file_and_line(tmp_path):
  recipe = tmp_path / 'mine.gin'
  recipe.write_text("include 'gin/runs/demo.gin'\n\nTRAIN_STEPS = 60\nTRAIN_STEP = 60\n",
                    encoding='utf-8')
  with pytest.raises(UserError) as refused:
    gin_utils.parse_gin([str(recipe)], [])
  assert str(refused.value) == (f'gin: {recipe}, line 4: no binding reads the macro '
                                'TRAIN_STEP (did you mean TRAIN_STEPS?)')


def test_a_macro_read_by_a_later_binding_is_accepted():
  gin_utils.parse_gin(['gin/runs/demo.gin'],
                      ['STEPS_WANTED = 9', 'TRAIN_STEPS = %STEPS_WANTED'])
  assert configurables.train_config().train_steps == 9


def test_a_recipe_check_follows_macros_to_the_file_they_name(tmp_path):
  """A macro set to another macro is followed to its value; a *_FILE macro that only a
  replaced binding read is no input."""
  recipe = tmp_path / 'mine.gin'
  recipe.write_text("include 'gin/runs/parallel_files.gin'\nCORPUS = '%s'\n"
                    "SRC_FILE = %%CORPUS\nTGT_FILE = %%CORPUS\nSRC_LANG = 'eng_Latn'\n"
                    "TGT_LANG = 'fra_Latn'\n" % (tmp_path / 'pairs.tsv'), encoding='utf-8')
  with pytest.raises(UserError) as refused:
    gin_utils.check_recipe([str(recipe)], [])
  assert str(refused.value) == f'SRC_FILE: {tmp_path}/pairs.tsv: no such file'
  (tmp_path / 'pairs.tsv').write_text('a\tb\n', encoding='utf-8')
  gin_utils.check_recipe([str(recipe)], [])
  gin_utils.check_recipe([str(recipe)], ['SRC_FILE = %CORPUS', "CORPUS = 'nope'",
                                         "data_tasks.register_from_config.corpora_files = {}"])


def test_a_recipe_whose_inputs_are_not_read_may_leave_them_unset():
  """A dry run reads no data: the recipe's unset SRC_FILE is no mistake there."""
  gin_utils.check_recipe(['gin/runs/parallel_files.gin'], [], inputs=False)
  with pytest.raises(UserError, match='the macro SRC_LANG is not set'):
    gin_utils.check_recipe(['gin/runs/parallel_files.gin'], [])


@pytest.mark.parametrize('binding, error', [
    ('train_loop.train.train_step = 5', "Configurable 'train_loop.train' doesn't have a "
     "parameter named 'train_step' (did you mean train_steps?)"),
    ('train_loop.trian.train_steps = 5', "No configurable matching 'train_loop.trian' "
     '(did you mean train_loop.train?)'),
])
def test_an_unknown_configurable_or_parameter_names_the_closest(binding, error):
  with pytest.raises(UserError) as refused:
    gin_utils.parse_gin(['gin/runs/demo.gin'], [binding])
  assert str(refused.value) == f'gin: binding {binding!r}: {error}'


@pytest.mark.parametrize('binding, field', [
    ("MODEL_DIR = '~/runs/$RUN_NAME'", 'model_dir'),
    ("training.TrainConfig.init_from = '~/runs/$RUN_NAME'", 'init_from'),
])
def test_home_and_variables_are_expanded_in_run_folders(binding, field, tmp_path,
                                                        monkeypatch):
  monkeypatch.setenv('HOME', str(tmp_path))
  monkeypatch.setenv('RUN_NAME', 'first')
  gin_utils.parse_gin(['gin/runs/demo.gin'], [binding])
  assert getattr(configurables.train_config(), field) == str(tmp_path / 'runs' / 'first')


def test_home_and_variables_are_expanded_in_every_path_setting(tmp_path, monkeypatch):
  monkeypatch.setenv('HOME', str(tmp_path))
  monkeypatch.setenv('VOCABS', str(tmp_path / 'vocabs'))
  gin_utils.parse_gin(['gin/runs/demo.gin'], [
      "VOCABULARY_PATH = '$VOCABS/v.model'",
      "evaluation.EvalConfig.spm_model_path = '~/flores.spm'"])
  assert configurables.data_settings().vocabulary_path == str(tmp_path / 'vocabs' / 'v.model')
  assert configurables.eval_config().spm_model_path == str(tmp_path / 'flores.spm')
  assert files.path('~/x/$VOCABS') == pathlib.Path(f'{tmp_path}/x/{tmp_path}/vocabs')
  monkeypatch.setenv('RUN_NAME', 'first')
  assert str(files.path('gs://bucket/~/$RUN_NAME')) == 'gs://bucket/~/first'
