"""What the training loop does besides stepping: each job an `Action` it calls after a step.

The loop (`train_loop.run_steps`) only steps and calls its actions in order; logging,
DRO's weight updates, evaluation, early stopping with its best checkpoint, and periodic
checkpoints are each one class here that holds its own state. Another program adds its
own job by passing one more Action.
"""

from collections.abc import Iterator, Sequence
import contextlib
import dataclasses
import json
import logging
import math
import signal
import sys
import time
import typing
from typing import Any

import jax
from jax.experimental import multihost_utils
import jax.numpy as jnp
import tensorboardX
import tqdm

from t5x_mt.training import baselines
from t5x_mt.training import dro
from t5x_mt.evaluation import per_direction
from t5x_mt.evaluation import scoring
from t5x_mt.core import files
from t5x_mt.core import processes
from t5x_mt.core import progress
from t5x_mt.runs import run_layout
from t5x_mt.training.run import Run
from t5x_mt.training import trainer
from t5x_mt.core.errors import RunFailure

Metrics = dict[str, jax.Array]


class Action:
  """One job of the loop, called after every step; the default does nothing."""

  def after_step(self, run: Run, step: int, metrics: Metrics) -> None:
    """Called once the state of `step` (the number of updates so far) exists."""

  def stop_requested(self) -> bool:
    """True ends the loop before the next step."""
    return False


class _ObjectStoreEventFiles:
  """tensorboardX's event files under a gs:// logdir, written through etils.epath (as the
  run's other files are) instead of tensorboardX's google-cloud-storage client, which
  t5x_mt does not install."""

  def __init__(self):
    # epath's TensorFlow backend opens a GFile as a context manager (kept here, or its
    # generator would close the file when collected), its others a file object, itself
    # one: entered, either is the file, which tensorboardX closes.
    self._opened = contextlib.ExitStack()

  def open(self, path: str):
    return self._opened.enter_context(files.path(path).open('wb'))

  def directory_check(self, path: str) -> None:
    files.path(path).mkdir(parents=True, exist_ok=True)


tensorboardX.record_writer.register_writer_factory('gs', _ObjectStoreEventFiles())


class MetricsLog:
  """metrics.jsonl (one object per logged step) and TensorBoard event files, written by
  process 0 (the others compute the same records and write nothing)."""

  def __init__(self, layout: run_layout.RunLayout, resume_step: int):
    self.path = layout.metrics
    self._writes = processes.is_primary()
    if self._writes:
      self._truncate_after(resume_step)
      # The event files of a run stopped after its checkpoint hold the steps this run
      # logs again: a session start at the first of them hides those from TensorBoard.
      self._tensorboard = tensorboardX.SummaryWriter(str(layout.tensorboard),
                                                     purge_step=resume_step + 1)

  def _truncate_after(self, step: int) -> None:
    """A resumed run rewrites the steps after its checkpoint; drop their old records (and
    a last one cut short by a kill)."""
    if not self.path.exists():
      return
    kept = [record for record in files.read_json_lines(self.path) if record['step'] <= step]
    files.write_text_atomically(self.path, ''.join(
        json.dumps(record, sort_keys=True) + '\n' for record in kept))

  def write(self, record: dict[str, Any]) -> None:
    """One record; a value that is not a finite number is written as null (strict JSON
    readers reject NaN) and left out of TensorBoard."""
    if not self._writes:
      return
    record = {name: value if _finite_or_not_a_number(value) else None
              for name, value in record.items()}
    files.append_text(self.path, json.dumps(record, sort_keys=True, allow_nan=False) + '\n')
    self.write_scalars(record['step'], {name: value for name, value in record.items()
                                        if name != 'step' and value is not None})

  def write_scalars(self, step: int, scalars: dict[str, float]) -> None:
    """TensorBoard scalars of `step` beside the logged ones (evaluation scores), in the
    same event files."""
    if not self._writes:
      return
    for name, value in scalars.items():
      self._tensorboard.add_scalar(name, value, step)
    self._tensorboard.flush()

  def close(self) -> None:
    """Puts every event on disk: the event writer's thread may still hold the last ones,
    which a flush does not wait for."""
    if self._writes:
      self._tensorboard.close()


def _finite_or_not_a_number(value: Any) -> bool:
  return not isinstance(value, float) or math.isfinite(value)


class LogMetrics(Action):
  """Every `every` steps and at the last, one record of the window's token-weighted mean
  losses, the learning rate, throughput and gradient norm (plus DRO's weights); where the
  run's bar is not drawn (a log file), a progress line in the log says the same."""

  def __init__(self, run: Run, every: int, robust: dro.DroTraining | None = None):
    self._every = every
    self._robust = robust
    self.log = MetricsLog(run.layout, run.start_step)
    self._window_sums: Metrics | None = None
    self._window_start = time.perf_counter()
    self._window_start_step = run.start_step
    self._paused_at_start = run.paused_seconds
    self.last_record: dict[str, Any] = {}

  def after_step(self, run: Run, step: int, metrics: Metrics) -> None:
    # Summed on the device (asynchronously) until the next log: the logged loss is the
    # token-weighted mean over the window, not one noisy batch.
    self._window_sums = metrics if self._window_sums is None else jax.tree_util.tree_map(
        jnp.add, self._window_sums, metrics)
    if step % self._every and step != run.config.train_steps:
      return
    summary = trainer.summarize_metrics(self._window_sums, run.direction_names)
    # Throughput counts training time only, not evaluations inside the window.
    elapsed = (time.perf_counter() - self._window_start
               - (run.paused_seconds - self._paused_at_start))
    self.last_record = {'step': step, 'loss': summary['loss'],
                        'learning_rate': float(run.schedule(step - 1)),
                        'tokens_per_second': summary['tokens'] / max(elapsed, 1e-9),
                        'grad_norm': float(metrics['grad_norm']),
                        'nonfinite_steps': int(self._window_sums['nonfinite']),
                        **{k: v for k, v in summary.items()
                           if k.startswith(('loss/', 'tokens/'))},
                        **(self._robust.log_record() if self._robust else {})}
    self.log.write(self.last_record)
    run.progress.set_postfix(loss=f'{summary["loss"]:.3f}')
    progress.report(run.progress, _progress_line(
        self.last_record, run.config.train_steps,
        elapsed / (step - self._window_start_step)))
    self._window_sums, self._window_start = None, time.perf_counter()
    self._window_start_step = step
    self._paused_at_start = run.paused_seconds


def _progress_line(record: dict[str, Any], train_steps: int, seconds_per_step: float) -> str:
  """The step, loss, throughput and time left at the window's pace: what the bar shows."""
  left = tqdm.tqdm.format_interval((train_steps - record['step']) * seconds_per_step)
  return (f"step {record['step']}/{train_steps}: loss {record['loss']:.3f}, "
          f"{record['tokens_per_second']:,.0f} tokens/s, {left} left")


@typing.runtime_checkable
class WeightedSampler(typing.Protocol):
  """An input stream that draws each row from a group by weight (DRO's sampling mode)."""

  def set_weights(self, weights) -> None: ...


class UpdateDro(Action):
  """DRO: folds each step's per-direction losses into the group averages; at an
  interval's end, new weights go to the group sampler (the reweighting variant reads
  them through `direction_scales` at the next step). Saved with each checkpoint."""

  def __init__(self, robust: dro.DroTraining, samplers: Sequence['WeightedSampler']):
    self.robust = robust
    self._samplers = list(samplers)
    self._send_weights()

  def _send_weights(self) -> None:
    for sampler in self._samplers:
      sampler.set_weights(self.robust.weights)

  def after_step(self, run: Run, step: int, metrics: Metrics) -> None:
    loss_sums, tokens = jax.device_get((metrics['direction_loss_sums'],
                                        metrics['direction_tokens']))
    self.robust.observe(loss_sums, tokens)
    if self.robust.after_step(step):
      self._send_weights()

  def direction_scales(self) -> jax.Array | None:
    if self.robust.config.mode == 'reweighting':
      return jnp.asarray(self.robust.direction_scales())
    return None

  def write_state(self, prefix: str) -> None:
    """Process 0 writes it: every process holds the same state."""
    if processes.is_primary():
      files.write_text_atomically(prefix, json.dumps(self.robust.state(), sort_keys=True) + '\n')

  def read_state(self, prefix: str) -> None:
    self.robust.restore(json.loads(files.path(prefix).read_text(encoding='utf-8')))


class Evaluate(Action):
  """Every `every` steps before the last, scores the run's directions into
  eval/step_<N>.json (and, given the run's `log`, into TensorBoard); `latest` holds
  (step, summary) for the actions after it."""

  def __init__(self, every: int, config: per_direction.EvalConfig, log: MetricsLog | None = None):
    self._every = every
    self.config = config
    self._log = log
    self.latest: tuple[int, dict[str, Any]] | None = None

  def after_step(self, run: Run, step: int, metrics: Metrics) -> None:
    if not self._every or step % self._every or step == run.config.train_steps:
      return
    started = time.perf_counter()
    run.translator.params = run.state.params
    summary = self.evaluate(run, step)
    self.write(run, summary, test=False)
    self.latest = (step, summary)
    run.paused_seconds += time.perf_counter() - started

  def evaluate(self, run: Run, step: int, split: str | None = None) -> dict[str, Any]:
    """`evaluate_directions` of the run's mixture with the translator's parameters, under
    a progress bar where the run shows one."""
    return per_direction.evaluate_directions(run.translator, run.mixture, step, self.config,
                                             split, progress_bar=run.config.progress_bar)

  def write(self, run: Run, summary: dict[str, Any], test: bool) -> None:
    """Process 0 writes the scores (every process computed the same) as the record of
    the validation or the test split, as TensorBoard scalars named by that split at the
    evaluated step, and prints their table."""
    if not processes.is_primary():
      return
    role = 'test' if test else 'validation'
    scoring.write_eval_json(run.layout.root, summary, role)
    if self._log is not None:
      self._log.write_scalars(summary['step'], scoring.scalars(summary, role))
    tqdm.tqdm.write(scoring.format_table(summary), file=sys.stdout)
    sys.stdout.flush()


class EvaluateLanguageModel(Evaluate):
  """`Evaluate` for a language model, which translates nothing: each direction's (a
  language's text) per-token loss without label smoothing and its perplexity on the
  split, measured in the training loss's packed batches (`baselines.group_losses`)."""

  def evaluate(self, run: Run, step: int, split: str | None = None) -> dict[str, Any]:
    split = split or self.config.split
    config = run.config
    held_out = baselines.group_losses(
        run.translator, run.mixture, inputs_length=config.inputs_length,
        targets_length=config.targets_length, label_smoothing=0.0,
        loss_chunk_length=config.loss_chunk_length, split=split)
    summary = scoring.summarize_losses(step, held_out['losses'], held_out['tokens'])
    summary.update(split=split, task=config.mixture_or_task_name)
    return summary


@dataclasses.dataclass
class BestRecord:
  """The best validation average chrF++ so far, its step, and evaluations since; kept in
  MODEL_DIR/best.json with every evaluation counted, so that a resumed run counts on from
  those up to its checkpoint."""
  path: files.AnyPath
  best_step: int | None = None
  best_chrf: float = float('-inf')
  evaluations_since_best: int = 0
  # [step, average chrF++] of each evaluation counted, in order.
  evaluations: list[list] = dataclasses.field(default_factory=list)

  @classmethod
  def load(cls, layout: run_layout.RunLayout, resume_step: int) -> 'BestRecord':
    """The record as it stood at checkpoint `resume_step`. A run stopped after an
    evaluation but before the checkpoint of its step evaluates that step again: counted
    twice, it would stop early sooner, and a best step found then would never be saved."""
    path = layout.best
    if not path.exists():
      return cls(path)
    saved = json.loads(path.read_text(encoding='utf-8'))
    if 'evaluations' not in saved:  # Written before best.json listed its evaluations.
      return cls(path, saved['step'], saved['chrf'], saved['evaluations_since_best'])
    record = cls(path)
    for step, chrf in saved['evaluations']:
      if step <= resume_step:
        record._count(step, chrf)
    if len(record.evaluations) < len(saved['evaluations']):
      record._write()
    return record

  def _count(self, step: int, chrf: float) -> bool:
    improved = chrf > self.best_chrf
    if improved:
      self.best_step, self.best_chrf, self.evaluations_since_best = step, chrf, 0
    else:
      self.evaluations_since_best += 1
    self.evaluations.append([step, chrf])
    return improved

  def _write(self) -> None:
    if processes.is_primary():
      files.write_text_atomically(self.path, json.dumps({
          'step': self.best_step, 'chrf': self.best_chrf,
          'evaluations_since_best': self.evaluations_since_best,
          'evaluations': self.evaluations}, indent=2) + '\n')

  def update(self, step: int, summary: dict[str, Any]) -> bool:
    """Counts one evaluation; True if it is the best so far."""
    improved = self._count(step, summary['average']['chrf'])
    self._write()
    return improved


class StopEarly(Action):
  """Stops after `patience` evaluations without a better average chrF++, and saves each
  new best step as a checkpoint that outlives the rotation (kept until a better one)."""

  def __init__(self, run: Run, evaluate: Evaluate, patience: int):
    self._evaluate = evaluate
    self._patience = patience
    self.record = BestRecord.load(run.layout, run.start_step)
    run.checkpoints.protect(self.record.best_step)

  def stop_requested(self) -> bool:
    return (self.record.best_step is not None and
            self.record.evaluations_since_best >= self._patience)

  def after_step(self, run: Run, step: int, metrics: Metrics) -> None:
    if not self._evaluate.latest or self._evaluate.latest[0] != step:
      return
    new_best = self.record.update(step, self._evaluate.latest[1])
    run.checkpoints.protect(self.record.best_step)
    if self.stop_requested():
      logging.info('Early stopping at step %d: best average chrF++ %.2f at step %d',
                   step, self.record.best_chrf, self.record.best_step)
    if new_best or self.stop_requested():
      run.save(step)

  def count_last(self, run: Run, summary: dict[str, Any]) -> None:
    """Counts the evaluation of the step the run ends at, which `Evaluate` leaves to the
    final evaluations, so that a last step better than every earlier one is the best
    (the step the test split scores); a run that stopped early ends at a counted step."""
    evaluations = self.record.evaluations
    if not evaluations or evaluations[-1][0] != summary['step']:
      self.record.update(summary['step'], summary)
      run.checkpoints.protect(self.record.best_step)

  def report(self, summary: dict[str, Any]) -> None:
    """Names the best validation step beside the last one in the final summary and log."""
    summary['best'] = {'step': self.record.best_step, 'chrf': self.record.best_chrf}
    summary['last'] = {'step': summary['step'], 'chrf': summary['average']['chrf']}
    if processes.is_primary():
      print(f'best step {self.record.best_step} (average chrF++ {self.record.best_chrf:.2f}),'
            f' last step {summary["step"]} (average chrF++ {summary["average"]["chrf"]:.2f})',
            flush=True)


class StopOnNonFinite(Action):
  """Ends the run (RunFailure, exit 1) after `limit` steps in a row whose loss or gradient
  norm was not finite; the train step skipped each of them, so no checkpoint holds a
  non-finite value. Each step's flag is read one step late, once the next step is queued,
  so the device is never left idle waiting for the host."""

  def __init__(self, limit: int):
    self._limit = limit
    self._in_a_row = 0
    self._pending: tuple[int, jax.Array] | None = None

  def after_step(self, run: Run, step: int, metrics: Metrics) -> None:
    self.check()
    self._pending = (step, metrics['nonfinite'])

  def check(self) -> None:
    """Counts the pending step; the loop calls it once more after the last step."""
    if self._pending is None:
      return
    step, nonfinite = self._pending
    self._pending = None
    self._in_a_row = self._in_a_row + 1 if int(nonfinite) else 0
    if self._in_a_row >= self._limit:
      raise RunFailure(
          f'step {step}: the loss or gradient norm was not finite for {self._in_a_row} '
          f'steps in a row (steps {step - self._in_a_row + 1}-{step}, all skipped, so '
          'every checkpoint is finite); lower LEARNING_RATE or raise WARMUP_STEPS')


class SaveOnPreemption(Action):
  """SIGTERM (how TPU VMs and Slurm announce preemption) or SIGINT: save the step every
  process agrees on and stop, without evaluating; the same command resumes from it.

  One process takes the signals itself (`listening`). In a multi-process run JAX's
  preemption notifier, started with `jax.distributed`, takes SIGTERM and its sync point
  names the first step every process can still reach, which each process asks for at
  every step.
  """

  def __init__(self):
    self.preempted_at: int | None = None
    self._signal: str | None = None

  @contextlib.contextmanager
  def listening(self) -> Iterator[None]:
    """Takes SIGTERM and SIGINT for the loop's duration (one process), then gives them
    back to their previous handlers."""
    if jax.process_count() > 1:
      yield
      return
    def note(signal_number, frame):
      del frame
      self._signal = signal.Signals(signal_number).name
    previous = {number: signal.signal(number, note)
                for number in (signal.SIGTERM, signal.SIGINT)}
    try:
      yield
    finally:
      for number, handler in previous.items():
        signal.signal(number, handler)

  def _reached(self, step: int) -> bool:
    if jax.process_count() > 1:
      return multihost_utils.reached_preemption_sync_point(step)
    return self._signal is not None

  def after_step(self, run: Run, step: int, metrics: Metrics) -> None:
    if self.preempted_at is not None or not self._reached(step):
      return
    run.save(step)
    run.checkpoints.wait()
    self.preempted_at = step
    if processes.is_primary():
      # tqdm.write: a line of its own, not glued to the training bar the signal cut.
      tqdm.tqdm.write(f'{self._signal or "SIGTERM"} at step {step}: saved checkpoint {step} '
                      'and stopped; run the same command to resume', file=sys.stderr)

  def stop_requested(self) -> bool:
    return self.preempted_at is not None


class SaveCheckpoints(Action):
  """A checkpoint every `every` steps and at the last."""

  def __init__(self, every: int):
    self._every = every

  def after_step(self, run: Run, step: int, metrics: Metrics) -> None:
    if step % self._every == 0 or step == run.config.train_steps:
      run.save(step)
