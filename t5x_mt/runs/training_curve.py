"""A run's learning curve, read from its folder: the training loss and the validation
chrF++ by step, the copy-source floor beside them, and how many epochs of each
direction's training text the run has seen.

These answer the questions a small-data run raises: is the model above doing nothing yet,
and are more steps (or more epochs of the same text) still paying?
"""

from collections.abc import Iterable, Mapping, Sequence
import dataclasses
import json
import re
from typing import Any, Optional

from t5x_mt.core import charts
from t5x_mt.runs import run_layout

_STEP_RECORD = re.compile(r'^step_(\d+)\.json$')


@dataclasses.dataclass(frozen=True)
class Evaluation:
  """The mean validation chrF++ of one checkpoint, and of the sources copied (None where
  the run did not score the copy baseline)."""
  step: int
  chrf: float
  copy_chrf: Optional[float]


def loss_points(records: Iterable[Mapping[str, Any]]) -> tuple[list[int], list[float]]:
  """(steps, losses) of the records that log a finite loss (a window of skipped,
  non-finite steps logs null)."""
  points = [(int(record['step']), float(record['loss'])) for record in records
            if isinstance(record.get('loss'), (int, float))]
  return [step for step, _ in points], [loss for _, loss in points]


def evaluations(layout: run_layout.RunLayout) -> list[Evaluation]:
  """Every validation record of the run, by step."""
  folder = layout.eval_dir()
  found = []
  for path in (folder.iterdir() if folder.is_dir() else ()):
    match = _STEP_RECORD.match(path.name)
    if match:
      summary = json.loads(path.read_text(encoding='utf-8'))
      copy = summary['categories']['ALL'].get('copy')
      found.append(Evaluation(int(match[1]), summary['average']['chrf'],
                              copy['chrf'] if copy else None))
  return sorted(found, key=lambda evaluation: evaluation.step)


def trained_tokens(records: Iterable[Mapping[str, Any]]) -> dict[str, float]:
  """Target tokens trained per direction, summed over the records' `tokens/<direction>`
  (each record counts its own logging window)."""
  totals: dict[str, float] = {}
  for record in records:
    for key, value in record.items():
      if key.startswith('tokens/'):
        direction = key.removeprefix('tokens/')
        totals[direction] = totals.get(direction, 0.0) + float(value)
  return totals


def epochs(trained: Mapping[str, float], corpus: Mapping[str, float]) -> dict[str, float]:
  """Passes over each direction's training text: tokens trained over the tokens of one
  pass (directions the run trained but the corpus count lacks are left out)."""
  return {direction: trained[direction] / corpus[direction]
          for direction in sorted(trained) if corpus.get(direction)}


def target_tokens(targets: Sequence[str], encode, targets_length: int) -> int:
  """Tokens one pass over `targets` trains: each encoded sentence plus its EOS, cut to
  the run's `targets_length` as the input pipeline cuts it."""
  return sum(min(len(ids) + 1, targets_length) for ids in encode(list(targets)))


def chart(steps: Sequence[int], losses: Sequence[float], evaluated: Sequence[Evaluation],
          title: str) -> bytes:
  """PNG: the training loss (left axis) and validation chrF++ with the copy-source floor
  (right axis) against the step."""
  pyplot = charts.pyplot()
  figure, loss_axes = pyplot.subplots(figsize=(8, 4.5))
  loss_axes.plot(steps, losses, color='tab:blue', linewidth=1.4, label='training loss')
  loss_axes.set_xlabel('step')
  loss_axes.set_ylabel('training loss (label-smoothed cross-entropy)', color='tab:blue')
  chrf_axes = loss_axes.twinx()
  chrf_axes.plot([e.step for e in evaluated], [e.chrf for e in evaluated], color='tab:red',
                 marker='o', linewidth=1.4, label='validation chrF++ (mean over directions)')
  copies = [e.copy_chrf for e in evaluated if e.copy_chrf is not None]
  if copies:
    chrf_axes.axhline(copies[-1], color='tab:gray', linestyle='--', linewidth=1.0,
                      label='copying the source')
  chrf_axes.set_ylabel('chrF++', color='tab:red')
  chrf_axes.set_ylim(bottom=0)
  handles = [handle for axes in (loss_axes, chrf_axes)
             for handle in axes.get_legend_handles_labels()[0]]
  chrf_axes.legend(handles=handles, fontsize='small', loc='best')
  loss_axes.set_title(title)
  return charts.png_bytes(figure)
