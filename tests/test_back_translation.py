"""Tests for t5x_mt.decoding.back_translation, t5x_mt.data.monolingual and launch/back_translate.py.

The resumable writer is tested with a deterministic stand-in for the model's chunked
translation (each sentence upper-cased), so that a kill can be placed after any chunk;
the command itself runs on the session's real tiny eng->hau run.
"""

import json

import pytest
import seqio

import data_tasks
from t5x_mt.decoding import back_translation
from t5x_mt.config import run_loading
from t5x_mt.decoding import line_streaming
from t5x_mt.data import corpora
from t5x_mt.data import corpus_types
from t5x_mt.data import monolingual
from t5x_mt.data import tags
from t5x_mt.core.errors import UserError
from t5x_mt.evaluation import per_direction
from test_launch_translate_evaluate import error_lines
from test_launch_translate_evaluate import run_in_process

JOB = back_translation.Job(lang='hau_Latn', other_lang='eng_Latn', mode='bt', tag='bt')
SENTENCES = [f'jumla ta {i}' for i in range(10)]
PROVENANCE = {'checkpoint_dir': '/runs/a', 'step': 4}


class Killed(Exception):
  """Stands for the process being killed between two chunks."""


def upper_case_chunks(chunk_size: int, kill_after: int | None = None):
  """translate_chunks: sentences[start:] upper-cased, `chunk_size` at a time; raises
  Killed once `kill_after` chunks have been handed out."""
  calls = []

  def translate_chunks(sentences, start):
    calls.append(start)
    for index, chunk_start in enumerate(range(start, len(sentences), chunk_size)):
      if kill_after is not None and index == kill_after:
        raise Killed
      yield [s.upper() for s in sentences[chunk_start:chunk_start + chunk_size]]

  translate_chunks.calls = calls
  return translate_chunks


def read_pairs(folder, job=JOB) -> list[tuple[str, str]]:
  return list(zip(*(
      (folder / f'{job.direction}.{lang}').read_text(encoding='utf-8').splitlines()
      for lang in (job.src_lang, job.tgt_lang))))


def test_back_translation_pairs_put_the_translation_on_the_source_side(tmp_path):
  summary = back_translation.translate_into_corpus(upper_case_chunks(4), JOB, SENTENCES,
                                                   tmp_path, PROVENANCE)
  assert read_pairs(tmp_path) == [(s.upper(), s) for s in SENTENCES]
  assert (summary.direction, summary.translated_now, summary.pairs_written) == (
      'eng_Latn-hau_Latn', 10, 10)
  entry = json.loads((tmp_path / 'synthetic.json').read_text())['directions'][
      'eng_Latn-hau_Latn']
  assert (entry['synthetic_lang'], entry['tag'], entry['mode'], entry['pairs']) == (
      'eng_Latn', 'bt', 'bt', 10)
  assert entry['made_from']['step'] == 4 and entry['made_from']['sentences'] == 10
  assert not (tmp_path / back_translation.PARTIAL).exists()


def test_forward_translation_pairs_put_it_on_the_target_side(tmp_path):
  job = back_translation.Job(lang='hau_Latn', other_lang='eng_Latn', mode='ft', tag='da')
  back_translation.translate_into_corpus(upper_case_chunks(4), job, SENTENCES, tmp_path,
                                         PROVENANCE)
  assert job.direction == 'hau_Latn-eng_Latn'
  assert read_pairs(tmp_path, job) == [(s, s.upper()) for s in SENTENCES]


@pytest.mark.parametrize('kill_after', [0, 1, 2])
def test_killed_run_resumes_without_lost_or_repeated_lines(tmp_path, kill_after):
  with pytest.raises(Killed):
    back_translation.translate_into_corpus(upper_case_chunks(4, kill_after), JOB, SENTENCES,
                                           tmp_path, PROVENANCE)
  partial = tmp_path / back_translation.PARTIAL / JOB.direction / back_translation.TRANSLATIONS
  assert partial.read_text().splitlines() == [s.upper() for s in SENTENCES[:4 * kill_after]]
  assert not (tmp_path / f'{JOB.direction}.eng_Latn').exists()
  resumed = upper_case_chunks(4)
  summary = back_translation.translate_into_corpus(resumed, JOB, SENTENCES, tmp_path,
                                                   PROVENANCE)
  assert resumed.calls == [4 * kill_after]
  assert (summary.resumed_from, summary.translated_now) == (4 * kill_after, 10 - 4 * kill_after)
  assert read_pairs(tmp_path) == [(s.upper(), s) for s in SENTENCES]


def test_torn_last_line_is_translated_again(tmp_path):
  partial_dir = tmp_path / back_translation.PARTIAL / JOB.direction
  with pytest.raises(Killed):
    back_translation.translate_into_corpus(upper_case_chunks(3, 1), JOB, SENTENCES, tmp_path,
                                           PROVENANCE)
  with open(partial_dir / back_translation.TRANSLATIONS, 'ab') as f:
    f.write(b'JUMLA TA')  # Half of line 4, cut by the kill.
  resumed = upper_case_chunks(3)
  back_translation.translate_into_corpus(resumed, JOB, SENTENCES, tmp_path, PROVENANCE)
  assert resumed.calls == [3]
  assert read_pairs(tmp_path) == [(s.upper(), s) for s in SENTENCES]


def test_restart_with_other_input_is_refused(tmp_path):
  with pytest.raises(Killed):
    back_translation.translate_into_corpus(upper_case_chunks(4, 1), JOB, SENTENCES, tmp_path,
                                           PROVENANCE)
  with pytest.raises(UserError, match='an unfinished run of eng_Latn-hau_Latn with other'):
    back_translation.translate_into_corpus(upper_case_chunks(4), JOB, SENTENCES, tmp_path,
                                           dict(PROVENANCE, step=6))


def test_finished_direction_is_kept_or_refused(tmp_path):
  back_translation.translate_into_corpus(upper_case_chunks(4), JOB, SENTENCES, tmp_path,
                                         PROVENANCE)
  again = upper_case_chunks(4)
  summary = back_translation.translate_into_corpus(again, JOB, SENTENCES, tmp_path, PROVENANCE)
  assert again.calls == [] and summary.translated_now == 0 and summary.pairs_written == 10
  with pytest.raises(UserError, match='already holds eng_Latn-hau_Latn made from other input'):
    back_translation.translate_into_corpus(upper_case_chunks(4), JOB, SENTENCES[:5], tmp_path,
                                           PROVENANCE)


def test_empty_translations_are_left_out_of_the_pairs(tmp_path):

  def drop_odd(sentences, start):
    yield ['' if i % 2 else s.upper() for i, s in enumerate(sentences[start:], start)]

  summary = back_translation.translate_into_corpus(drop_odd, JOB, SENTENCES, tmp_path,
                                                   PROVENANCE)
  assert summary.pairs_written == 5
  assert read_pairs(tmp_path) == [(s.upper(), s) for s in SENTENCES[::2]]


def test_folder_registers_as_a_synthetic_corpus_with_its_tags(tmp_path):
  back_translation.translate_into_corpus(upper_case_chunks(4), JOB, SENTENCES, tmp_path,
                                         PROVENANCE)
  job = back_translation.Job(lang='hau_Latn', other_lang='fra_Latn', mode='ft', tag='da')
  back_translation.translate_into_corpus(upper_case_chunks(4), job, SENTENCES, tmp_path,
                                         PROVENANCE)
  corpora.register_dir('test_bt_folder', tmp_path, overwrite=True)
  corpus = corpora.get_corpus('test_bt_folder')
  assert corpus.directions() == (('eng_Latn', 'hau_Latn'), ('hau_Latn', 'fra_Latn'))
  assert corpus.pairs('train', 'hau_Latn', 'eng_Latn')[0] == ('jumla ta 0', 'JUMLA TA 0')
  assert corpus.synthetic_tags('eng_Latn', 'hau_Latn').source_prefix == '<BT>'
  assert corpus.synthetic_tags('hau_Latn', 'fra_Latn').target_suffix == '<DA>'
  assert corpus.synthetic_tags('fra_Latn', 'hau_Latn').source_suffix == '<DA>'


def test_bad_job_flags_are_named():
  with pytest.raises(UserError, match="--mode: 'st' is not one of bt, ft"):
    back_translation.Job('hau_Latn', 'eng_Latn', mode='st')
  with pytest.raises(UserError, match="--tag: unknown synthetic-data tag scheme 'BT'"):
    back_translation.Job('hau_Latn', 'eng_Latn', tag='BT')


# Monolingual readers.

@pytest.mark.parametrize('content, message', [
    (b'first\n\nthird\n', r'mono\.txt:2: empty line'),
    (b'first\n   \n', r'mono\.txt:2: empty line'),
    (b'first\nbad \xff byte\n', r'mono\.txt:2: not valid UTF-8'),
    (b'first\nsecond\nnul \x00 here\n', r'mono\.txt:3: control character U\+0000'),
])
def test_bad_monolingual_lines_name_file_and_line(tmp_path, content, message):
  path = tmp_path / 'mono.txt'
  path.write_bytes(content)
  with pytest.raises(UserError, match=message):
    monolingual.read_monolingual_file(path)


def test_gather_deduplicates_files_and_corpus_sides_in_order(tmp_path):
  path = tmp_path / 'mono.txt'
  path.write_text('b\ta\nc\nb\ta\n', encoding='utf-8')  # Tabs are text.
  corpora.register_corpus('test_mono_sides', lambda: corpus_types.PairsCorpus(
      'test_mono_sides', 'train', {('eng_Latn', 'hau_Latn'): [('x', 'c'), ('y', 'd')]}),
      overwrite=True)
  assert monolingual.gather('hau_Latn', [str(path)], ['test_mono_sides']) == ['b\ta', 'c', 'd']
  assert monolingual.corpus_side('test_mono_sides', 'eng_Latn') == ['x', 'y']


# launch/back_translate.py on the session's tiny eng->hau run.

def test_command_writes_forward_translations_that_train_with_da_tags(trained_run, tmp_path,
                                                                     monkeypatch, capsys):
  mono = tmp_path / 'eng.txt'
  lines = [f'Monday {i}' for i in range(20)] + ['Monday 3']
  mono.write_text(''.join(line + '\n' for line in lines), encoding='utf-8')
  output = tmp_path / 'ft'
  code, out, err = run_in_process('back_translate.py', [
      f'--checkpoint_dir={trained_run}', '--lang=eng_Latn', '--into=hau_Latn', '--mode=ft',
      '--tag=da', f'--monolingual={mono}', f'--output={output}', '--beam_size=1',
      '--batch_size=1'], monkeypatch, capsys)
  assert code == 0, err
  assert json.loads(out.splitlines()[-1])['translated_now'] == 20
  job = back_translation.Job('eng_Latn', 'hau_Latn', mode='ft', tag='da')
  translator = run_loading.load_translator(str(trained_run), beam_size=1, batch_size=1)
  expected = line_streaming.translate_lines(translator, lines[:20], 'eng_Latn', 'hau_Latn')
  pairs = read_pairs(output, job)
  assert pairs == [p for p in zip(lines[:20], expected) if p[1].strip()]
  # The tiny model prefers language tags; none reaches a pair, where training would read it
  # as a tag.
  reserved = tags.reserved_pieces(translator.tokenizer)
  assert not any(reserved[translator.tokenizer.encode(target)].any() for _, target in pairs)

  data_tasks.register_corpora_and_mixtures(corpora_dirs={'test_ft_cli': str(output)})
  data_tasks.use_vocabulary(trained_run / 'vocab.model')
  task = data_tasks.register_direction_task('test_ft_cli', 'eng_Latn', 'hau_Latn')
  example = next(seqio.get_mixture_or_task(task).get_dataset(
      {'inputs': 32, 'targets': 32}, split='train', shuffle=False).as_numpy_iterator())
  da_id = translator.tokenizer.piece_to_id('<DA>')
  assert example['targets'].tolist()[-2:] == [da_id, 1]  # [y'; <DA>] then EOS.


def test_command_refuses_an_empty_monolingual_line_and_writes_nothing(trained_run, tmp_path,
                                                                      monkeypatch, capsys):
  mono = tmp_path / 'eng.txt'
  mono.write_text('Monday\n\nTuesday\n', encoding='utf-8')
  code, out, err = run_in_process('back_translate.py', [
      f'--checkpoint_dir={trained_run}', '--lang=eng_Latn', '--into=hau_Latn',
      f'--monolingual={mono}', f'--output={tmp_path / "bt"}'], monkeypatch, capsys)
  assert code == 2 and out == ''
  assert error_lines(err) == [f'error: {mono}:2: empty line (monolingual files hold one '
                              'sentence per line)']
  assert not (tmp_path / 'bt').exists()


def test_direction_trained_on_genuine_and_synthetic_pairs_is_evaluated_once(trained_run):
  translator = run_loading.load_translator(str(trained_run), beam_size=1, batch_size=4)
  name = 'test_bt_eval'
  corpora.register_corpus(name, lambda: corpus_types.SyntheticCorpus(
      name, 'train', {('eng_Latn', 'hau_Latn'): [('Monday', 'Litinin')]},
      {('eng_Latn', 'hau_Latn'): ('eng_Latn', 'bt')}), overwrite=True)
  data_tasks.register_corpora_and_mixtures(mixtures={name: ['cldr_eng_Latn.hau_Latn', name]})
  assert len(data_tasks.mixture_view(name).members) == 2
  settings = per_direction.EvalConfig(max_sentences=4)
  both = per_direction.evaluate_directions(translator, data_tasks.mixture_view(name), 4,
                                           settings)
  genuine = per_direction.evaluate_directions(
      translator, data_tasks.mixture_view('cldr_eng_Latn.hau_Latn'), 4, settings)
  assert list(both['directions']) == ['eng_Latn-hau_Latn']
  assert both['directions'] == genuine['directions']


def test_distill_writes_the_teachers_translations_of_the_sources(trained_run, tmp_path,
                                                                 monkeypatch, capsys):
  output = tmp_path / 'kd'
  code, out, err = run_in_process('distill.py', [
      f'--checkpoint_dir={trained_run}', '--corpus=cldr', '--directions=eng_Latn-hau_Latn',
      '--max_sentences=6', f'--output={output}', '--beam_size=2', '--batch_size=4'],
      monkeypatch, capsys)
  assert code == 0, err
  assert json.loads(out.splitlines()[-1])['translated_now'] == 6
  sources = list(dict.fromkeys(s for s, _ in corpora.get_corpus('cldr').pairs(
      'train', 'eng_Latn', 'hau_Latn')))[:6]
  translator = run_loading.load_translator(str(trained_run), beam_size=2, batch_size=4)
  expected = line_streaming.translate_lines(translator, sources, 'eng_Latn', 'hau_Latn')
  job = back_translation.Job('eng_Latn', 'hau_Latn', mode='ft', tag='none')
  assert read_pairs(output, job) == [p for p in zip(sources, expected) if p[1].strip()]
  corpora.register_dir('test_kd', output, overwrite=True)
  assert corpora.get_corpus('test_kd').synthetic_tags('eng_Latn', 'hau_Latn') == (
      tags.SyntheticTags())


def test_distill_needs_directions(monkeypatch, capsys, tmp_path):
  code, _, err = run_in_process('distill.py', [
      f'--checkpoint_dir={tmp_path}', '--corpus=cldr', '--directions=eng_Latn',
      f'--output={tmp_path / "kd"}'], monkeypatch, capsys)
  assert code == 2 and error_lines(err) == [
      "error: --directions: 'eng_Latn' is not <src>-<tgt>"]


def test_a_restart_may_change_how_many_batches_decode_at_once(trained_run):
  teacher = run_loading.load_teacher(str(trained_run), None,
                                   {'beam_size': 2, 'parallel_batches': 3})
  assert teacher.translator.parallel_batches == 3
  assert teacher.provenance['decoding'] == {'beam_size': 2}
