"""Cleaning keeps and drops the same pairs of real corpora as the recorded decisions.

`cleaning_decisions.json` holds, for gettext_l10n and NTREX-128 (train) and for every step
list below, what `clean_locally` removed with each step and a digest per direction of
the kept pairs and of the dropped lines with the step that dropped each. It was written
by the per-pair cleaner the chunked one replaced; run this file as a script to rewrite it
when a change of decisions is intended.

The model filters (language_id, mdl_repeat, decontaminate) are left out of the presets:
they are not rule filters, and they would make the test minutes long.
"""

import hashlib
import json
import sys
from collections import Counter
from pathlib import Path

import gin
import pytest

from t5x_mt.config import configurables
from t5x_mt.config import gin_utils
from t5x_mt.data import readers
from t5x_mt.data.cleaning import io as cleaning_io
from t5x_mt.data.cleaning import pipeline
from t5x_mt.data.cleaning.steps import STEPS
from t5x_mt.core.directions import Direction

FIXTURE = Path(__file__).with_name('cleaning_decisions.json')
CORPORA = ('gettext_l10n', 'ntrex128')  # Also their folders in the shared data.
MODEL_FILTERS = ('language_id', 'mdl_repeat', 'decontaminate')
NOT_RULES = (*MODEL_FILTERS, 'mined_scores')
RULE_FILTERS = 'rule_filters'
PRESETS = ('default', 'lanbridge', 'm2m', 'nt5', 'tencent', 'volctrans')


def step_list(config: str) -> list[pipeline.StepSpec]:
  """Every rule filter (defaults, sorted by name), or a preset without its model filters."""
  gin.clear_config()
  if config == RULE_FILTERS:
    return pipeline.resolve_specs(sorted(name for name, cls in STEPS.items()
                                         if cls.kind == 'filter' and name not in NOT_RULES))
  gin_utils.parse_gin([str(pipeline.preset_file(config))], [])
  try:
    return configurables.cleaning_specs([name for name in configurables.cleaning_step_names()
                                         if name not in MODEL_FILTERS])
  finally:
    gin.clear_config()


def _digest(*paths: Path) -> str:
  sha = hashlib.sha256()
  for path in paths:
    sha.update(path.read_bytes() if path.exists() else b'-')
  return sha.hexdigest()[:16]


def decisions(corpus: str, config: str, output_dir: Path) -> dict:
  """What cleaning `corpus` with step list `config` removed, kept and dropped."""
  report = pipeline.clean_locally(cleaning_io.corpus_sources(corpus), step_list(config),
                                  output_dir, write_dropped=True, overwrite=True,
                                  progress=False)
  digests, rewritten = {}, Counter()
  for direction, entry in report['directions'].items():
    rewritten.update(entry['rewritten'])
    src_lang, tgt_lang = Direction.parse(direction, 'report')
    digests[direction] = _digest(output_dir / f'{direction}.{src_lang}',
                                 output_dir / f'{direction}.{tgt_lang}',
                                 output_dir / 'dropped' / f'{direction}.tsv')
  return {'pairs_in': report['total']['pairs_in'], 'pairs_out': report['total']['pairs_out'],
          'dropped': {name: count for name, count in report['total']['dropped'].items()
                      if count},
          'rewritten': dict(sorted(rewritten.items())),
          'digests': digests}


@pytest.mark.slow
@pytest.mark.parametrize('config', [RULE_FILTERS, *PRESETS])
@pytest.mark.parametrize('corpus', CORPORA)
def test_cleaning_decisions_match_the_recorded_ones(corpus, config, tmp_path):
  root = readers.shared_data_dir()
  if root is None or not (root / corpus).is_dir():
    pytest.skip(f'the shared data folder has no {corpus}')
  expected = json.loads(FIXTURE.read_text())[corpus][config]
  assert decisions(corpus, config, tmp_path / 'out') == expected


def write_fixture(scratch: Path) -> None:
  recorded = {corpus: {config: decisions(corpus, config, scratch / corpus / config)
                       for config in (RULE_FILTERS, *PRESETS)} for corpus in CORPORA}
  FIXTURE.write_text(json.dumps(recorded, indent=1, sort_keys=True) + '\n')


if __name__ == '__main__':
  write_fixture(Path(sys.argv[1] if len(sys.argv) > 1 else '/tmp/t5x_mt/cleaning_decisions'))
