"""A training run's MODEL_DIR as a translator: its gin config, vocabulary and parameters.

A run leaves everything translation needs in MODEL_DIR (see `run_layout`):
`config.gin` (the operative config), `vocab.model` and Orbax checkpoints. Loading reads
only the checkpoint's 'params' item, never the optimizer state, so a model that trained
with Adam's two moments per weight translates in a third of the memory.

A run's config.gin is read into values (`SavedRun`) on a gin config of its own, so loading
a run, or several, leaves the process's gin config as it was. Decoding settings given as
arguments (beam size, alpha, batch size) override the run's. A command that works with a
run's corpora and mixtures makes the run's config its own explicitly (`adopt_run_config`).
Where the run (or --yoruba_diacritics) names a Yoruba diacritics run, its outputs into
yor_Latn are restored by that run's model (`diacritics.MarkRestoringTranslator`).
"""

from collections.abc import Iterator
from collections.abc import Mapping
from collections.abc import Sequence
import dataclasses
from typing import Any

import flax.linen as nn
import gin
import jax

from t5x_mt.runs import averaging
from t5x_mt.runs import checkpoints
from t5x_mt.config import configurables
from t5x_mt.decoding import ensemble
from t5x_mt.decoding import family_routing
from t5x_mt.core import files
from t5x_mt.config import gin_utils
from t5x_mt.decoding import back_translation
from t5x_mt.decoding import diacritics
from t5x_mt.decoding import inference
from t5x_mt.decoding import sequence_scoring
from t5x_mt.model import models
from t5x_mt.model import network
from t5x_mt.core import partitioning
from t5x_mt.runs import run_layout
from t5x_mt.runs import run_vocabulary
from t5x_mt.data import settings
from t5x_mt.data import tags
from t5x_mt.data import vocab
from t5x_mt.data import wmt22
from t5x_mt.data.yoruba import marking_lexicon
from t5x_mt.core import validation
from t5x_mt.core.directions import Direction
from t5x_mt.core.errors import UserError

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


@dataclasses.dataclass(frozen=True)
class SavedRun:
  """What a run folder's config.gin binds, as values, with the files beside it."""
  run_dir: files.AnyPath
  vocabulary_file: files.AnyPath
  source_vocabulary_file: str | None  # Where the run segments sources with a model of its own.
  model: network.TransformerConfig  # Over the embedding rows of its vocabulary.
  data: settings.DataSettings
  decode: inference.DecodeSettings
  rules: partitioning.LogicalRules

  def decode_settings(self, overrides: Mapping[str, Any]) -> inference.DecodeSettings:
    """The run's decoding settings with `overrides` (DecodeSettings fields) in force."""
    return dataclasses.replace(self.decode, **overrides)


def read_run(checkpoint_dir: str, flag: str = '--checkpoint_dir') -> SavedRun:
  """The run's settings from its config.gin, read on a gin config of its own (the process's
  is left as it was); a UserError naming `flag` where the folder is no run.

  Unknown configurables are skipped, so a run written by a newer or older t5x_mt (or with
  project-specific bindings) still loads for translation.
  """
  layout = run_layout.RunLayout(checkpoint_dir)
  config_file = _run_file(checkpoint_dir, layout.config, 'its config.gin', flag)
  vocabulary_file = _run_file(checkpoint_dir, layout.vocabulary,
                              'a copy of its SentencePiece model', flag)
  num_pieces = vocab.sentencepiece_processor(vocabulary_file).get_piece_size()
  tags.add_vocabulary_languages(vocabulary_file.read_bytes())
  with gin_utils.isolated_config():
    gin_utils.parse_gin([str(config_file)], [], skip_unknown=True)
    return SavedRun(config_file.parent, vocabulary_file, source_vocabulary_file(checkpoint_dir),
                    configurables.model_config(run_vocabulary.padded_vocab_size(num_pieces)),
                    configurables.data_settings(), configurables.decode_settings(),
                    configurables.axis_rules())


def adopt_run_config(checkpoint_dir: str, flag: str = '--checkpoint_dir') -> files.AnyPath:
  """Makes the run's config.gin the process's gin config, for a command that works with the
  run's own corpora and mixtures (back_translate.py --from_corpus, distill.py); returns
  the run folder. Loading a run's model needs no such step (`read_run`)."""
  config_file = _run_file(checkpoint_dir, run_layout.RunLayout(checkpoint_dir).config,
                          'its config.gin', flag)
  gin.clear_config()
  gin_utils.parse_gin([str(config_file)], [], skip_unknown=True)
  return config_file.parent


def saved_steps(checkpoint_dir: str, flag: str = '--checkpoint_dir') -> list[int]:
  """The run's finished checkpoint steps, ascending; a UserError if it has none."""
  layout = run_layout.RunLayout(checkpoint_dir)
  _run_file(checkpoint_dir, layout.config, 'its config.gin', flag)
  layout.check_not_an_export(flag)
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
  params = _restore_params(run.saved.run_dir, step, run.abstract_params)
  target_languages = translator_overrides.pop('target_languages',
                                              trained_target_languages(run.saved.run_dir))
  return inference.Translator(models.TranslationModel(run.saved.model), params,
                              str(run.saved.vocabulary_file), run.saved.data.tag_strategy,
                              run.saved.decode_settings(translator_overrides),
                              mesh=run.mesh, rules=run.saved.rules,
                              target_languages=target_languages,
                              reverse_target=run.saved.data.reverse_target,
                              source_vocabulary_file=run.saved.source_vocabulary_file)


def load_ensemble(members: Sequence[tuple[str, float]], combination: str, *,
                  mesh_shape: Sequence[int] = (-1, 1),
                  **translator_overrides: Any) -> inference.Translator:
  """A Translator whose model is the `ensemble.Ensemble` of the runs `members` names
  ((run folder, weight) pairs), each at its latest checkpoint.

  The runs must share their vocabulary, tag strategy and target order; in their models
  they may differ. The first run's decoding settings and logical axis rules are the
  ensemble's; the ensemble translates into the languages every run trained into.
  `translator_overrides` as in `load_translator`.
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
      _check_same_targets(loaded[0].saved, run.saved)
    loaded.append(run)
    params.append(_restore_params(run.saved.run_dir, checkpoint_step(directory),
                                  run.abstract_params))
    target_languages.append(trained_target_languages(run.saved.run_dir))
  first = loaded[0].saved
  model = ensemble.Ensemble([models.TranslationModel(run.saved.model) for run in loaded],
                            [weight for _, weight in members], combination,
                            vocab.sentencepiece_processor(first.vocabulary_file)
                            .get_piece_size())
  known = [languages for languages in target_languages if languages is not None]
  target_languages = translator_overrides.pop(
      'target_languages', set.intersection(*known) if known else None)
  return inference.Translator(
      model, tuple(params), str(first.vocabulary_file), first.data.tag_strategy,
      first.decode_settings(translator_overrides), mesh=loaded[0].mesh, rules=first.rules,
      target_languages=target_languages, reverse_target=first.data.reverse_target,
      source_vocabulary_file=first.source_vocabulary_file)


def _source_bytes(run_dir: str) -> bytes | None:
  path = source_vocabulary_file(run_dir)
  return None if path is None else files.path(path).read_bytes()


def _check_same_targets(first: SavedRun, other: SavedRun) -> None:
  """A UserError naming both runs unless `other` tags its inputs and orders its targets
  as `first` does."""
  for setting in ('tag_strategy', 'reverse_target'):
    theirs, ours = (getattr(run.data, setting) for run in (other, first))
    if theirs != ours:
      raise UserError(f'--ensemble: {other.run_dir} has {setting} {theirs!r}, '
                      f'{first.run_dir} {ours!r}; an ensemble\'s runs share it')


def trained_target_languages(run_dir: str | files.AnyPath) -> set[str] | None:
  """The languages the run in `run_dir` trained to translate into (its directions.json),
  None for a run that did not record its directions."""
  trained = run_layout.RunLayout(run_dir).trained_directions()
  return trained and {Direction.parse(d, 'directions.json').tgt_lang for d in trained}


def load_model(checkpoint_dir: str | None, family_models: Mapping[int, str] | None,
               step: int | None, overrides: dict[str, Any],
               ensemble_members: Sequence[tuple[str, float]] | None = None,
               ensemble_combination: str = 'mean_log_prob') -> Any:
  """The translator of run `checkpoint_dir`, of the ensemble of `ensemble_members`
  ((run folder, weight) pairs; `load_ensemble`), or the router over `family_models`
  ({family group: run folder}), its outputs into yor_Latn restored where
  overrides['yoruba_diacritics'] or the (first) run's config.gin names a Yoruba diacritics
  run (`with_restored_marks`).

  The router reads lines in chunks of batches of overrides['batch_size'] sentences, else of
  the largest batch size the family runs' config.gin files bind.
  """
  if ensemble_members is not None:
    translator = load_ensemble(ensemble_members, ensemble_combination, **overrides)
    return with_restored_marks(translator, translator.settings)
  if family_models is None:
    translator = load_translator(checkpoint_dir, step, **overrides)
    return with_restored_marks(translator, translator.settings)
  for directory in family_models.values():
    checkpoint_step(directory, flag='--family_models')  # Each a run, before any loads.
  runs = [read_run(directory, '--family_models') for directory in family_models.values()]
  # The router pivots, so that each leg goes to the model of its own target.
  pivot = {name: overrides[name] for name in ('pivot_language', 'pivot_directions')
           if name in overrides}
  model_overrides = {k: v for k, v in overrides.items() if k not in pivot}
  router = family_routing.FamilyTranslator(
      family_models, lambda directory: load_translator(directory, **model_overrides),
      wmt22.inference_group,
      batch_size=overrides.get('batch_size', max(run.decode.batch_size for run in runs)),
      **pivot)
  return with_restored_marks(router, runs[0].decode_settings(overrides))


def with_restored_marks(translator: Any, decode: inference.DecodeSettings) -> Any:
  """`translator` (a run's, an ensemble's, a family router or a CTranslate2 model), its
  outputs into yor_Latn restored by the Yoruba diacritics run `decode.yoruba_diacritics`
  names; as it is where that is None."""
  if decode.yoruba_diacritics is None:
    return translator
  restorer = load_restorer(decode.yoruba_diacritics, flag='--yoruba_diacritics')
  return diacritics.MarkRestoringTranslator(translator, restorer)


def load_restorer(checkpoint_dir: str, step: int | None = None,
                  batch_size: int | None = None, flag: str = '--checkpoint_dir',
                  lexicon_weight: float = diacritics.LEXICON_WEIGHT,
                  unknown_words: str = 'bare') -> diacritics.Restorer:
  """The restorer trained in `checkpoint_dir` (its latest checkpoint, or `step`) with the
  marking lexicon the run keeps; `batch_size` lines are restored at once (default: the
  run's decoding batch size). `lexicon_weight` 0 with `unknown_words` 'model' restores
  with the model alone, and needs no lexicon.

  A UserError naming `flag` if the folder is no run, a run that trained anything else
  than restoration (yor_Latn-yor_Latn), or one without the lexicon it needs.
  """
  validation.number('--lexicon_weight', lexicon_weight, at_least=0.0)
  validation.choice('--unknown_words', unknown_words, diacritics.UNKNOWN_WORDS)
  checkpoint_step(checkpoint_dir, step, flag)  # A UserError naming what's missing.
  trained = run_layout.RunLayout(checkpoint_dir).trained_directions()
  if trained != [diacritics.DIRECTION.name]:
    raise UserError(f'{flag}: {checkpoint_dir} is not a Yoruba diacritics run (it '
                    f'trained {", ".join(trained or ["no recorded direction"])}, not '
                    f'{diacritics.DIRECTION.name}; train one with '
                    'gin/runs/yoruba_diacritics.gin)')
  overrides = {} if batch_size is None else {'batch_size': batch_size}
  translator = load_translator(checkpoint_dir, step, beam_size=1, **overrides)
  uses_lexicon = lexicon_weight > 0 or unknown_words == 'bare'
  return diacritics.Restorer.of_translator(
      translator, _run_lexicon(checkpoint_dir, flag) if uses_lexicon else None,
      lexicon_weight, unknown_words)


def _run_lexicon(checkpoint_dir: str, flag: str) -> marking_lexicon.MarkingLexicon:
  """The marking lexicon a restoration run keeps; a UserError naming `flag` without one."""
  path = run_layout.RunLayout(checkpoint_dir).corpus_file(marking_lexicon.FILE_NAME)
  if not path.exists():
    raise UserError(f'{flag}: {checkpoint_dir} has no {marking_lexicon.FILE_NAME}, which '
                    'runs of gin/runs/yoruba_diacritics.gin write when they start (give '
                    '--lexicon_weight=0 --unknown_words=model to restore with the model '
                    'alone)')
  return marking_lexicon.MarkingLexicon.from_json(path.read_text(encoding='utf-8'), str(path))


def load_teacher(checkpoint_dir: str | None, step: int | None, decoding: dict[str, Any],
                 ensemble_members: Sequence[tuple[str, float]] | None = None,
                 ensemble_combination: str = 'mean_log_prob') -> back_translation.Teacher:
  """The run `checkpoint_dir` at `step` (latest if None), or the ensemble of
  `ensemble_members` ((run folder, weight) pairs, each at its latest checkpoint), as the
  teacher of back-translation or distillation, with what identifies its output."""
  # How many batches decode at once changes no translation, so a restart may change it.
  output_decoding = {k: v for k, v in decoding.items() if k != 'parallel_batches'}
  if ensemble_members is not None:
    runs = [[str(directory), weight, checkpoint_step(directory, flag='--ensemble')]
            for directory, weight in ensemble_members]
    provenance = {'ensemble': runs, 'ensemble_combination': ensemble_combination}
  else:
    step = checkpoint_step(checkpoint_dir, step)
    provenance = {'checkpoint_dir': str(checkpoint_dir), 'step': step}
  translator = load_model(checkpoint_dir, None, step, decoding, ensemble_members,
                          ensemble_combination)
  return back_translation.Teacher(translator, provenance | {'decoding': output_decoding})


def load_scorer(run_dir: str, *, batch_size: int = 64,
                step: int | None = None) -> sequence_scoring.RunScorer:
  """The scorer of the run in `run_dir` (its MODEL_DIR), with the parameters of `step`
  (latest if None), scoring `batch_size` pairs at a time."""
  return sequence_scoring.RunScorer(load_translator(run_dir, step, batch_size=batch_size))


@dataclasses.dataclass(frozen=True)
class _LoadedRun:
  """A run's settings, the mesh it decodes on and its abstract (shape-only) parameters,
  ready for a checkpoint to restore into."""
  saved: SavedRun
  mesh: jax.sharding.Mesh
  abstract_params: Any


def _load_run(checkpoint_dir: str, mesh_shape: Sequence[int]) -> _LoadedRun:
  saved = read_run(checkpoint_dir)
  mesh = partitioning.create_mesh(mesh_shape)
  return _LoadedRun(saved, mesh, abstract_params(saved.model, mesh, saved.rules))


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
    copy_run_files(run_layout.RunLayout(run.saved.run_dir), run_layout.RunLayout(staging))
    source = checkpoints.RunCheckpoints(str(run.saved.run_dir), read_only=True)
    target = checkpoints.RunCheckpoints(str(staging), keep=1)
    try:
      target.save_params(max(steps), averaging.mean_params(
          _saved_params(source, sorted(steps), run.abstract_params)))
    finally:
      source.close()
      target.close()
  return max(steps)


# What a run's readers need besides its checkpoints: config, vocabularies, directions and
# the base run a LoRA run's checkpoints complete (`RunCheckpoints.base`).
RUN_FILES = ('config', 'vocabulary', 'source_vocabulary', 'directions', 'base_run')


def copy_run_files(source: run_layout.RunLayout, target: run_layout.RunLayout,
                   names: Sequence[str] = RUN_FILES) -> None:
  """Copies the files `names` (RunLayout's names for them) that `source` has."""
  for name in names:
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
