"""gin/models: each model file's architecture and parameter count are the ones
docs/methods.md#model tables, every recipe builds a valid model, and the architecture
macros choose the model whichever file sets them last."""

import functools
import itertools
import pathlib
import re

import gin
import pytest

from t5x_mt.config import configurables
from t5x_mt.config import gin_utils
from t5x_mt.model import models
from t5x_mt.model import network
from t5x_mt.runs import run_vocabulary
from test_launch_translate_evaluate import run_in_process

REPO = pathlib.Path(__file__).resolve().parents[1]
# Included by every model file: it binds the architecture macros and is no model size.
ARCHITECTURE_MACROS = 'architecture.gin'
MODEL_FILES = sorted(path.name for path in (REPO / 'gin' / 'models').glob('*.gin')
                     if path.name != ARCHITECTURE_MACROS)
# Parts a run file includes, which configure no model of their own.
RUN_PARTS = ('gin/runs/base_run.gin', 'gin/runs/dro/dro.gin')
RECIPES = sorted(
    str(path.relative_to(REPO)) for folder in ('models', 'runs')
    for path in (REPO / 'gin' / folder).rglob('*.gin')
    if str(path.relative_to(REPO)) not in RUN_PARTS)
# The papers' counts that the recipes reproduce to the digits each paper gives (NT5's
# Table 4, VolcTrans); Tencent's differ, as the doc's Departs says.
PAPER_COUNTS = {'ntt_base.gin': '547M', 'abci_base.gin': '622M', 'abci_encbig.gin': '2.0B',
                'abci_encdeep.gin': '736M', 'volctrans_2b.gin': '2.1B'}
UNITS = {'M': 1e6, 'B': 1e9}


def _doc_table() -> dict[str, dict[str, str]]:
  """docs/methods.md's table of model files, the first table under '## Model': file name
  -> column -> cell."""
  text = (REPO / 'docs' / 'methods.md').read_text(encoding='utf-8')
  lines = text.split('\n## Model\n', 1)[1].split('\n## ', 1)[0].splitlines()
  first = next(number for number, line in enumerate(lines) if line.startswith('| '))
  table = itertools.takewhile(lambda line: line.startswith('|'), lines[first:])
  rows = [[cell.strip() for cell in line.strip().strip('|').split('|')]
          for line in table if line.startswith('| ')]
  header, *body = rows
  return {row[0].strip('`'): dict(zip(header, row)) for row in body}


TABLE = _doc_table()


def _model_config(gin_files: list[str], bindings: list[str] = (),
                  vocab_size: int = 1000) -> network.TransformerConfig:
  gin.clear_config()
  gin_utils.parse_gin(gin_files, list(bindings))
  return configurables.model_config(vocab_size=run_vocabulary.padded_vocab_size(vocab_size))


@functools.cache
def _count(model_file: str, vocab_size: int) -> int:
  """What `--dry_run --vocab_size=<vocab_size>` counts for the model file."""
  return models.count_params(_model_config([f'gin/models/{model_file}'],
                                           vocab_size=vocab_size))


def _figure(text: str) -> tuple[float, float]:
  """('546.7M') -> (546.7e6, 0.05e6): the value and half a unit of its last digit."""
  match = re.fullmatch(r'(\d+)(?:\.(\d+))?([MB])', text)
  assert match, f'not a parameter count: {text!r}'
  unit = UNITS[match[3]]
  decimals = len(match[2] or '')
  return float(text[:-1]) * unit, 0.5 * unit * 10**-decimals


def test_the_doc_tables_every_model_file():
  assert sorted(TABLE) == MODEL_FILES


@pytest.mark.parametrize('model_file', MODEL_FILES)
def test_each_model_file_has_the_architecture_the_doc_tables(model_file):
  row = TABLE[model_file]
  config = _model_config([f'gin/models/{model_file}'])
  widths = {config.mlp_dim_of('encoder'), config.mlp_dim_of('decoder')}
  assert row['layers (enc + dec)'] == (f'{config.num_encoder_layers} + '
                                       f'{config.num_decoder_layers}')
  assert row['d'] == str(config.emb_dim)
  assert row['FFN (enc / dec)'] == (
      str(config.mlp_dim) if len(widths) == 1 else
      f'{config.mlp_dim_of("encoder")} / {config.mlp_dim_of("decoder")}')
  assert row['heads'] == str(config.num_heads)
  assert row['norms'] == config.layer_norm
  assert row['positions'] == config.position_embedding
  assert row['embeddings'] == ('shared' if config.share_encoder_embedding else 'separate')


@pytest.mark.parametrize('model_file', MODEL_FILES)
def test_each_model_file_has_the_parameter_count_the_doc_tables(model_file):
  row = TABLE[model_file]
  expected, half_digit = _figure(row['parameters'])
  assert abs(_count(model_file, int(row['vocabulary'])) - expected) <= half_digit


@pytest.mark.parametrize('model_file, paper', PAPER_COUNTS.items())
def test_seed_models_have_their_papers_parameter_counts(model_file, paper):
  row = TABLE[model_file]
  assert row['paper'] == paper
  expected, half_digit = _figure(paper)
  assert abs(_count(model_file, int(row['vocabulary'])) - expected) <= half_digit


@pytest.mark.parametrize('recipe', RECIPES)
def test_every_recipe_builds_a_valid_model_through_the_architecture_macros(recipe):
  config = _model_config([recipe])  # TransformerConfig refuses an invalid setting.
  assert (config.layer_norm, config.position_embedding) == (
      gin.query_parameter('%LAYER_NORM'), gin.query_parameter('%POSITION_EMBEDDING'))


def test_a_model_file_after_a_runs_own_replaces_its_whole_architecture():
  demo = _model_config(['gin/runs/demo.gin'])
  assert (demo.layer_norm, demo.position_embedding) == ('pre', 'learned')
  nt5 = _model_config(['gin/runs/demo.gin', 'gin/models/abci_encdeep.gin'])
  assert (nt5.layer_norm, nt5.position_embedding) == ('post_b2t', 'relative')
  assert (nt5.num_encoder_layers, nt5.share_encoder_embedding) == (18, False)
  back = _model_config(['gin/runs/demo.gin', 'gin/models/abci_encdeep.gin',
                        'gin/models/base.gin'])
  assert (back.layer_norm, back.position_embedding) == ('pre', 'learned')


def test_the_architecture_macros_override_a_model_files_choice():
  config = _model_config(['gin/runs/demo.gin', 'gin/models/ntt_base.gin'],
                         ["LAYER_NORM = 'post'", "POSITION_EMBEDDING = 'sinusoidal'"])
  assert (config.layer_norm, config.position_embedding) == ('post', 'sinusoidal')


def test_the_dry_run_prints_an_nt5_models_count(monkeypatch, capsys):
  code, out, _ = run_in_process(
      'train.py', ['--gin_file=gin/runs/demo.gin', '--gin_file=gin/models/abci_base.gin',
                   '--dry_run', '--vocab_size=64000'], monkeypatch, capsys)
  assert code == 0
  assert 'parameters: 622.25M ' in out
