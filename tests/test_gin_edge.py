"""Gin only at the edge: no library module reads gin, and every name recipes bind still
reaches the library through t5x_mt.configurables."""

import ast
import pathlib

import gin
import pytest

import data_tasks
from t5x_mt import configurables
from t5x_mt.data.cleaning import pipeline
from t5x_mt.errors import UserError

REPO = pathlib.Path(__file__).resolve().parents[1]
# The edge: gin registration, parsing, flags, and loading a run's config.gin.
GIN_MODULES = {'t5x_mt/configurables.py', 't5x_mt/gin_utils.py', 't5x_mt/cli.py',
               't5x_mt/run_loading.py'}


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
  assert getattr(configurables.configure_data(), field) == expected
  assert getattr(data_tasks.settings(), field) == expected


def test_a_bad_data_binding_names_the_gin_setting():
  gin.parse_config("data_tasks.tag_strategy.strategy = 'tenc'")
  with pytest.raises(UserError, match=r"^tag_strategy\.strategy: unknown tag "
                     "strategy 'tenc'"):
    configurables.data_settings()


def test_declared_corpora_and_mixtures_are_registered():
  gin.parse_config("data_tasks.register_from_config.mixtures = "
                   "{'test_gin_edge_mix': ['cldr_eng_Latn.hau_Latn', 'cldr_hau_Latn.eng_Latn']}")
  configurables.configure_data()
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
