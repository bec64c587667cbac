"""The repository's docs stand alone: no file cites a document or folder outside it, and
every `docs/methods.md#<anchor>` a file cites is a heading of docs/methods.md."""

import ast
import pathlib
import re

REPO = pathlib.Path(__file__).resolve().parents[1]
METHODS = REPO / 'docs' / 'methods.md'
README = REPO / 'README.md'

# Files that ship with the repository and are read by its users.
SCANNED_FOLDERS = ('t5x_mt', 'launch', 'data_tasks', 'gin', 'docs')
TEXT_SUFFIXES = ('.py', '.gin', '.md', '.txt')

# Documents outside the repository, and paths into the folder beside it.
OUTSIDE_REFERENCE = re.compile(r'METHODS\.md|DESIGN\.md|\.\./shared\b|(?<![\w/])shared/')

# The one place that says where the sample-data folder is by default: the function that
# looks it up ($T5X_MT_SHARED_DATA names it otherwise).
DATA_LOOKUP = (REPO / 't5x_mt' / 'data' / 'readers.py', 'shared_data_dir')

METHODS_LINK = re.compile(r'docs/methods\.md#([\w-]+)')
MARKDOWN_LINK = re.compile(r'\]\((\.\./README\.md|README\.md|)#([\w-]+)\)')


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


def test_links_from_docs_methods_to_its_own_and_the_readme_sections_exist():
  targets = {'': anchors_of(METHODS), 'README.md': anchors_of(README),
             '../README.md': anchors_of(README)}
  links = MARKDOWN_LINK.findall(METHODS.read_text(encoding='utf-8'))
  broken = [f'{page}#{section}' for page, section in links if section not in targets[page]]
  assert links
  assert not broken, broken

