"""Bad input to the launch commands: exit 2, one line on stderr naming the flag or file,
nothing written, and no TensorFlow start-up logging.

Each command runs from an empty working folder (so anything it writes there shows).
Argument errors are answered before TensorFlow or JAX is imported: those commands run in
a subprocess, as a user runs them, and the test checks what they imported. The errors
found after the imports (a gin parse with the model's configurables, a trained run) come
from commands run through `cli.run` in this process, the same parsing, error lines and
exit codes without paying ~10 s of imports each; one of them runs in a subprocess, to
show that a user sees no TensorFlow start-up logging above the line.
"""

import dataclasses
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys

import pytest

from t5x_mt.core import cli
from t5x_mt.evaluation import scoring
from t5x_mt.pretrained import huggingface

from test_launch_translate_evaluate import command_environment
from test_launch_translate_evaluate import LAUNCH
from test_launch_translate_evaluate import run_in_process

SCRIPTS = sorted(path.name for path in LAUNCH.glob('*.py'))
HEAVY_LIBRARIES = ('jax', 'tensorflow')
# Runs launch/<script> as `python launch/<script>` would, then writes which of
# HEAVY_LIBRARIES it imported to the file named by the first argument.
IMPORT_REPORTING_RUNNER = f'''
import atexit, os, runpy, sys
report, script = sys.argv[1], sys.argv[2]
sys.argv = sys.argv[2:]
sys.path[0] = os.path.dirname(script)
atexit.register(lambda: open(report, 'w').write(
    ' '.join(name for name in {HEAVY_LIBRARIES!r} if name in sys.modules)))
runpy.run_path(script, run_name='__main__')
'''


@dataclasses.dataclass
class Finished:
  returncode: int
  stdout: str
  stderr: str
  imported: list[str] | None  # Which of HEAVY_LIBRARIES it imported; None in process.


def launch(script: str, *flags: str, cwd: pathlib.Path) -> Finished:
  """Runs launch/<script> with `flags` in `cwd`, as a user does."""
  report = cwd.parent / f'{cwd.name}.imported'
  done = subprocess.run([sys.executable, '-c', IMPORT_REPORTING_RUNNER, str(report),
                         str(LAUNCH / script), *flags], cwd=cwd, env=command_environment(),
                        capture_output=True, text=True, timeout=300, check=False)
  imported = report.read_text().split()
  report.unlink()
  return Finished(done.returncode, done.stdout, done.stderr, imported)


@pytest.fixture
def launch_in_process(monkeypatch, capsys):
  """launch(), for commands whose error comes after the imports: runs launch/<script>
  through cli.run in this process, in `cwd`."""
  def run(script: str, *flags: str, cwd: pathlib.Path) -> Finished:
    monkeypatch.chdir(cwd)
    return Finished(*run_in_process(script, list(flags), monkeypatch, capsys), imported=None)
  return run


@pytest.fixture
def workdir(tmp_path) -> pathlib.Path:
  """An empty working folder for the command."""
  folder = tmp_path / 'work'
  folder.mkdir()
  return folder


def files_under(folder: pathlib.Path) -> list[str]:
  return sorted(str(path.relative_to(folder)) for path in folder.rglob('*'))


def assert_refused(finished: Finished, error_line: str) -> None:
  """Exit 2 with exactly `error_line` on stderr, nothing on stdout."""
  assert (finished.returncode, finished.stderr, finished.stdout) == (2, error_line + '\n', '')


@pytest.mark.parametrize('script', SCRIPTS)
def test_help_answers_without_importing_tensorflow_or_jax(script, workdir):
  finished = launch(script, '--help', cwd=workdir)
  assert finished.returncode == 0 and finished.stdout.startswith('usage: ')
  assert finished.stderr == '' and finished.imported == []


def test_a_reader_that_stops_reading_ends_the_command_quietly(monkeypatch, capsys):
  """`translate.py ... | head -1`: the pipe's reader is gone while the command writes."""
  read_end, write_end = os.pipe()
  os.close(read_end)
  with capsys.disabled():
    monkeypatch.setattr(sys, 'stdout', os.fdopen(write_end, 'w'))
    with pytest.raises(SystemExit) as exited:
      cli.run(lambda argv: print('a translation\n' * 10_000, flush=True))
  assert exited.value.code == cli.EXIT_BROKEN_PIPE == 141


def test_a_ctrl_c_that_a_library_caught_still_stops_the_command(capsys):
  """The command goes on, since it never learns of it, but exits as interrupted."""
  def main(argv):
    del argv
    try:
      signal.raise_signal(signal.SIGINT)
    except KeyboardInterrupt:  # As a library's bare `except:` would.
      pass
    print('done')

  before = signal.getsignal(signal.SIGINT)
  with pytest.raises(SystemExit) as exited:
    cli.run(main)
  assert exited.value.code == cli.EXIT_INTERRUPTED == 130
  assert capsys.readouterr() == ('done\n', 'interrupted\n')
  assert signal.getsignal(signal.SIGINT) is before


@pytest.mark.parametrize('script', SCRIPTS)
def test_unknown_flag_is_one_line_before_any_import(script, workdir):
  finished = launch(script, '--zzz=1', cwd=workdir)
  assert_refused(finished, 'error: unknown flag --zzz=1; see --help')
  assert finished.imported == [] and files_under(workdir) == []


def test_abbreviated_flag_is_refused_naming_the_flag_it_may_mean(workdir):
  finished = launch('translate.py', '--checkpoint_dir=run', '--src=eng_Latn',
                    '--tgt_lang=hau_Latn', cwd=workdir)
  assert_refused(finished,
                 'error: unknown flag --src=eng_Latn (did you mean --src_lang?); see --help')
  assert finished.imported == []


def test_missing_value_is_one_line_naming_the_flag(workdir):
  finished = launch('translate.py', '--checkpoint_dir=run', '--src_lang=eng_Latn',
                    '--tgt_lang=hau_Latn', '--beam_size=wide', cwd=workdir)
  assert_refused(finished, "error: argument --beam_size: invalid int value: 'wide'; see --help")


# Each command with an output, the flags it needs to get as far as writing it (run/ and
# the models do not exist: the output must be refused before they are looked at), and
# the output flag.
OUTPUTS = {
    'translate.py': (['--checkpoint_dir=run', '--src_lang=eng_Latn', '--tgt_lang=hau_Latn',
                      '--input=in.txt'], '--output'),
    'evaluate.py': (['--checkpoint_dir=run', '--src_lang=eng_Latn', '--tgt_lang=hau_Latn',
                     '--src_file=in.txt', '--ref_file=in.txt'], '--output_json'),
    'average_checkpoints.py': (['--checkpoint_dir=run', '--last=2'], '--output_dir'),
    'back_translate.py': (['--checkpoint_dir=run', '--lang=hau_Latn', '--into=eng_Latn',
                           '--monolingual=in.txt'], '--output'),
    'distill.py': (['--checkpoint_dir=run', '--corpus=cldr',
                    '--directions=eng_Latn-hau_Latn'], '--output'),
    'export.py': (['--checkpoint_dir=run', '--format=ctranslate2'], '--output_dir'),
    'extend_vocab.py': (['--checkpoint_dir=run', '--language=ach_Latn', '--text=in.txt'],
                        '--output_dir'),
    'import_checkpoint.py': (['--format=huggingface', '--path=in'], '--output_dir'),
    'build_vocab.py': (['--gin_file=gin/runs/demo.gin'], '--output'),
    'cache_tasks.py': (['--gin_file=gin/runs/demo.gin'], '--output_dir'),
    'clean.py': (['--src_file=in.txt', '--tgt_file=in.txt', '--src_lang=eng_Latn',
                  '--tgt_lang=hau_Latn', '--preset=default'], '--output_dir'),
    'compute_baselines.py': (['--checkpoint_dir=run', '--mixture=cldr_demo'], '--output'),
    'merge_vocab.py': (['--base_model=a.model', '--new_model=b.model'], '--output'),
    'plot_dro.py': (['--model_dir=run'], '--output'),
    'plot_sampling.py': (['--mixture=cldr_demo'], '--output'),
    'plot_training.py': (['--model_dir=run'], '--output'),
    'rerank.py': (['--nbest=in.txt', '--mbr'], '--output'),
    'restore_diacritics.py': (['--checkpoint_dir=run'], '--output'),
    'select_data.py': (['--candidates=in', '--in_domain=in'], '--output_dir'),
}


def test_every_command_with_an_output_is_covered():
  # train.py writes MODEL_DIR, which its gin config names; serve.py answers requests.
  no_output = {'train.py', 'serve.py'}
  assert sorted(OUTPUTS) == sorted(set(SCRIPTS) - no_output)


@pytest.mark.parametrize('script', sorted(OUTPUTS))
def test_output_under_a_file_is_refused_before_any_work(script, workdir):
  flags, output_flag = OUTPUTS[script]
  (workdir / 'in.txt').write_text('hello\n', encoding='utf-8')
  (workdir / 'blocker').write_text('a file, not a folder\n', encoding='utf-8')
  finished = launch(script, *flags, f'{output_flag}=blocker/out', cwd=workdir)
  assert_refused(finished, f'error: {output_flag}: cannot create blocker/out: blocker is a file')
  assert finished.imported == [] and files_under(workdir) == ['blocker', 'in.txt']


def test_file_output_that_is_a_folder_is_refused(workdir):
  (workdir / 'hyp').mkdir()
  finished = launch('translate.py', '--checkpoint_dir=run', '--src_lang=eng_Latn',
                    '--tgt_lang=hau_Latn', '--output=hyp', cwd=workdir)
  assert_refused(finished, 'error: --output: hyp is a folder, not a file')


@pytest.fixture
def unwritable_folder(tmp_path) -> pathlib.Path:
  """A folder this process cannot create files in (root ignores permissions: /sys)."""
  if os.geteuid() == 0:
    if not os.path.isdir('/sys'):
      pytest.skip('running as root without /sys: no folder it cannot write')
    yield pathlib.Path('/sys')
    return
  folder = tmp_path / 'read_only'
  folder.mkdir()
  folder.chmod(0o555)
  yield folder
  folder.chmod(0o755)


@pytest.mark.parametrize('script', ['translate.py', 'merge_vocab.py'])
def test_output_in_an_unwritable_folder_is_refused_before_any_work(script, workdir,
                                                                   unwritable_folder):
  flags, output_flag = OUTPUTS[script]
  output = unwritable_folder / 'out'
  finished = launch(script, *flags, f'{output_flag}={output}', cwd=workdir)
  assert finished.returncode == 2 and finished.imported == []
  assert finished.stderr.startswith(f'error: {output_flag}: cannot write {output}: '
                                    f'{unwritable_folder} is not writable (')
  assert len(finished.stderr.splitlines()) == 1 and not output.exists()


# A command, its flags, and the flag that names a file or folder that is not there.
MISSING_INPUTS = [
    ('translate.py', ['--checkpoint_dir=run', '--src_lang=eng_Latn', '--tgt_lang=hau_Latn'],
     'error: --checkpoint_dir: run is not a directory'),
    ('translate.py', ['--ensemble=.:2,gs://bucket/run,run:0.5', '--src_lang=eng_Latn',
                      '--tgt_lang=hau_Latn'], 'error: --ensemble: run is not a directory'),
    ('translate.py', ['--ctranslate2=model', '--src_lang=eng_Latn', '--tgt_lang=hau_Latn'],
     'error: --ctranslate2: model is not a directory'),
    ('translate.py', ['--checkpoint_dir=.', '--src_lang=eng_Latn', '--tgt_lang=hau_Latn',
                      '--input=in.txt'], 'error: --input: in.txt: no such file'),
    ('translate.py', ['--checkpoint_dir=.', '--src_lang=eng_Latn', '--tgt_lang=hau_Latn',
                      '--yoruba_diacritics=marks'],
     'error: --yoruba_diacritics: marks is not a directory'),
    ('evaluate.py', ['--checkpoint_dir=.', '--src_lang=eng_Latn', '--tgt_lang=hau_Latn',
                     '--src_file=.', '--ref_file=ref.txt'],
     'error: --src_file: . is a folder, not a file'),
    ('evaluate.py', ['--family_models=1=.,3=lfg3', '--tasks=cldr_demo'],
     'error: --family_models: lfg3 is not a directory'),
    ('evaluate.py', ['--hyp_file=hyp.txt', '--ref_file=in.nbest'],
     'error: --hyp_file: hyp.txt: no such file'),
    ('evaluate.py', ['--ctranslate2=model', '--src_lang=eng_Latn', '--tgt_lang=hau_Latn',
                     '--src_file=in.nbest', '--ref_file=in.nbest'],
     'error: --ctranslate2: model is not a directory'),
    ('back_translate.py', ['--checkpoint_dir=.', '--lang=hau_Latn', '--into=eng_Latn',
                           '--monolingual=hau.txt', '--output=bt'],
     'error: --monolingual: hau.txt: no such file'),
    ('distill.py', ['--checkpoint_dir=run', '--corpus=cldr', '--directions=eng_Latn-hau_Latn',
                    '--output=distilled'], 'error: --checkpoint_dir: run is not a directory'),
    ('average_checkpoints.py', ['--checkpoint_dir=run', '--last=2', '--output_dir=averaged'],
     'error: --checkpoint_dir: run is not a directory'),
    ('export.py', ['--checkpoint_dir=run', '--format=ctranslate2', '--output_dir=exported'],
     'error: --checkpoint_dir: run is not a directory'),
    ('compute_baselines.py', ['--checkpoint_dir=run', '--mixture=cldr_demo',
                              '--output=baselines.json'],
     'error: --checkpoint_dir: run is not a directory'),
    ('import_checkpoint.py', ['--path=hf', '--output_dir=imported'],
     'error: --path: hf is not a directory'),
    ('restore_diacritics.py', ['--checkpoint_dir=run'],
     'error: --checkpoint_dir: run is not a directory'),
    ('rerank.py', ['--nbest=.', '--mbr', '--output=chosen.txt'],
     'error: --nbest: . is a folder, not a file'),
    ('rerank.py', ['--nbest=in.nbest', '--source=in.nbest', '--src_lang=eng_Latn',
                   '--tgt_lang=hau_Latn', '--backward=run', '--weights=in.nbest',
                   '--output=chosen.txt'], 'error: --backward: run is not a directory'),
    ('serve.py', ['--ctranslate2=model'], 'error: --ctranslate2: model is not a directory'),
    ('serve.py', ['--ensemble=run,.'], 'error: --ensemble: run is not a directory'),
    ('clean.py', ['--tsv_file=pairs.tsv', '--src_lang=eng_Latn', '--tgt_lang=hau_Latn',
                  '--preset=default', '--output_dir=cleaned'],
     'error: --tsv_file: pairs.tsv: no such file'),
]


@pytest.mark.parametrize('script, flags, error_line', MISSING_INPUTS,
                         ids=[f'{script} {error.split(":")[1].strip()}'
                              for script, _, error in MISSING_INPUTS])
def test_a_missing_input_file_or_run_folder_is_named_before_any_import(script, flags,
                                                                       error_line, workdir):
  """The folders and files a command reads are looked up before TensorFlow starts (a
  gs:// folder is left to its reader)."""
  (workdir / 'in.nbest').write_text('0 ||| a ||| forward=-1 ||| -1\n', encoding='utf-8')
  finished = launch(script, *flags, cwd=workdir)
  assert_refused(finished, error_line)
  assert finished.imported == [] and files_under(workdir) == ['in.nbest']


NLLB = pathlib.Path(__file__).parent / 'checkpoints' / 'huggingface' / 'nllb'

# Runs launch/<script> as `python launch/<script>` would, and sends it SIGINT, as Ctrl-C
# does, the first time it creates a file or folder whose path holds the first argument:
# mid-work, with its output staged beside its place. (A poll from outside would race the
# tiny models' staged outputs, which last milliseconds.)
INTERRUPTING_RUNNER = '''
import os, runpy, signal, sys
mark, script = sys.argv[1], sys.argv[2]
sys.argv = sys.argv[2:]
sys.path[0] = os.path.dirname(script)
sent = []
def interrupt_at_mark(event, args):
  if event in ('open', 'os.mkdir') and mark in str(args[0]) and not sent:
    sent.append(event)
    os.kill(os.getpid(), signal.SIGINT)
sys.addaudithook(interrupt_at_mark)
runpy.run_path(script, run_name='__main__')
'''


@pytest.mark.slow
@pytest.mark.parametrize('script, flags, mark', [
    # While CTranslate2 writes the model into the staged folder.
    ('export.py', ['--checkpoint_dir={run}', '--format=ctranslate2', '--output_dir=out'],
     '.out.partial/model.bin'),
    # While Orbax's threads write the checkpoint into the staged run folder (they begin
    # its arrays' metadata) and the command waits for them.
    ('import_checkpoint.py', [f'--path={NLLB}', '--output_dir=out'], 'array_metadatas'),
    # As the translations' file is begun, its lines still to come.
    ('translate.py', ['--checkpoint_dir={run}', '--src_lang=eng_Latn', '--tgt_lang=hau_Latn',
                      '--output=out.txt'], '.out.txt.'),
])
def test_ctrl_c_mid_work_is_one_line_and_exit_130_and_leaves_nothing_behind(
    script, flags, mark, trained_run, workdir):
  done = subprocess.run(
      [sys.executable, '-c', INTERRUPTING_RUNNER, mark, str(LAUNCH / script),
       *(flag.format(run=trained_run) for flag in flags)],
      cwd=workdir, env=command_environment(), input='Monday\n', capture_output=True,
      text=True, timeout=300, check=False)
  assert (done.returncode, done.stderr, done.stdout) == (130, 'interrupted\n', '')
  assert files_under(workdir) == []


# Each command that reads a run from --checkpoint_dir, and the flags it needs beside it.
RUN_READERS = {
    'translate.py': ['--src_lang=eng_Latn', '--tgt_lang=hau_Latn', '--input=in.txt'],
    'evaluate.py': ['--src_lang=eng_Latn', '--tgt_lang=hau_Latn', '--src_file=in.txt',
                    '--ref_file=in.txt'],
    'average_checkpoints.py': ['--last=2', '--output_dir=averaged'],
    'back_translate.py': ['--lang=hau_Latn', '--into=eng_Latn', '--monolingual=in.txt',
                          '--output=bt'],
    'distill.py': ['--corpus=cldr', '--directions=eng_Latn-hau_Latn', '--output=distilled'],
    'export.py': ['--format=ctranslate2', '--output_dir=exported'],
    'extend_vocab.py': ['--language=ach_Latn', '--text=in.txt', '--output_dir=extended'],
    'compute_baselines.py': ['--mixture=cldr_demo', '--output=baselines.json'],
    'rerank.py': ['--source=in.txt', '--src_lang=eng_Latn', '--tgt_lang=hau_Latn',
                  '--mbr_samples=2', '--output=chosen.txt'],
    'restore_diacritics.py': ['--output=restored.txt'],
    'serve.py': [],
}


def test_every_command_reading_a_run_is_covered():
  assert sorted(RUN_READERS) == [script for script in SCRIPTS
                                 if 'checkpoint_dir' in (LAUNCH / script).read_text()]


@pytest.fixture(scope='module')
def exported_run(trained_run, tmp_path_factory) -> pathlib.Path:
  """The tiny run exported as a CTranslate2 model."""
  from t5x_mt.export import ctranslate2_export  # pylint: disable=g-import-not-at-top
  output = tmp_path_factory.mktemp('exported') / 'ct2'
  ctranslate2_export.export_run(str(trained_run), str(output), 'float32')
  return output


@pytest.mark.parametrize('script', sorted(RUN_READERS))
def test_an_export_given_as_checkpoint_dir_points_to_ctranslate2(script, exported_run,
                                                                 workdir, launch_in_process):
  (workdir / 'in.txt').write_text('Monday\n', encoding='utf-8')
  finished = launch_in_process(script, f'--checkpoint_dir={exported_run}',
                               *RUN_READERS[script], cwd=workdir)
  assert finished.returncode == 2
  assert finished.stderr.splitlines() == [
      f'error: --checkpoint_dir: {exported_run} is a CTranslate2 export, not a training run: '
      f'translate.py, evaluate.py and serve.py take it as --ctranslate2={exported_run}; '
      'other commands read the run it was exported from']
  assert files_under(workdir) == ['in.txt']


def _run_folder(folder: pathlib.Path, vocabulary: bytes) -> None:
  """What extend_vocab.py reads of a run before anything loads: its vocabulary, a
  config.gin and a checkpoints/ folder."""
  folder.mkdir()
  (folder / 'vocab.model').write_bytes(vocabulary)
  (folder / 'config.gin').write_text('', encoding='utf-8')
  (folder / 'checkpoints').mkdir()


@pytest.mark.parametrize('flags, error_line', [
    (['--language=hau_Latn', '--text=ach.txt'],
     'error: --language: run has hau_Latn already (its vocabulary holds the tag <2hau_Latn>)'),
    (['--language=ach', '--text=ach.txt'], "error: --language: 'ach' is not shaped as a "
     'FLORES-200 code (ISO 639-3 language, ISO 15924 script: ach_Latn)'),
    (['--language=ach_Latn', '--text=blank.txt'], 'error: --text: blank.txt holds no text'),
    (['--language=xyz_Latn', '--text=amh.txt'], 'error: --text: amh.txt: 100% of its letters '
     'are outside the Latn script that xyz_Latn names'),
    (['--language=ach_Latn', '--text=ach.txt', '--checkpoint_dir=texts'],
     'error: --checkpoint_dir: texts is not a run folder (it has no config.gin)'),
    (['--language=ach_Latn', '--text=ach.txt', '--output_dir=texts'],
     'error: --output_dir: texts exists and is not empty'),
    (['--language=ach_Latn', '--text=ach.txt', '--checkpoint_dir=bilingual'],
     'error: --checkpoint_dir: bilingual tags no language (a bilingual model): it has no '
     'tag to add a language by'),
    (['--language=ach_Latn', '--text=ach.txt', '--checkpoint_dir=opus'],
     'error: --checkpoint_dir: opus segments its sources with a vocabulary of their own '
     '(source_vocab.model, an OPUS-MT import); languages are added to runs of one '
     'vocabulary'),
])
def test_a_language_that_cannot_be_added_is_one_line_before_any_import(workdir, flags,
                                                                        error_line):
  imported = huggingface.vocabulary_of(NLLB, huggingface.read_config(NLLB)).model
  _run_folder(workdir / 'run', imported)
  _run_folder(workdir / 'bilingual', (NLLB / 'sentencepiece.bpe.model').read_bytes())
  _run_folder(workdir / 'opus', imported)
  (workdir / 'opus' / 'source_vocab.model').write_bytes(imported)
  (workdir / 'texts').mkdir()  # A folder, not empty, and no run.
  (workdir / 'texts' / 'notes.txt').write_text('notes\n', encoding='utf-8')
  for name, text in (('ach', 'Lunyodo pwonyo lutino gi\n'), ('blank', '\n  \n'),
                     ('amh', 'ሰላም ለዓለም\n')):
    (workdir / f'{name}.txt').write_text(text, encoding='utf-8')
  written = files_under(workdir)
  finished = launch('extend_vocab.py', '--checkpoint_dir=run', '--output_dir=extended', *flags,
                    cwd=workdir)
  assert_refused(finished, error_line)
  assert finished.imported == [] and files_under(workdir) == written


@pytest.mark.parametrize('flags, error_line', [
    (['--ref_file=ref.txt', '--checkpoint_dir=.'], 'error: --hyp_file: scores the '
     'translations it holds, without a model; leave out --checkpoint_dir'),
    (['--ref_file=ref.txt', '--ctranslate2=.', '--beam_size=2', '--src_lang=eng_Latn'],
     'error: --hyp_file: scores the translations it holds, without a model; leave out '
     '--beam_size, --ctranslate2, --src_lang'),
    (['--ref_file=ref.txt', '--tasks=cldr_demo'], 'error: --hyp_file: scores the '
     'translations it holds, without a model; leave out --tasks'),
    ([], 'error: --ref_file: required with --hyp_file'),
    (['--ref_file=short.txt'], 'error: hyp.txt has 2 lines but short.txt has 1: --hyp_file '
     'and --ref_file must be line-aligned'),
    (['--ref_file=ref.txt', '--src_file=short.txt'], 'error: hyp.txt has 2 lines but '
     'short.txt has 1: --hyp_file and --src_file must be line-aligned'),
    (['--ref_file=ref.txt', '--baseline=copy'],
     'error: --baseline: copy scores the sources as translations; give --src_file'),
    (['--ref_file=ref.txt', '--spm_model=flores200.model'],
     'error: --spm_model: flores200.model: no such file'),
])
def test_bad_hypothesis_file_scoring_is_one_line_before_any_import(workdir, flags,
                                                                  error_line):
  for name, text in (('hyp.txt', 'Litinin\nbabu\n'), ('ref.txt', 'Litinin\nbabu\n'),
                     ('short.txt', 'Litinin\n')):
    (workdir / name).write_text(text, encoding='utf-8')
  finished = launch('evaluate.py', '--hyp_file=hyp.txt', *flags, '--output_json=scores.json',
                    cwd=workdir)
  assert_refused(finished, error_line)
  assert finished.imported == [] and files_under(workdir) == ['hyp.txt', 'ref.txt',
                                                              'short.txt']


def test_scoring_a_hypothesis_file_loads_neither_tensorflow_nor_jax(workdir):
  hypotheses = ['Litinin 3 Mayu', 'kilomita 10', '']
  references = ['Litinin', 'kilomita 10', 'babu']
  (workdir / 'hyp.txt').write_text(''.join(f'{line}\n' for line in hypotheses),
                                   encoding='utf-8')
  (workdir / 'ref.txt').write_text(''.join(f'{line}\n' for line in references),
                                   encoding='utf-8')
  finished = launch('evaluate.py', '--hyp_file=hyp.txt', '--ref_file=ref.txt',
                    '--output_json=scores.json', cwd=workdir)
  assert (finished.returncode, finished.stderr, finished.imported) == (0, '', [])
  expected = scoring.score_translations([], hypotheses, references)
  assert json.loads(finished.stdout) == expected == json.loads(
      (workdir / 'scores.json').read_text())


@pytest.mark.parametrize('flags, error_line', [
    (['--ctranslate2=.', '--port=70000'],
     'error: --port: a port number from 1 to 65535, got 70000'),
    (['--ctranslate2=.', '--max_queue=0'], 'error: --max_queue: must be >= 1, got 0'),
    (['--ctranslate2=.', '--checkpoint_dir=.'],
     'error: --checkpoint_dir: not with --ctranslate2, whose folder is the model'),
    (['--port=5000'], 'error: give exactly one of --checkpoint_dir or --ensemble'),
])
def test_bad_server_flags_are_one_line_before_any_import(workdir, flags, error_line):
  finished = launch('serve.py', *flags, cwd=workdir)
  assert_refused(finished, error_line)
  assert finished.imported == [] and files_under(workdir) == []


@pytest.mark.parametrize('flags, error_line', [
    (['--coordinator_address=127.0.0.1:4000', '--num_processes=2', '--process_id=2'],
     'error: --process_id: 2 is out of range for --num_processes=2 (0 to 1)'),
    (['--num_processes=2', '--process_id=0'],
     'error: --coordinator_address: needed with --num_processes, --process_id (a '
     'multi-process run names all three)'),
    (['--coordinator_address=localhost', '--num_processes=2', '--process_id=0'],
     "error: --coordinator_address: 'localhost' is not HOST:PORT"),
    (['--local_device_ids=0,x'],
     "error: --local_device_ids: '0,x' is not a comma-separated list of device numbers"),
    (['--topology=v5e:2x2'], 'error: --topology: only with --dry_run'),
    (['--compile_plan'], 'error: --compile_plan: only with --dry_run'),
])
def test_bad_train_flags_are_one_line_before_any_import(workdir, flags, error_line):
  finished = launch('train.py', '--gin_file=gin/runs/demo.gin', *flags, cwd=workdir)
  assert_refused(finished, error_line)
  assert finished.imported == [] and files_under(workdir) == []


@pytest.mark.parametrize('binding, error_line', [
    ('--gin.MESH_SHAPE=(2, 2, 1)', 'error: MESH_SHAPE: (2, 2, 1) does not cover the 8 devices '
     '(the product of the sizes must equal the device count)'),
    ('--gin.TRAIN_STEP=5', "error: gin: binding 'TRAIN_STEP = 5': no binding reads the macro "
     'TRAIN_STEP (did you mean TRAIN_STEPS?)'),
])
def test_bad_demo_binding_is_one_line_before_any_work(workdir, binding, error_line,
                                                     launch_in_process):
  finished = launch_in_process('train.py', '--gin_file=gin/runs/demo.gin', binding,
                    f"--gin.MODEL_DIR='{workdir / 'run'}'", cwd=workdir)
  assert_refused(finished, error_line)
  assert files_under(workdir) == []


@pytest.mark.parametrize('bindings, error_line', [
    (['--gin.LORA_RANK=8', "--gin.LORA_TARGETS=('value', 'decoder/mlp/w0')"],
     "error: network.TransformerConfig.lora_targets (LORA_TARGETS): 'decoder/mlp/w0' "
     'matches no module of this model; its modules are encoder/attention/query, '),
    (['--gin.LORA_RANK=300'], 'error: network.TransformerConfig.lora_rank (LORA_RANK): 300 '
     'is larger than encoder/attention/query, whose smaller side is 256'),
])
def test_a_lora_setting_that_cannot_hold_is_one_line(workdir, bindings, error_line,
                                                     launch_in_process):
  finished = launch_in_process('train.py', '--gin_file=gin/runs/demo.gin', *bindings,
                    f"--gin.MODEL_DIR='{workdir / 'run'}'", cwd=workdir)
  assert finished.returncode == 2 and finished.stdout == ''
  assert len(finished.stderr.splitlines()) == 1, finished.stderr
  assert finished.stderr.startswith(error_line), finished.stderr
  assert files_under(workdir) == []


def test_an_unknown_ensemble_combination_is_named_before_any_import(workdir):
  finished = launch('translate.py', '--ensemble=.,.:2', '--ensemble_combination=max',
                    '--src_lang=eng_Latn', '--tgt_lang=hau_Latn', cwd=workdir)
  assert_refused(finished, "error: --ensemble_combination: 'max' is not one of "
                 "'log_mean_prob', 'mean_log_prob'")
  assert finished.imported == []


def test_missing_gin_file_is_named_before_any_import(workdir):
  finished = launch('train.py', '--gin_file=gin/runs/no_such_run.gin', cwd=workdir)
  assert_refused(finished, 'error: --gin_file: gin/runs/no_such_run.gin not found')
  assert finished.imported == []


def test_gin_file_with_an_unclosed_parenthesis_is_named_before_any_import(workdir):
  (workdir / 'in.txt').write_text('hello\n', encoding='utf-8')
  (workdir / 'steps.gin').write_text('duplicates.bloom_error_rate = (1e-7\n', encoding='utf-8')
  finished = launch('clean.py', '--src_file=in.txt', '--tgt_file=in.txt', '--src_lang=eng_Latn',
                    '--tgt_lang=hau_Latn', '--preset=default', '--gin_file=steps.gin',
                    '--output_dir=cleaned', cwd=workdir)
  assert_refused(finished, 'error: gin: steps.gin: ends inside a bracket or quote left open')
  assert finished.imported == [] and files_under(workdir) == ['in.txt', 'steps.gin']


def test_gin_mistake_names_the_file_and_line(workdir, launch_in_process):
  (workdir / 'in.txt').write_text('hello\n', encoding='utf-8')
  (workdir / 'steps.gin').write_text('# Tighter duplicates.\nduplicates.bloom_error = 1e-7\n',
                                     encoding='utf-8')
  finished = launch_in_process('clean.py', '--src_file=in.txt', '--tgt_file=in.txt',
                               '--src_lang=eng_Latn', '--tgt_lang=hau_Latn', '--preset=default',
                               '--gin_file=steps.gin', '--output_dir=cleaned', cwd=workdir)
  assert_refused(finished, "error: gin: steps.gin, line 2: Configurable 'duplicates' doesn't "
                 "have a parameter named 'bloom_error' (did you mean bloom_error_rate?)")



@pytest.mark.parametrize('script, flags', [
    ('train.py', ['--gin_file=gin/runs/parallel_files.gin']),
    ('clean.py', ['--src_file=in.txt', '--tgt_file=in.txt', '--src_lang=eng_Latn',
                  '--tgt_lang=hau_Latn', '--preset=default', '--output_dir=cleaned']),
])
@pytest.mark.parametrize('binding', ['--gin.SRC_LANG=eng_Latn', '--gin.MODEL_DIR=/tmp/x',
                                     '--gin.network.TransformerConfig.mlp_activation=gelu'])
def test_unquoted_string_binding_says_how_to_quote_it_before_any_import(script, flags,
                                                                         binding, workdir):
  """Whatever the macro or setting: the shell took the quotes a string needs off."""
  finished = launch(script, *flags, binding, cwd=workdir)
  name, _, value = binding.partition('=')
  assert_refused(finished, f'error: {binding}: a string needs quotes: {name}="\'{value}\'"')
  assert finished.imported == [] and files_under(workdir) == []


def test_unquoted_string_in_a_gin_file_says_how_to_quote_it_before_any_import(workdir):
  (workdir / 'mine.gin').write_text("include 'gin/runs/demo.gin'\n\nTAG_STRATEGY = tgt\n",
                                    encoding='utf-8')
  finished = launch('train.py', '--gin_file=mine.gin', cwd=workdir)
  assert_refused(finished, "error: gin: mine.gin, line 3: a string needs quotes: "
                 "TAG_STRATEGY = 'tgt'")
  assert finished.imported == []


def parallel_files_flags(**macros: str) -> list[str]:
  """train.py's flags for gin/runs/parallel_files.gin, each macro given its gin value."""
  return ['--gin_file=gin/runs/parallel_files.gin', "--gin.MODEL_DIR='run'",
          *(f'--gin.{name}={value}' for name, value in macros.items())]


def test_a_recipe_macro_left_unset_is_named_before_any_import(workdir):
  (workdir / 'train.fra').write_text('bonjour\n', encoding='utf-8')
  finished = launch('train.py', *parallel_files_flags(
      SRC_LANG="'eng_Latn'", TGT_LANG="'fra_Latn'", TGT_FILE="'train.fra'"), cwd=workdir)
  assert_refused(finished, 'error: gin: the macro SRC_FILE is not set '
                 '(gin/runs/parallel_files.gin, line 21 reads it); give it with '
                 '--gin.SRC_FILE=...')
  assert finished.imported == [] and files_under(workdir) == ['train.fra']


def test_a_missing_file_a_recipe_macro_names_is_named_before_any_import(workdir):
  (workdir / 'train.fra').write_text('bonjour\n', encoding='utf-8')
  finished = launch('train.py', *parallel_files_flags(
      SRC_LANG="'eng_Latn'", TGT_LANG="'fra_Latn'", SRC_FILE="'train.eng'",
      TGT_FILE="'train.fra'"), cwd=workdir)
  assert_refused(finished, 'error: SRC_FILE: train.eng: no such file')
  assert finished.imported == [] and files_under(workdir) == ['train.fra']


@pytest.mark.slow
def test_error_inside_a_configurable_is_one_line_without_tensorflow_logging(workdir):
  """train() refuses the mixture inside gin's wrapper, which appends "In call to
  configurable 'train'" to the message."""
  finished = launch('train.py', '--gin_file=gin/runs/demo.gin',
                    "--gin.MIXTURE_OR_TASK_NAME='no_such_mixture'",
                    f"--gin.MODEL_DIR='{workdir / 'run'}'", cwd=workdir)
  assert finished.returncode == 2 and finished.stdout == ''
  assert len(finished.stderr.splitlines()) == 1, finished.stderr
  assert finished.stderr.startswith(
      "error: MIXTURE_OR_TASK_NAME: unknown mixture or task 'no_such_mixture'; ")


def test_unknown_mixture_names_the_mixture_flag(workdir, launch_in_process):
  finished = launch_in_process('plot_sampling.py', '--mixture=no_such_mixture',
                               '--output=shares.png', cwd=workdir)
  assert finished.returncode == 2 and len(finished.stderr.splitlines()) == 1, finished.stderr
  assert finished.stderr.startswith("error: --mixture: unknown mixture or task "
                                    "'no_such_mixture'; ")
  assert files_under(workdir) == []


def test_missing_averaging_step_names_the_steps_flag(trained_run, workdir, launch_in_process):
  finished = launch_in_process('average_checkpoints.py', f'--checkpoint_dir={trained_run}',
                               '--steps=2,3', '--output_dir=averaged', cwd=workdir)
  assert_refused(finished, f'error: --steps: {trained_run} has no checkpoint 3 (it keeps 2, 4)')
  assert files_under(workdir) == []


def test_unloadable_sentencepiece_model_is_one_line_naming_the_file(trained_run, workdir,
                                                                    launch_in_process):
  run = workdir / 'run'
  shutil.copytree(trained_run, run)
  (run / 'vocab.model').write_bytes(b'not a SentencePiece model')
  (workdir / 'in.txt').write_text('Monday\n', encoding='utf-8')
  finished = launch_in_process('translate.py', f'--checkpoint_dir={run}', '--src_lang=eng_Latn',
                               '--tgt_lang=hau_Latn', '--input=in.txt', '--output=out.txt',
                               cwd=workdir)
  assert_refused(finished, f'error: {run}/vocab.model: cannot load this SentencePiece model '
                 f'(INTERNAL: could not parse ModelProto from {run}/vocab.model)')
  assert not (workdir / 'out.txt').exists()


@pytest.mark.parametrize('binding, error_line', [
    ('--gin.TRAIN_STEPS=0',
     'error: TRAIN_STEPS (training.TrainConfig.train_steps): must be >= 1, got 0'),
    ("--gin.network.TransformerConfig.mlp_activation='gelu2'",
     "error: network.TransformerConfig.mlp_activation: 'gelu2' is not one of 'gelu', 'relu', "
     "'swish'"),
])
def test_bad_training_setting_is_one_line_and_creates_no_model_dir(workdir, binding,
                                                                   error_line, launch_in_process):
  finished = launch_in_process('train.py', '--gin_file=gin/runs/demo.gin', binding,
                    f"--gin.MODEL_DIR='{workdir / 'run'}'",
                    f"--gin.VOCABULARY_PATH='{workdir / 'vocab.model'}'", cwd=workdir)
  assert_refused(finished, error_line)
  assert files_under(workdir) == []


def streamed_corpus_flags(workdir: pathlib.Path, lines: str) -> list[str]:
  """A run over a streamed corpus of one TSV file holding `lines`."""
  (workdir / 'web.tsv').write_text(lines, encoding='utf-8')
  return ['--gin_file=gin/runs/demo.gin', f"--gin.MODEL_DIR='{workdir / 'run'}'",
          f"--gin.VOCABULARY_PATH='{workdir / 'vocab.model'}'",
          "--gin.data_tasks.register_from_config.streamed_corpora={'web': {'languages': "
          f"['eng_Latn', 'hau_Latn'], 'files': ['{workdir / 'web.tsv'}']}}}}",
          "--gin.MIXTURE_OR_TASK_NAME='web_eng_Latn.hau_Latn'"]


def test_streamed_corpus_line_without_its_columns_is_named(workdir, launch_in_process):
  finished = launch_in_process('train.py', *streamed_corpus_flags(workdir, 'a\tb\nno tab\n'), cwd=workdir)
  assert_refused(finished, f'error: {workdir / "web.tsv"}:2: fewer than 2 tab-separated '
                 'columns (columns 0 and 1)')
  assert files_under(workdir) == ['web.tsv']


def test_run_that_could_score_no_direction_is_refused_before_training(workdir,
                                                                     launch_in_process):
  finished = launch_in_process('train.py', *streamed_corpus_flags(workdir, 'a\tb\n'), cwd=workdir)
  assert_refused(finished, "error: no direction of 'web_eng_Latn.hau_Latn' has validation "
                 'pairs in its corpora; name a corpus that has them with '
                 'evaluation.EvalConfig.corpus')
  assert files_under(workdir) == ['web.tsv']


def test_a_commands_log_shows_warnings_in_the_projects_format_and_no_info(tmp_path):
  """Malloc's set-up logs (at debug) before the command's own logging is configured: had
  it installed Python's default handler, warnings would read `WARNING:root:` and the
  configured format and level would never apply."""
  command = ('import logging\n'
             'from t5x_mt.core import cli\n'
             "cli.run(lambda argv: logging.info('progress') or logging.warning('a warning'))\n")
  done = subprocess.run([sys.executable, '-c', command], cwd=tmp_path,
                        env=command_environment(), capture_output=True, text=True,
                        timeout=120, check=False)
  assert (done.returncode, done.stderr, done.stdout) == (0, 'WARNING root: a warning\n', '')


@pytest.mark.parametrize('flags, shown', [
    ([], 'INFO t5x_mt.progress: step 1 of 2\nWARNING root: a warning\n'),
    (['--verbosity=info'], 'INFO t5x_mt.progress: step 1 of 2\nINFO root: 3 pairs held out\n'
     'WARNING root: a warning\n'),
    (['--verbosity=warning'], 'WARNING root: a warning\n'),
    (['--verbosity=error'], ''),
])
def test_verbosity_says_what_a_commands_log_shows(flags, shown, tmp_path):
  """By default a log file gets the progress lines that stand in for a bar, and warnings."""
  command = ('import logging\n'
             'from t5x_mt.core import cli\n'
             'def main(argv):\n'
             "  cli.argument_parser('a command').parse_args(argv)\n"
             "  logging.getLogger(cli.PROGRESS_LOG).info('step 1 of 2')\n"
             "  logging.info('3 pairs held out')\n"
             "  logging.warning('a warning')\n"
             'cli.run(main)\n')
  done = subprocess.run([sys.executable, '-c', command, *flags], cwd=tmp_path,
                        env=command_environment(), capture_output=True, text=True,
                        timeout=120, check=False)
  assert (done.returncode, done.stderr, done.stdout) == (0, shown, '')


def test_an_unknown_verbosity_is_one_line_naming_the_flag(workdir):
  finished = launch('translate.py', '--verbosity=loud', cwd=workdir)
  assert_refused(finished, "error: argument --verbosity: invalid choice: 'loud' (choose from "
                 "'debug', 'info', 'warning', 'error'); see --help")
  assert finished.imported == []
