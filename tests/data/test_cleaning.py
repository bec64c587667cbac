"""The local cleaning engine and launch/clean.py: outputs, report, bad input, Beam parity."""

import json
import subprocess

import gin
import pytest

from t5x_mt.config import configurables
from t5x_mt.data import corpora
from t5x_mt.data.cleaning import io as cleaning_io
from t5x_mt.data.cleaning import pipeline

from test_launch_translate_evaluate import run_in_process

SOURCE = [
    'The meeting starts at 9 tomorrow.',         # 1 kept
    'Visit http://spam.example now',             # 2 url_or_email
    'The meeting starts at 9 tomorrow.',         # 3 duplicates (of 1)
    'Open',                                      # 4 conflicting (two targets)
    'Open',                                      # 5 conflicting
    'We have 3 dogs.',                           # 6 number_mismatch
    'Good morning, everyone.',                   # 7 kept
    'THE MEETING starts at 9 tomorrow!',         # 8 duplicates (normalised)
]
TARGET = [
    'Taron zai fara da karfe 9 gobe.',
    'Ziyarci http://spam.example yanzu',
    'Taron zai fara da karfe 9 gobe.',
    'Bude',
    'Buɗe',
    'Muna da karnuka 4.',
    'Barka da safiya, kowa.',
    'taron zai fara da karfe 9 gobe',
]
STEPS = ['whitespace', 'url_or_email', 'number_mismatch', 'duplicates',
         'conflicting_translations']


def _write_pair(folder, source=SOURCE, target=TARGET, invalid_line=None):
  src, tgt = folder / 'in.eng', folder / 'in.hau'
  src_bytes = ''.join(line + '\n' for line in source).encode()
  tgt_lines = [(line + '\n').encode() for line in target]
  if invalid_line is not None:
    tgt_lines[invalid_line] = b'bad \xff byte\n'
  src.write_bytes(src_bytes)
  tgt.write_bytes(b''.join(tgt_lines))
  return src, tgt


def _clean(tmp_path, steps=STEPS, chunk_lines=3, **kwargs):
  tmp_path.mkdir(exist_ok=True)
  src, tgt = _write_pair(tmp_path, invalid_line=kwargs.pop('invalid_line', None))
  source = cleaning_io.ParallelFiles(str(src), str(tgt), 'eng_Latn', 'hau_Latn')
  out = tmp_path / 'out'
  report = pipeline.clean_locally([source], configurables.cleaning_specs(steps), out,
                                  chunk_lines=chunk_lines, progress=False, **kwargs)
  return out, report


def test_kept_pairs_and_report(tmp_path):
  out, report = _clean(tmp_path, write_dropped=True)
  assert (out / 'eng_Latn-hau_Latn.eng_Latn').read_text().splitlines() == [SOURCE[0],
                                                                           SOURCE[6]]
  assert (out / 'eng_Latn-hau_Latn.hau_Latn').read_text().splitlines() == [TARGET[0],
                                                                           TARGET[6]]
  entry = report['directions']['eng_Latn-hau_Latn']
  assert (entry['pairs_in'], entry['pairs_out']) == (8, 2)
  assert entry['dropped'] == {'invalid_utf8': 0, 'whitespace': 0, 'url_or_email': 1,
                              'number_mismatch': 1, 'duplicates': 2,
                              'conflicting_translations': 2}
  dropped = (out / 'dropped' / 'eng_Latn-hau_Latn.tsv').read_text().splitlines()
  assert [row.split('\t')[:2] for row in dropped] == [
      ['url_or_email', '2'], ['duplicates', '3'], ['conflicting_translations', '4'],
      ['conflicting_translations', '5'], ['number_mismatch', '6'], ['duplicates', '8']]
  assert json.loads((out / 'report.json').read_text()) == report
  assert (out / 'removed.png').read_bytes().startswith(b'\x89PNG')


def test_bloom_filter_dedup_gives_the_same_corpus(tmp_path):
  exact, _ = _clean(tmp_path / 'exact')
  gin.parse_config('duplicates.bloom_error_rate = 1e-7')
  bloom, report = _clean(tmp_path / 'bloom')
  assert report['steps'][3]['params'] == {'bloom_error_rate': 1e-7}
  for name in ('eng_Latn-hau_Latn.eng_Latn', 'eng_Latn-hau_Latn.hau_Latn'):
    assert (bloom / name).read_bytes() == (exact / name).read_bytes()


def test_invalid_utf8_is_counted_and_skipped(tmp_path):
  out, report = _clean(tmp_path, invalid_line=6, write_dropped=True)
  entry = report['directions']['eng_Latn-hau_Latn']
  assert entry['dropped']['invalid_utf8'] == 1 and entry['pairs_out'] == 1
  assert 'invalid_utf8\t7\tGood morning' in (out / 'dropped' / 'eng_Latn-hau_Latn.tsv'
                                              ).read_text()


def test_a_byte_order_mark_opening_a_file_is_not_part_of_its_first_line(tmp_path):
  src, tgt = _write_pair(tmp_path, source=['\ufeffGood morning.', 'Good night.'],
                         target=['\ufeffBarka da safiya.', 'Sai da safe.'])
  tsv = tmp_path / 'in.tsv'
  tsv.write_bytes('\ufeffGood morning.\tBarka da safiya.\n'.encode())
  sources = [cleaning_io.ParallelFiles(str(src), str(tgt), 'eng_Latn', 'hau_Latn'),
             cleaning_io.TsvFile(str(tsv), 'eng_Latn', 'hau_Latn')]
  first_pairs = [next(source.read(source.chunks(1)[0])).pair for source in sources]
  assert [(pair.src, pair.tgt) for pair in first_pairs] == [
      ('Good morning.', 'Barka da safiya.')] * 2


def test_cleaned_folder_is_a_corpus(tmp_path):
  out, _ = _clean(tmp_path)
  corpora.register_clean_dir('cleaned_test', out, overwrite=True)
  corpus = corpora.get_corpus('cleaned_test')
  assert corpus.pairs('train', 'eng_Latn', 'hau_Latn') == [(SOURCE[0], TARGET[0]),
                                                           (SOURCE[6], TARGET[6])]
  assert corpus.pairs('train', 'hau_Latn', 'eng_Latn')[0] == (TARGET[0], SOURCE[0])


@pytest.fixture
def run_clean(monkeypatch, capsys):
  """Runs launch/clean.py with these flags through cli.run in this process: the command's
  parsing, error lines and exit code without a process start each."""
  def run(*flags) -> subprocess.CompletedProcess:
    argv = [str(flag) for flag in flags]
    return subprocess.CompletedProcess(argv, *run_in_process('clean.py', argv, monkeypatch,
                                                             capsys))
  return run


def test_mismatched_line_counts_name_both_files(tmp_path, run_clean):
  src, tgt = _write_pair(tmp_path, target=TARGET[:-1])
  result = run_clean(f'--src_file={src}', f'--tgt_file={tgt}', '--src_lang=eng_Latn',
                      '--tgt_lang=hau_Latn', '--filters=empty', f'--output_dir={tmp_path}/o')
  assert result.returncode == 2
  assert result.stderr.strip().splitlines()[-1] == (
      f'error: {src} has 8 lines but {tgt} has 7: parallel files must have one line per '
      'segment')
  assert not (tmp_path / 'o').exists()


@pytest.mark.parametrize('flags, message', [
    (['--preset=volctrnas'], "--preset: unknown preset 'volctrnas'"),
    (['--filters=empty,lenght'], "unknown cleaning step 'lenght'"),
    (['--preset=nt5', '--src_lang=xx_Latn'], 'xx_Latn'),
])
def test_bad_flags_are_one_line_and_exit_2(tmp_path, flags, message, run_clean):
  src, tgt = _write_pair(tmp_path)
  base = [f'--src_file={src}', f'--tgt_file={tgt}', '--src_lang=eng_Latn',
          '--tgt_lang=hau_Latn', f'--output_dir={tmp_path}/o']
  if not any(flag.startswith(('--preset', '--filters')) for flag in flags):
    flags = [*flags, '--filters=empty']
  result = run_clean(*base, *flags)
  assert result.returncode == 2
  assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
  assert not (tmp_path / 'o').exists()


def test_empty_input_is_an_error(tmp_path, run_clean):
  (tmp_path / 'a').write_text('')
  (tmp_path / 'b').write_text('')
  result = run_clean(f'--src_file={tmp_path}/a', f'--tgt_file={tmp_path}/b',
                      '--src_lang=eng_Latn', '--tgt_lang=hau_Latn', '--filters=empty',
                      f'--output_dir={tmp_path}/o')
  assert result.returncode == 2 and 'are empty' in result.stderr


def test_beam_pipeline_writes_the_same_folder_as_the_local_engine(tmp_path):
  from t5x_mt.data.cleaning import beam  # pylint: disable=g-import-not-at-top
  src, tgt = _write_pair(tmp_path, invalid_line=4)
  source = cleaning_io.ParallelFiles(str(src), str(tgt), 'eng_Latn', 'hau_Latn')
  reversed_source = cleaning_io.ParallelFiles(str(tgt), str(src), 'hau_Latn', 'eng_Latn')
  specs = pipeline.resolve_specs(['moses_punctuation', *STEPS])
  local = pipeline.clean_locally([source, reversed_source], specs, tmp_path / 'local',
                                 chunk_lines=3, write_dropped=True, progress=False)
  beam = beam.clean_with_beam([source, reversed_source], specs, tmp_path / 'beam',
                                       chunk_lines=3, write_dropped=True)
  assert beam['directions'] == local['directions']
  names = sorted(path.relative_to(tmp_path / 'local').as_posix()
                 for path in (tmp_path / 'local').rglob('*') if path.is_file())
  assert names == sorted(path.relative_to(tmp_path / 'beam').as_posix()
                         for path in (tmp_path / 'beam').rglob('*') if path.is_file())
  for name in names:
    if name.endswith(('.json', '.png')):
      continue
    assert (tmp_path / 'beam' / name).read_bytes() == (tmp_path / 'local' / name).read_bytes()


def test_command_line_cleans_with_beam_and_prints_the_totals(tmp_path, run_clean):
  src, tgt = _write_pair(tmp_path)
  result = run_clean(f'--src_file={src}', f'--tgt_file={tgt}', '--src_lang=eng_Latn',
                      '--tgt_lang=hau_Latn', f'--filters={",".join(STEPS)}', '--runner=beam',
                      '--chunk_lines=4', f'--output_dir={tmp_path}/o')
  assert result.returncode == 0, result.stderr
  assert json.loads(result.stdout.strip().splitlines()[-1]) == {
      'pairs_in': 8, 'pairs_out': 2, 'output_dir': f'{tmp_path}/o'}
  assert (tmp_path / 'o' / 'eng_Latn-hau_Latn.hau_Latn').read_text().splitlines() == [
      TARGET[0], TARGET[6]]
  assert not (tmp_path / '.o.partial').exists()
