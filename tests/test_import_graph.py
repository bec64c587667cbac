"""Imports point one way: no cycles among the library's modules, the data layer never
reaches up into the registrations, DRO or the training code, and the library never imports
the task registry (data_tasks), which the launch layer sets up and the library reads
through seqio."""

import ast
import pathlib

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ('t5x_mt', 'data_tasks')
# What t5x_mt/data must not import: it serves them, they do not serve it.
ABOVE_THE_DATA_LAYER = ('data_tasks', 't5x_mt.dro', 't5x_mt.train_loop', 't5x_mt.trainer',
                        't5x_mt.actions', 't5x_mt.run', 't5x_mt.configurables')


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


def _above_the_data_layer(module: str) -> bool:
  return any(module == above or module.startswith(above + '.')
             for above in ABOVE_THE_DATA_LAYER)


def _graph() -> dict[str, set[str]]:
  modules = _modules()
  return {name: _imports(path, modules) - {name} for name, path in modules.items()}


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


def test_the_import_graph_has_no_cycle():
  graph = _graph()
  assert len(graph) > 50  # Every module was found.
  cycles = [cycle for module in sorted(graph) if (cycle := _cycle_from(module, graph))]
  assert not cycles, ' -> '.join(cycles[0])


def test_the_data_layer_imports_nothing_above_it():
  graph = _graph()
  upward = {(module, imported) for module, imports in graph.items()
            if module.startswith('t5x_mt.data') for imported in imports
            if _above_the_data_layer(imported)}
  assert not upward


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
  assert _above_the_data_layer('t5x_mt.dro') and _above_the_data_layer('data_tasks')
  assert not _above_the_data_layer('t5x_mt.run_layout')
