"""A training run's MODEL_DIR as a translator: its gin config, vocabulary and parameters.

A run leaves everything translation needs in MODEL_DIR (see `run_layout`):
`config.gin` (the operative config), `vocab.model` and Orbax checkpoints. Loading reads
only the checkpoint's 'params' item, never the optimizer state, so a model that trained
with Adam's two moments per weight translates in a third of the memory.

Loading a run parses its config.gin into the process's gin config, replacing whatever was
there: the model hyperparameters, tag strategy, logical axis rules, data and evaluation
settings of the run are then the ones every gin-configurable function sees. Decoding
settings given as arguments (beam size, alpha, batch size) still override the run's. The
task registry is left as it was: a command that reads a loaded run's tasks sets the
registry up with the run's data settings itself.
"""

from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Mapping
from collections.abc import Sequence
import dataclasses
import itertools
import logging
from typing import Any

import flax.linen as nn
import gin
import jax
import tqdm

from t5x_mt.runs import averaging
from t5x_mt.runs import checkpoints
from t5x_mt.config import configurables
from t5x_mt.decoding import ensemble
from t5x_mt.core import files
from t5x_mt.config import gin_utils
from t5x_mt.decoding import inference
from t5x_mt.model import models
from t5x_mt.model import network
from t5x_mt.core import partitioning
from t5x_mt.core import progress
from t5x_mt.runs import run_layout
from t5x_mt.runs import run_vocabulary
from t5x_mt.data import settings
from t5x_mt.data import vocab
from t5x_mt.core.directions import Direction
from t5x_mt.core.errors import UserError

# Sentences handed to Translator.translate at once, in batches: large enough that its
# length-sorting keeps batches full of similar lengths, small enough for a live progress bar.
TRANSLATE_CHUNK_BATCHES = 16


def _run_file(checkpoint_dir: str, path: files.AnyPath, what: str,
              flag: str = '--checkpoint_dir') -> files.AnyPath:
  """`path` (a file of the run `checkpoint_dir`, which `flag` named), or a UserError
  naming what is missing."""
  if not files.path(checkpoint_dir).is_dir():
    raise UserError(f'{flag}: {checkpoint_dir} is not a directory')
  if not path.is_file():
    raise UserError(f'{path}: not found; {flag} must name the MODEL_DIR of a training '
                    f'run, which holds {what}')
  return path


def load_run_config(checkpoint_dir: str, flag: str = '--checkpoint_dir') -> files.AnyPath:
  """Replaces the process's gin config with the run's config.gin; returns the run folder
  (a UserError naming `flag` where it has none).

  Unknown configurables are skipped, so a run written by a newer or older t5x_mt (or with
  project-specific bindings) still loads for translation.
  """
  config_file = _run_file(checkpoint_dir, run_layout.RunLayout(checkpoint_dir).config,
                          'its config.gin', flag)
  gin.clear_config()
  gin_utils.parse_gin([str(config_file)], [], skip_unknown=True)
  return config_file.parent


def saved_steps(checkpoint_dir: str, flag: str = '--checkpoint_dir') -> list[int]:
  """The run's finished checkpoint steps, ascending; a UserError if it has none."""
  _run_file(checkpoint_dir, run_layout.RunLayout(checkpoint_dir).config, 'its config.gin',
            flag)
  run_checkpoints = checkpoints.RunCheckpoints(checkpoint_dir, read_only=True)
  try:
    steps = run_checkpoints.all_steps()
  finally:
    run_checkpoints.close()
  if not steps:
    raise UserError(f'{run_checkpoints.directory}: holds no finished checkpoint')
  return steps


def checkpoint_step(checkpoint_dir: str, step: int | None = None,
                    flag: str = '--checkpoint_dir') -> int:
  """The checkpoint step to load: `step` if the run saved it, else the latest."""
  steps = saved_steps(checkpoint_dir, flag)
  if step is None:
    return steps[-1]
  if step not in steps:
    raise UserError(f'--step: {run_layout.RunLayout(checkpoint_dir).checkpoints} has '
                    f'no checkpoint {step} (it has {", ".join(map(str, steps))})')
  return step


def abstract_params(config: network.TransformerConfig, mesh: jax.sharding.Mesh,
                    rules: partitioning.LogicalRules) -> Any:
  """ShapeDtypeStructs of the model's parameters, sharded as the run's rules say.

  Shapes come from `jax.eval_shape`, so nothing is allocated before Orbax reads each
  device's shard straight into place.
  """
  boxed = models.abstract_variables(config)['params']
  shardings = partitioning.logical_to_shardings(boxed, mesh, rules)
  return jax.tree_util.tree_map(
      lambda leaf, sharding: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=sharding),
      nn.unbox(boxed), shardings)


def _restore_params(run_dir: files.AnyPath, step: int, target: Any) -> Any:
  run_checkpoints = checkpoints.RunCheckpoints(str(run_dir), read_only=True)
  try:
    return run_checkpoints.restore_params(step, target)
  finally:
    run_checkpoints.close()


def load_translator(checkpoint_dir: str, step: int | None = None, *,
                    mesh_shape: Sequence[int] = (-1, 1),
                    **translator_overrides: Any) -> inference.Translator:
  """A Translator with the run's model, parameters at `step` (latest if None) and vocabulary.

  Replaces the process's gin config with the run's (see the module docstring).

  Args:
    checkpoint_dir: the run's MODEL_DIR.
    step: checkpoint step to load; None loads the latest.
    mesh_shape: sizes of the mesh axes ('data', 'fsdp', 'model') to translate on; the default
      replicates the parameters and splits batches over every local device.
    **translator_overrides: `inference.DecodeSettings` fields (beam_size, alpha,
      batch_size, ...) that take precedence over the run's config.gin, and the
      Translator's `target_languages` (default: those of the run's directions.json).
  """
  step = checkpoint_step(checkpoint_dir, step)
  run = _load_run(checkpoint_dir, mesh_shape)
  params = _restore_params(run.run_dir, step, run.abstract_params)
  target_languages = translator_overrides.pop('target_languages',
                                              trained_target_languages(run.run_dir))
  data_settings = configurables.data_settings()
  return inference.Translator(models.TranslationModel(run.config), params,
                              str(run.vocabulary_file), data_settings.tag_strategy,
                              configurables.decode_settings(**translator_overrides),
                              mesh=run.mesh, rules=run.rules, target_languages=target_languages,
                              reverse_target=data_settings.reverse_target,
                              source_vocabulary_file=run.source_vocabulary_file)


def load_ensemble(members: Sequence[tuple[str, float]], combination: str, *,
                  mesh_shape: Sequence[int] = (-1, 1),
                  **translator_overrides: Any) -> inference.Translator:
  """A Translator whose model is the `ensemble.Ensemble` of the runs `members` names
  ((run folder, weight) pairs), each at its latest checkpoint.

  The runs must share their vocabulary, tag strategy and target order; in their models
  they may differ. The first run's decoding settings and logical axis rules are the
  ensemble's, and its config.gin is the process's gin config afterwards; the ensemble
  translates into the languages every run trained into. `translator_overrides` as in
  `load_translator`.
  """
  vocabularies = []
  for directory, _ in members:  # Each must be a run with a checkpoint, before any loads.
    checkpoint_step(directory, flag='--ensemble')
    vocabularies.append(_run_file(directory, run_layout.RunLayout(directory).vocabulary,
                                  'a copy of its SentencePiece model', '--ensemble'))
    if vocabularies[-1].read_bytes() != vocabularies[0].read_bytes() or (
        _source_bytes(directory) != _source_bytes(members[0][0])):
      raise UserError(f'--ensemble: {directory} has another vocabulary than '
                      f'{members[0][0]} ({vocabularies[-1]} or its source_vocab.model differs '
                      f'from {vocabularies[0]}\'s); an ensemble\'s runs share one')
  loaded, params, target_languages = [], [], []
  for directory, _ in members:
    run = _load_run(directory, mesh_shape)
    if loaded:
      _check_same_targets(loaded[0], run)
    loaded.append(run)
    params.append(_restore_params(run.run_dir, checkpoint_step(directory),
                                  run.abstract_params))
    target_languages.append(trained_target_languages(run.run_dir))
  first = loaded[0]
  load_run_config(members[0][0])
  model = ensemble.Ensemble([models.TranslationModel(run.config) for run in loaded],
                            [weight for _, weight in members], combination,
                            vocab.sentencepiece_processor(first.vocabulary_file)
                            .get_piece_size())
  known = [languages for languages in target_languages if languages is not None]
  target_languages = translator_overrides.pop(
      'target_languages', set.intersection(*known) if known else None)
  return inference.Translator(
      model, tuple(params), str(first.vocabulary_file), first.data_settings.tag_strategy,
      configurables.decode_settings(**translator_overrides), mesh=first.mesh,
      rules=first.rules, target_languages=target_languages,
      reverse_target=first.data_settings.reverse_target,
      source_vocabulary_file=first.source_vocabulary_file)


def _source_bytes(run_dir: str) -> bytes | None:
  path = source_vocabulary_file(run_dir)
  return None if path is None else files.path(path).read_bytes()


def _check_same_targets(first: '_Run', other: '_Run') -> None:
  """A UserError naming both runs unless `other` tags its inputs and orders its targets
  as `first` does."""
  for setting in ('tag_strategy', 'reverse_target'):
    theirs, ours = (getattr(run.data_settings, setting) for run in (other, first))
    if theirs != ours:
      raise UserError(f'--ensemble: {other.run_dir} has {setting} {theirs!r}, '
                      f'{first.run_dir} {ours!r}; an ensemble\'s runs share it')


def trained_target_languages(run_dir: str | files.AnyPath) -> set[str] | None:
  """The languages the run in `run_dir` trained to translate into (its directions.json),
  None for a run that did not record its directions."""
  trained = run_layout.RunLayout(run_dir).trained_directions()
  return trained and {Direction.parse(d, 'directions.json').tgt_lang for d in trained}


def model_config_of(vocabulary_file: files.AnyPath) -> network.TransformerConfig:
  """The model of the process's gin config (a loaded run's) over the embedding rows of
  the SentencePiece model `vocabulary_file`."""
  num_pieces = vocab.sentencepiece_processor(vocabulary_file).get_piece_size()
  return configurables.model_config(run_vocabulary.padded_vocab_size(num_pieces))


def load_model(checkpoint_dir: str | None, family_models: Mapping[int, str] | None,
               step: int | None, overrides: dict[str, Any],
               ensemble_members: Sequence[tuple[str, float]] | None = None,
               ensemble_combination: str = 'mean_log_prob',
               ) -> inference.Translator | inference.FamilyTranslator:
  """The translator of run `checkpoint_dir`, of the ensemble of `ensemble_members`
  ((run folder, weight) pairs; `load_ensemble`), or the router over `family_models`
  ({family group: run folder}).

  The router reads lines in chunks of batches of overrides['batch_size'] sentences, else of
  the largest batch size the family runs' config.gin files bind. Reading them leaves the
  last run's config as the process's gin config, as loading its model does.
  """
  if ensemble_members is not None:
    return load_ensemble(ensemble_members, ensemble_combination, **overrides)
  if family_models is None:
    return load_translator(checkpoint_dir, step, **overrides)
  run_batch_sizes = []
  for directory in family_models.values():
    checkpoint_step(directory)  # Each must be a run with a checkpoint, before any loads.
    load_run_config(directory)
    run_batch_sizes.append(configurables.decode_settings().batch_size)
  # The router pivots, so that each leg goes to the model of its own target.
  pivot = {name: overrides[name] for name in ('pivot_language', 'pivot_directions')
           if name in overrides}
  model_overrides = {k: v for k, v in overrides.items() if k not in pivot}
  return inference.FamilyTranslator(
      family_models, lambda directory: load_translator(directory, **model_overrides),
      batch_size=overrides.get('batch_size', max(run_batch_sizes)), **pivot)



@dataclasses.dataclass(frozen=True)
class _Run:
  """A run's files and its model, with the abstract (shape-only) parameters to restore."""
  run_dir: files.AnyPath
  vocabulary_file: files.AnyPath
  source_vocabulary_file: str | None  # Where the run segments sources with a model of its own.
  config: network.TransformerConfig
  data_settings: settings.DataSettings
  mesh: jax.sharding.Mesh
  rules: partitioning.LogicalRules
  abstract_params: Any


def _load_run(checkpoint_dir: str, mesh_shape: Sequence[int]) -> _Run:
  """The run's config (made the process's gin config), vocabulary and abstract parameters."""
  run_dir = load_run_config(checkpoint_dir)
  vocabulary_file = _run_file(checkpoint_dir, run_layout.RunLayout(run_dir).vocabulary,
                              'a copy of its SentencePiece model')
  config = model_config_of(vocabulary_file)
  mesh = partitioning.create_mesh(mesh_shape)
  rules = configurables.axis_rules()
  return _Run(run_dir, vocabulary_file, source_vocabulary_file(run_dir), config,
              configurables.data_settings(), mesh, rules, abstract_params(config, mesh, rules))


def source_vocabulary_file(run_dir: str | files.AnyPath) -> str | None:
  """The run's own model for segmenting sources (`run_layout.RunLayout.source_vocabulary`),
  None where its vocabulary segments both sides."""
  path = run_layout.RunLayout(run_dir).source_vocabulary
  return str(path) if path.is_file() else None


def average_checkpoints(checkpoint_dir: str, steps: Sequence[int], output_dir: str) -> int:
  """Writes the mean parameters of a run's checkpoints at `steps` as a run folder.

  `output_dir` gets the run's config.gin and vocab.model and one params-only checkpoint
  at the last of `steps`, so translate.py, evaluate.py and fine-tuning read it like any
  run. It appears whole or not at all (`files.staged_folder`).
  Returns the step it was saved at.
  """
  output = files.path(output_dir)
  if output.exists() and any(output.iterdir()):
    raise UserError(f'--output_dir: {output} exists and is not empty')
  for step in steps:
    checkpoint_step(checkpoint_dir, step)
  run = _load_run(checkpoint_dir, (-1, 1))
  with files.staged_folder(output) as staging:
    copy_run_files(run_layout.RunLayout(run.run_dir), run_layout.RunLayout(staging))
    source = checkpoints.RunCheckpoints(str(run.run_dir), read_only=True)
    target = checkpoints.RunCheckpoints(str(staging), keep=1)
    try:
      target.save_params(max(steps), averaging.mean_params(
          _saved_params(source, sorted(steps), run.abstract_params)))
    finally:
      source.close()
      target.close()
  return max(steps)


def copy_run_files(source: run_layout.RunLayout, target: run_layout.RunLayout) -> None:
  """What a run's readers need besides its checkpoints: config, vocabularies, directions."""
  for name in ('config', 'vocabulary', 'source_vocabulary', 'directions'):
    if getattr(source, name).is_file():
      files.write_bytes_atomically(getattr(target, name), getattr(source, name).read_bytes())


def _saved_params(run_checkpoints: checkpoints.RunCheckpoints, steps: Sequence[int],
                  target: Any) -> Iterator[Any]:
  """The parameters saved at each of `steps`, restored one at a time like `target`.

  All must have the shapes of the first (UserError otherwise, e.g. across a vocabulary
  growth).
  """
  for step in steps:
    if run_checkpoints.saved_shapes(step) != run_checkpoints.saved_shapes(steps[0]):
      raise UserError(f'{run_checkpoints.directory}: checkpoints {steps[0]} and {step} have '
                      'different shapes (a vocabulary grew between them); average steps of '
                      'one shape')
    yield run_checkpoints.restore_params(step, target)


def translate_lines(translator: inference.Translator | inference.FamilyTranslator,
                    lines: Sequence[str], src_lang: str, tgt_lang: str, *,
                    progress_bar: bool = False, source_name: str = 'input') -> list[str]:
  """Translations of one sentence per line, line for line (see `stream_translations`)."""
  return list(itertools.chain.from_iterable(stream_translations(
      translator, lines, src_lang, tgt_lang, total=len(lines), progress_bar=progress_bar,
      source_name=source_name)))


def stream_translations(translator: inference.Translator | inference.FamilyTranslator,
                        lines: Iterable[str], src_lang: str, tgt_lang: str, *,
                        total: int | None = None, progress_bar: bool = False,
                        source_name: str = 'input', nbest: int = 0
                        ) -> Iterator[list[str]] | Iterator[list[list[inference.Hypothesis]]]:
  """Translations of one sentence per line, one chunk of consecutive lines at a time;
  with `nbest` each line's n-best list (`Translator.translate_nbest`) instead, an empty
  line's holding one empty hypothesis scored 0.

  `lines` is read only as far as the chunk being translated, so a caller that writes each
  chunk as it comes holds one chunk, and its reader sees output before the input ends.
  Empty (or blank) lines become empty lines without reaching the model, which would
  otherwise invent a sentence from the tag alone. A line longer than the model's input
  is translated from its start, with a warning naming `source_name` and the line number.
  The progress bar counts lines up to `total` (None: the count alone).
  """
  translator.check_direction(src_lang, tgt_lang)
  lines = iter(lines)
  with _translation_bar(translator, src_lang, tgt_lang, total, 0, progress_bar) as bar:
    line_number = 1
    while chunk := list(itertools.islice(lines, _chunk_size(translator))):
      yield _translate_lines_chunk(translator, chunk, src_lang, tgt_lang, bar, source_name,
                                   line_number, nbest)
      line_number += len(chunk)


def translation_chunks(translator: inference.Translator, sentences: Sequence[str],
                       src_lang: str, tgt_lang: str, *, start: int = 0,
                       progress_bar: bool = False) -> Iterator[list[str]]:
  """Translations of sentences[start:], one chunk of consecutive sentences at a time.

  A caller that stores each chunk as it comes (launch/back_translate.py) loses at most
  one chunk to a kill. The progress bar counts from `start`.
  """
  chunk_size = _chunk_size(translator)
  with _translation_bar(translator, src_lang, tgt_lang, len(sentences), start,
                        progress_bar) as bar:
    for chunk_start in range(start, len(sentences), chunk_size):
      yield _translate_chunk(translator, sentences[chunk_start:chunk_start + chunk_size],
                             src_lang, tgt_lang, bar)


def _chunk_size(translator: inference.Translator | inference.FamilyTranslator) -> int:
  return translator.batch_size * TRANSLATE_CHUNK_BATCHES


def _translation_bar(translator: inference.Translator | inference.FamilyTranslator,
                     src_lang: str, tgt_lang: str, total: int | None, start: int,
                     shown: bool) -> tqdm.tqdm:
  """A bar named by the direction's path that counts each sentence once per leg (a
  pivoted direction's twice), from `start` sentences done."""
  legs = translator.legs(src_lang, tgt_lang)
  path = '-'.join([src_lang] + [leg_tgt for _, leg_tgt in legs])
  return progress.bar(total=None if total is None else total * len(legs), desc=path,
                      unit='sentence', shown=shown, initial=start * len(legs))


def _translate_chunk(translator: inference.Translator | inference.FamilyTranslator,
                     sentences: Sequence[str], src_lang: str, tgt_lang: str,
                     bar: tqdm.tqdm, nbest: int = 0) -> list[str] | list[list[Any]]:
  """Translations of `sentences` (with `nbest`, their n-best lists), each one line (a
  newline inside becomes a space); `bar` moves with each decoded batch."""
  if not sentences:
    return []
  one_line = lambda text: ' '.join(text.splitlines())
  if nbest:
    lists = translator.translate_nbest(sentences, src_lang, tgt_lang, nbest,
                                       on_batch=bar.update)
    return [[h._replace(text=one_line(h.text)) for h in hypotheses] for hypotheses in lists]
  translations = translator.translate(sentences, src_lang, tgt_lang, on_batch=bar.update)
  return [one_line(translation) for translation in translations]


def _translate_lines_chunk(translator: inference.Translator | inference.FamilyTranslator,
                           lines: Sequence[str], src_lang: str, tgt_lang: str,
                           bar: tqdm.tqdm, source_name: str, first_line_number: int,
                           nbest: int = 0) -> list[str] | list[list[Any]]:
  """`_translate_chunk` of the lines that hold text; the others stay empty (and count as
  done at once). An overlong line is named by `source_name` and its line number."""
  to_translate = [i for i, line in enumerate(lines) if line.strip()]
  for index in translator.overlong([lines[i] for i in to_translate], src_lang, tgt_lang):
    logging.warning("%s:%d: longer than the model's input; only its start is translated",
                    source_name, first_line_number + to_translate[index])
  bar.update((len(lines) - len(to_translate)) * len(translator.legs(src_lang, tgt_lang)))
  empty = [inference.Hypothesis('', 0.0, 0.0, 0)] if nbest else ''
  outputs = [empty] * len(lines)
  translations = _translate_chunk(translator, [lines[i] for i in to_translate], src_lang,
                                  tgt_lang, bar, nbest)
  for index, translation in zip(to_translate, translations):
    outputs[index] = translation
  return outputs
