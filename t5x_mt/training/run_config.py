"""The settings of a training run, as plain frozen values.

Library code takes these explicitly; gin fills them in only at the launch layer
(`t5x_mt/config/configurables.py`), under the names recipes have always bound
(`training.TrainConfig.batch_size = %BATCH_SIZE`, `training.per_direction.EvalConfig.split`).
Each value is checked when the object is made, so a wrong binding fails before any work,
naming the setting as gin writes it.
"""

from collections.abc import Callable, Sequence
import dataclasses
from typing import Any

import numpy as np
import optax

from t5x_mt.core import files
from t5x_mt.core import partitioning
from t5x_mt.training import trainer
from t5x_mt.core import validation
from t5x_mt.data.settings import DataSettings
from t5x_mt.evaluation import per_direction
from t5x_mt.core.errors import UserError

# The gin names of the settings below (configurables.py registers them).
TRAIN_CONFIGURABLE = 'training.TrainConfig'
VOCABULARY_CONFIGURABLE = 'runs.VocabularyConfig'
MODEL_CONFIGURABLE = 'network.TransformerConfig'
DECODE_CONFIGURABLE = 'decoding.DecodeSettings'
# The stable macros bound to TrainConfig fields in gin/runs/base_run.gin.
MACROS = {'model_dir': 'MODEL_DIR', 'train_steps': 'TRAIN_STEPS', 'batch_size': 'BATCH_SIZE',
          'mixture_or_task_name': 'MIXTURE_OR_TASK_NAME', 'mesh_shape': 'MESH_SHAPE',
          'log_every_steps': 'LOG_EVERY_STEPS', 'eval_every_steps': 'EVAL_EVERY_STEPS',
          'checkpoint_every_steps': 'CHECKPOINT_EVERY_STEPS', 'seed': 'SEED',
          'dcn_mesh_shape': 'DCN_MESH_SHAPE', 'input_shards': 'INPUT_SHARDS'}
# Counts and sizes that must be positive, or may also be 0.
_POSITIVE = ('train_steps', 'batch_size', 'log_every_steps', 'checkpoint_every_steps',
             'keep_checkpoints', 'inputs_length', 'targets_length', 'num_microbatches',
             'max_nonfinite_steps')
_NON_NEGATIVE = ('eval_every_steps', 'loss_chunk_length', 'early_stopping_patience')


def setting_name(field: str, configurable: str = TRAIN_CONFIGURABLE) -> str:
  """How a user names a TrainConfig field: its macro and its gin binding."""
  binding = f'{configurable}.{field}'
  return f'{MACROS[field]} ({binding})' if field in MACROS else binding


@dataclasses.dataclass(frozen=True)
class TrainConfig:
  """What a training run does, step by step.

  Attributes:
    model_dir: MODEL_DIR, receives config.gin, vocab.model, metrics.jsonl, tensorboard/,
      checkpoints/, input_state/ and eval/step_<N>.json.
    train_steps: TRAIN_STEPS, the step the run ends at (a resumed run counts from its
      checkpoint).
    batch_size: BATCH_SIZE, global rows per step; with `pack` each row holds as many
      sentence pairs as fit in inputs_length/targets_length, without it one pair.
    mixture_or_task_name: MIXTURE_OR_TASK_NAME, the seqio mixture or task trained on.
    mesh_shape: MESH_SHAPE, sizes of the mesh axes ('data', 'fsdp', 'model'), or
      ('data', 'model') without FSDP; with dcn_mesh_shape, the mesh within one TPU slice
      or GPU node.
    dcn_mesh_shape: DCN_MESH_SHAPE, how many slices (TPU) or processes (GPU nodes) lie
      along each mesh axis, joined by the data-centre network; None: one slice.
    input_shards: INPUT_SHARDS, the streams a global batch is read from
      (sharded_input.py): the batches depend on it, never on the process count. None:
      one per group of processes holding distinct rows (a resumed run keeps its own).
    async_checkpointing: training goes on while a checkpoint's arrays are written.
    eval_every_steps: EVAL_EVERY_STEPS; 0 evaluates only at the end.
    evaluate_test_split: after training, also score the 'test' split into
      MODEL_DIR/test/eval/step_<N>.json.
    learning_rate_schedule: the schedule, a gin reference such as
      `@trainer.inverse_sqrt_schedule()` or `@trainer.constant_schedule()` (fine-tuning).
    optimizer: makes the optimizer from the schedule: `@trainer.make_optimizer`.
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
    max_nonfinite_steps: a step whose loss or gradient norm is not finite is skipped
      (parameters and optimizer state unchanged) and counted in metrics.jsonl's
      `nonfinite_steps`; after this many in a row the run stops with exit 1, its
      checkpoints all finite.
    loss_chunk_length: > 0 computes the loss that many decoder positions at a time, from
      the decoder's states, with its gradients in the same pass
      (fused_loss.chunked_label_smoothed_objective): the same loss and gradients without
      ever holding the [batch, length, vocab] logits. 0: the plain loss over full logits.
  """
  model_dir: str
  train_steps: int
  batch_size: int
  mixture_or_task_name: str
  mesh_shape: Sequence[int] = (-1, 1)
  dcn_mesh_shape: Sequence[int] | None = None
  input_shards: int | None = None
  async_checkpointing: bool = True
  log_every_steps: int = 50
  eval_every_steps: int = 0
  checkpoint_every_steps: int = 500
  keep_checkpoints: int = 3
  seed: int = 0
  inputs_length: int = 64
  targets_length: int = 64
  pack: bool = True
  num_microbatches: int = 1
  label_smoothing: float = 0.1
  evaluate_test_split: bool = True
  progress_bar: bool = True
  learning_rate_schedule: optax.Schedule = dataclasses.field(
      default_factory=trainer.inverse_sqrt_schedule)
  optimizer: Callable[..., optax.GradientTransformation] = trainer.make_optimizer
  init_from: str | None = None
  early_stopping_patience: int = 0
  dro: Any = None
  loss_chunk_length: int = 0
  max_nonfinite_steps: int = 10

  def __post_init__(self):
    object.__setattr__(self, 'model_dir', files.expand(self.model_dir))
    if self.init_from is not None:
      object.__setattr__(self, 'init_from', files.expand(self.init_from))
    for field in _POSITIVE:
      validation.integer(setting_name(field), getattr(self, field), minimum=1)
    for field in _NON_NEGATIVE:
      validation.integer(setting_name(field), getattr(self, field), minimum=0)
    if self.input_shards is not None:
      validation.integer(setting_name('input_shards'), self.input_shards, minimum=1)
    validation.number(setting_name('label_smoothing'), self.label_smoothing,
                      at_least=0.0, below=1.0)
    if not callable(self.learning_rate_schedule):
      raise UserError(f'{setting_name("learning_rate_schedule")}: '
                      f'{self.learning_rate_schedule!r} is not a schedule (bind a gin '
                      'reference such as @trainer.constant_schedule())')
    if self.early_stopping_patience and not self.eval_every_steps:
      raise UserError(f'{setting_name("early_stopping_patience")}: needs EVAL_EVERY_STEPS > 0')

  def make_optimizer(self, model: Any = None) -> optax.GradientTransformation:
    """The optimizer for `model` (a TransformerConfig): one with LoRA trains LoRA alone."""
    with_lora = {'with_lora': True} if model is not None and model.lora_rank else {}
    return self.optimizer(learning_rate=self.learning_rate_schedule, **with_lora)


def _literal(value: Any) -> bool:
  """Whether gin reads `repr(value)` back as the same value."""
  if value is None or isinstance(value, (bool, int, float, str)):
    return True
  if isinstance(value, (tuple, list)):
    return all(map(_literal, value))
  if isinstance(value, dict):
    return all(map(_literal, value)) and all(map(_literal, value.values()))
  return False


def _gin_value(value: Any) -> str | None:
  """`value` as gin writes it (a dtype by its name), None if gin cannot hold it."""
  if _literal(value):
    return repr(value)
  try:
    return repr(np.dtype(value).name)
  except TypeError:
    return None


def bindings_of(configurable: str, settings: Any, skip: Sequence[str] = ()) -> list[str]:
  """The gin bindings that make `configurable` give `settings` (a dataclass) again."""
  lines = []
  for field in dataclasses.fields(settings):
    text = _gin_value(getattr(settings, field.name))
    if field.name not in skip and text is not None:
      lines.append(f'{configurable}.{field.name} = {text}')
  return lines


@dataclasses.dataclass(frozen=True)
class RunSpec:
  """Everything `train_loop.build_run` needs, gathered by the launch layer.

  `model` is checked before any data is read; its `vocab_size` is replaced by the
  embedding rows of the run's vocabulary once that is known. `data` must be the settings
  the task registry was set up with (vocabulary file, tags, temperature): the run reads
  the registry's tasks (`build_run` checks that they encode with its vocabulary) and
  translates with the same vocabulary and tags. `operative_config` gives the text
  MODEL_DIR/config.gin records: the launch layer's gin bindings in force; for a run built
  from objects, by default, the bindings of its settings (`describe`), so that
  translate.py and evaluate.py load it like any other run.
  """
  train: TrainConfig
  model: Any  # network.TransformerConfig
  data: DataSettings = DataSettings()
  evaluation: per_direction.EvalConfig = per_direction.EvalConfig()
  vocabulary: Any = None  # run_vocabulary.VocabularyConfig; None: its defaults.
  decode: Any = None  # inference.DecodeSettings of evaluations; None: its defaults.
  axis_rules: partitioning.LogicalRules = partitioning.DEFAULT_RULES
  operative_config: Callable[[], str] | None = None

  def config_text(self) -> str:
    return self.operative_config() if self.operative_config else self.describe()

  def describe(self) -> str:
    """The spec's settings as gin bindings under the names the launch layer binds (what
    a schedule, optimizer or DRO object holds is not written)."""
    lines = ['import t5x_mt.config.configurables', '',
             *bindings_of(TRAIN_CONFIGURABLE, self.train, skip=('dro',)),
             *bindings_of(per_direction.EVAL_CONFIGURABLE, self.evaluation),
             *bindings_of(MODEL_CONFIGURABLE, self.model, skip=('vocab_size',)),
             f'data_tasks.vocabulary_path.path = {self.data.vocabulary_path!r}',
             f'data_tasks.tag_strategy.strategy = {self.data.tag_strategy!r}',
             f'data_tasks.reverse_target.enabled = {self.data.reverse_target!r}']
    if self.vocabulary is not None:
      lines += bindings_of(VOCABULARY_CONFIGURABLE, self.vocabulary)
    if self.decode is not None:
      lines += bindings_of(DECODE_CONFIGURABLE, self.decode)
    return '\n'.join(lines) + '\n'
