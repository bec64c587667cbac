"""launch/select_data.py on a mix of two domains: nested threshold folders that shrink and
grow more in-domain, held-out recall as the scores file says, and bad input refused in
one line with nothing written."""

import json

import numpy as np
import pytest

from t5x_mt.data.corpus_types import clean_dir_corpus

from test_launch_translate_evaluate import run_in_process

DIRECTION = 'eng_Latn-fra_Latn'
MEDICINE = [('patient', 'patient'), ('nurse', 'infirmier'), ('doctor', 'médecin'),
            ('vaccine', 'vaccin'), ('tablet', 'comprimé'), ('hospital', 'hôpital'),
            ('surgeon', 'chirurgien'), ('syringe', 'flacon')]
FOOTBALL = [('striker', 'attaquant'), ('referee', 'arbitre'), ('goalkeeper', 'gardien'),
            ('stadium', 'stade'), ('penalty', 'penalty'), ('coach', 'entraîneur'),
            ('championship', 'championnat'), ('corner', 'corner')]
TEMPLATES = [
    ('We saw the {0} and the {1} near the {2} this morning.',
     'Nous avons vu le {0} et le {1} près du {2} ce matin.'),
    ('Everyone was waiting for the {0} after the {1} left the {2}.',
     'Tout le monde attendait le {0} après que le {1} a quitté le {2}.'),
    ('Yesterday the {0} spoke with the {1} about the {2} for a long time.',
     'Hier le {0} a parlé longtemps avec le {1} du {2}.'),
]
# As the gradual fine-tuning recipes read them. The classifier's probabilities on this mix
# stay below 0.99 (a sample of 60 sentences, negatives that are a fifth in-domain), so it
# is given lower ones.
THRESHOLDS = {'cross_entropy': ('0.7', '0.8', '0.9', '0.99'),
              'classifier': ('0.5', '0.7', '0.9')}
IN_DOMAIN, OTHER = 60, 240  # Candidates of each domain: the in-domain ones a fifth.


def _pairs(words, count, seed):
  rng = np.random.default_rng(seed)
  pairs = []
  for _ in range(count):
    english, french = TEMPLATES[rng.integers(len(TEMPLATES))]
    chosen = [words[index] for index in rng.choice(len(words), 3, replace=False)]
    pairs.append((english.format(*(eng for eng, _ in chosen)),
                  french.format(*(fra for _, fra in chosen))))
  return pairs


def _clean_folder(folder, pairs, direction=DIRECTION):
  folder.mkdir()
  src, tgt = direction.split('-')
  (folder / f'{direction}.{src}').write_text(''.join(f'{s}\n' for s, _ in pairs), 'utf-8')
  (folder / f'{direction}.{tgt}').write_text(''.join(f'{t}\n' for _, t in pairs), 'utf-8')
  return folder


def _flores_folder(folder, pairs):
  """FLORES-200's layout: one <code>.dev file per language, line-aligned."""
  folder.mkdir()
  for side, lang in enumerate(DIRECTION.split('-')):
    (folder / f'{lang}.dev').write_text(''.join(f'{pair[side]}\n' for pair in pairs), 'utf-8')
  return folder


@pytest.fixture
def mix(tmp_path):
  """(candidates folder, in-domain medicine sample, the candidates' medicine half)."""
  medicine = _pairs(MEDICINE, IN_DOMAIN, seed=1)
  candidates = medicine + _pairs(FOOTBALL, OTHER, seed=2)
  return (_clean_folder(tmp_path / 'candidates', candidates),
          _pairs(MEDICINE, 60, seed=3), set(medicine))


def _select(tmp_path, monkeypatch, capsys, *flags):
  return run_in_process('select_data.py', [f'--output_dir={tmp_path / "out"}', *flags],
                        monkeypatch, capsys)


@pytest.mark.parametrize('method', ['classifier', 'cross_entropy'])
def test_thresholds_nest_shrink_and_keep_the_in_domain_half(method, mix, tmp_path,
                                                            monkeypatch, capsys):
  candidates, sample, medicine = mix
  # The sample in either layout: a FLORES-200-style dev folder, or a clean.py folder.
  sample_folder = (_flores_folder if method == 'classifier' else _clean_folder)(
      tmp_path / 'sample', sample)
  held_out_pairs = sorted(medicine)[:20]
  held_out = _clean_folder(tmp_path / 'held_out', held_out_pairs)
  thresholds = THRESHOLDS[method]
  code, out, _ = _select(tmp_path, monkeypatch, capsys, f'--candidates={candidates}',
                         f'--in_domain={sample_folder}', f'--held_out={held_out}',
                         f'--method={method}', f'--thresholds={",".join(thresholds)}')
  assert code == 0
  output = tmp_path / 'out'
  assert sorted(path.name for path in output.iterdir()) == [
      'report.json', 'scores', *(f'threshold_{t}' for t in thresholds)]
  selected = [clean_dir_corpus('s', output / f'threshold_{t}').pairs('train', 'eng_Latn',
                                                                     'fra_Latn')
              for t in thresholds]
  sizes = [len(pairs) for pairs in selected]
  assert sizes == sorted(sizes, reverse=True) and sizes[0] > sizes[-1] > 0
  for wider, narrower in zip(selected, selected[1:]):
    assert set(narrower) <= set(wider)
  assert sum(pair in medicine for pair in selected[-1]) >= 0.9 * sizes[-1]

  report = json.loads((output / 'report.json').read_text())
  entry = report['directions'][DIRECTION]
  assert report['method'] == method and entry['candidates'] == IN_DOMAIN + OTHER
  assert [entry['thresholds'][t]['kept'] for t in thresholds] == sizes
  # Recall by hand: the held-out pairs are candidates, so scores.tsv has their values.
  rows = [line.split('\t') for line in
          (output / 'scores' / f'{DIRECTION}.tsv').read_text('utf-8').splitlines()]
  assert rows[0] == ['score', 'percentile', 'eng_Latn', 'fra_Latn']
  column = 0 if method == 'classifier' else 1
  value_of = {(row[2], row[3]): float(row[column]) for row in rows[1:]}
  held_out_values = np.asarray([value_of[pair] for pair in held_out_pairs])
  for t in thresholds:
    assert entry['thresholds'][t]['held_out_recall'] == pytest.approx(
        np.mean(held_out_values >= float(t)))
  table = [line.split() for line in out.splitlines()]
  assert [DIRECTION, thresholds[-1], str(sizes[-1]), str(IN_DOMAIN + OTHER)] in [
      row[:4] for row in table]


def test_a_threshold_nothing_reaches_writes_empty_files_and_says_so(mix, tmp_path,
                                                                    monkeypatch, capsys,
                                                                    caplog):
  candidates, sample, _ = mix
  sample_folder = _clean_folder(tmp_path / 'sample', sample)
  code, out, _ = _select(tmp_path, monkeypatch, capsys, f'--candidates={candidates}',
                         f'--in_domain={sample_folder}', '--thresholds=0.5,1.0')
  assert code == 0
  empty = clean_dir_corpus('empty', tmp_path / 'out' / 'threshold_1.0')
  assert empty.pairs('train', 'eng_Latn', 'fra_Latn') == []
  assert out.splitlines()[-1].endswith('0.0%  none kept')
  assert caplog.messages == [f'threshold_1.0 keeps no {DIRECTION} pairs: its files are '
                             'empty and a stage trained on them has nothing to learn from']


def _bad_inputs(tmp_path, mix):
  """(flags, the error line) for each bad input; every folder exists as named."""
  candidates, sample, _ = mix
  good = _clean_folder(tmp_path / 'good', sample)
  empty = _clean_folder(tmp_path / 'empty', [])
  swapped = _clean_folder(tmp_path / 'swapped', [(t, s) for s, t in sample])
  german = _clean_folder(tmp_path / 'german', sample, 'eng_Latn-deu_Latn')
  not_clean = tmp_path / 'not_clean'
  not_clean.mkdir()
  (not_clean / 'notes.txt').write_text('hello\n')
  return {
      'empty sample': ([f'--in_domain={empty}'],
                       f'--in_domain: {empty}: the {DIRECTION} sample is empty: give '
                       'sentence pairs of the domain to select for'),
      'wrong language': ([f'--in_domain={swapped}'],
                         f'--in_domain: {swapped}: only 0 of 60 eng_Latn sentences are '
                         'identified as eng_Latn: a sample in another language, or sides '
                         'swapped?'),
      'missing direction': ([f'--in_domain={german}'],
                            f'--in_domain: {german} has no {DIRECTION} pairs (nor '
                            f'fra_Latn-eng_Latn), which candidate direction {DIRECTION} '
                            'needs (it has: deu_Latn, eng_Latn)'),
      'descending': ([f'--in_domain={good}', '--thresholds=0.9,0.7'],
                     '--thresholds: thresholds must ascend, got 0.9,0.7'),
      'outside [0, 1]': ([f'--in_domain={good}', '--thresholds=0.5,1.5'],
                         '--thresholds: thresholds must be in [0, 1], got 0.5,1.5'),
      'candidates not clean': ([f'--in_domain={good}', f'--candidates={not_clean}'],
                               f'--candidates: {not_clean} has no <src>-<tgt>.<src> files '
                               '(not a launch/clean.py output folder)'),
      'unknown method': ([f'--in_domain={good}', '--method=mbert'],
                         "--method: 'mbert' is not one of classifier, cross_entropy"),
  }, candidates


def test_each_bad_input_is_one_line_and_writes_nothing(mix, tmp_path, monkeypatch, capsys):
  cases, candidates = _bad_inputs(tmp_path, mix)
  for name, (flags, error) in cases.items():
    flags = [f'--candidates={candidates}', *flags]  # A later --candidates overrides.
    code, out, err = _select(tmp_path, monkeypatch, capsys, *flags)
    assert (code, out, err) == (2, '', f'error: {error}\n'), name
    assert not (tmp_path / 'out').exists() and not list(tmp_path.glob('.out*')), name


def test_an_existing_output_is_replaced_only_with_overwrite_and_only_a_selection(
    mix, tmp_path, monkeypatch, capsys):
  candidates, sample, _ = mix
  sample_folder = _clean_folder(tmp_path / 'sample', sample)
  flags = [f'--candidates={candidates}', f'--in_domain={sample_folder}',
           '--method=cross_entropy']
  assert _select(tmp_path, monkeypatch, capsys, *flags)[0] == 0
  output = tmp_path / 'out'
  assert _select(tmp_path, monkeypatch, capsys, *flags)[:3:2] == (
      2, f'error: --output_dir: {output} already exists (pass --overwrite to replace it)\n')
  assert _select(tmp_path, monkeypatch, capsys, *flags, '--overwrite')[0] == 0
  (output / 'stage_1').mkdir()  # A gradual fine-tuning run beside the selection.
  assert _select(tmp_path, monkeypatch, capsys, *flags, '--overwrite')[:3:2] == (
      2, f'error: --output_dir: {output} holds stage_1, which no selection writes: '
      '--overwrite replaces an earlier selection only (move it out first)\n')
  assert (output / 'stage_1').is_dir()
