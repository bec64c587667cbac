"""tools/readme_demo_figures.py: the README's demo figures come from a run's own files."""

import importlib.util
import json
import pathlib
import sys

import pytest

from t5x_mt.core import cli
from t5x_mt.evaluation import scoring

REPO = pathlib.Path(__file__).resolve().parents[1]
SCRIPT = REPO / 'tools' / 'readme_demo_figures.py'


def load_script():
  spec = importlib.util.spec_from_file_location('readme_demo_figures', SCRIPT)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


FIGURES = load_script()


def run_script(argv: list[str], monkeypatch, capsys) -> tuple[int, str, str]:
  """(exit code, stdout, stderr) of the script run through cli.run in this process."""
  monkeypatch.setattr(sys, 'argv', [str(SCRIPT), *argv])
  capsys.readouterr()
  with pytest.raises(SystemExit) as exit_info:
    cli.run(FIGURES.main)
  out, err = capsys.readouterr()
  return exit_info.value.code, out, err


def finished_run(model_dir: pathlib.Path) -> dict:
  """A run folder as the demo leaves it: losses logged at steps 25 and 50 (and a window
  of skipped steps at 40), and test scores at the last step, written by the library."""
  model_dir.mkdir()
  records = [{'step': 25, 'loss': 5.8049}, {'step': 40, 'loss': None},
             {'step': 50, 'loss': 3.7151}]
  (model_dir / 'metrics.jsonl').write_text(
      ''.join(json.dumps(record) + '\n' for record in records), encoding='utf-8')
  scores = {
      'eng_Latn-hau_Latn': scoring.score_translations(
          ['Monday, 5 March 2024', 'fifteen kilometres'],
          ['Litinin, 5 ga Maris 2024', 'kilomita goma sha biyar'],
          ['Litinin, 5 ga Maris 2024', 'kilomita goma sha biyar']),
      'hau_Latn-eng_Latn': scoring.score_translations(
          ['Litinin, 5 ga Maris 2024', 'kilomita goma sha biyar'],
          ['Monday, 5 March 2024', 'fifteen metres'],
          ['Monday, 5 March 2024', 'fifteen kilometres'])}
  summary = scoring.summarize(50, scores)
  summary['split'] = 'test'
  scoring.write_eval_json(model_dir, summary, 'test')
  return summary


README_TEXT = ('# Project\n\nIntro.\n\n<!-- demo-figures:start -->\nold figures\n'
               '<!-- demo-figures:end -->\n\nAfter the figures.\n')


def test_rewrites_only_the_marked_block_from_the_runs_files(tmp_path, monkeypatch, capsys):
  summary = finished_run(tmp_path / 'run')
  readme = tmp_path / 'README.md'
  readme.write_text(README_TEXT, encoding='utf-8')
  argv = [f'--model_dir={tmp_path / "run"}', f'--readme={readme}']

  code, out, err = run_script(argv, monkeypatch, capsys)

  assert (code, err) == (0, '')
  text = readme.read_text(encoding='utf-8')
  before, block = text.split('<!-- demo-figures:start -->\n')
  block, after = block.split('<!-- demo-figures:end -->\n')
  assert before == '# Project\n\nIntro.\n\n'
  assert after == '\nAfter the figures.\n'
  assert 'old figures' not in block
  assert '| step | 25 | 50 |\n|---|---|---|\n| loss | 5.80 | 3.72 |\n' in block
  assert '`MODEL_DIR/test/eval/step_50.json`' in block
  assert f'```\n{scoring.format_table(summary)}\n```\n' in block
  all_directions = summary['categories']['ALL']
  assert all_directions['chrf'] == pytest.approx(
      (summary['directions']['eng_Latn-hau_Latn']['chrf']
       + summary['directions']['hau_Latn-eng_Latn']['chrf']) / 2)
  assert out == (f'{readme}: demo figures of step 50 written (test ALL: '
                 f'{all_directions["bleu"]:.2f} BLEU, {all_directions["chrf"]:.2f} chrF++)\n')

  code, out, _ = run_script(argv, monkeypatch, capsys)
  assert code == 0 and out.endswith(', unchanged\n')
  assert readme.read_text(encoding='utf-8') == text


def test_refuses_a_readme_without_markers_and_a_run_without_test_scores(
    tmp_path, monkeypatch, capsys):
  finished_run(tmp_path / 'run')
  readme = tmp_path / 'README.md'
  unmarked = '# Project\n\n<!-- demo-figures:start -->\nno end marker\n'
  readme.write_text(unmarked, encoding='utf-8')

  code, out, err = run_script([f'--model_dir={tmp_path / "run"}', f'--readme={readme}'],
                              monkeypatch, capsys)
  assert (code, out) == (2, '')
  assert err == (f'error: {readme}: needs one line <!-- demo-figures:start --> and, after '
                 'it, one line <!-- demo-figures:end --> (found 1 and 0)\n')
  assert readme.read_text(encoding='utf-8') == unmarked

  readme.write_text(README_TEXT, encoding='utf-8')
  (tmp_path / 'run' / 'test' / 'eval' / 'step_50.json').unlink()
  code, _, err = run_script([f'--model_dir={tmp_path / "run"}', f'--readme={readme}'],
                            monkeypatch, capsys)
  assert code == 2
  assert err.startswith(f'error: {tmp_path / "run" / "test" / "eval" / "step_50.json"} not '
                        'found: the test split is scored when the run reaches TRAIN_STEPS')
  assert readme.read_text(encoding='utf-8') == README_TEXT


def test_the_readme_has_one_demo_figures_block_the_script_can_replace():
  text = (REPO / 'README.md').read_text(encoding='utf-8')
  replaced = FIGURES.replace_block(text, 'new figures', 'README.md')
  start = text.index(FIGURES.START)
  end = text.index(FIGURES.END)
  assert replaced == f'{text[:start]}{FIGURES.START}\nnew figures\n{text[end:]}'
  assert '| loss |' in text[start:end] and 'ALL ' in text[start:end]
