"""The CLDR corpus's 'long' split, which bench/architectures.py measures positions on,
scored by evaluate.py on a finished run."""

import json

from test_launch_translate_evaluate import run_in_process

TASK = 'cldr_eng_Latn.hau_Latn'


def test_evaluate_scores_the_long_split(trained_run, tmp_path, monkeypatch, capsys):
  output = tmp_path / 'long.json'
  code, out, _ = run_in_process('evaluate.py', [
      f'--checkpoint_dir={trained_run}', f'--tasks={TASK}', '--split=long', '--beam_size=1',
      '--max_sentences=2', f'--output_json={output}'], monkeypatch, capsys)
  assert code == 0 and out.splitlines()[0].startswith(f'long split of {TASK} at step ')
  summary = json.loads(output.read_text())
  assert summary['split'] == 'long'
  assert summary['directions']['eng_Latn-hau_Latn']['n'] == 2
