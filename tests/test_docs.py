"""The repository's docs stand alone and say what is true: no file cites a document or
folder outside it, every link between its Markdown pages lands on a page and heading that
exist, and every command they show parses as the command itself parses it."""

import ast
from collections.abc import Iterator
import dataclasses
import importlib.util
import pathlib
import re
import shlex
import textwrap
from typing import Any

import gin

from t5x_mt.core import cli
from t5x_mt.config import configurables  # pylint: disable=unused-import  (gin names the commands bind)
from t5x_mt.config import gin_utils
from t5x_mt.data.cleaning import pipeline
from t5x_mt.core.errors import UserError
from t5x_mt.runs import run_layout

from test_launch_translate_evaluate import run_in_process

REPO = pathlib.Path(__file__).resolve().parents[1]
METHODS = REPO / 'docs' / 'methods.md'
README = REPO / 'README.md'
# The pages a user reads: the README and every page under docs/.
PAGES = (README, *sorted((REPO / 'docs').glob('*.md')))

# Files that ship with the repository and are read by its users.
SCANNED_FOLDERS = ('t5x_mt', 'launch', 'tools', 'data_tasks', 'gin', 'docs')
TEXT_SUFFIXES = ('.py', '.gin', '.md', '.txt')

# Documents outside the repository, and paths into the folder beside it.
OUTSIDE_REFERENCE = re.compile(r'METHODS\.md|DESIGN\.md|\.\./shared\b|(?<![\w/])shared/')

# The one place that says where the sample-data folder is by default: the function that
# looks it up ($T5X_MT_SHARED_DATA names it otherwise).
DATA_LOOKUP = (REPO / 't5x_mt' / 'data' / 'readers.py', 'shared_data_dir')

METHODS_LINK = re.compile(r'docs/methods\.md#([\w-]+)')
# A Markdown link or image whose target is a path in the repository (no scheme).
RELATIVE_LINK = re.compile(r'\]\((?![a-z]+:)([^)\s]+)\)')
TESTS_README = REPO / 'tests' / 'README.md'
# A section of the README cited by its heading in a comment or docstring.
README_SECTION = re.compile(r'README(?:\'s|,) "([^"]+)"')

# A fenced code block, also one indented inside a list item.
FENCED_BLOCK = re.compile(r'^[ \t]*```[^\n]*\n(.*?)^[ \t]*```', re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r'`([^`]+)`')
COMMAND = re.compile(r'\bpython3? ((?:launch|tools)/\w+\.py)\b(.*)')
# Arguments that stand for something the reader fills in: `...`, `F,..`, `$VAR`, `[--optional]`.
ELISION = re.compile(r'\.\.|\$|^\[|\]$')


def shipped_files() -> list[pathlib.Path]:
  files = [README, *sorted((REPO / 'bench').glob('*.py'))]
  for folder in SCANNED_FOLDERS:
    files += sorted(path for path in (REPO / folder).rglob('*')
                    if path.suffix in TEXT_SUFFIXES and '__pycache__' not in path.parts)
  return files


def without_function(source: str, name: str) -> str:
  """`source` with the lines of its top-level function `name` blanked out."""
  lines = source.splitlines()
  for node in ast.parse(source).body:
    if isinstance(node, ast.FunctionDef) and node.name == name:
      first = min([node.lineno] + [d.lineno for d in node.decorator_list])
      lines[first - 1:node.end_lineno] = [''] * (node.end_lineno - first + 1)
      return '\n'.join(lines)
  raise AssertionError(f'{name} is no longer in the file: update DATA_LOOKUP')


def text_of(path: pathlib.Path) -> str:
  text = path.read_text(encoding='utf-8')
  if path == DATA_LOOKUP[0]:
    text = without_function(text, DATA_LOOKUP[1])
  return text


def anchor(heading: str) -> str:
  """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, '-' for ' '."""
  return re.sub(r'[^\w\- ]', '', heading.strip().lower()).replace(' ', '-')


def anchors_of(markdown: pathlib.Path) -> set[str]:
  headings = re.findall(r'^#{1,6} (.+)$', markdown.read_text(encoding='utf-8'), re.MULTILINE)
  return {anchor(heading) for heading in headings}


def test_no_shipped_file_cites_a_document_or_folder_outside_the_repository():
  path, function = DATA_LOOKUP
  assert OUTSIDE_REFERENCE.search(path.read_text(encoding='utf-8')), (
      f'{function} no longer names the default folder: drop it from DATA_LOOKUP')
  offences = []
  for path in shipped_files():
    for number, line in enumerate(text_of(path).splitlines(), start=1):
      if OUTSIDE_REFERENCE.search(line):
        offences.append(f'{path.relative_to(REPO)}:{number}: {line.strip()}')
  assert not offences, '\n'.join(offences)


def test_every_cited_methods_section_is_a_heading_of_docs_methods():
  assert anchor('Deduplication and decontamination') == 'deduplication-and-decontamination'
  assert anchor('Speed: attention kernel, large vocabularies, deep stacks') == (
      'speed-attention-kernel-large-vocabularies-deep-stacks')
  headings = anchors_of(METHODS)
  cited = {}
  tests = sorted(path for path in (REPO / 'tests').rglob('*.py') if '__pycache__' not in path.parts)
  for path in shipped_files() + tests:
    for section in METHODS_LINK.findall(text_of(path)):
      cited.setdefault(section, []).append(str(path.relative_to(REPO)))
  missing = {section: files for section, files in cited.items() if section not in headings}
  assert cited, 'no file cites a docs/methods.md section'
  assert not missing, missing


def test_every_link_between_the_pages_lands_on_a_file_and_heading():
  """The README and every page under docs/ link to files that exist, and to headings
  those Markdown files have (a page's own headings for `#anchor`)."""
  links = {}
  for page in (*PAGES, TESTS_README):
    for target in RELATIVE_LINK.findall(page.read_text(encoding='utf-8')):
      links.setdefault((page, target), None)
  broken = []
  for page, target in links:
    name, _, section = target.partition('#')
    linked = (page.parent / name).resolve() if name else page
    if not linked.exists():
      broken.append(f'{page.relative_to(REPO)}: {target}: no such file')
    elif section and section not in anchors_of(linked):
      broken.append(f'{page.relative_to(REPO)}: {target}: no such heading')
  assert any(target.startswith('docs/') for _, target in links)
  assert any(target.startswith('methods.md#') for _, target in links)
  assert not broken, broken


def test_every_readme_section_a_file_cites_by_name_is_a_heading_of_the_readme():
  headings = set(re.findall(r'^#{1,6} (.+)$', README.read_text(encoding='utf-8'), re.MULTILINE))
  cited = {}
  for path in shipped_files():
    for section in README_SECTION.findall(text_of(path)):
      cited.setdefault(section, []).append(str(path.relative_to(REPO)))
  missing = {section: files for section, files in cited.items() if section not in headings}
  assert cited, 'no file cites a README section by name'
  assert not missing, missing


@dataclasses.dataclass(frozen=True)
class DocumentedCommand:
  """A `python launch/<script> ...` command as a page shows it."""
  where: str
  script: str
  arguments: tuple[str, ...]

  @property
  def elided(self) -> bool:
    """Whether the page leaves parts out, so that only its flag names can be checked."""
    return any(ELISION.search(argument) for argument in self.arguments)

  def flags(self) -> list[str]:
    """The arguments with brackets of optional ones taken off."""
    return [argument.strip('[]') for argument in self.arguments if argument.strip('[]')]


def shown(page: pathlib.Path) -> str:
  """`page` as a message names it: from the repository root, or by name outside it."""
  return str(page.relative_to(REPO)) if page.is_relative_to(REPO) else page.name


def code_of(page: pathlib.Path) -> list[tuple[int, str]]:
  """(first line, text) of every fenced block and every inline code span of `page`."""
  text = page.read_text(encoding='utf-8')
  code = [(text.count('\n', 0, block.start(1)) + 1, block[1])
          for block in FENCED_BLOCK.finditer(text)]
  prose = FENCED_BLOCK.sub(lambda block: '\n' * block[0].count('\n'), text)
  code += [(prose.count('\n', 0, span.start(1)) + 1, span[1].replace('\\\n', ' ')
            .replace('\n', ' ')) for span in CODE_SPAN.finditer(prose)]
  return code


def shell_words(text: str) -> list[str]:
  """The words of a shell command line up to its first operator (`<`, `>`, `|`, `&&`, `;`)
  or comment."""
  lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
  lexer.whitespace_split = True
  words = []
  try:
    for word in lexer:
      if set(word) <= set(lexer.punctuation_chars):
        break
      words.append(word)
  except ValueError:  # A quote closed only after the command: --command="... <<< 'text'"
    pass
  return words


def joined_lines(code: str) -> Iterator[tuple[int, str]]:
  """(index of its first line, line) of each line of `code`, continuation lines joined."""
  lines = code.split('\n')
  number = 0
  while number < len(lines):
    start, line = number, lines[number]
    while line.endswith('\\') and number + 1 < len(lines):
      number += 1
      line = line[:-1] + ' ' + lines[number]
    number += 1
    yield start, line


def documented_commands(page: pathlib.Path) -> list[DocumentedCommand]:
  """Every `python launch/<script> ...` command of `page`, continuation lines joined."""
  commands = []
  for first_line, code in code_of(page):
    for start, line in joined_lines(code):
      for match in COMMAND.finditer(line):
        commands.append(DocumentedCommand(
            f'{shown(page)}:{first_line + start}', match[1],
            tuple(shell_words(match[2]))))
  return commands


class _ParserReached(Exception):
  """Raised where a command would parse its flags, with its parser and their arguments."""

  def __init__(self, parser, arguments: list[str]):
    super().__init__()
    self.parser, self.arguments = parser, arguments


def parser_and_arguments(command: DocumentedCommand, monkeypatch) -> tuple:
  """The parser `command`'s script builds and the arguments it gives it (its own
  `--gin.NAME=VALUE` and `-- <runner options>` taken out), without running anything else."""

  def parser_that_stops(description):
    parser = real_parser(description)

    def stop(args=None, namespace=None):  # pylint: disable=unused-argument
      raise _ParserReached(parser, list(args))
    parser.parse_args = stop
    return parser

  real_parser = cli.argument_parser
  spec = importlib.util.spec_from_file_location(
      f'documented_{pathlib.Path(command.script).stem}', REPO / command.script)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  with monkeypatch.context() as patch:
    patch.setattr(cli, 'argument_parser', parser_that_stops)
    try:
      module.main(command.flags())
    except _ParserReached as reached:
      return reached.parser, reached.arguments
  raise AssertionError(f'{command.script} returned without parsing its flags')


def gin_files_of(command: DocumentedCommand, namespace) -> list[str]:
  """The gin files the command reads: its --gin_file flags, and clean.py's --preset."""
  gin_files = list(getattr(namespace, 'gin_file', None) or [])
  if getattr(namespace, 'preset', None):
    gin_files.insert(0, str(pipeline.preset_file(namespace.preset)))
  return gin_files


def mistakes_of(command: DocumentedCommand, monkeypatch) -> list[str]:
  """What is wrong with `command`: an unknown flag, a value its parser refuses, a gin file
  that does not exist, a gin binding that does not parse."""
  try:
    bindings, _ = gin_utils.split_gin_overrides(command.flags())
    parser, arguments = parser_and_arguments(command, monkeypatch)
  except UserError as error:
    return [str(error)]
  if command.elided:
    known = parser._option_string_actions  # pylint: disable=protected-access
    mistakes = [f'unknown flag {argument}' for argument in arguments
                if argument.startswith('--') and argument.partition('=')[0] not in known]
    mistakes += [f'--gin_file: {name} not found' for name in
                 (argument.partition('=')[2] for argument in arguments
                  if argument.startswith('--gin_file='))
                 if not ELISION.search(name) and not (REPO / name).is_file()]
    return mistakes
  try:
    namespace = type(parser).parse_args(parser, arguments)
  except UserError as error:
    return [str(error)]
  except SystemExit:  # --help
    return []
  gin_files = gin_files_of(command, namespace)
  if not gin_files and not bindings:
    return []
  gin.clear_config()
  try:
    gin_utils.parse_gin(gin_files, bindings)
  except UserError as error:
    return [str(error)]
  finally:
    gin.clear_config()
  return []


def shell_lines(text: str) -> list[str]:
  """The lines of a shell script or code block that are neither blank nor comments."""
  return [line.strip() for line in text.splitlines()
          if line.strip() and not line.lstrip().startswith('#')]


def test_the_readme_set_up_is_two_commands_and_ci_runs_its_test_command():
  text = README.read_text(encoding='utf-8')
  section = text[text.index('## Set-up: two commands'):]
  section = section[:section.index('\n## ', 1)]
  install, test = shell_lines(FENCED_BLOCK.search(section)[1])
  assert install == ('python3 -m venv .venv && . .venv/bin/activate && pip install -r '
                     'requirements.txt && python launch/train.py --gin_file=gin/runs/demo.gin')
  activate, test_command = test.split(' && ')
  assert (activate, test_command) == ('. .venv/bin/activate', 'python -m pytest -q tests')
  ci = shell_lines((REPO / '.ci' / 'run').read_text(encoding='utf-8'))
  assert ci[-1] == test_command
  assert {'python3 -m venv .venv', activate,
          'python -m pip install --quiet -r requirements.txt'} <= set(ci)


def test_documented_commands_are_found_with_their_arguments(tmp_path):
  """The extraction itself: fenced blocks (indented too), inline code, continuation lines,
  quotes, redirections, comments, elisions."""
  page = tmp_path / 'page.md'
  page.write_text(textwrap.dedent("""\
      # A page

      ```bash
      python launch/train.py --gin_file=gin/runs/demo.gin \\
          --gin.MODEL_DIR="'/tmp/run'"   # a comment
      python launch/translate.py --checkpoint_dir=D < in.txt > out.txt
      ```

      1. A step:

         ```bash
         python launch/evaluate.py --checkpoint_dir=D ... \\
           --tasks=cldr_demo
         ```

      Inline, `python launch/compute_baselines.py --checkpoint_dir=D \\
      [--grouping=target]` and `launch/clean.py` (no command).
      """), encoding='utf-8')
  commands = [(command.where, command.script, command.arguments, command.elided)
              for command in documented_commands(page)]
  assert commands == [
      ('page.md:4', 'launch/train.py',
       ('--gin_file=gin/runs/demo.gin', "--gin.MODEL_DIR='/tmp/run'"), False),
      ('page.md:6', 'launch/translate.py', ('--checkpoint_dir=D',), False),
      ('page.md:12', 'launch/evaluate.py', ('--checkpoint_dir=D', '...', '--tasks=cldr_demo'),
       True),
      ('page.md:16', 'launch/compute_baselines.py',
       ('--checkpoint_dir=D', '[--grouping=target]'), True)]
  assert documented_commands(page)[3].flags() == ['--checkpoint_dir=D', '--grouping=target']


def test_a_command_with_a_wrong_flag_value_gin_file_or_binding_is_caught(monkeypatch):
  def mistakes(script: str, *arguments: str) -> list[str]:
    return mistakes_of(DocumentedCommand('x', script, arguments), monkeypatch)

  assert mistakes('launch/translate.py', '--checkpoint_dir=D', '--src=eng_Latn') == [
      'unknown flag --src=eng_Latn (did you mean --src_lang?); see --help']
  assert mistakes('launch/translate.py', '--checkpoint_dir=D', '--beam_size=four') == [
      "argument --beam_size: invalid int value: 'four'; see --help"]
  assert mistakes('launch/evaluate.py', '--checkpoint_dir=D', '...', '--src=x') == [
      'unknown flag --src=x']
  assert mistakes('launch/train.py', '--gin_file=gin/runs/nope.gin') == [
      '--gin_file: gin/runs/nope.gin not found']
  assert mistakes('launch/train.py', '--gin_file=gin/runs/demo.gin', '--gin.TRAIN_STEP=3') == [
      "gin: binding 'TRAIN_STEP = 3': no binding reads the macro TRAIN_STEP "
      '(did you mean TRAIN_STEPS?)']
  assert mistakes('launch/train.py', '--gin_file=gin/runs/demo.gin',
                  '--gin.MODEL_DIR=/tmp/x') == [
                      '--gin.MODEL_DIR=/tmp/x: a string needs quotes: '
                      '--gin.MODEL_DIR="\'/tmp/x\'"']
  assert mistakes('launch/clean.py', '--corpus=cldr', '--filters=long_word', '--output_dir=o',
                  '--gin.long_word.max_chars=60') == []


def test_every_command_the_readme_and_docs_show_parses(monkeypatch, capsys):
  commands = [command for page in PAGES for command in documented_commands(page)]
  scripts = {command.script for command in commands}
  assert {'launch/train.py', 'launch/translate.py', 'launch/evaluate.py',
          'launch/average_checkpoints.py', 'tools/readme_demo_figures.py'} <= scripts
  missing = sorted({f'{command.where}: {command.script}' for command in commands
                    if not (REPO / command.script).is_file()})
  assert not missing, missing
  wrong = [f'{command.where}: python {command.script} {shlex.join(command.arguments)}: '
           f'{mistake}' for command in commands
           for mistake in mistakes_of(command, monkeypatch)]
  capsys.readouterr()
  assert not wrong, '\n'.join(wrong)


# A shell variable set on a line of its own (IMPORTED=/tmp/t5x_mt/nllb), and one read.
SHELL_VARIABLE = re.compile(r'^([A-Za-z_]\w*)=(\S+)$')
SHELL_REFERENCE = re.compile(r'\$(?:\{(\w+)\}|(\w+))')
TINY_NLLB = REPO / 'tests' / 'checkpoints' / 'huggingface' / 'nllb'
FINE_TUNING_RECIPE = 'gin/runs/finetune/pretrained.gin'


def documented_sequence(page: pathlib.Path, section: str | None = None,
                        variables: dict[str, str] | None = None) -> list[DocumentedCommand]:
  """The `python launch/<script> ...` commands of `page`'s fenced blocks (those under its
  heading `section`, if given), in order, with the shell variables that lines before
  them set expanded; `variables` replace the values the page gives."""
  text = page.read_text(encoding='utf-8')
  start, end = 0, len(text)
  if section:
    start = text.index(f'\n## {section}\n')
    next_section = text.find('\n## ', start + 1)
    end = next_section if next_section >= 0 else end
  values, commands = {}, []
  for block in FENCED_BLOCK.finditer(text, start, end):
    first_line = text.count('\n', 0, block.start(1)) + 1
    for offset, line in joined_lines(block[1]):
      where = f'{shown(page)}:{first_line + offset}'
      assignment = SHELL_VARIABLE.match(line.strip())
      if assignment:
        values[assignment[1]] = (variables or {}).get(assignment[1], assignment[2])
        continue
      unset = [name for name in SHELL_REFERENCE.findall(line) if ''.join(name) not in values]
      assert not unset, f'{where}: ${"".join(unset[0])} is set by no line before it'
      line = SHELL_REFERENCE.sub(lambda reference: values[reference[1] or reference[2]], line)
      commands += [DocumentedCommand(where, match[1], tuple(shell_words(match[2])))
                   for match in COMMAND.finditer(line)]
  return commands


def training_inputs(gin_files: list[str], bindings: list[str]) -> dict[str, Any]:
  """The folders and files a training run of `gin_files` and `bindings` reads: the run it
  starts from, its vocabularies and its cleaned corpora; a UserError where train.py
  would stop before reading them (a macro the recipe reads that nothing sets)."""
  gin_utils.check_recipe(gin_files, bindings)
  gin.clear_config()
  try:
    gin_utils.parse_gin(gin_files, bindings)
    data = configurables.data_settings()
    return {'init_from': configurables.train_config().init_from,
            'vocabulary': data.vocabulary_path,
            'source_vocabulary': data.source_vocabulary_path,
            'corpora_dirs': configurables.corpora_and_mixtures()['corpora_dirs'] or {}}
  finally:
    gin.clear_config()


def contents(path: str | pathlib.Path | None) -> bytes | None:
  """The bytes of the file at `path`, None where there is none."""
  return pathlib.Path(path).read_bytes() if path and pathlib.Path(path).is_file() else None


def _given(flags: list[str], values: dict[str, str]) -> list[str]:
  """`flags` with those named in `values` given those values instead."""
  return [next((f'{name}={value}' for name, value in values.items()
                if flag.startswith(f'{name}=')), flag) for flag in flags]


def unmet_inputs(commands: list[DocumentedCommand], monkeypatch, capsys,
                 brought: dict[str, str]) -> list[str]:
  """What a fine-tuning of an import among `commands` reads that no command before it
  writes. The import runs, from the tiny NLLB checkpoint (the folder a user brings) into
  the folder the command names, and so does launch/extend_vocab.py; `brought` gives the
  flags that name what else a user brings (text files) the values of such files here.
  launch/clean.py is taken at its word (it reads the data folder for minutes): it writes
  its --output_dir."""
  brought = {'--path': str(TINY_NLLB), **brought}
  written, unmet = set(), []
  for command in commands:
    parser, arguments = parser_and_arguments(command, monkeypatch)
    args = type(parser).parse_args(parser, arguments)
    flags = _given(list(command.flags()), brought)
    if command.script in ('launch/import_checkpoint.py', 'launch/extend_vocab.py'):
      if not pathlib.Path(args.output_dir).exists():
        code, _, err = run_in_process(command.script.removeprefix('launch/'), flags,
                                      monkeypatch, capsys)
        assert code == 0, f'{command.where}: {err}'
      written.add(args.output_dir)
    elif command.script == 'launch/clean.py':
      written.add(args.output_dir)
    elif command.script == 'launch/train.py' and (
        FINE_TUNING_RECIPE in args.gin_file or any('init_from' in flag for flag in flags)):
      bindings, _ = gin_utils.split_gin_overrides(flags)
      try:
        inputs = training_inputs(args.gin_file, args.gin_bindings + bindings)
      except UserError as error:
        unmet.append(f'{command.where}: {error}')
        continue
      parent = inputs['init_from']
      if parent not in written:
        unmet.append(f'{command.where}: init_from {parent} is written by no command before it')
        continue
      layout = run_layout.RunLayout(parent)
      for name, theirs in (('vocabulary', layout.vocabulary),
                           ('source_vocabulary', layout.source_vocabulary)):
        if contents(inputs[name]) != contents(theirs):  # What fine-tuning requires.
          unmet.append(f'{command.where}: the {name} is not that of {parent}')
      unmet += [f'{command.where}: corpus {corpus}: {folder} is written by no command before it'
                for corpus, folder in inputs['corpora_dirs'].items() if folder not in written]
  return unmet


def test_the_documented_fine_tuning_of_an_import_runs_in_order(tmp_path, monkeypatch, capsys):
  """The commands that fine-tune an imported model, as the README, docs/pretrained.md and
  docs/lora.md (after the README's import) show them, a language added to it among them:
  every folder the training run reads is one a command before it writes, and every macro
  its recipe reads is set. IMPORTED and EXTENDED name other folders here than on the
  pages: they alone must carry the import to the run, its start (init_from) and its
  vocabulary."""
  variables = {'IMPORTED': str(tmp_path / 'imported'), 'EXTENDED': str(tmp_path / 'extended')}
  # The parallel text a user brings to add a language: English and Acholi.
  for name, line in (('train.eng', 'Parents teach their children'),
                     ('train.ach', 'Lunyodo pwonyo lutino gi')):
    (tmp_path / name).write_text(line + '\n', encoding='utf-8')
  brought = {'--text': str(tmp_path / 'train.ach'),
             '--gin.SRC_FILE': repr(str(tmp_path / 'train.eng')),
             '--gin.TGT_FILE': repr(str(tmp_path / 'train.ach'))}
  readme = documented_sequence(README, 'Start from NLLB or OPUS-MT', variables)
  importing = [command for command in readme if command.script != 'launch/train.py']
  sequences = [readme, documented_sequence(REPO / 'docs' / 'pretrained.md', None, variables),
               importing + documented_sequence(REPO / 'docs' / 'lora.md', None, variables)]
  fine_tunings = [command for sequence in sequences for command in sequence
                  if f'--gin_file={FINE_TUNING_RECIPE}' in command.arguments]
  assert len(fine_tunings) == 3, fine_tunings
  unmet = [problem for sequence in sequences
           for problem in unmet_inputs(sequence, monkeypatch, capsys, brought)]
  assert not unmet, '\n'.join(unmet)
