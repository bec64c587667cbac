"""The training run: from a gin config to checkpoints, metrics and evaluation files.

`train()` is what `launch/train.py` calls once gin is parsed. Re-running the same command
resumes from the latest checkpoint in MODEL_DIR (parameters, optimizer, step and input
position) and continues the same loss curve.
"""

from collections.abc import Callable, Sequence
import dataclasses
import json
import logging
import pathlib
import time
from typing import Any

from flax import traverse_util
import flax.linen as nn
import gin
import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec
import numpy as np
import tensorboardX
import tensorflow as tf
import tqdm

import data_tasks
from t5x_mt import adapters
from t5x_mt import checkpoints
from t5x_mt import dro
from t5x_mt import evaluation
from t5x_mt import files
from t5x_mt import inference
from t5x_mt import network
from t5x_mt import partitioning
from t5x_mt import trainer
from t5x_mt import validation
from t5x_mt.data import corpora
from t5x_mt.data import directions
from t5x_mt.data import group_sampler
from t5x_mt.data import input_pipeline
from t5x_mt.data import vocab
from t5x_mt.data import vocab_merge
from t5x_mt.errors import UserError

VOCABULARY_FILE = 'vocab.model'
CONFIG_FILE = 'config.gin'
METRICS_FILE = 'metrics.jsonl'
BEST_FILE = 'best.json'
DRO_GROUPS_FILE = 'dro_groups.json'
DIRECTIONS_FILE = 'directions.json'

# The model's hyperparameters come from gin/models/*.gin; the vocabulary size from the run.
model_config = gin.external_configurable(network.TransformerConfig, module='network')
gin.external_configurable(dro.DroConfig, module='dro')


@gin.configurable
def build_vocabulary(mixture_or_task_name: str, output_path: str, vocab_size: int = 8000,
                     alpha: float = 0.3, num_sentences: int = 1_000_000, seed: int = 0) -> str:
  """Trains the run's SentencePiece model on the training side of the mixture."""
  sentences = data_tasks.training_sentences(mixture_or_task_name)
  return vocab.train_sentencepiece(sentences, output_path, vocab_size=vocab_size, alpha=alpha,
                                   num_sentences=num_sentences, seed=seed)


def padded_vocab_size(num_pieces: int, multiple: int = 128) -> int:
  """Embedding rows: the vocabulary rounded up so the 'vocab' axis shards evenly."""
  return -(-num_pieces // multiple) * multiple


def run_vocabulary(mixture_or_task_name: str, model_dir: pathlib.Path) -> bytes:
  """The run's SentencePiece model, built from the mixture if VOCABULARY_PATH does not
  exist yet.

  A copy lives in MODEL_DIR (`_write_run_files`) so that translation needs only the
  checkpoint directory. A resumed run may switch to a grown version of its vocabulary
  (old pieces unchanged, new ones appended); any other change is an error.
  """
  path = data_tasks.vocabulary_path()
  if not tf.io.gfile.exists(path):
    logging.info('Vocabulary %s not found: building it from %s', path, mixture_or_task_name)
    build_vocabulary(mixture_or_task_name, path)
  local_copy = model_dir / VOCABULARY_FILE
  configured = tf.io.gfile.GFile(path, 'rb').read()
  if local_copy.exists() and local_copy.read_bytes() != configured:
    if not vocab_merge.extends(local_copy.read_bytes(), configured):
      raise UserError(f'VOCABULARY_PATH: {path} differs from the vocabulary this run was '
                      f'trained with ({local_copy}) and does not extend it (launch/'
                      'merge_vocab.py grows a vocabulary; a new vocabulary needs a new MODEL_DIR)')
    logging.info('Vocabulary grown: %s extends %s; new embedding rows are initialised',
                 path, local_copy)
  return configured


def trained_directions(run_dir: pathlib.Path) -> list[str] | None:
  """The directions a run (or the run it was fine-tuned from) trained on, None for a run
  that did not record them."""
  path = run_dir / DIRECTIONS_FILE
  if not path.is_file():
    return None
  return json.loads(path.read_text(encoding='utf-8'))['directions']


def _write_run_files(run_dir: pathlib.Path, vocabulary: bytes, direction_names: Sequence[str],
                     init_from: str | None, robust: dro.DroTraining | None) -> None:
  """config.gin, the vocabulary's copy, the trained directions (with those of the run it
  starts from) and DRO's groups: what a run's readers need."""
  files.write_text_atomically(run_dir / CONFIG_FILE, gin.config_str())
  inherited = (trained_directions(pathlib.Path(init_from)) or []) if init_from else []
  files.write_text_atomically(run_dir / DIRECTIONS_FILE, json.dumps(
      {'directions': sorted({*direction_names, *inherited})}, indent=2) + '\n')
  local_copy = run_dir / VOCABULARY_FILE
  if not local_copy.exists() or local_copy.read_bytes() != vocabulary:
    files.write_bytes_atomically(local_copy, vocabulary)
  if robust:
    files.write_text_atomically(run_dir / DRO_GROUPS_FILE, json.dumps(
        robust.groups_record(), indent=2, sort_keys=True) + '\n')


class MetricsLog:
  """metrics.jsonl (one object per logged step) and TensorBoard event files."""

  def __init__(self, model_dir: pathlib.Path, resume_step: int):
    self.path = model_dir / METRICS_FILE
    self._truncate_after(resume_step)
    self._tensorboard = tensorboardX.SummaryWriter(str(model_dir / 'tensorboard'))

  def _truncate_after(self, step: int) -> None:
    """A resumed run rewrites the steps after its checkpoint; drop their old records (and
    a last one cut short by a kill)."""
    if not self.path.exists():
      return
    kept = [record for record in files.read_json_lines(self.path) if record['step'] <= step]
    files.write_text_atomically(self.path, ''.join(
        json.dumps(record, sort_keys=True) + '\n' for record in kept))

  def write(self, record: dict[str, Any]) -> None:
    with self.path.open('a', encoding='utf-8') as f:
      f.write(json.dumps(record, sort_keys=True) + '\n')
    for name, value in record.items():
      if name != 'step':
        self._tensorboard.add_scalar(name, value, record['step'])
    self._tensorboard.flush()


@gin.configurable
def evaluate_directions(translator: inference.Translator, mixture_or_task_name: str, step: int,
                        *, split: str = 'validation', corpus: str | None = None,
                        max_sentences: int | None = 200,
                        spm_model_path: str | None = None) -> dict[str, Any]:
  """Translates each direction's `split` and scores it (the eval/step_<N>.json summary).

  By default each direction is evaluated on the `split` of the first of its training
  corpora that has one (back-translations have none); `corpus` evaluates the same
  directions on another registered corpus (e.g. train on NTREX-128, validate on
  FLORES-200 dev). A direction several corpora train is evaluated once.
  """
  scores = {}
  for direction in data_tasks.mixture_directions(mixture_or_task_name):
    source = corpora.get_corpus(corpus or direction.corpus)
    if direction.name in scores or (corpus is None and split not in source.splits()):
      continue
    pairs = source.pairs(split, direction.src_lang, direction.tgt_lang)[:max_sentences]
    if not pairs:
      continue
    sources, references = zip(*pairs)
    hypotheses = translator.translate(list(sources), direction.src_lang, direction.tgt_lang)
    scores[direction.name] = evaluation.score_direction(hypotheses, list(references),
                                                        spm_model_path=spm_model_path)
  summary = evaluation.summarize(step, scores)
  summary['split'] = split
  return summary


def _write_evaluation(model_dir: pathlib.Path, summary: dict[str, Any], test: bool) -> None:
  evaluation.write_eval_json(str(model_dir / 'test') if test else str(model_dir), summary)
  print(evaluation.format_table(summary), flush=True)



@dataclasses.dataclass
class EarlyStopping:
  """The best validation average chrF++ so far, its step, and evaluations since; kept in
  MODEL_DIR/best.json so that a resumed run keeps counting."""
  path: pathlib.Path
  best_step: int | None = None
  best_chrf: float = float('-inf')
  evaluations_since_best: int = 0

  @classmethod
  def load(cls, run_dir: pathlib.Path) -> 'EarlyStopping':
    path = run_dir / BEST_FILE
    if not path.exists():
      return cls(path)
    record = json.loads(path.read_text(encoding='utf-8'))
    return cls(path, record['step'], record['chrf'], record['evaluations_since_best'])

  def update(self, step: int, summary: dict[str, Any]) -> bool:
    """Counts one evaluation; True if it is the best so far."""
    chrf = summary['average']['chrf']
    improved = chrf > self.best_chrf
    if improved:
      self.best_step, self.best_chrf, self.evaluations_since_best = step, chrf, 0
    else:
      self.evaluations_since_best += 1
    files.write_text_atomically(self.path, json.dumps({
        'step': self.best_step, 'chrf': self.best_chrf,
        'evaluations_since_best': self.evaluations_since_best}, indent=2) + '\n')
    return improved

  def should_stop(self, patience: int) -> bool:
    return self.best_step is not None and self.evaluations_since_best >= patience


def _schedule(name: str):
  if name == 'inverse_sqrt':
    return trainer.inverse_sqrt_schedule()
  if name == 'constant':
    return trainer.constant_schedule()
  raise UserError(f'train.learning_rate_schedule: {name!r} is not inverse_sqrt or constant')


def _check_loop_settings(**settings: Any) -> None:
  """The training loop's counts and sizes, named as gin binds them, before any work."""
  macros = {'train_steps': 'TRAIN_STEPS', 'batch_size': 'BATCH_SIZE',
            'log_every_steps': 'LOG_EVERY_STEPS', 'eval_every_steps': 'EVAL_EVERY_STEPS',
            'checkpoint_every_steps': 'CHECKPOINT_EVERY_STEPS'}
  name = lambda setting: (f'{macros[setting]} (train_loop.train.{setting})' if setting in macros
                          else f'train_loop.train.{setting}')
  minimums = {'eval_every_steps': 0, 'loss_chunk_length': 0, 'early_stopping_patience': 0}
  for setting, value in settings.items():
    if setting == 'label_smoothing':
      validation.number(name(setting), value, at_least=0.0, below=1.0)
    else:
      validation.integer(name(setting), value, minimum=minimums.get(setting, 1))
  if settings['early_stopping_patience'] and not settings['eval_every_steps']:
    raise UserError('train_loop.train.early_stopping_patience: needs EVAL_EVERY_STEPS > 0')


def _initial_params(init_from: str, vocabulary: bytes, target: Any) -> Any:
  """The latest parameters of run `init_from`, which must share this run's vocabulary."""
  parent = pathlib.Path(init_from)
  parent_vocabulary = parent / VOCABULARY_FILE
  if not parent_vocabulary.is_file():
    raise UserError(f'train.init_from: {parent_vocabulary} not found (not a run folder)')
  if parent_vocabulary.read_bytes() != vocabulary:
    raise UserError(f'train.init_from: {parent_vocabulary} differs from this run\'s '
                    'vocabulary; set VOCABULARY_PATH to it')
  parent_checkpoints = checkpoints.RunCheckpoints(str(parent), read_only=True)
  try:
    logging.info('Starting from the parameters of %s', parent)
    return _in_parent_layout(parent_checkpoints, target,
                             lambda target: _with_new_adapters(parent_checkpoints, target))
  except UserError as error:
    raise UserError(f'train.init_from: {error}') from None
  finally:
    parent_checkpoints.close()


def _in_parent_layout(parent: checkpoints.RunCheckpoints, target: Any,
                      restore: Callable[[Any], Any]) -> Any:
  """`restore(target)`, run in the parent's layer layout when it differs from this run's
  (one trained with TransformerConfig.scan_layers, the other without), the result
  converted back and placed as `target` is."""
  step = parent.latest_step()
  saved = parent.saved_shapes(step) if step is not None else {}
  parent_scanned = any(path[:2] == ('encoder', network.SCANNED_LAYERS) for path in saved)
  if not saved or parent_scanned == network.is_scanned(target):
    return restore(target)
  to_parent, back = ((network.stack_layers, network.unstack_layers) if parent_scanned else
                     (network.unstack_layers, network.stack_layers))
  logging.info('Converting the parameters between scanned and unrolled layers')
  restored = back(restore(to_parent(target)))
  return jax.tree.map(lambda value, like: jax.device_put(value, like.sharding), restored,
                      target)


def _with_new_adapters(parent: checkpoints.RunCheckpoints, target: Any) -> Any:
  """The parent's latest parameters; adapters it was built without keep `target`'s fresh
  values (adapters added to a trained base start as the identity)."""
  step = parent.latest_step()
  saved = parent.saved_shapes(step) if step is not None else {}
  flat = traverse_util.flatten_dict(target)
  new = {path for path in flat if path not in saved and
         any(part.startswith(adapters.MODULE_PREFIX) for part in path)}
  if not new:
    return parent.restore_params(step, target)
  logging.info('%d adapter parameters are new: they start at their initial values', len(new))
  restored = parent.restore_params(step, traverse_util.unflatten_dict(
      {path: leaf for path, leaf in flat.items() if path not in new}))
  merged = {**flat, **traverse_util.flatten_dict(restored)}
  return traverse_util.unflatten_dict(merged)


@gin.configurable
def train(model_dir: str = gin.REQUIRED, train_steps: int = gin.REQUIRED,
          batch_size: int = gin.REQUIRED, mixture_or_task_name: str = gin.REQUIRED,
          mesh_shape: Sequence[int] = (-1, 1), log_every_steps: int = 50,
          eval_every_steps: int = 0, checkpoint_every_steps: int = 500,
          keep_checkpoints: int = 3, seed: int = 0, inputs_length: int = 64,
          targets_length: int = 64, pack: bool = True, num_microbatches: int = 1,
          label_smoothing: float = 0.1, evaluate_test_split: bool = True,
          progress_bar: bool = True, learning_rate_schedule: str = 'inverse_sqrt',
          init_from: str | None = None, early_stopping_patience: int = 0,
          dro: dro.DroConfig | None = None, loss_chunk_length: int = 0) -> dict[str, Any]:
  """Trains, checkpoints, logs and evaluates a run; returns the last logged metrics.

  Args:
    model_dir: MODEL_DIR, receives config.gin, vocab.model, metrics.jsonl, tensorboard/,
      checkpoints/, input_state/ and eval/step_<N>.json.
    train_steps: TRAIN_STEPS, the step the run ends at (a resumed run counts from its
      checkpoint).
    batch_size: BATCH_SIZE, global rows per step; with `pack` each row holds as many
      sentence pairs as fit in inputs_length/targets_length, without it one pair.
    mesh_shape: MESH_SHAPE, sizes of the mesh axes ('data', 'model').
    eval_every_steps: EVAL_EVERY_STEPS; 0 evaluates only at the end.
    evaluate_test_split: after training, also score the 'test' split into
      MODEL_DIR/test/eval/step_<N>.json.
    learning_rate_schedule: 'inverse_sqrt' (trainer.inverse_sqrt_schedule) or 'constant'
      (trainer.constant_schedule, for fine-tuning).
    init_from: fine-tuning: a run folder (or launch/average_checkpoints.py output) whose
      latest parameters start this run, with a fresh optimizer, at step 0. Its
      vocab.model must be this run's vocabulary.
    early_stopping_patience: with EVAL_EVERY_STEPS, stop after this many evaluations
      without a better average chrF++ than the best so far; the best step is saved as a
      checkpoint that outlives the rotation of keep_checkpoints, is named in
      MODEL_DIR/best.json and the final summary beside the last step, and is the one the
      test split scores. 0 never stops early.
    dro: distributionally robust optimisation over groups of directions (gin/runs/dro/);
      None trains on the mixture's fixed rates.
    loss_chunk_length: > 0 computes the loss that many decoder positions at a time, from
      the decoder's states, with its gradients in the same pass
      (fused_loss.chunked_label_smoothed_objective): the same loss and gradients without
      ever holding the [batch, length, vocab] logits, for 100k-256k vocabularies, and
      faster than the plain loss on CPU. 0: the plain loss over full logits.
  """
  _check_loop_settings(train_steps=train_steps, batch_size=batch_size,
                       log_every_steps=log_every_steps, eval_every_steps=eval_every_steps,
                       checkpoint_every_steps=checkpoint_every_steps,
                       keep_checkpoints=keep_checkpoints, inputs_length=inputs_length,
                       targets_length=targets_length, num_microbatches=num_microbatches,
                       label_smoothing=label_smoothing, loss_chunk_length=loss_chunk_length,
                       early_stopping_patience=early_stopping_patience)
  run_dir = pathlib.Path(model_dir)
  checkpoints.check_writable(model_dir)
  mesh = partitioning.create_mesh(mesh_shape)
  rules = partitioning.logical_axis_rules()
  partitioning.check_batch_divisible(batch_size, mesh)
  trainer.check_microbatches(batch_size, num_microbatches, mesh.shape['data'])
  schedule = _schedule(learning_rate_schedule)
  optimizer = trainer.make_optimizer(learning_rate=schedule)
  # The model's settings are checked before the data is read and the vocabulary (whose
  # size the model needs) is built.
  adapter_config = model_config(vocab_size=1)
  data_tasks.register_from_config()
  data_tasks.check_train_examples(mixture_or_task_name)
  run_directions = data_tasks.mixture_directions(mixture_or_task_name)
  direction_ids = sorted({directions.direction_id(d.src_lang, d.tgt_lang)
                          for d in run_directions})
  direction_names = [directions.direction_from_id(i) for i in direction_ids]
  if adapter_config.adapter_keys:
    adapters.check_directions(direction_names, adapter_config.adapter_by,
                              adapter_config.adapter_keys, 'MIXTURE_OR_TASK_NAME')
  vocabulary = run_vocabulary(mixture_or_task_name, run_dir)
  config = model_config(vocab_size=padded_vocab_size(data_tasks.VOCABULARY.vocab_size))
  model = network.Transformer(config)

  state, state_shardings = partitioning.shard_init(
      lambda rng: trainer.init_train_state(model, optimizer, rng, inputs_length,
                                           targets_length),
      mesh, rules, jax.random.PRNGKey(seed))
  robust = dro and _robust_training(dro, mixture_or_task_name, direction_names)
  data_iterator = _training_batches(mixture_or_task_name, robust, batch_size=batch_size,
                                    inputs_length=inputs_length, targets_length=targets_length,
                                    seed=seed, pack=pack)
  # MODEL_DIR is created only now that the configuration is known to be valid, and its
  # files are (re)written only once a resumed checkpoint has restored into this model.
  with files.removed_on_failure(run_dir):
    run_checkpoints = checkpoints.RunCheckpoints(model_dir, keep=keep_checkpoints)
    start_step = run_checkpoints.latest_step() or 0
    if start_step:
      logging.info('Resuming from checkpoint at step %d', start_step)
      state = run_checkpoints.restore(start_step, state)
      run_checkpoints.restore_input(start_step, data_iterator)
      if robust:
        robust.restore(_saved_dro_state(run_checkpoints, start_step))
    elif init_from:
      state = state.replace(params=_initial_params(init_from, vocabulary, state.params))
    _write_run_files(run_dir, vocabulary, direction_names, init_from, robust)

  train_step = trainer.jit_train_step(
      trainer.make_train_step(model, optimizer, direction_ids=direction_ids,
                              label_smoothing=label_smoothing,
                              num_microbatches=num_microbatches,
                              loss_chunk_length=loss_chunk_length),
      state_shardings, mesh, rules)
  metrics_log = MetricsLog(run_dir, start_step)
  translator = inference.Translator(model, state.params, str(run_dir / VOCABULARY_FILE),
                                    data_tasks.tag_strategy(), mesh=mesh, rules=rules)
  step_rng = jax.random.PRNGKey(seed + 1)
  last_record: dict[str, Any] = {}
  window_sums, window_start = None, time.perf_counter()
  progress = tqdm.tqdm(total=train_steps, initial=start_step, disable=not progress_bar,
                       desc='train', unit='step', dynamic_ncols=True)
  step = start_step
  early_stopping = EarlyStopping.load(run_dir)
  run_checkpoints.protect(early_stopping.best_step)
  host_state = lambda: {'dro': robust.state()} if robust else None
  while step < train_steps and not (early_stopping_patience and
                                    early_stopping.should_stop(early_stopping_patience)):
    batch = partitioning.host_batch_to_global(
        {name: np.asarray(value) for name, value in next(data_iterator).items()}, mesh)
    state, metrics = train_step(state, batch, step_rng, _direction_scales(robust))
    # Summed on the device (asynchronously) until the next log: the logged loss is the
    # token-weighted mean over the window, not one noisy batch.
    window_sums = metrics if window_sums is None else jax.tree_util.tree_map(
        jnp.add, window_sums, metrics)
    step += 1
    progress.update(1)
    if robust:
      _update_dro(robust, metrics, step, data_iterator)
    if step % log_every_steps == 0 or step == train_steps:
      summary = trainer.summarize_metrics(window_sums, direction_names)
      elapsed = time.perf_counter() - window_start
      last_record = {'step': step, 'loss': summary['loss'],
                     'learning_rate': float(schedule(step - 1)),
                     'tokens_per_second': summary['tokens'] / max(elapsed, 1e-9),
                     'grad_norm': float(metrics['grad_norm']),
                     **{k: v for k, v in summary.items() if k.startswith('loss/')},
                     **(robust.log_record() if robust else {})}
      metrics_log.write(last_record)
      progress.set_postfix(loss=f'{summary["loss"]:.3f}')
      window_sums, window_start = None, time.perf_counter()
    new_best = stopping = False
    if eval_every_steps and step % eval_every_steps == 0 and step != train_steps:
      translator.params = state.params
      summary = evaluate_directions(translator, mixture_or_task_name, step)
      _write_evaluation(run_dir, summary, test=False)
      window_start = time.perf_counter()  # Throughput counts training time only.
      if early_stopping_patience:
        new_best = early_stopping.update(step, summary)
        run_checkpoints.protect(early_stopping.best_step)
        stopping = early_stopping.should_stop(early_stopping_patience)
        if stopping:
          logging.info('Early stopping at step %d: best average chrF++ %.2f at step %d',
                       step, early_stopping.best_chrf, early_stopping.best_step)
    if (step % checkpoint_every_steps == 0 or step == train_steps or new_best or stopping):
      run_checkpoints.save(step, state, data_iterator, host_state())
  progress.close()
  translator.params = state.params
  summary = evaluate_directions(translator, mixture_or_task_name, step)
  if early_stopping_patience and early_stopping.best_step is not None:
    _report_best_and_last(summary, early_stopping)
  _write_evaluation(run_dir, summary, test=False)
  if evaluate_test_split:
    # With early stopping, the test split scores the step selected on validation.
    selected = (early_stopping.best_step if early_stopping_patience and
                early_stopping.best_step is not None else step)
    if selected != step:
      translator.params = run_checkpoints.restore_params(selected, state.params)
    test_summary = evaluate_directions(translator, mixture_or_task_name, selected,
                                       split='test')
    _write_evaluation(run_dir, test_summary, test=True)
  run_checkpoints.close()
  return last_record


def _report_best_and_last(summary: dict[str, Any], early_stopping: EarlyStopping) -> None:
  """Names the best validation step beside the last one in the final summary and log."""
  summary['best'] = {'step': early_stopping.best_step, 'chrf': early_stopping.best_chrf}
  summary['last'] = {'step': summary['step'], 'chrf': summary['average']['chrf']}
  print(f'best step {early_stopping.best_step} (average chrF++ {early_stopping.best_chrf:.2f}),'
        f' last step {summary["step"]} (average chrF++ {summary["average"]["chrf"]:.2f})',
        flush=True)


def _robust_training(config: dro.DroConfig, mixture_or_task_name: str,
                     direction_names: Sequence[str]) -> dro.DroTraining:
  """DRO's host-side state for the run's groups; p_g and sampling shares from the data."""
  return dro.DroTraining(
      config, direction_names,
      proportions=group_sampler.group_shares(mixture_or_task_name, config.grouping,
                                             config.proportions),
      sampling_shares=group_sampler.group_shares(mixture_or_task_name, config.grouping,
                                                 'rates'))


def _training_batches(mixture_or_task_name: str, robust: dro.DroTraining | None, **kwargs):
  """This process's batches: the mixture at its fixed rates, or DRO's group sampler."""
  if robust and robust.config.mode == 'sampling':
    sampler = group_sampler.GroupSampler(mixture_or_task_name,
                                         grouping=robust.config.grouping,
                                         global_batch_size=kwargs.pop('batch_size'), **kwargs)
    sampler.set_weights(robust.weights)
    return sampler
  return iter(input_pipeline.train_dataset(
      mixture_or_task_name, global_batch_size=kwargs.pop('batch_size'), **kwargs))


def _saved_dro_state(run_checkpoints: checkpoints.RunCheckpoints, step: int) -> dict:
  saved = run_checkpoints.restore_host_state(step)
  if not saved or 'dro' not in saved:
    raise UserError(f'{run_checkpoints.model_dir}: checkpoint {step} was saved without '
                    'DRO state; a DRO run cannot resume a plain run (use train.init_from)')
  return saved['dro']


def _direction_scales(robust: dro.DroTraining | None) -> jax.Array | None:
  if robust and robust.config.mode == 'reweighting':
    return jnp.asarray(robust.direction_scales())
  return None


def _update_dro(robust: dro.DroTraining, metrics: dict, step: int, data_iterator) -> None:
  """Folds the step's per-direction losses into DRO's EMAs; at an interval's end, new
  weights for the sampler (the reweighting variant reads them at the next step)."""
  loss_sums, tokens = jax.device_get((metrics['direction_loss_sums'],
                                      metrics['direction_tokens']))
  robust.observe(loss_sums, tokens)
  if robust.after_step(step) and isinstance(data_iterator, group_sampler.GroupSampler):
    data_iterator.set_weights(robust.weights)


def _shard_bytes(abstract_tree: Any, mesh_sizes: dict[str, int], rules) -> int:
  """Bytes one device holds of a boxed abstract tree under the given mesh axis sizes."""
  specs = nn.get_partition_spec(abstract_tree)
  mesh_specs = nn.logical_to_mesh(specs, rules)
  total = 0
  for leaf, spec in zip(jax.tree_util.tree_leaves(nn.unbox(abstract_tree)),
                        jax.tree_util.tree_leaves(
                            mesh_specs, is_leaf=lambda x: isinstance(x, PartitionSpec))):
    shape = list(leaf.shape)
    for dim, axes in enumerate(tuple(spec)[:len(shape)]):
      for axis in (axes if isinstance(axes, tuple) else (axes,)):
        if axis is not None:
          shape[dim] = -(-shape[dim] // mesh_sizes[axis])
    total += int(np.prod(shape, dtype=np.int64)) * leaf.dtype.itemsize
  return total


@gin.configurable
def dry_run(mesh_shape: Sequence[int] = (-1, 1), inputs_length: int = 64,
            targets_length: int = 64, vocab_size: int | None = None) -> dict[str, Any]:
  """Builds the model abstractly and reports its size and per-device memory.

  Nothing is allocated: shapes come from `jax.eval_shape`. The vocabulary size is the
  run's vocabulary file if it exists, else `vocab_size` (gin), else the size the
  vocabulary would be built with.
  """
  if vocab_size is None:
    if tf.io.gfile.exists(data_tasks.vocabulary_path()):
      vocab_size = data_tasks.VOCABULARY.vocab_size
    else:
      vocab_size = gin.query_parameter('build_vocabulary.vocab_size')
      if isinstance(vocab_size, gin.config.ConfigurableReference):
        vocab_size = vocab_size.scoped_configurable_fn()  # A macro such as %VOCAB_SIZE.
  config = model_config(vocab_size=padded_vocab_size(vocab_size))
  model = network.Transformer(config)
  optimizer = trainer.make_optimizer()
  abstract = jax.eval_shape(
      lambda rng: trainer.init_train_state(model, optimizer, rng, inputs_length, targets_length),
      jax.random.PRNGKey(0))
  shape = list(mesh_shape)
  if -1 in shape:
    known = int(np.prod([s for s in shape if s != -1]))
    shape[shape.index(-1)] = max(jax.device_count() // known, 1)
  mesh_sizes = dict(zip(partitioning.MESH_AXES, shape))
  rules = partitioning.logical_axis_rules()
  report = {
      'parameters': network.count_params(config),
      'vocab_size': config.vocab_size,
      'mesh_shape': shape,
      'param_bytes_per_device': _shard_bytes(abstract.params, mesh_sizes, rules),
      'optimizer_bytes_per_device': _shard_bytes(abstract.opt_state, mesh_sizes, rules),
  }
  return report
