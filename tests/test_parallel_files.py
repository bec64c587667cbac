"""Training on a user's own files: corpora of files registered from gin
(`data_tasks.register_from_config.corpora_files`), their held-out validation lines, and the
recipe gin/runs/parallel_files.gin run from the command line."""

import json
import pathlib

import gin
import pytest

from conftest import tiny_run_bindings
import data_tasks
from t5x_mt.config import configurables
from t5x_mt.config import gin_utils
from t5x_mt.data import corpora
from t5x_mt.data import mixtures
from test_launch_translate_evaluate import run_in_process

ENG, HAU = 'eng_Latn', 'hau_Latn'
# Line 3 repeats line 28, which the last 5 lines hold out: it is not trained on either.
PAIRS = [(f'the report {i} is ready', f'rahoto {i} ya shirya') for i in range(30)]
PAIRS[3] = PAIRS[28]
HELD_OUT = 5
EXPECTED_TRAIN = PAIRS[:3] + PAIRS[4:25]
TEST_PAIRS = [(f'the letter {i} came', f'wasiƙa {i} ta zo') for i in range(4)]
RECIPE = 'gin/runs/parallel_files.gin'


def write_pairs(folder: pathlib.Path, stem: str, pairs: list[tuple[str, str]]
                ) -> tuple[pathlib.Path, pathlib.Path]:
  """The pairs as two line-aligned files, <stem>.eng and <stem>.hau."""
  paths = folder / f'{stem}.eng', folder / f'{stem}.hau'
  for side, path in enumerate(paths):
    path.write_text(''.join(pair[side] + '\n' for pair in pairs), encoding='utf-8')
  return paths


@pytest.fixture
def home(tmp_path, monkeypatch) -> pathlib.Path:
  """A home folder holding train.eng/.hau and test.eng/.hau, named with ~ in the specs."""
  monkeypatch.setenv('HOME', str(tmp_path))
  write_pairs(tmp_path, 'train', PAIRS)
  write_pairs(tmp_path, 'test', TEST_PAIRS)
  return tmp_path


def test_held_out_lines_are_validation_and_never_trained_on(home):
  name = 'test_own_files'
  data_tasks.register_corpora_and_mixtures(
      corpora_files={name: {'languages': [ENG, HAU], 'train': ['~/train.eng', '~/train.hau'],
                            'validation_lines': HELD_OUT,
                            'test': ['~/test.eng', '~/test.hau']}},
      mixtures={name: [name]})
  corpus = corpora.get_corpus(name)
  assert corpus.pairs('train', ENG, HAU) == EXPECTED_TRAIN
  assert corpus.pairs('validation', ENG, HAU) == PAIRS[25:]
  assert corpus.pairs('test', ENG, HAU) == TEST_PAIRS
  mixture = data_tasks.mixture_view(name)
  assert [(m.task, m.direction.name, m.pairs) for m in mixture.members] == [
      (f'{name}_{ENG}.{HAU}', f'{ENG}-{HAU}', 24)]
  assert mixtures.training_sentences(data_tasks.mixture_view(name))[ENG] == [src for src, _ in EXPECTED_TRAIN]


def test_mixture_named_as_its_corpus_follows_the_corpus_when_registered_again(home):
  name = 'test_own_files_again'
  for languages, files in (([ENG, HAU], ['~/train.eng', '~/train.hau']),
                           ([HAU, ENG], ['~/train.hau', '~/train.eng'])):
    data_tasks.register_corpora_and_mixtures(
        corpora_files={name: {'languages': languages, 'train': files}},
        mixtures={name: [name]})
  assert [m.direction.name for m in data_tasks.mixture_view(name).members] == [f'{HAU}-{ENG}']


def test_a_tsv_file_is_a_split_too(tmp_path):
  (tmp_path / 'pairs.tsv').write_text('x\tone\tun\ny\ttwo\tdeux\n', encoding='utf-8')
  data_tasks.register_corpora_and_mixtures(corpora_files={'test_own_tsv': {
      'languages': [ENG, 'fra_Latn'], 'train': str(tmp_path / 'pairs.tsv'),
      'columns': [1, 2]}})
  assert corpora.get_corpus('test_own_tsv').pairs('train', ENG, 'fra_Latn') == [
      ('one', 'un'), ('two', 'deux')]


def recipe_flags(model_dir: pathlib.Path, **macros: str) -> list[str]:
  """launch/train.py's flags for the recipe, each macro given as the gin value it takes."""
  return [f'--gin_file={RECIPE}', f"--gin.MODEL_DIR='{model_dir}'",
          *(f'--gin.{name}={value}' for name, value in macros.items())]


GOOD_MACROS = {'SRC_FILE': "'~/train.eng'", 'TGT_FILE': "'~/train.hau'",
               'SRC_LANG': f"'{ENG}'", 'TGT_LANG': f"'{HAU}'"}
WHERE = "data_tasks.register_from_config.corpora_files['parallel_files']"


@pytest.mark.parametrize('macros, error', [
    ({'SRC_FILE': "'~/nope.eng'"}, 'SRC_FILE: {home}/nope.eng: no such file'),
    ({'TGT_FILE': "'~/test.hau'"},
     '{home}/train.eng has 30 lines but {home}/test.hau has 4: parallel files must have one '
     'line per segment'),
    ({'SRC_LANG': "'eng'"},
     f"{WHERE}: source language: 'eng' is not a FLORES-200 language code; did you mean "
     "'eng_Latn'? (codes look like eng_Latn, hau_Latn, amh_Ethi)"),
    ({'TEST_SRC_FILE': "'~/test.eng'"},
     f"{WHERE}: test: expected [source file, target file] or one TSV file, got "
     "['~/test.eng', None]"),
    ({'VALIDATION_LINES': '30'},
     "corpus 'parallel_files': validation_lines=30 would hold out every line of "
     '{home}/train.eng and {home}/train.hau (30 lines)'),
], ids=['missing file', 'line counts', 'language code', 'half a test set', 'no lines left'])
def test_bad_files_or_codes_are_one_line_naming_them(home, macros, error, monkeypatch, capsys):
  model_dir = home / 'run'
  code, _, stderr = run_in_process(
      'train.py', recipe_flags(model_dir, **{**GOOD_MACROS, **macros}), monkeypatch, capsys)
  assert (code, stderr.strip().splitlines()[-1]) == (2, 'error: ' + error.format(home=home))
  assert not model_dir.exists()


def evaluate_test_split(**macros: str) -> bool:
  gin_utils.parse_gin([RECIPE], [f'{name} = {value}' for name, value in macros.items()])
  return configurables.train_config().evaluate_test_split


def test_test_split_is_scored_only_when_its_files_are_given():
  assert not evaluate_test_split(**GOOD_MACROS)
  gin.clear_config()
  assert evaluate_test_split(**GOOD_MACROS, TEST_SRC_FILE="'a'", TEST_TGT_FILE="'b'")


@pytest.mark.slow
def test_recipe_trains_on_the_files_and_scores_held_out_and_test_lines(home, monkeypatch,
                                                                       capsys):
  model_dir = home / 'run'
  tiny = tiny_run_bindings(
      model_dir, home / 'unused.model', 'parallel_files', 2, **{
          'VOCABULARY_PATH': '@data_tasks.model_dir_vocabulary()',
          'training.TrainConfig.evaluate_test_split': '@data_tasks.gives_files()',
          'evaluation.EvalConfig.max_sentences': 'None'})
  flags = recipe_flags(model_dir, **GOOD_MACROS, VALIDATION_LINES=str(HELD_OUT),
                       TEST_SRC_FILE="'~/test.eng'", TEST_TGT_FILE="'~/test.hau'")
  flags += ['--gin.' + binding.replace(' = ', '=', 1) for binding in tiny]
  code, _, stderr = run_in_process('train.py', flags, monkeypatch, capsys)
  assert code == 0, stderr[-3000:]
  assert corpora.get_corpus('parallel_files').pairs('train', ENG, HAU) == EXPECTED_TRAIN
  validation = json.loads((model_dir / 'eval' / 'step_2.json').read_text())
  test = json.loads((model_dir / 'test' / 'eval' / 'step_2.json').read_text())
  assert validation['directions'][f'{ENG}-{HAU}']['n'] == HELD_OUT
  assert test['directions'][f'{ENG}-{HAU}']['n'] == len(TEST_PAIRS)
  assert (model_dir / 'vocab.model').is_file()
  assert not (home / 'unused.model').exists()


@pytest.mark.parametrize('verbosity', [None, 'info'])
def test_with_verbosity_info_the_log_says_how_many_pairs_repeat_a_held_out_one(
    verbosity, home, monkeypatch, capsys, caplog):
  """What docs/your_own_data.md says the log gives; hidden at the default verbosity."""
  flags = recipe_flags(home / 'run', **GOOD_MACROS, VALIDATION_LINES=str(HELD_OUT), **{
      'evaluation.EvalConfig.split': "'nope'"})  # Refused once the corpus is read.
  code, _, stderr = run_in_process(
      'train.py', flags + ([f'--verbosity={verbosity}'] if verbosity else []), monkeypatch,
      capsys)
  assert code == 2 and 'has nope pairs' in stderr
  held_out = [record.getMessage() for record in caplog.records
              if 'are its validation split' in record.getMessage()]
  assert held_out == ([f"Corpus 'parallel_files': the last {HELD_OUT} lines of "
                       f'{home}/train.eng and {home}/train.hau are its validation split (1 '
                       'earlier training pairs repeat one of them and are left out)']
                      if verbosity else [])
