"""Reranking n-best lists: tuned weights, the beam's own choice, MBR, weights files."""

import json
import re

import numpy as np
import pytest
import sacrebleu

from t5x_mt.decoding import nbest
from t5x_mt.decoding import reranking
from t5x_mt.config import run_loading
from t5x_mt.core.errors import UserError
from test_launch_translate_evaluate import run_in_process

WORDS = [f'w{i}' for i in range(40)]


def _noisy_lists(sentences: int, hypotheses: int, seed: int):
  """References and lists of their copies with 0-4 words replaced, in random order."""
  rng = np.random.default_rng(seed)
  references = [' '.join(rng.choice(WORDS, 8)) for _ in range(sentences)]
  lists = []
  for reference in references:
    sentence = []
    for _ in range(hypotheses):
      words = reference.split()
      for _ in range(rng.integers(0, 5)):
        words[rng.integers(len(words))] = str(rng.choice(WORDS))
      sentence.append(' '.join(words))
    lists.append(sentence)
  return references, lists, rng


def test_tuning_puts_the_weight_on_the_oracle_feature_and_picks_its_hypotheses():
  """Each list holds its reference, not first; the oracle feature is 1 there (and on any
  other copy of it) and 0 elsewhere. Only the oracle's choices reach chrF++ 100."""
  references, lists, rng = _noisy_lists(sentences=40, hypotheses=6, seed=0)
  features = []
  for reference, sentence in zip(references, lists):
    sentence[rng.integers(1, len(sentence))] = reference
    oracle = np.array([float(h == reference) for h in sentence])
    # The beam's score and a distractor know nothing of the reference.
    features.append(np.column_stack([rng.normal(size=len(sentence)), oracle,
                                     rng.normal(size=len(sentence))]))
  candidates = reranking.Candidates(lists, ('forward_normalized', 'oracle', 'noise'),
                                    features)
  tuned = reranking.tune(candidates, references, 'chrf++', random_starts=3)
  weights = tuned.weights.vector(candidates.feature_names, 'weights.json')
  assert weights[1] == 1.0
  assert candidates.chosen(candidates.choose(weights)) == references
  assert tuned.reranked == pytest.approx(100.0)
  assert tuned.first_best < 90


def test_tuning_is_deterministic_given_its_seed():
  references, lists, rng = _noisy_lists(sentences=20, hypotheses=5, seed=1)
  candidates = reranking.Candidates(lists, ('a', 'b', 'c'),
                                    [rng.normal(size=(5, 3)) for _ in lists])
  first = reranking.tune(candidates, references, 'bleu', random_starts=4, seed=7)
  again = reranking.tune(candidates, references, 'bleu', random_starts=4, seed=7)
  assert first == again


@pytest.mark.parametrize('metric', ['chrf++', 'bleu'])
def test_corpus_objective_is_sacrebleus_corpus_score(metric):
  references, lists, _ = _noisy_lists(sentences=15, hypotheses=4, seed=2)
  candidates = reranking.Candidates(lists, (), [np.zeros((4, 0)) for _ in lists])
  choices = [i % 4 for i in range(15)]
  expected = reranking.corpus_metric(metric).corpus_score(candidates.chosen(choices),
                                                          [references]).score
  objective = reranking.CorpusObjective(candidates, references, metric)
  assert objective.score(choices) == pytest.approx(expected, abs=1e-9)


def test_line_search_finds_the_best_value_of_one_weight_exactly():
  """No value on a fine grid beats the line search, and its value scores what it says."""
  references, lists, rng = _noisy_lists(sentences=25, hypotheses=5, seed=3)
  candidates = reranking.Candidates(lists, ('a', 'b'),
                                    [rng.normal(size=(5, 2)) for _ in lists])
  objective = reranking.CorpusObjective(candidates, references, 'chrf++')
  weights = np.array([1.0, 0.0])
  value, score = reranking._line_search(candidates, objective, weights, 1)
  assert objective.score(candidates.choose(np.array([1.0, value]))) == pytest.approx(score)
  grid = [objective.score(candidates.choose(np.array([1.0, t])))
          for t in np.linspace(-10, 10, 2001)]
  assert max(grid) <= score + 1e-9
  assert score > objective.score(candidates.choose(weights))


def test_weight_on_the_beam_score_alone_keeps_the_beams_choice(tmp_path):
  """An n-best list as translate.py writes it: the beam's choice first, its total the
  length-normalised score, by which the list is sorted although the raw log-probability
  (`forward`) prefers shorter hypotheses."""
  path = tmp_path / 'list.nbest'
  path.write_text(
      '0 ||| a b c ||| forward=-3.0 forward_normalized=-0.75 length=4 ||| -0.75\n'
      '0 ||| a b ||| forward=-2.5 forward_normalized=-0.83 length=3 ||| -0.83\n'
      '1 ||| x ||| forward=-1.0 forward_normalized=-0.5 length=2 ||| -0.5\n'
      '1 ||| y ||| forward=-0.5 forward_normalized=-0.5 length=1 ||| -0.5\n'
      '1 ||| z ||| forward=-4.0 forward_normalized=-1.0 length=4 ||| -1.0\n',
      encoding='utf-8')
  candidates = reranking.from_nbest(nbest.read(path), str(path))
  beam_only = reranking.Weights({'forward': 0.0, 'forward_normalized': 1.0, 'length': 0.0},
                                'chrf++')
  assert candidates.choose(beam_only.vector(candidates.feature_names, 'w')) == [0, 0]  # A tie keeps 'x'.
  forward_only = reranking.Weights({'forward': 1.0, 'forward_normalized': 0.0, 'length': 0.0},
                                   'chrf++')
  assert candidates.choose(forward_only.vector(candidates.feature_names, 'w')) == [1, 1]


def test_mbr_over_identical_hypotheses_returns_that_hypothesis():
  candidates = reranking.Candidates([['the same'] * 4],
                                    ('forward',), [np.array([[-4.0], [-1.0], [-2.0], [-3.0]])])
  for weighted in (False, True):
    assert candidates.chosen(reranking.mbr_choices(candidates, weighted)) == ['the same']


def test_mbr_picks_the_consensus_and_weighting_follows_the_model():
  # 'a b c' twice shares no character with 'x y z': uniformly each twin expects
  # (100 + 100 + 0) / 3 and the odd one 100 / 3, so MBR leaves the decoder's first. When
  # the model gives the odd one nearly all the probability, it expects nearly 100 and the
  # twins nearly 0.
  candidates = reranking.Candidates([['x y z', 'a b c', 'a b c']], ('forward',),
                                    [np.array([[-1.0], [-20.0], [-20.0]])])
  assert reranking.mbr_choices(candidates) == [1]
  assert reranking.mbr_choices(candidates, weighted=True) == [0]
  # A hotter distribution (temperature 100) is nearly uniform again.
  assert reranking.mbr_choices(candidates, weighted=True, temperature=100.0) == [1]


def test_mbr_choice_on_a_hand_made_list():
  # Sentence chrF++ of row against column (sacrebleu.CHRF(word_order=2).sentence_score):
  #                                A      B      C      D    uniform mean
  #   A the cat sat on a mat     100.00   2.64  67.44  55.01   56.27
  #   B dogs bark loudly           2.53 100.00   2.29   3.68   27.13
  #   C the cat sat on the mat    72.03   2.57 100.00  80.49   63.77
  #   D ... the mat today         68.46   4.81  94.29 100.00   66.89
  # Uniformly D wins: chrF++ weighs recall twice, and D holds all of C. With p = softmax
  # of forward (-10, -10, -1, -3), about (0, 0, .88, .12): C expects .88 * 100 + .12 *
  # 80.49 = 97.7, D .88 * 94.29 + .12 * 100 = 95.0, so C wins.
  hypotheses = ['the cat sat on a mat', 'dogs bark loudly', 'the cat sat on the mat',
                'the cat sat on the mat today']
  chrf = sacrebleu.CHRF(word_order=2)
  assert chrf.sentence_score(hypotheses[3], [hypotheses[2]]).score == pytest.approx(94.29,
                                                                                   abs=0.01)
  candidates = reranking.Candidates([hypotheses], ('forward',),
                                    [np.array([[-10.0], [-10.0], [-1.0], [-3.0]])])
  assert reranking.mbr_choices(candidates) == [3]
  assert reranking.mbr_choices(candidates, weighted=True) == [2]


def test_weights_file_round_trips_and_refuses_other_features(tmp_path):
  path = tmp_path / 'weights.json'
  weights = reranking.Weights({'forward': 0.25, 'backward': -1.0}, 'bleu')
  reranking.save_weights(path, weights, {'first_best': 10.0, 'reranked': 11.0})
  assert reranking.load_weights(path) == weights
  with pytest.raises(UserError, match=r'weights.json: weights for features forward, '
                     r'backward but the n-best list and runs give forward, language_model'):
    weights.vector(('forward', 'language_model'), str(path))


@pytest.mark.parametrize('content', ['{"metric": "bleu"', '[1, 2]',
                                     '{"metric": "ter", "features": {"a": 1}}',
                                     '{"metric": "bleu", "features": {"a": "high"}}'])
def test_damaged_weights_file_is_one_line(tmp_path, content):
  path = tmp_path / 'weights.json'
  path.write_text(content, encoding='utf-8')
  with pytest.raises(UserError, match='weights.json: not a'):
    reranking.load_weights(path)


def test_list_whose_lines_carry_other_features_names_the_line(tmp_path):
  path = tmp_path / 'list.nbest'
  path.write_text('0 ||| a ||| forward=-1 length=1 ||| -1\n'
                  '0 ||| b ||| forward=-2 ||| -2\n', encoding='utf-8')
  with pytest.raises(UserError, match=r'list.nbest:2: field features: forward where '
                     r'line 1 has forward length'):
    reranking.from_nbest(nbest.read(path), str(path))


def _write_oracle_list(path, references):
  """An n-best list of four hypotheses per sentence, sorted by the beam's score, with the
  reference second: only the `oracle` feature (1 there, else 0) finds it."""
  lines = []
  for index, reference in enumerate(references):
    hypotheses = [f'{reference} extra', reference, 'wrong words', reference[:3]]
    for rank, hypothesis in enumerate(hypotheses):
      features = {'forward_normalized': -1.0 - rank, 'oracle': float(rank == 1)}
      lines.append(nbest.format_entry(index, hypothesis, features, -1.0 - rank))
  path.write_text(''.join(lines), encoding='utf-8')


def test_command_tunes_on_dev_and_applies_the_weights_to_test(tmp_path, monkeypatch, capsys):
  dev, test = (['one two three', 'four five six', 'seven eight nine ten'],
               ['eleven twelve', 'a b c d e f', 'the last one'])
  for name, references in (('dev', dev), ('test', test)):
    _write_oracle_list(tmp_path / f'{name}.nbest', references)
    (tmp_path / f'{name}.ref').write_text(''.join(f'{r}\n' for r in references), 'utf-8')
  code, out, err = run_in_process('rerank.py', [
      f'--nbest={tmp_path / "dev.nbest"}', f'--reference={tmp_path / "dev.ref"}',
      '--metric=bleu', f'--save_weights={tmp_path / "weights.json"}', '--random_starts=2'],
      monkeypatch, capsys)
  assert code == 0, err
  dev_scores = json.loads(out)
  assert dev_scores['n'] == 3 and dev_scores['chosen']['bleu'] == pytest.approx(100.0)
  assert dev_scores['first_best']['bleu'] < 80
  saved = json.loads((tmp_path / 'weights.json').read_text('utf-8'))
  assert saved['metric'] == 'bleu' and saved['features']['oracle'] == 1.0
  assert saved['dev']['reranked'] == pytest.approx(100.0)
  code, out, err = run_in_process('rerank.py', [
      f'--nbest={tmp_path / "test.nbest"}', f'--weights={tmp_path / "weights.json"}',
      f'--output={tmp_path / "test.out"}'], monkeypatch, capsys)
  assert code == 0, err
  assert out == ''  # Without --reference nothing to score.
  assert (tmp_path / 'test.out').read_text('utf-8').splitlines() == test


def test_command_mbr_writes_each_lists_consensus(tmp_path, monkeypatch, capsys):
  (tmp_path / 'list.nbest').write_text(
      '0 ||| x y z ||| forward=-1.0 ||| -1.0\n0 ||| a b c ||| forward=-20.0 ||| -20.0\n'
      '0 ||| a b c ||| forward=-20.0 ||| -20.0\n1 ||| alone ||| forward=-3.0 ||| -3.0\n',
      encoding='utf-8')
  for flags, expected in (([], ['a b c', 'alone']), (['--mbr_weighted'], ['x y z', 'alone'])):
    code, _, err = run_in_process('rerank.py', [
        f'--nbest={tmp_path / "list.nbest"}', '--mbr', *flags,
        f'--output={tmp_path / "out.txt"}'], monkeypatch, capsys)
    assert code == 0, err
    assert (tmp_path / 'out.txt').read_text('utf-8').splitlines() == expected


@pytest.mark.parametrize('case, message', [
    ('malformed', r"list.nbest:2: field feature forward: 'oops' is not a number"),
    ('source_lines', r'list.nbest has lists for 2 sentences but .*src.txt has 3 lines'),
    ('other_features', r'weights.json: weights for features forward, backward but the '
                       r'n-best list and runs give forward, length'),
])
def test_command_bad_input_is_one_line_and_writes_nothing(tmp_path, monkeypatch, capsys,
                                                          case, message):
  second = '0 ||| b ||| forward=oops length=1 ||| -1' if case == 'malformed' else (
      '1 ||| b ||| forward=-1 length=1 ||| -1')
  (tmp_path / 'list.nbest').write_text(f'0 ||| a ||| forward=-2 length=1 ||| -2\n{second}\n',
                                       encoding='utf-8')
  (tmp_path / 'src.txt').write_text('s1\ns2\n' + ('s3\n' if case == 'source_lines' else ''),
                                    encoding='utf-8')
  reranking.save_weights(tmp_path / 'weights.json', reranking.Weights(
      {'forward': 1.0, **({'backward': 0.5} if case == 'other_features' else {'length': 0.0})},
      'chrf++'), {})
  code, out, err = run_in_process('rerank.py', [
      f'--nbest={tmp_path / "list.nbest"}', f'--source={tmp_path / "src.txt"}',
      f'--weights={tmp_path / "weights.json"}', f'--output={tmp_path / "out.txt"}'],
      monkeypatch, capsys)
  assert code == 2 and out == ''
  assert len(err.splitlines()) == 1 and re.search(f'^error: .*{message}', err), err
  assert not (tmp_path / 'out.txt').exists()


def test_backward_run_scores_each_source_given_its_hypotheses(trained_run, tmp_path,
                                                              monkeypatch, capsys):
  """A hau->eng list reranked by the backward feature alone: the eng->hau run's log p(hau
  source | eng hypothesis) decides, as the run's scorer computes it."""
  sources = ['Litinin', 'Janairu da Fabrairu']
  lists = [['Monday', 'January and February', 'the year 2024'],
           ['the year 2024', 'Monday', 'January and February']]
  entries = [[nbest.Entry(h, {'forward': -1.0}, -1.0) for h in sentence] for sentence in lists]
  nbest.write(tmp_path / 'list.nbest', entries)
  (tmp_path / 'src.hau').write_text(''.join(f'{s}\n' for s in sources), encoding='utf-8')
  reranking.save_weights(tmp_path / 'weights.json',
                         reranking.Weights({'forward': 0.0, 'backward': 1.0}, 'chrf++'), {})
  flags = [f'--nbest={tmp_path / "list.nbest"}', f'--source={tmp_path / "src.hau"}',
           '--src_lang=hau_Latn', '--tgt_lang=eng_Latn', f'--output={tmp_path / "out.eng"}',
           f'--weights={tmp_path / "weights.json"}']
  code, _, err = run_in_process('rerank.py', [*flags, f'--backward={trained_run}'],
                                monkeypatch, capsys)
  assert code == 0, err
  scorer = run_loading.load_scorer(str(trained_run))
  expected = [sentence[int(np.argmax(scorer.score(sentence, [source] * 3, 'eng_Latn',
                                                   'hau_Latn')))]
              for source, sentence in zip(sources, lists)]
  assert (tmp_path / 'out.eng').read_text('utf-8').splitlines() == expected
  # A translation run is no language model: refused, and tuning writes no weights.
  code, _, err = run_in_process('rerank.py', [
      *flags[:4], f'--reference={tmp_path / "out.eng"}', f'--language_model={trained_run}',
      f'--save_weights={tmp_path / "lm_weights.json"}'], monkeypatch, capsys)
  assert code == 2
  assert err.strip().endswith(f'--language_model: {trained_run} is a translation run; it '
                              'needs a language_model run')
  assert not (tmp_path / 'lm_weights.json').exists()


@pytest.mark.slow
def test_weight_on_the_beam_score_alone_reproduces_translate(trained_run, tmp_path,
                                                              monkeypatch, capsys):
  """translate.py --nbest's lists, reranked by forward_normalized alone, give
  translate.py's own translations."""
  source = tmp_path / 'source.eng'
  source.write_text('Monday\n\nGood morning.\nThank you very much.\n', encoding='utf-8')
  decoding = [f'--checkpoint_dir={trained_run}', '--src_lang=eng_Latn',
              '--tgt_lang=hau_Latn', f'--input={source}', '--beam_size=4', '--batch_size=2']
  code, best, err = run_in_process('translate.py', decoding, monkeypatch, capsys)
  assert code == 0, err
  code, _, err = run_in_process('translate.py', [*decoding, '--nbest=4',
                                                 f'--output={tmp_path / "list.nbest"}'],
                                monkeypatch, capsys)
  assert code == 0, err
  reranking.save_weights(tmp_path / 'weights.json', reranking.Weights(
      {'forward': 0.0, 'forward_normalized': 1.0, 'length': 0.0}, 'chrf++'), {})
  code, _, err = run_in_process('rerank.py', [
      f'--nbest={tmp_path / "list.nbest"}', f'--weights={tmp_path / "weights.json"}',
      f'--output={tmp_path / "reranked.hau"}'], monkeypatch, capsys)
  assert code == 0, err
  assert (tmp_path / 'reranked.hau').read_text('utf-8') == best
