"""A training run ready to step: what `train_loop.build_run` assembles and actions act on."""

from collections.abc import Callable
import dataclasses
from typing import Any

import jax
import optax
import tqdm

from t5x_mt import checkpoints
from t5x_mt import inference
from t5x_mt import models
from t5x_mt import partitioning
from t5x_mt import run_config
from t5x_mt import run_layout
from t5x_mt import trainer


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
