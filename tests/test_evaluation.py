"""Tests for t5x_mt.evaluation.scoring: scores against hand-worked values, categories, eval JSON."""

import json
import math

import pytest
import sacrebleu
import sentencepiece as spm

from t5x_mt.evaluation import scoring
from t5x_mt.core.errors import UserError

SPM_TRAINING_TEXT = """\
the cat sat on the mat and the dog sat on the log
a small cat is sitting near the small dog
the dogs and the cats are sitting on the mats
translation models translate sentences between many languages
the translated sentences are scored with bleu and chrf
sitting cats translate nothing at all
"""


@pytest.fixture(scope='module')
def spm_model_path(tmp_path_factory):
  folder = tmp_path_factory.mktemp('spm')
  text_path = folder / 'train.txt'
  text_path.write_text(SPM_TRAINING_TEXT * 3)
  spm.SentencePieceTrainer.train(
      input=str(text_path), model_prefix=str(folder / 'spm'), vocab_size=50,
      model_type='unigram', character_coverage=1.0, pad_id=0, eos_id=1, unk_id=2, bos_id=-1,
      minloglevel=2)
  return str(folder / 'spm.model')


def test_identical_text_scores_100(spm_model_path):
  lines = ['the cat sat on the mat', 'a small dog is sitting']
  scores = scoring.score_direction(lines, lines, spm_model_path=spm_model_path)
  assert scores == {'bleu': pytest.approx(100.0), 'chrf': pytest.approx(100.0),
                    'spbleu': pytest.approx(100.0), 'n': 2}


def test_bleu_matches_hand_counted_ngram_precisions():
  # hyp "the cat sat on the mat" / ref "the cat sat on a mat": clipped matches
  # 1-grams 5/6, 2-grams 3/5, 3-grams 2/4, 4-grams 1/3; equal lengths, so no brevity penalty.
  scores = scoring.score_direction(['the cat sat on the mat'], ['the cat sat on a mat'])
  want = 100 * (5 / 6 * 3 / 5 * 2 / 4 * 1 / 3) ** 0.25
  assert scores['bleu'] == pytest.approx(want, abs=1e-6)
  assert scores['spbleu'] is None


def test_bleu_applies_brevity_penalty():
  # hyp "the cat sat on the" (5 words) / ref of 6: precisions 4/5, 3/4, 2/3, 1/2 and
  # brevity penalty exp(1 - 6/5).
  scores = scoring.score_direction(['the cat sat on the'], ['the cat sat on a mat'])
  want = 100 * math.exp(1 - 6 / 5) * (4 / 5 * 3 / 4 * 2 / 3 * 1 / 2) ** 0.25
  assert scores['bleu'] == pytest.approx(want, abs=1e-6)


def test_chrf_plus_plus_matches_hand_computation():
  # hyp "the cat" / ref "the cats"; character n-grams ignore spaces: "thecat" vs "thecats".
  # (hyp n-grams, ref n-grams, matches) per order, counted by hand:
  char_orders = [(6, 7, 6), (5, 6, 5), (4, 5, 4), (3, 4, 3), (2, 3, 2), (1, 2, 1)]
  word_orders = [(2, 2, 1),   # {the, cat} vs {the, cats}
                 (1, 1, 0)]   # "the cat" vs "the cats"
  counts = char_orders + word_orders
  # sacreBLEU averages precision and recall over the orders, then takes F-beta, beta = 2.
  precision = sum(match / hyp for hyp, _, match in counts) / len(counts)
  recall = sum(match / ref for _, ref, match in counts) / len(counts)
  assert precision == pytest.approx(13 / 16)
  want = 100 * 5 * precision * recall / (4 * precision + recall)
  scores = scoring.score_direction(['the cat'], ['the cats'])
  assert scores['chrf'] == pytest.approx(want, abs=1e-6)
  assert scores['chrf'] == pytest.approx(64.5006, abs=1e-3)


def test_spbleu_is_bleu_over_sentencepiece_pieces(spm_model_path):
  hypotheses = ['the cats sat on the mats', 'translation models score sentences']
  references = ['the cat sat on a mat', 'translation models translate sentences']
  processor = spm.SentencePieceProcessor(model_file=spm_model_path)
  pieces = lambda lines: [' '.join(processor.encode(line, out_type=str)) for line in lines]
  want = sacrebleu.BLEU(tokenize='none').corpus_score(
      pieces(hypotheses), [pieces(references)]).score
  scores = scoring.score_direction(hypotheses, references, spm_model_path=spm_model_path)
  assert scores['spbleu'] == pytest.approx(want)
  # Subwords give partial credit for "cats" against "cat", which word BLEU does not.
  assert scores['spbleu'] > scores['bleu']


def test_mismatched_lengths_and_missing_spm_are_user_errors(tmp_path):
  with pytest.raises(UserError, match='2 hypotheses but 1 references'):
    scoring.score_direction(['a', 'b'], ['a'])
  with pytest.raises(UserError, match='missing.model'):
    scoring.score_direction(['a'], ['a'], spm_model_path=str(tmp_path / 'missing.model'))


@pytest.mark.parametrize('direction, want', [
    ('hau_Latn-eng_Latn', ('X-ENG', 'ALL')),
    ('eng_Latn-hau_Latn', ('ENG-X', 'ALL')),
    ('swh_Latn-fra_Latn', ('X-FRA', 'ALL')),
    ('fra_Latn-wol_Latn', ('FRA-X', 'ALL')),
    ('gaz_Latn-amh_Ethi', ('X-X', 'ALL')),
    ('eng_Latn-fra_Latn', ('ENG-X', 'X-FRA', 'ALL')),
    ('fra_Latn-eng_Latn', ('X-ENG', 'FRA-X', 'ALL')),
])
def test_category_of(direction, want):
  assert scoring.category_of(direction) == want


def test_category_of_rejects_malformed_direction():
  with pytest.raises(UserError, match="evaluated direction: 'eng_Latn' is not <src>-<tgt>"):
    scoring.category_of('eng_Latn')


def _scores(bleu, chrf, spbleu=None, n=10):
  return {'bleu': bleu, 'chrf': chrf, 'spbleu': spbleu, 'n': n}


def test_summarize_averages_directions_per_category():
  summary = scoring.summarize(500, {
      'hau_Latn-eng_Latn': _scores(20.0, 40.0, 22.0),
      'yor_Latn-eng_Latn': _scores(10.0, 30.0, 12.0, n=1000),
      'eng_Latn-fra_Latn': _scores(30.0, 50.0),
      'gaz_Latn-amh_Ethi': _scores(4.0, 20.0, 5.0),
  })
  assert summary['step'] == 500
  assert list(summary['directions']) == sorted(summary['directions'])
  assert summary['categories'] == {
      'X-ENG': {'bleu': 15.0, 'chrf': 35.0, 'spbleu': 17.0, 'n': 2},
      'ENG-X': {'bleu': 30.0, 'chrf': 50.0, 'spbleu': None, 'n': 1},
      'X-FRA': {'bleu': 30.0, 'chrf': 50.0, 'spbleu': None, 'n': 1},
      'X-X': {'bleu': 4.0, 'chrf': 20.0, 'spbleu': 5.0, 'n': 1},
      # (20 + 10 + 30 + 4) / 4, (40 + 30 + 50 + 20) / 4; one direction lacks spBLEU.
      'ALL': {'bleu': 16.0, 'chrf': 35.0, 'spbleu': None, 'n': 4},
  }
  assert summary['average'] == {'bleu': 16.0, 'chrf': 35.0}


def test_write_eval_json_is_atomic_and_round_trips(tmp_path):
  summary = scoring.summarize(1200, {'eng_Latn-hau_Latn': _scores(12.5, 38.25, 14.0)})
  path = scoring.write_eval_json(tmp_path, summary)
  assert path == tmp_path / 'eval' / 'step_1200.json'
  assert json.loads(path.read_text()) == summary
  # Rewriting the same step replaces the file and leaves no temporary behind.
  summary['average']['bleu'] = 13.0
  scoring.write_eval_json(tmp_path, summary)
  assert sorted(p.name for p in (tmp_path / 'eval').iterdir()) == ['step_1200.json']
  assert json.loads(path.read_text())['average']['bleu'] == 13.0


def test_write_eval_json_failure_leaves_no_file(tmp_path):
  with pytest.raises(TypeError):
    scoring.write_eval_json(tmp_path, {'step': 3, 'directions': {'x': object()}})
  assert not list(tmp_path.rglob('*step_3.json*'))


def test_format_table_lists_directions_and_categories():
  summary = scoring.summarize(7, {
      'hau_Latn-eng_Latn': _scores(20.0, 40.0, 22.0, n=1012),
      'eng_Latn-hau_Latn': _scores(10.5, 30.5),
  })
  lines = scoring.format_table(summary).splitlines()
  assert lines[0] == 'scores at step 7'  # A record that names no split or task.
  row = next(line for line in lines if line.startswith('hau_Latn-eng_Latn'))
  assert row.split() == ['hau_Latn-eng_Latn', '20.00', '40.00', '22.00', '1012']
  row = next(line for line in lines if line.startswith('eng_Latn-hau_Latn'))
  assert row.split() == ['eng_Latn-hau_Latn', '10.50', '30.50', '-', '10']
  row = next(line for line in lines if line.startswith('ALL'))
  assert row.split() == ['ALL', '15.25', '35.25', '-', '2']
  assert len({len(line) for line in lines[1:] if not line.startswith('-')}) == 1


def test_looping_share_counts_outputs_that_repeat_a_4gram_three_times():
  hypotheses = ['a b c d a b c d a b c d',   # 'a b c d' three times: a loop.
                'a b c d a b c d x',         # twice only.
                'the the the the the the',   # 'the the the the' three times.
                '']
  assert scoring.looping_share(hypotheses) == 0.5
  assert scoring.looping_share([]) == 0.0


def test_copy_baseline_is_averaged_and_shown_beside_the_model():
  directions = {'eng_Latn-hau_Latn': {'bleu': 10.0, 'chrf': 30.0, 'spbleu': None, 'n': 5,
                                      'copy': {'chrf': 20.0}},
                'hau_Latn-eng_Latn': {'bleu': 12.0, 'chrf': 40.0, 'spbleu': None, 'n': 5,
                                      'copy': {'chrf': 25.0}}}
  summary = scoring.summarize(7, directions)
  assert summary['categories']['ALL']['copy'] == {'chrf': 22.5}
  table = scoring.format_table(summary).splitlines()
  assert table[1].split() == ['direction', 'BLEU', 'chrF++', 'spBLEU', 'n', 'copy', 'gain']
  assert table[3].split() == ['eng_Latn-hau_Latn', '10.00', '30.00', '-', '5', '20.00',
                              '+10.00']
  assert [line.split()[-1] for line in table if line.startswith('ALL')] == ['+12.50']


def test_a_record_written_before_the_looping_share_prints_without_that_column():
  """eval/step_N.json of older runs has `looping` per direction but none per category; a
  finished run prints such records again."""
  directions = {'eng_Latn-hau_Latn': {'bleu': 10.0, 'chrf': 30.0, 'spbleu': None, 'n': 5,
                                      'looping': 0.2}}
  summary = scoring.summarize(7, directions)
  for scores in summary['categories'].values():
    del scores['looping']
  table = scoring.format_table(summary).splitlines()
  assert table[1].split() == ['direction', 'BLEU', 'chrF++', 'spBLEU', 'n']
  assert [line.split() for line in table if line.startswith('ALL')] == [
      ['ALL', '10.00', '30.00', '-', '1']]
