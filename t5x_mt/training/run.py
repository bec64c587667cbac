"""A training run ready to step: what `train_loop.build_run` assembles and actions act on;
and a run that already finished, which shows its scores again instead of re-evaluating."""

from collections.abc import Callable
import dataclasses
import json
from typing import Any

import jax
import optax
import tqdm

from t5x_mt.runs import checkpoints
from t5x_mt.evaluation import scoring
from t5x_mt.decoding import inference
from t5x_mt.model import models
from t5x_mt.core import partitioning
from t5x_mt.core import processes
from t5x_mt.training import run_config
from t5x_mt.data import mixtures
from t5x_mt.runs import run_layout
from t5x_mt.training import trainer


@dataclasses.dataclass
class Run:
  """A run ready to step: its state on the mesh, compiled step, batches and checkpoints.

  `host_states` are saved beside each checkpoint (the input position, DRO's averages);
  `direction_scales` gives the train step's per-direction loss scales (DRO's reweighting
  variant) or None.
  """
  config: run_config.TrainConfig
  layout: run_layout.RunLayout
  model: models.TranslationModel
  mesh: jax.sharding.Mesh
  rules: partitioning.LogicalRules
  state: trainer.TrainState
  train_step: Callable[..., tuple[trainer.TrainState, dict]]
  schedule: optax.Schedule
  batches: Any
  checkpoints: checkpoints.RunCheckpoints
  translator: inference.Translator
  mixture: mixtures.MixtureView
  direction_names: list[str]
  start_step: int
  host_states: dict[str, checkpoints.HostState]
  direction_scales: Callable[[], jax.Array | None] = lambda: None
  progress: tqdm.tqdm = dataclasses.field(default_factory=lambda: tqdm.tqdm(disable=True))
  # Seconds spent in evaluations, which throughput does not count.
  paused_seconds: float = 0.0

  def save(self, step: int) -> None:
    """A checkpoint of `step`, once however many actions ask for it."""
    if self.checkpoints.latest_step() != step:
      self.checkpoints.save(step, self.state, self.host_states)


def report_if_finished(config: run_config.TrainConfig) -> bool:
  """Whether the run in MODEL_DIR already trained TRAIN_STEPS steps and scored them at
  the end; if so, process 0 says so and prints the saved scores, so the same command run
  again answers at once instead of evaluating again what it already scored."""
  # Every process reads the run's files: opening its checkpoints synchronises the
  # processes (Orbax), so process 0 alone would wait for the others there.
  summaries = _final_summaries(config)
  if summaries is None:
    return False
  if processes.is_primary():
    print(f'{config.model_dir}: finished at step {config.train_steps} (TRAIN_STEPS); its '
          'scores:', flush=True)
    for summary in summaries:
      print(scoring.format_table(summary), flush=True)
  return True


def _final_summaries(config: run_config.TrainConfig) -> list[dict[str, Any]] | None:
  """The records of the final evaluations (validation at TRAIN_STEPS, then the test split
  where the run scores it) of a run whose latest checkpoint is at TRAIN_STEPS; None for a
  run that has not got there or was stopped before scoring it."""
  layout = run_layout.RunLayout(config.model_dir)
  if not layout.checkpoints.is_dir():
    return None
  run_checkpoints = checkpoints.RunCheckpoints(config.model_dir, read_only=True)
  try:
    latest = run_checkpoints.latest_step()
  finally:
    run_checkpoints.close()
  validation = layout.eval_record(config.train_steps)
  if latest != config.train_steps or not validation.is_file():
    return None
  summaries = [json.loads(validation.read_text(encoding='utf-8'))]
  if config.evaluate_test_split:
    # The test split is scored at the step validation selected (early stopping's best).
    selected = (summaries[0].get('best') or {}).get('step') or config.train_steps
    test = layout.eval_record(selected, 'test')
    if not test.is_file():
      return None
    summaries.append(json.loads(test.read_text(encoding='utf-8')))
  return summaries
