"""Growing a vocabulary: old ids and segmentations untouched, the new language covered."""

import math
import subprocess
import sys

import pytest
import sentencepiece as spm

from t5x_mt.data import corpora
from t5x_mt.data import vocab
from t5x_mt.data import vocab_merge
from t5x_mt.core.errors import UserError
from t5x_mt.config.gin_utils import REPO_ROOT

OLD = ('eng_Latn', 'fra_Latn', 'hau_Latn')
NEW = 'amh_Ethi'


@pytest.fixture(scope='module')
def models(tmp_path_factory):
  """(base model over eng/fra/hau CLDR text, amh-only model, merged model, text)."""
  folder = tmp_path_factory.mktemp('vocab_merge')
  cldr = corpora.get_corpus('cldr')
  text = {lang: cldr.sentences('train', lang) for lang in (*OLD, NEW)}
  base = vocab.train_sentencepiece({lang: text[lang] for lang in OLD}, str(folder / 'base.model'),
                                   vocab_size=1200, num_sentences=20_000)
  new = vocab.train_sentencepiece({NEW: text[NEW]}, str(folder / 'new.model'), vocab_size=900,
                                  num_sentences=20_000)
  merged = str(folder / 'merged.model')
  summary = vocab_merge.merge_files(base, new, merged, score_scale=0.5)
  return base, new, merged, text, summary


def test_old_pieces_keep_ids_and_scores(models):
  base, _, merged, _, summary = models
  old = vocab_merge.load_model(base, 'base')
  grown = vocab_merge.load_model(merged, 'merged')
  assert len(grown.pieces) == len(old.pieces) + summary.appended > len(old.pieces)
  for before, after in zip(old.pieces, grown.pieces):
    assert (before.piece, before.score, before.type) == (after.piece, after.score, after.type)


def test_appended_pieces_cannot_be_spelled_and_are_scored_lower(models):
  base, new, merged, _, summary = models
  old = vocab_merge.load_model(base, 'base')
  spelling = {p.piece for p in old.pieces if p.type in vocab_merge._SPELLING_TYPES}  # pylint: disable=protected-access
  new_scores = {p.piece: p.score for p in vocab_merge.load_model(new, 'new').pieces}
  appended = vocab_merge.load_model(merged, 'merged').pieces[len(old.pieces):]
  assert summary.spellable > 0
  for piece in appended:
    assert not vocab_merge.spellable(piece.piece, spelling, max(map(len, spelling)))
    assert piece.score == pytest.approx(new_scores[piece.piece] + math.log(0.5))


def test_old_languages_segment_identically_and_the_new_one_is_covered(models):
  base, _, merged, text, _ = models
  old_processor = spm.SentencePieceProcessor(model_file=base)
  merged_processor = spm.SentencePieceProcessor(model_file=merged)
  for lang in OLD:
    covered, changed = vocab_merge.changed_segmentations(old_processor, merged_processor,
                                                         text[lang])
    assert covered > 0.9 * len(text[lang]) and changed == 0
  before = vocab_merge.byte_fallback_share(old_processor, text[NEW])
  after = vocab_merge.byte_fallback_share(merged_processor, text[NEW])
  assert before > 0.5 and after < 0.01
  assert (vocab.pieces_per_word(merged_processor, text[NEW])
          < vocab.pieces_per_word(old_processor, text[NEW]) / 2)


def test_spellable_is_exact_concatenation():
  assert vocab_merge.spellable('▁abc', {'▁a', 'bc'}, 2)
  assert not vocab_merge.spellable('▁abd', {'▁a', 'bc', 'b'}, 2)


def test_a_model_of_another_kind_is_refused(tmp_path, models):
  base = models[0]
  for kind in ('bpe', 'char'):
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(['hello world'] * 50 + ['abc def'] * 50),
        model_prefix=str(tmp_path / kind), model_type=kind, vocab_size=30, minloglevel=2)
  with pytest.raises(UserError, match='is a char model; only unigram and BPE models can be '
                     'merged'):
    vocab_merge.merge_files(base, str(tmp_path / 'char.model'), str(tmp_path / 'out.model'))
  result = subprocess.run([sys.executable, 'launch/merge_vocab.py', f'--base_model={base}',
                           f'--new_model={tmp_path}/bpe.model', f'--output={tmp_path}/o.model'],
                          cwd=REPO_ROOT, capture_output=True, text=True, check=False)
  assert result.returncode == 2
  assert result.stderr == 'error: --new_model: a bpe model cannot grow a unigram model\n'
  assert not (tmp_path / 'o.model').exists()


def test_a_bpe_model_grows_by_pieces_that_merge_after_every_old_one(tmp_path):
  cldr = corpora.get_corpus('cldr')
  text = {lang: cldr.sentences('train', lang) for lang in (*OLD, NEW)}
  base, new = (vocab.train_sentencepiece(
      {lang: text[lang] for lang in langs}, str(tmp_path / f'{name}.model'), vocab_size=size,
      num_sentences=5_000, model_type='bpe') for name, langs, size in (
          ('base', OLD, 1200), ('new', (NEW,), 900)))
  summary = vocab_merge.merge_files(base, new, str(tmp_path / 'merged.model'))
  old = vocab_merge.load_model(base, 'base')
  scores = [piece.score for piece in
            vocab_merge.load_model(str(tmp_path / 'merged.model'), 'merged').pieces]
  appended = scores[len(old.pieces):]
  assert len(appended) == summary.appended > 100
  assert appended == sorted(appended, reverse=True)
  assert appended[0] < min(piece.score for piece in old.pieces)
  old_processor = spm.SentencePieceProcessor(model_file=base)
  merged_processor = spm.SentencePieceProcessor(model_file=str(tmp_path / 'merged.model'))
  for lang in OLD:
    covered, changed = vocab_merge.changed_segmentations(old_processor, merged_processor,
                                                         text[lang])
    assert covered > 0.9 * len(text[lang]) and changed == 0
  assert vocab_merge.byte_fallback_share(merged_processor, text[NEW]) < 0.01


def test_a_resumed_run_takes_a_grown_vocabulary_but_no_other(models, tmp_path):
  import data_tasks  # pylint: disable=g-import-not-at-top
  from t5x_mt.runs import run_vocabulary  # pylint: disable=g-import-not-at-top
  base, new, merged, _, _ = models
  run_copy = tmp_path / 'vocab.model'
  run_copy.write_bytes(open(base, 'rb').read())
  settings = run_vocabulary.VocabularyConfig()
  assert (run_vocabulary.run_vocabulary(merged, data_tasks.mixture_view('cldr_demo'), settings,
                                       run_copy) ==
          open(merged, 'rb').read())
  with pytest.raises(UserError, match='does not extend it'):
    run_vocabulary.run_vocabulary(new, data_tasks.mixture_view('cldr_demo'), settings, run_copy)
