"""The training run: `build_run` assembles a `Run`, `run_steps` steps it and calls actions.

`train(spec)` is what `launch/train.py` calls with the settings gin bound. Re-running the
same command resumes from the latest checkpoint in MODEL_DIR (parameters, optimizer, step,
input position and DRO's state) and continues the same loss curve.
"""

from collections.abc import Callable, Sequence
import contextlib
import dataclasses
import json
import logging
import os
from typing import Any

import jax

from t5x_mt.training import actions
from t5x_mt.model import adapters
from t5x_mt.runs import checkpoints
from t5x_mt.training import dro
from t5x_mt.core import files
from t5x_mt.training import fine_tuning
from t5x_mt.decoding import inference
from t5x_mt.model import models
from t5x_mt.model import network
from t5x_mt.core import partitioning
from t5x_mt.core import processes
from t5x_mt.core import progress
from t5x_mt.training import run as run_lib
from t5x_mt.training import run_config
from t5x_mt.runs import run_layout
from t5x_mt.runs import run_vocabulary
from t5x_mt.training import sharded_input
from t5x_mt.training import trainer
from t5x_mt.core import directions
from t5x_mt.data import grain_pipeline
from t5x_mt.data import mixtures
from t5x_mt.data import tags
from t5x_mt.data import task_cache
from t5x_mt.core.errors import UserError
from t5x_mt.evaluation import per_direction

def _write_run_files(layout: run_layout.RunLayout, spec: run_config.RunSpec,
                     mixture: mixtures.MixtureView, vocabulary: bytes,
                     direction_names: Sequence[str], robust: dro.DroTraining | None) -> None:
  """config.gin, the vocabulary's copy, the trained directions (with those of the run it
  starts from), DRO's groups and the files its corpora keep with it: what a run's
  readers need."""
  files.write_text_atomically(layout.config, spec.config_text())
  init_from = spec.train.init_from
  inherited = (run_layout.RunLayout(init_from).trained_directions() or []) if init_from else []
  layout.write_directions([*direction_names, *inherited])
  if not layout.vocabulary.exists() or layout.vocabulary.read_bytes() != vocabulary:
    files.write_bytes_atomically(layout.vocabulary, vocabulary)
  if spec.data.source_vocabulary_path:
    files.write_bytes_atomically(layout.source_vocabulary,
                                 files.path(spec.data.source_vocabulary_path).read_bytes())
  if robust:
    files.write_text_atomically(layout.dro_groups, json.dumps(
        robust.groups_record(), indent=2, sort_keys=True) + '\n')
  for name, content in mixtures.run_files(mixture).items():
    files.write_bytes_atomically(layout.corpus_file(name), content)


def _shared_vocabulary(spec: run_config.RunSpec, mixture: mixtures.MixtureView,
                       layout: run_layout.RunLayout, cache: task_cache.TaskCache | None
                       ) -> bytes:
  """The run's SentencePiece model: process 0 reads (or builds) it and sends it to the
  others, which keep a copy at VOCABULARY_PATH where their input pipelines read it (hosts
  of a pod need not share a disk). A run that trains from cached tasks and finds no
  VOCABULARY_PATH takes the cache's: its examples were made with it."""
  path = spec.data.vocabulary_path

  def read_or_build() -> bytes:
    if cache and not files.path(path).exists():
      files.path(os.path.dirname(path)).mkdir(parents=True, exist_ok=True)
      files.write_bytes_atomically(path, cache.vocabulary())
    return run_vocabulary.run_vocabulary(
        path, mixture, spec.vocabulary or run_vocabulary.VocabularyConfig(), layout.vocabulary)

  vocabulary = processes.from_primary(read_or_build)
  if not processes.is_primary() and not (
      files.path(path).exists() and files.path(path).read_bytes() == vocabulary):
    files.path(os.path.dirname(path)).mkdir(parents=True, exist_ok=True)
    files.write_bytes_atomically(path, vocabulary)
  return vocabulary


def _check_targets_are_tagged(strategy: str, direction_names: Sequence[str]) -> None:
  """A UserError for a run that tags no language but translates into several: its model
  could not tell which one a source asks for."""
  targets = sorted({directions.Direction.parse(name, 'MIXTURE_OR_TASK_NAME').tgt_lang
                    for name in direction_names})
  if strategy == tags.NO_TAGS and len(targets) > 1:
    raise UserError(f"TAG_STRATEGY (data_tasks.tag_strategy.strategy): 'none' tags no "
                    f'language, and the mixture translates into {len(targets)} '
                    f'({", ".join(targets)}); choose a strategy with a target tag')


def _run_directions(mixture: mixtures.MixtureView,
                    model: network.TransformerConfig) -> tuple[list[int], list[str]]:
  """The ids and names of the mixture's directions; adapters must cover them all."""
  run_directions = mixture.directions()
  if model.adapter_keys:
    adapters.check_directions(run_directions, model.adapter_by, model.adapter_keys,
                              'MIXTURE_OR_TASK_NAME')
  return [d.id for d in run_directions], [d.name for d in run_directions]


def _robust_training(config: dro.DroConfig, mixture: mixtures.MixtureView,
                     direction_names: Sequence[str]) -> dro.DroTraining:
  """DRO's host-side state for the run's groups; p_g and sampling shares from the data."""
  return dro.DroTraining(
      config, direction_names,
      proportions=mixture.group_shares(config.grouping, config.proportions),
      sampling_shares=mixture.group_shares(config.grouping, 'rates'))


def _seqio_shard_opener(config: run_config.TrainConfig, mixture: mixtures.MixtureView,
                        robust: dro.DroTraining | None
                        ) -> Callable[[sharded_input.InputShard, int], sharded_input.ShardStream]:
  """How an input shard is read from seqio's registered tasks: the mixture at its fixed
  rates, or DRO's group sampler."""
  # pylint: disable=g-import-not-at-top  (TensorFlow: only a run that reads seqio imports it)
  import seqio
  from t5x_mt.data import group_sampler
  from t5x_mt.data import input_pipeline
  from t5x_mt.data import streamed_pipeline
  # pylint: enable=g-import-not-at-top

  def open_shard(shard: sharded_input.InputShard, rows: int) -> sharded_input.ShardStream:
    settings = dict(batch_size=rows, inputs_length=config.inputs_length,
                    targets_length=config.targets_length, seed=config.seed, pack=config.pack,
                    shard=seqio.ShardInfo(*shard))
    if robust and robust.config.mode == 'sampling':
      return group_sampler.GroupSampler(mixture, grouping=robust.config.grouping, **settings)
    with streamed_pipeline.opened_streams() as streams:
      dataset = input_pipeline.train_dataset(config.mixture_or_task_name, **settings)
    return input_pipeline.DatasetStream(dataset, streams)
  return open_shard


def _cache_shard_opener(config: run_config.TrainConfig, mixture: mixtures.MixtureView,
                        cache: task_cache.TaskCache
                        ) -> Callable[[sharded_input.InputShard, int], sharded_input.ShardStream]:
  """How an input shard is read from cached tasks, through Grain."""
  def open_shard(shard: sharded_input.InputShard, rows: int) -> sharded_input.ShardStream:
    return grain_pipeline.CachedTrainStream(
        cache, mixture, shard_index=shard.index, num_shards=shard.num_shards, rows=rows,
        inputs_length=config.inputs_length, targets_length=config.targets_length,
        seed=config.seed, pack=config.pack)
  return open_shard


def training_batches(config: run_config.TrainConfig, mixture: mixtures.MixtureView,
                     robust: dro.DroTraining | None, mesh: jax.sharding.Mesh,
                     num_shards: int, cache: task_cache.TaskCache | None = None
                     ) -> sharded_input.ShardedBatches:
  """The run's global batches, read in `num_shards` input shards: from the cached tasks
  where the run has them (CACHED_TASKS_DIR), else from seqio."""
  open_shard = (_cache_shard_opener(config, mixture, cache) if cache
                else _seqio_shard_opener(config, mixture, robust))
  return sharded_input.ShardedBatches(open_shard, mesh, config.batch_size, num_shards)


def _input_shard_count(config: run_config.TrainConfig, run_checkpoints: checkpoints.RunCheckpoints,
                       start_step: int, mesh: jax.sharding.Mesh) -> int:
  """The run's INPUT_SHARDS, given the checkpoint it resumes from (step 0: none)."""
  saved = (sharded_input.saved_shard_count(
      f'{run_checkpoints.layout.host_state_prefix(start_step)}.input') if start_step else None)
  return sharded_input.shard_count(config.input_shards, saved, mesh, config.batch_size)


def _restore_latest_readable(run_checkpoints: checkpoints.RunCheckpoints,
                             state: trainer.TrainState) -> tuple[int, trainer.TrainState]:
  """The latest checkpoint that can be read, restored into `state` (step 0 and `state`
  itself when there is none). Each damaged one after it is named in a warning and set
  aside, so the run resumes from the one before and later writes that step anew."""
  for step in reversed(run_checkpoints.all_steps()):
    try:
      return step, run_checkpoints.restore(step, state)
    except checkpoints.DamagedCheckpoint as error:
      logging.warning('%s; set aside in %s, resuming from the checkpoint before it', error,
                      run_checkpoints.layout.damaged / str(step))
      run_checkpoints.set_aside(step)
  return 0, state


def _check_lengths_fit_positions(config: run_config.TrainConfig,
                                 model: network.TransformerConfig) -> None:
  """A UserError for an input or target length longer than the table of absolute
  positions the model reads (an imported model's is its checkpoint's): rows past it do
  not exist."""
  stacks = (('decoder', config.targets_length, 'TARGETS_LENGTH'),)
  if not model.decoder_only:
    stacks = (('encoder', config.inputs_length, 'INPUTS_LENGTH'), *stacks)
  for stack, length, macro in stacks:
    if model.positions_of(stack).absolute and length > model.max_length:
      raise UserError(f'{macro}: {length} is longer than the model\'s {model.max_length} '
                      'positions (network.TransformerConfig.max_length); set it to at most '
                      f'{model.max_length}')


def _task_cache(spec: run_config.RunSpec) -> task_cache.TaskCache | None:
  """The run's task cache (CACHED_TASKS_DIR), checked against what it cannot feed."""
  if not spec.data.cached_tasks_dir:
    return None
  dro_config = spec.train.dro
  if dro_config and dro_config.mode == 'sampling':
    raise UserError("CACHED_TASKS_DIR: DRO's sampling mode (dro.DroConfig.mode) draws "
                    "from seqio's tasks; train it with CACHED_TASKS_DIR empty, or use "
                    "mode = 'reweighting'")
  if spec.model.decoder_only:
    raise UserError('CACHED_TASKS_DIR: a language model (network.TransformerConfig.'
                    "decoder_only) is evaluated on seqio's tasks; train it with "
                    'CACHED_TASKS_DIR empty')
  return task_cache.TaskCache(spec.data.cached_tasks_dir)


def build_run(spec: run_config.RunSpec) -> tuple[run_lib.Run, actions.UpdateDro | None]:
  """The run of `spec`, resumed from MODEL_DIR's latest checkpoint if there is one, and
  DRO's action when the run is robust (its state is one of the run's host states).

  Every setting is checked before MODEL_DIR is created; MODEL_DIR's files are
  (re)written only once a resumed checkpoint has restored into this model.
  """
  config = spec.train
  run_dir = files.path(config.model_dir)
  layout = run_layout.RunLayout(run_dir)
  checkpoints.check_writable(config.model_dir)
  _check_lengths_fit_positions(config, spec.model)
  mesh = partitioning.create_mesh(config.mesh_shape, dcn_mesh_shape=config.dcn_mesh_shape)
  rules = spec.axis_rules
  partitioning.check_batch_divisible(config.batch_size, mesh)
  trainer.check_microbatches(config.batch_size, config.num_microbatches,
                             partitioning.batch_shards(mesh))
  optimizer = config.make_optimizer(spec.model)
  cache = _task_cache(spec)
  mixture = (cache.mixture_view(config.mixture_or_task_name) if cache
             else mixtures.mixture_view(config.mixture_or_task_name))
  mixtures.check_train_examples(mixture)
  if not cache:
    mixtures.check_vocabulary(config.mixture_or_task_name, spec.data.vocabulary_path,
                              spec.data.source_vocabulary_path)
  per_direction.check_evaluable(mixture, spec.evaluation,
                                [spec.evaluation.split] + ['test'] * config.evaluate_test_split)
  if spec.model.decoder_only and config.early_stopping_patience:
    raise UserError(f'{run_config.setting_name("early_stopping_patience")}: stops on '
                    'validation chrF++, which a language model (network.TransformerConfig.'
                    'decoder_only) has none of')
  direction_ids, direction_names = _run_directions(mixture, spec.model)
  _check_targets_are_tagged(spec.data.tag_strategy, direction_names)
  vocabulary = _shared_vocabulary(spec, mixture, layout, cache)
  if cache:
    cache.check_made_for(spec.data, vocabulary, spec.data.source_vocabulary_path and
                         files.path(spec.data.source_vocabulary_path).read_bytes())
  model = models.TranslationModel(dataclasses.replace(spec.model, vocab_size=(
      run_vocabulary.padded_vocab_size(run_vocabulary.num_pieces(vocabulary)))))
  state, state_shardings = partitioning.shard_init(
      lambda rng: trainer.init_train_state(model, optimizer, rng, config.inputs_length,
                                           config.targets_length),
      mesh, rules, jax.random.PRNGKey(config.seed))
  robust = config.dro and _robust_training(config.dro, mixture, direction_names)
  with files.removed_on_failure(run_dir) if processes.is_primary() else contextlib.nullcontext():
    run_checkpoints = checkpoints.RunCheckpoints(config.model_dir, keep=config.keep_checkpoints,
                                                 asynchronous=config.async_checkpointing)
    start_step, state = _restore_latest_readable(run_checkpoints, state)
    batches = training_batches(config, mixture, robust, mesh, _input_shard_count(
        config, run_checkpoints, start_step, mesh), cache)
    update_dro = robust and actions.UpdateDro(
        robust, [stream for stream in batches.streams.values()
                 if isinstance(stream, actions.WeightedSampler)])
    host_states = {'input': batches, **({'dro': update_dro} if robust else {})}
    if start_step:
      logging.info('Resuming from checkpoint at step %d', start_step)
      run_checkpoints.restore_host_states(start_step, host_states)
    elif config.init_from:
      state = state.replace(params=fine_tuning.initial_params(
          config.init_from, vocabulary, state.params, spec.data.source_vocabulary_path))
      if spec.model.lora_rank:
        fine_tuning.record_base(run_checkpoints, config.init_from, state.params)
    if processes.is_primary():
      _write_run_files(layout, spec, mixture, vocabulary, direction_names, robust)
  train_step = trainer.jit_train_step(
      trainer.make_train_step(model, optimizer, direction_ids=direction_ids,
                              label_smoothing=config.label_smoothing,
                              num_microbatches=config.num_microbatches,
                              loss_chunk_length=config.loss_chunk_length),
      state_shardings, mesh, rules)
  # VOCABULARY_PATH holds vocab.model's bytes on every process, where SentencePiece can
  # open it by name (it cannot open a gs:// MODEL_DIR's copy).
  translator = inference.Translator(model, state.params, spec.data.vocabulary_path,
                                    spec.data.tag_strategy, spec.decode or inference.DecodeSettings(),
                                    mesh=mesh, rules=rules,
                                    reverse_target=spec.data.reverse_target,
                                    source_vocabulary_file=spec.data.source_vocabulary_path)
  run = run_lib.Run(config=config, layout=layout, model=model, mesh=mesh, rules=rules,
                    state=state, train_step=train_step,
                    schedule=config.learning_rate_schedule, batches=batches,
                    checkpoints=run_checkpoints, translator=translator,
                    mixture=mixture, direction_names=direction_names, start_step=start_step,
                    host_states=host_states)
  if update_dro:
    run.direction_scales = update_dro.direction_scales
  return run, update_dro


def run_steps(run: run_lib.Run, loop_actions: Sequence[actions.Action]) -> int:
  """Steps until TRAIN_STEPS or until an action asks to stop; returns the last step."""
  step_rng = jax.random.PRNGKey(run.config.seed + 1)
  step = run.start_step
  while step < run.config.train_steps and not any(a.stop_requested() for a in loop_actions):
    run.state, metrics = run.train_step(run.state, next(run.batches), step_rng,
                                        run.direction_scales())
    step += 1
    run.progress.update(1)
    for action in loop_actions:
      action.after_step(run, step, metrics)
  return step


def _final_evaluations(run: run_lib.Run, step: int, evaluate: actions.Evaluate,
                       stop_early: actions.StopEarly | None) -> None:
  """The last step's validation scores (with early stopping, beside the best step's), and
  the test split's, scored at the step validation selected."""
  run.translator.params = run.state.params
  summary = evaluate.evaluate(run, step)
  if stop_early:
    stop_early.count_last(run, summary)
    stop_early.report(summary)
  evaluate.write(run, summary, test=False)
  if not run.config.evaluate_test_split:
    return
  selected = stop_early.record.best_step if stop_early else step
  if selected != step:
    run.translator.params = run.checkpoints.restore_params(selected, run.state.params)
  evaluate.write(run, evaluate.evaluate(run, selected, split='test'), test=True)


def train(spec: run_config.RunSpec) -> dict[str, Any]:
  """Trains, checkpoints, logs and evaluates a run; returns the last logged metrics."""
  if run_lib.report_if_finished(spec.train):
    return {}
  run, update_dro = build_run(spec)
  config = run.config
  log_metrics = actions.LogMetrics(run, config.log_every_steps,
                                   update_dro.robust if update_dro else None)
  evaluate_class = (actions.EvaluateLanguageModel if run.model.config.decoder_only
                    else actions.Evaluate)
  evaluate = evaluate_class(config.eval_every_steps, spec.evaluation, log_metrics.log)
  stop_early = (actions.StopEarly(run, evaluate, config.early_stopping_patience)
                if config.early_stopping_patience else None)
  stop_on_nonfinite = actions.StopOnNonFinite(config.max_nonfinite_steps)
  preemption = actions.SaveOnPreemption()
  loop_actions = [action for action in (stop_on_nonfinite, update_dro, log_metrics, evaluate,
                                        stop_early,
                                        actions.SaveCheckpoints(config.checkpoint_every_steps),
                                        preemption)
                  if action]
  run.progress = progress.bar(total=config.train_steps, initial=run.start_step, desc='train',
                              unit='step', shown=config.progress_bar)
  try:
    with preemption.listening():
      step = run_steps(run, loop_actions)
    stop_on_nonfinite.check()
  finally:
    run.progress.close()
    run.checkpoints.wait()  # A run that stops here keeps the checkpoints it was writing.
  if preemption.preempted_at is None:
    _final_evaluations(run, step, evaluate, stop_early)
  log_metrics.log.close()
  run.checkpoints.close()
  return log_metrics.last_record
