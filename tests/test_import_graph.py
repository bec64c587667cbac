"""Imports point one way: the library's packages form layers, each importing only the
layers below it (the order of LAYERS, which each package's docstring states); there are
no cycles among modules; and the library never imports the task registry (data_tasks),
which the launch layer sets up and the library reads through seqio."""

import ast
import pathlib

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ('t5x_mt', 'data_tasks')
# Lowest first: a package may import the ones before it, never one after it.
LAYERS = ('core', 'kernels', 'model', 'data', 'runs', 'decoding', 'evaluation', 'training',
          'config', 'export', 'serving', 'pretrained')


def _modules() -> dict[str, pathlib.Path]:
  modules = {}
  for package in PACKAGES:
    for path in (REPO_ROOT / package).rglob('*.py'):
      parts = list(path.relative_to(REPO_ROOT).with_suffix('').parts)
      if parts[-1] == '__init__':
        parts.pop()
      modules['.'.join(parts)] = path
  return modules


def _imports(path: pathlib.Path, modules: dict[str, pathlib.Path]) -> set[str]:
  """The repository modules `path` imports anywhere in its body (function-level too)."""
  named = set()
  for node in ast.walk(ast.parse(path.read_text(encoding='utf-8'))):
    if isinstance(node, ast.Import):
      named.update(alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
      named.add(node.module)
      named.update(f'{node.module}.{alias.name}' for alias in node.names)
  return {name for name in named if name in modules}


def _graph() -> dict[str, set[str]]:
  modules = _modules()
  return {name: _imports(path, modules) - {name} for name, path in modules.items()}


def _layer(module: str) -> int | None:
  """The index in LAYERS of a t5x_mt module's package; None outside the layers."""
  parts = module.split('.')
  if parts[0] != 't5x_mt' or len(parts) < 2 or parts[1] not in LAYERS:
    return None
  return LAYERS.index(parts[1])


def _upward_imports(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
  return sorted((module, imported) for module, imports in graph.items()
                for imported in imports
                if _layer(module) is not None and _layer(imported) is not None
                and _layer(imported) > _layer(module))


def _cycle_from(start: str, graph: dict[str, set[str]]) -> list[str] | None:
  """A path of imports from `start` back to itself, if there is one."""
  stack, seen = [(start, [start])], set()
  while stack:
    module, path = stack.pop()
    for imported in graph[module]:
      if imported == start:
        return path + [start]
      if imported not in seen:
        seen.add(imported)
        stack.append((imported, path + [imported]))
  return None


def test_every_library_module_lives_in_a_layer():
  graph = _graph()
  assert len(graph) > 100  # Every module was found.
  outside = sorted(module for module in graph if module.startswith('t5x_mt.')
                   and _layer(module) is None)
  assert not outside


def test_no_package_imports_one_above_it():
  assert not _upward_imports(_graph())


def test_the_import_graph_has_no_cycle():
  graph = _graph()
  cycles = [cycle for module in sorted(graph) if (cycle := _cycle_from(module, graph))]
  assert not cycles, ' -> '.join(cycles[0])


def test_each_package_docstring_names_what_it_may_import():
  for layer in LAYERS:
    docstring = ast.get_docstring(ast.parse(
        (REPO_ROOT / 't5x_mt' / layer / '__init__.py').read_text(encoding='utf-8')))
    assert docstring and 'May import' in docstring, layer


def test_the_library_imports_no_task_registry():
  graph = _graph()
  registry_readers = sorted(module for module, imports in graph.items()
                            if module.split('.')[0] == 't5x_mt'
                            and any(imported.split('.')[0] == 'data_tasks'
                                    for imported in imports))
  assert not registry_readers
  # The checker sees an import of the registry where there is one: the launch layer's glue.
  assert 'data_tasks' in graph['data_tasks.from_gin']


def test_the_checker_sees_a_cycle_and_an_upward_import():
  graph = {'a': {'b'}, 'b': {'c'}, 'c': {'a'}, 'd': {'a'}}
  assert _cycle_from('a', graph) == ['a', 'b', 'c', 'a']
  assert _cycle_from('d', graph) is None
  layered = {'t5x_mt.model.network': {'t5x_mt.data.directions'},
             't5x_mt.data.tags': {'t5x_mt.core.languages'}}
  assert _upward_imports(layered) == [('t5x_mt.model.network', 't5x_mt.data.directions')]
