"""SIGKILL at any moment of a training run, then the same command again: the run must end
as an uninterrupted one does.

  python bench/kill_resume.py [--trials=20] [--seed=0] [--train_steps=20] \
      [--checkpoint_every_steps=5] [--log_every_steps=1] [--batch_size=8] \
      [--kills_per_trial=1] [--workdir=DIR] [--keep]

README's "When a run goes wrong" promises that a run killed at any moment resumes from its
latest finished checkpoint and continues the same loss curve, that a checkpoint whose
write was cut short never becomes one, and that metrics.jsonl holds each logged step once.
A kill inside a checkpoint write or just after a metrics append is where such a promise
breaks, and those moments are rare in a run's life, so they are aimed at.

Everything is real: `launch/train.py --gin_file=gin/runs/demo.gin` as its own process, in a
fresh MODEL_DIR per trial, with frequent checkpoints and a record every step; a reference
run with the same settings is never killed. Each trial starts the command, watches
MODEL_DIR from this process at a high rate and sends SIGKILL at the moment its plan names:
  checkpoint  once Orbax's temporary folder of a chosen step exists, after a random delay
              shorter than the reference's shortest checkpoint write;
  metrics     as soon as metrics.jsonl has grown to a chosen number of records;
  random      a random fraction of the way from shortly before the reference's first
              record to its end (start-up, steps, checkpoints or the final evaluation);
              a fresh run that ends before its moment (the machine's speed varies) is
              started again, its moment timed on the run that ended.
It then runs the same command until it exits 0 (with --kills_per_trial > 1 the first
re-runs are killed too, at random moments). What a kill landed in is read from the disk
once the process is dead, never from the plan: a temporary checkpoint folder that no
earlier kill left means a checkpoint write was in progress; a metrics.jsonl without a
final newline means an append was cut; an append seen shortly before the kill counts as
around an append.

A trial is identical when metrics.jsonl, read strictly (every line one JSON object), holds
every logged step of the reference once and in order, its final loss equals the
reference's within LOSS_TOLERANCE, and so does every step's loss. Each re-run must also resume
from the latest checkpoint the kill left finished (from scratch if none).
"""

import argparse
import dataclasses
import json
import os
import pathlib
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
LOSS_TOLERANCE = 1e-5
# A kill this soon after metrics.jsonl was seen to grow counts as around its append.
AROUND_APPEND_SECONDS = 0.05
POLL_SECONDS = 0.001
ORBAX_TMP_MARK = '.orbax-checkpoint-tmp'
# Random moments start this long before a run's first record (the end of its start-up).
RANDOM_LEAD_SECONDS = 5.0
# A fresh run that ends before its planned moment (the machine ran faster than for the
# run its moment was timed on) is started again this many times, timed on itself.
RETRIES = 2
KINDS = ('checkpoint', 'metrics', 'random')


def train_command(model_dir: pathlib.Path, args: argparse.Namespace) -> list[str]:
  """The demo recipe, shortened, with a checkpoint every few steps and frequent records."""
  return [sys.executable, 'launch/train.py', '--gin_file=gin/runs/demo.gin',
          f"--gin.MODEL_DIR='{model_dir}'",
          f'--gin.TRAIN_STEPS={args.train_steps}',
          f'--gin.BATCH_SIZE={args.batch_size}',
          f'--gin.CHECKPOINT_EVERY_STEPS={args.checkpoint_every_steps}',
          f'--gin.LOG_EVERY_STEPS={args.log_every_steps}',
          '--gin.training.TrainConfig.evaluate_test_split=False',
          '--gin.training.TrainConfig.progress_bar=False',
          '--gin.evaluation.EvalConfig.max_sentences=1',
          '--gin.decoding.DecodeSettings.beam_size=1']


@dataclasses.dataclass(frozen=True)
class DiskState:
  """What MODEL_DIR shows at one moment: checkpoint folders and metrics.jsonl."""
  finished_steps: tuple[int, ...]
  # (name, inode) of each Orbax temporary folder: a name comes back when a step is saved
  # again, the inode tells the two apart.
  temporary: frozenset[tuple[str, int]]
  metrics_bytes: bytes
  metrics_rewrite_files: tuple[str, ...]

  @property
  def metrics_records(self) -> int:
    return self.metrics_bytes.count(b'\n')

  @property
  def torn_record(self) -> bool:
    return bool(self.metrics_bytes) and not self.metrics_bytes.endswith(b'\n')


def checkpoint_entries(model_dir: pathlib.Path) -> list[os.DirEntry]:
  try:
    return list(os.scandir(model_dir / 'checkpoints'))
  except OSError:
    return []


def metrics_size(model_dir: pathlib.Path) -> int:
  try:
    return os.stat(model_dir / 'metrics.jsonl').st_size
  except OSError:
    return -1


def first_step_from(path: pathlib.Path, offset: int) -> int | None:
  """The step of the record that starts at byte `offset` of `path`, None until its line
  is whole."""
  try:
    with open(path, 'rb') as f:
      f.seek(offset)
      line, newline, _ = f.read().partition(b'\n')
    return json.loads(line)['step'] if newline else None
  except (OSError, ValueError, KeyError):
    return None


def observe(model_dir: pathlib.Path) -> DiskState:
  entries = checkpoint_entries(model_dir)
  temporary = set()
  for entry in entries:
    if ORBAX_TMP_MARK in entry.name:
      try:
        temporary.add((entry.name, entry.inode()))
      except OSError:
        pass
  try:
    metrics = (model_dir / 'metrics.jsonl').read_bytes()
  except OSError:
    metrics = b''
  try:
    rewrites = tuple(sorted(name for name in os.listdir(model_dir)
                            if name.startswith('.metrics.jsonl.') and name.endswith('.tmp')))
  except OSError:
    rewrites = ()
  return DiskState(
      finished_steps=tuple(sorted(int(e.name) for e in entries if e.name.isdigit())),
      temporary=frozenset(temporary), metrics_bytes=metrics, metrics_rewrite_files=rewrites)


def temporary_step(name: str) -> int:
  return int(name.split('.', 1)[0])


@dataclasses.dataclass(frozen=True)
class Timeline:
  """When an uninterrupted run logged its first record and ended, in seconds from its
  start."""
  first_record: float
  end: float

  def moment(self, fraction: float) -> float:
    """The moment `fraction` of the way from shortly before the first record to the end."""
    start = max(self.first_record - RANDOM_LEAD_SECONDS, 0.0)
    return start + fraction * (self.end - start)


@dataclasses.dataclass
class Plan:
  """When to kill: the `kind` of moment and its target (a checkpoint step, a number of
  records, or for a random moment the fraction of the way through a `Timeline`), with a
  delay after a checkpoint write is seen."""
  kind: str
  target: float
  delay: float = 0.0

  def describe(self) -> str:
    if self.kind == 'checkpoint':
      return f'checkpoint {int(self.target)} write +{self.delay * 1000:.0f} ms'
    if self.kind == 'metrics':
      return f'metrics record {int(self.target)}'
    return f'random {self.target:.0%} of the way'


@dataclasses.dataclass
class Watch:
  """What the watcher saw of a run: when it began, when metrics.jsonl last grew, when
  each checkpoint's temporary folder appeared and went, and the first record's time."""
  started: float
  last_growth: float | None = None
  first_record: float | None = None
  temporary_seen: dict[tuple[str, int], list[float]] = dataclasses.field(default_factory=dict)
  metrics_size: int = -1
  # The step of the first record this run appended: a run resumed from checkpoint N
  # first logs the first logged step after N.
  first_appended_step: int | None = None
  _append_offset: int | None = None

  def poll(self, model_dir: pathlib.Path) -> tuple[bool, set[str]]:
    """Looks once: (whether metrics.jsonl grew since the last look, the names of the
    temporary checkpoint folders now there)."""
    now = time.perf_counter()
    size = metrics_size(model_dir)
    grew = size > max(self.metrics_size, 0)
    if grew:
      self.last_growth = now
      if self.first_record is None:
        self.first_record = now - self.started
      if self._append_offset is None:
        self._append_offset = max(self.metrics_size, 0)
    self.metrics_size = size
    if self._append_offset is not None and self.first_appended_step is None:
      self.first_appended_step = first_step_from(model_dir / 'metrics.jsonl',
                                                 self._append_offset)
    present = set()
    for entry in checkpoint_entries(model_dir):
      if ORBAX_TMP_MARK in entry.name:
        present.add(entry.name)
        try:
          key = (entry.name, entry.inode())
        except OSError:
          continue
        self.temporary_seen.setdefault(key, [now, now])[1] = now
    return grew, present

  def write_seconds(self) -> list[float]:
    """How long each temporary checkpoint folder was seen to exist."""
    return [last - first for first, last in self.temporary_seen.values()]


def moment_reached(plan: Plan, timeline: Timeline, watch: Watch, grew: bool,
                   present: set[str], model_dir: pathlib.Path) -> bool:
  """Whether the moment `plan` waits for has come (a checkpoint plan's delay aside)."""
  if plan.kind == 'random':
    return time.perf_counter() - watch.started >= timeline.moment(plan.target)
  if plan.kind == 'metrics':
    return grew and observe(model_dir).metrics_records >= plan.target
  return any(temporary_step(name) == plan.target for name in present)


@dataclasses.dataclass
class Kill:
  """One SIGKILL and what it landed in, read from the disk after the process died."""
  plan: Plan
  seconds: float
  landed: list[str]
  inside_checkpoint_write: bool
  around_metrics_append: bool
  disk: DiskState

  def describe(self) -> str:
    return f'[{self.plan.describe()}] at {self.seconds:.1f} s: {", ".join(self.landed)}'


def classify(plan: Plan, after: DiskState, earlier: DiskState | None, watch: Watch,
             killed_at: float, final_records: int) -> Kill:
  """What was happening when the process died, from the disk it left (`earlier`: what
  the kill before it left, whose leftovers say nothing of this one)."""
  landed = []
  new_temporary = sorted(name for name, inode in after.temporary - (
      earlier.temporary if earlier else frozenset()))
  new_rewrites = set(after.metrics_rewrite_files) - set(
      earlier.metrics_rewrite_files if earlier else ())
  for name in new_temporary:
    landed.append(f'inside checkpoint write (step {temporary_step(name)})')
  around_append = False
  if after.torn_record:
    landed.append('inside metrics append (record cut short)')
    around_append = True
  if new_rewrites:
    landed.append('inside metrics.jsonl rewrite')
    around_append = True
  if watch.last_growth is not None and killed_at - watch.last_growth <= AROUND_APPEND_SECONDS:
    landed.append(f'{(killed_at - watch.last_growth) * 1000:.0f} ms after metrics append '
                  f'(record {after.metrics_records})')
    around_append = True
  if not landed:
    records = after.metrics_records
    if records >= final_records:
      landed.append('after the last step (final evaluation)')
    elif watch.last_growth is None:
      landed.append(f'start-up (no record from this run; {records} in the file)')
    else:
      landed.append(f'between appends (records {records})')
  return Kill(plan=plan, seconds=killed_at - watch.started, landed=landed,
              inside_checkpoint_write=bool(new_temporary),
              around_metrics_append=around_append, disk=after)


@dataclasses.dataclass
class Completion:
  """A run of the command to its end (or to its kill)."""
  returncode: int
  seconds: float
  watch: Watch


def run_command(command: list[str], model_dir: pathlib.Path, log: pathlib.Path,
                plan: Plan | None = None, timeline: Timeline | None = None,
                earlier: DiskState | None = None,
                final_records: int = 0) -> tuple[Completion, Kill | None]:
  """Runs `command`, watching MODEL_DIR; with a plan, SIGKILLs it at the plan's moment
  (if the run ends before it, nothing is killed)."""
  with open(log, 'w', encoding='utf-8') as output:
    watch = Watch(started=time.perf_counter(), metrics_size=metrics_size(model_dir))
    process = subprocess.Popen(command, cwd=REPO, stdout=output, stderr=subprocess.STDOUT)
    seen_at = None
    kill = None
    while process.poll() is None:
      grew, present = watch.poll(model_dir)
      if plan is not None:
        if seen_at is None and moment_reached(plan, timeline, watch, grew, present,
                                              model_dir):
          seen_at = time.perf_counter()
        if seen_at is not None and time.perf_counter() - seen_at >= plan.delay:
          killed_at = time.perf_counter()
          os.kill(process.pid, signal.SIGKILL)
          process.wait()
          kill = classify(plan, observe(model_dir), earlier, watch, killed_at,
                          final_records)
          break
      time.sleep(POLL_SECONDS)
    process.wait()
  return Completion(process.returncode, time.perf_counter() - watch.started, watch), kill


class NotIdentical(Exception):
  """A trial whose run differs from the reference."""


def read_metrics_strictly(path: pathlib.Path) -> list[dict]:
  """Every line of metrics.jsonl as one JSON object; anything else is NotIdentical."""
  if not path.exists():
    raise NotIdentical('no metrics.jsonl')
  text = path.read_text(encoding='utf-8')
  if text and not text.endswith('\n'):
    raise NotIdentical('metrics.jsonl does not end with a newline')
  records = []
  for number, line in enumerate(text.split('\n')[:-1], start=1):
    try:
      record = json.loads(line)
    except json.JSONDecodeError as error:
      raise NotIdentical(f'metrics.jsonl:{number} is not JSON ({error})') from None
    if not isinstance(record, dict) or 'step' not in record:
      raise NotIdentical(f'metrics.jsonl:{number} is no step record')
    records.append(record)
  return records


def compare_to_reference(records: list[dict], reference: list[dict]) -> tuple[float, float]:
  """(final loss difference, largest step loss difference); NotIdentical if a step is
  missing, repeated or out of order, or a loss differs by more than the tolerance."""
  steps = [record['step'] for record in records]
  expected = [record['step'] for record in reference]
  repeated = sorted({step for step in steps if steps.count(step) > 1})
  missing = sorted(set(expected) - set(steps))
  if repeated or missing or steps != expected:
    raise NotIdentical(f'steps repeated {repeated}, missing {missing}, '
                       f'{len(steps)} records for {len(expected)}')
  differences = [abs(r['loss'] - e['loss']) for r, e in zip(records, reference)]
  final = differences[-1]
  largest = max(differences)
  if final > LOSS_TOLERANCE:
    raise NotIdentical(f'final loss {records[-1]["loss"]!r} against {reference[-1]["loss"]!r}')
  if largest > LOSS_TOLERANCE:
    step = expected[differences.index(largest)]
    raise NotIdentical(f'step {step} loss differs by {largest:.3g}')
  return final, largest


def plan_trials(count: int, rng: random.Random, reference: Completion,
                args: argparse.Namespace) -> list[list[Plan]]:
  """Each trial's kills: its first aimed at a kind of moment (kinds in turn, shuffled),
  any later one at a random moment of the re-run."""
  kinds = [KINDS[index % len(KINDS)] for index in range(count)]
  rng.shuffle(kinds)
  checkpoint_steps = list(range(args.checkpoint_every_steps, args.train_steps + 1,
                                args.checkpoint_every_steps))
  shortest_write = min(reference.watch.write_seconds(), default=0.0)
  plans = []
  for kind in kinds:
    if kind == 'checkpoint':
      first = Plan('checkpoint', rng.choice(checkpoint_steps),
                   delay=rng.uniform(0.0, 0.8 * shortest_write))
    elif kind == 'metrics':
      first = Plan('metrics', rng.randint(1, args.train_steps // args.log_every_steps))
    else:
      first = Plan('random', rng.random())
    plans.append([first] + [Plan('random', rng.random())
                            for _ in range(args.kills_per_trial - 1)])
  return plans


def resume_problem(first_appended: int | None, latest: int, logged_steps: list[int],
                   finished: bool) -> str | None:
  """Why a re-run did not resume from `latest`, the latest checkpoint the kill left
  finished (0: none), judged by the first record it appended; None if it did."""
  expected = next((step for step in logged_steps if step > latest), None)
  if first_appended == expected or (first_appended is None and not finished):
    return None
  return (f'first appended step {first_appended}, expected {expected} '
          f'(latest finished checkpoint {latest})')


@dataclasses.dataclass
class TrialResult:
  kills: list[Kill]
  runs: int
  identical: bool
  summary: str


def run_trial(folder: pathlib.Path, plans: list[Plan], timeline: Timeline,
              reference: list[dict], args: argparse.Namespace) -> TrialResult:
  """Kills the command as planned, runs it again until it ends, checks the outcome."""
  model_dir = folder / 'run'
  command = train_command(model_dir, args)
  kills, problems, resumed, notes = [], [], [], []
  runs = retries = 0
  pending = list(plans)
  while True:
    runs += 1
    plan = pending.pop(0) if pending else None
    completion, kill = run_command(command, model_dir, folder / f'run_{runs}.log', plan,
                                   timeline, kills[-1].disk if kills else None,
                                   len(reference))
    if kill is None and plan is not None and not kills and completion.returncode == 0:
      if retries == RETRIES:
        problems.append(f'run {runs} ended before its kill ({plan.describe()})')
        break
      retries += 1
      notes.append(f'a fresh run ended at {completion.seconds:.0f} s, before its kill')
      timeline = Timeline(completion.watch.first_record or 0.0, completion.seconds)
      shutil.rmtree(model_dir)
      pending.insert(0, plan)
      continue
    if kills:  # A re-run after a kill.
      latest = max(kills[-1].disk.finished_steps, default=0)
      resumed.append(str(latest))
      problem = resume_problem(completion.watch.first_appended_step, latest,
                               [record['step'] for record in reference], kill is None)
      if problem:
        problems.append(f'run {runs}: {problem}')
    if kill is not None:
      kills.append(kill)
      continue
    if completion.returncode != 0:
      problems.append(f'run {runs} exited {completion.returncode} (see {folder}/run_{runs}.log)')
    elif plan is not None:
      notes.append(f'run {runs} ended before its kill')
    break
  if (model_dir / 'damaged').exists():
    problems.append('a checkpoint was set aside as damaged')
  try:
    if problems:
      raise NotIdentical('; '.join(problems))
    final, largest = compare_to_reference(read_metrics_strictly(model_dir / 'metrics.jsonl'),
                                          reference)
    verdict = (f'{len(reference)} records once each; final loss diff {final:.1e}, '
               f'largest step diff {largest:.1e}; identical')
    identical = True
  except NotIdentical as error:
    verdict = f'NOT identical: {error}'
    identical = False
  summary = (f'{"; ".join(k.describe() for k in kills)}; resumed at step '
             f'{", ".join(resumed) or "-"}; {runs} runs'
             f'{"".join(f" ({note})" for note in notes)}; {verdict}')
  return TrialResult(kills, runs, identical, summary)


def run_reference(workdir: pathlib.Path, args: argparse.Namespace
                  ) -> tuple[Completion, list[dict]]:
  """The command run once without a kill: its timing and its metrics.jsonl records."""
  folder = workdir / 'reference'
  shutil.rmtree(folder, ignore_errors=True)
  folder.mkdir()
  completion, _ = run_command(train_command(folder / 'run', args), folder / 'run',
                              folder / 'run.log')
  if completion.returncode:
    sys.exit(f'the reference run failed: see {folder}/run.log')
  records = read_metrics_strictly(folder / 'run' / 'metrics.jsonl')
  writes = completion.watch.write_seconds()
  print(f'reference: {completion.seconds:.1f} s, first record at '
        f'{completion.watch.first_record:.1f} s, {len(records)} records, final loss '
        f'{records[-1]["loss"]!r}; checkpoint writes seen {len(writes)}, '
        f'{min(writes, default=0):.2f}-{max(writes, default=0):.2f} s', flush=True)
  return completion, records


def print_totals(results: list[TrialResult], trials: int, seconds: float) -> int:
  """The closing lines; returns how many trials were identical."""
  kills = [kill for result in results for kill in result.kills]
  identical = sum(result.identical for result in results)
  aimed = {kind: sum(kill.plan.kind == kind for kill in kills) for kind in KINDS}
  print(f'wall time {seconds:.0f} s')
  print(f'kills={len(kills)} (aimed: {", ".join(f"{k} {n}" for k, n in aimed.items())}): '
        f'inside a checkpoint write {sum(k.inside_checkpoint_write for k in kills)}, '
        f'around a metrics.jsonl append {sum(k.around_metrics_append for k in kills)} '
        f'(record cut short {sum(any("cut short" in l for l in k.landed) for k in kills)}, '
        f'during its rewrite {sum(any("rewrite" in l for l in k.landed) for k in kills)})',
        flush=True)
  print(f'kill_resume: trials={trials} identical={identical}', flush=True)
  return identical


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--trials', type=int, default=20)
  parser.add_argument('--seed', type=int, default=0)
  parser.add_argument('--train_steps', type=int, default=20)
  parser.add_argument('--checkpoint_every_steps', type=int, default=5)
  parser.add_argument('--log_every_steps', type=int, default=1)
  parser.add_argument('--batch_size', type=int, default=8)
  parser.add_argument('--kills_per_trial', type=int, default=1)
  parser.add_argument('--workdir', default=None, help='default: a temporary folder')
  parser.add_argument('--keep', action='store_true', help='keep the run folders')
  args = parser.parse_args()
  workdir = pathlib.Path(args.workdir or tempfile.mkdtemp(prefix='kill_resume_'))
  workdir.mkdir(parents=True, exist_ok=True)
  started = time.perf_counter()
  print(f'demo, {args.train_steps} steps of batch {args.batch_size}, a checkpoint every '
        f'{args.checkpoint_every_steps}, a record every {args.log_every_steps}; '
        f'{args.trials} trials, seed {args.seed}, {os.cpu_count()} cores, in {workdir}',
        flush=True)
  reference_run, reference = run_reference(workdir, args)
  timeline = Timeline(reference_run.watch.first_record or 0.0, reference_run.seconds)
  results = []
  plans = plan_trials(args.trials, random.Random(args.seed), reference_run, args)
  for index, trial_plans in enumerate(plans):
    folder = workdir / f'trial_{index:02d}'
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    trial_started = time.perf_counter()
    result = run_trial(folder, trial_plans, timeline, reference, args)
    results.append(result)
    print(f'trial {index:2d} ({time.perf_counter() - trial_started:.0f} s): {result.summary}',
          flush=True)
    if result.identical and not args.keep:
      shutil.rmtree(folder, ignore_errors=True)
  identical = print_totals(results, args.trials, time.perf_counter() - started)
  if not args.keep and identical == args.trials:
    shutil.rmtree(workdir, ignore_errors=True)
  sys.exit(0 if identical == args.trials else 1)


if __name__ == '__main__':
  main()
