"""Reranking n-best lists: a weighted sum of features, tuned on a dev set, and MBR.

Each hypothesis of an n-best list carries the features its file gives (translate.py
writes `forward`, the sum of its pieces' log-probabilities, `forward_normalized`, the
beam's length-normalised score, and `length`, its pieces) and those other runs add:
`backward` (a target->source run's log p(source | hypothesis)), `right_to_left` (a
right-to-left run's log p(hypothesis | source)) and `language_model` (a target-side
language model's log p(hypothesis)). The reranked choice is the hypothesis with the
highest weighted sum; ties go to the one ranked higher in the list.

Tuning searches the weights that maximise a corpus metric (chrF++ or BLEU) of the choices
on a dev set by coordinate ascent with an exact line search, from the beam's own weights
and from random starts (docs/reranking.md says why). The corpus metric is computed from
sacreBLEU's own sufficient statistics, summed over sentences, so each candidate point
costs one sum and one formula, not a re-scoring of the corpus.

Minimum Bayes risk (MBR) selection instead picks the hypothesis with the highest expected
sentence chrF++ against the hypotheses of its list, uniformly or weighted by the model's
probabilities renormalised over the list. The list may be a beam's n best or samples of
the model (epsilon samples: Freitag et al. 2023), whose uniform average estimates the
expectation under the model itself.
"""

from collections.abc import Mapping, Sequence
import dataclasses
import json
import math
import os
from typing import Protocol, TYPE_CHECKING

import numpy as np
import sacrebleu

from t5x_mt.core import files
from t5x_mt.decoding import nbest
from t5x_mt.core.errors import UserError

if TYPE_CHECKING:  # It loads JAX, which reranking a file's lists needs not.
  from t5x_mt.decoding import inference

# The n-best features translate.py writes: the beam ranks by BEAM_SCORE.
FORWARD = nbest.FORWARD
BEAM_SCORE = nbest.FORWARD_NORMALIZED
# The features other runs add, by the kind of run (t5x_mt.decoding.sequence_scoring) each needs.
BACKWARD = 'backward'
RIGHT_TO_LEFT = 'right_to_left'
LANGUAGE_MODEL = 'language_model'
RUN_FEATURES = {BACKWARD: 'translation', RIGHT_TO_LEFT: 'right_to_left',
                LANGUAGE_MODEL: 'language_model'}
METRICS = ('chrf++', 'bleu')


def corpus_metric(name: str) -> sacrebleu.metrics.base.Metric:
  """The sacreBLEU metric `name` ('chrf++' or 'bleu') as evaluation.py computes it."""
  if name == 'chrf++':
    return sacrebleu.CHRF(word_order=2)
  if name == 'bleu':
    return sacrebleu.BLEU()
  raise UserError(f'unknown metric {name!r}; choose one of {", ".join(METRICS)}')


class Scorer(Protocol):
  """What scores sentence pairs for a feature (t5x_mt.decoding.sequence_scoring.RunScorer)."""

  def score(self, sources: Sequence[str], targets: Sequence[str], src_lang: str,
            tgt_lang: str, *, progress_bar: bool = False) -> np.ndarray:
    """log p(target | source) of each pair."""


@dataclasses.dataclass(frozen=True)
class Candidates:
  """The hypotheses of each source sentence and their features.

  Attributes:
    hypotheses: one list of hypotheses per sentence, best first as decoded.
    feature_names: the name of each feature column.
    features: one [hypotheses, features] array per sentence.
  """
  hypotheses: list[list[str]]
  feature_names: tuple[str, ...]
  features: list[np.ndarray]

  @property
  def sentences(self) -> int:
    return len(self.hypotheses)

  def flat_hypotheses(self) -> list[str]:
    """Every hypothesis, sentence after sentence."""
    return [hypothesis for sentence in self.hypotheses for hypothesis in sentence]

  def with_feature(self, name: str, values: Sequence[float]) -> 'Candidates':
    """These candidates with one more feature, `values` given in `flat_hypotheses` order."""
    if name in self.feature_names:
      raise UserError(f'feature {name} is already in the n-best list')
    values = np.asarray(values, np.float64)
    columns = np.split(values, np.cumsum([len(h) for h in self.hypotheses])[:-1])
    return dataclasses.replace(
        self, feature_names=(*self.feature_names, name),
        features=[np.column_stack([f, c]) for f, c in zip(self.features, columns)])

  def only(self, names: Sequence[str]) -> 'Candidates':
    """These candidates with the features `names` alone, in that order."""
    columns = [self.feature_names.index(name) for name in names]
    return dataclasses.replace(self, feature_names=tuple(names),
                               features=[f[:, columns] for f in self.features])

  def choose(self, weights: np.ndarray) -> list[int]:
    """The index of each sentence's highest-scoring hypothesis under `weights`."""
    return [int(np.argmax(f @ weights)) for f in self.features]

  def chosen(self, choices: Sequence[int]) -> list[str]:
    return [sentence[choice] for sentence, choice in zip(self.hypotheses, choices)]


def from_nbest(lists: Sequence[Sequence[nbest.Entry]], source: str) -> Candidates:
  """The candidates of an n-best list read by `nbest.read` from file `source`; every
  entry must carry the same features in the same order."""
  if not lists:
    raise UserError(f'{source}: the n-best list is empty')
  names = tuple(lists[0][0].features)
  line = 0
  for sentence in lists:
    for entry in sentence:
      line += 1
      if tuple(entry.features) != names:
        raise UserError(f'{source}:{line}: field features: {" ".join(entry.features)} '
                        f'where line 1 has {" ".join(names)}; every line needs the same')
  return Candidates(
      hypotheses=[[entry.hypothesis for entry in sentence] for sentence in lists],
      feature_names=names,
      features=[np.array([list(entry.features.values()) for entry in sentence], np.float64
                         ).reshape(len(sentence), len(names)) for sentence in lists])


def from_hypotheses(lists: Sequence[Sequence['inference.Hypothesis']], source: str
                    ) -> Candidates:
  """The candidates of each sentence's decoded hypotheses (`Translator.translate_nbest`:
  a beam's n best or n samples), with the features translate.py --nbest writes for them;
  `source` names the sentences' file in errors."""
  return from_nbest([[nbest.Entry(h.text, nbest.search_features(h.log_prob, h.score,
                                                                 h.length), h.score)
                      for h in hypotheses] for hypotheses in lists], source)


def check_aligned(candidates: Candidates, lines: Sequence[str], nbest_file: str,
                  other_file: str) -> None:
  """Refuses `lines` of `other_file` (sources or references) that do not line up with the
  n-best list's sentences."""
  if len(lines) != candidates.sentences:
    raise UserError(f'{nbest_file} has lists for {candidates.sentences} sentences but '
                    f'{other_file} has {len(lines)} lines; they must be line-aligned')


def add_run_features(candidates: Candidates, sources: Sequence[str], src_lang: str,
                     tgt_lang: str, scorers: Mapping[str, Scorer],
                     progress_bar: bool = False) -> Candidates:
  """`candidates` with a feature per scorer, named by its key in RUN_FEATURES: `backward`
  scores each sentence's source given each hypothesis (tgt_lang -> src_lang); the others
  score each hypothesis given its source."""
  hypotheses = candidates.flat_hypotheses()
  repeated_sources = [source for source, sentence in zip(sources, candidates.hypotheses)
                      for _ in sentence]
  for name, scorer in scorers.items():
    if name == BACKWARD:
      values = scorer.score(hypotheses, repeated_sources, tgt_lang, src_lang,
                            progress_bar=progress_bar)
    else:
      values = scorer.score(repeated_sources, hypotheses, src_lang, tgt_lang,
                            progress_bar=progress_bar)
    candidates = candidates.with_feature(name, values)
  return candidates


@dataclasses.dataclass(frozen=True)
class Weights:
  """A tuned linear model: a weight per feature name, and the metric it was tuned for."""
  features: dict[str, float]
  metric: str

  def vector(self, feature_names: Sequence[str], weights_file: str) -> np.ndarray:
    """The weights in the order of `feature_names`; features the two do not share are
    refused in one line naming `weights_file`."""
    if set(self.features) != set(feature_names):
      raise UserError(
          f'{weights_file}: weights for features {", ".join(self.features)} but the '
          f'n-best list and runs give {", ".join(feature_names)}; give the runs the '
          f'weights were tuned with')
    return np.array([self.features[name] for name in feature_names])


def save_weights(path: str | os.PathLike, weights: Weights, scores: Mapping[str, float]
                 ) -> None:
  """Writes `weights` and the dev `scores` they reached as JSON, whole or not at all."""
  record = {'metric': weights.metric, 'features': weights.features, 'dev': dict(scores)}
  files.write_text_atomically(path, json.dumps(record, indent=2) + '\n')


def load_weights(path: str | os.PathLike) -> Weights:
  """The weights `save_weights` wrote to `path`; anything else is one line naming it."""
  try:
    record = json.loads(files.path(path).read_text(encoding='utf-8'))
  except FileNotFoundError:
    raise UserError(f'{path}: no such file') from None
  except (json.JSONDecodeError, UnicodeDecodeError) as error:
    raise UserError(f'{path}: not a JSON weights file ({error})') from None
  features = record.get('features') if isinstance(record, dict) else None
  if (not isinstance(features, dict) or not features or record.get('metric') not in METRICS
      or not all(isinstance(v, (int, float)) and math.isfinite(v) for v in features.values())):
    raise UserError(f'{path}: not a reranker weights file (it needs "metric": one of '
                    f'{", ".join(METRICS)}, and "features": a number per feature name)')
  return Weights({name: float(value) for name, value in features.items()}, record['metric'])


class CorpusObjective:
  """A corpus metric of choices among candidates, from per-hypothesis statistics.

  sacreBLEU's corpus BLEU and chrF++ are functions of sufficient statistics summed over
  sentences; each hypothesis's statistics against its reference are extracted once, so
  the score of any choice of hypotheses is a sum and one formula.
  """

  def __init__(self, candidates: Candidates, references: Sequence[str], metric: str):
    self.metric_name = metric
    self._metric = corpus_metric(metric)
    repeated = [reference for reference, sentence in zip(references, candidates.hypotheses)
                for _ in sentence]
    self._statistics = np.array(self._metric._extract_corpus_statistics(  # pylint: disable=protected-access
        candidates.flat_hypotheses(), [repeated]), np.int64)
    self._starts = np.concatenate([[0], np.cumsum([len(h) for h in candidates.hypotheses])])

  def statistics(self, sentence: int, hypothesis: int) -> np.ndarray:
    return self._statistics[self._starts[sentence] + hypothesis]

  def score_totals(self, totals: np.ndarray) -> float:
    """The corpus score of statistics summed over the chosen hypotheses."""
    return self._metric._compute_score_from_stats(totals.tolist()).score  # pylint: disable=protected-access

  def totals(self, choices: Sequence[int]) -> np.ndarray:
    return self._statistics[self._starts[:-1] + np.asarray(choices)].sum(axis=0)

  def score(self, choices: Sequence[int]) -> float:
    """The corpus score of hypothesis `choices[i]` of each sentence i."""
    return self.score_totals(self.totals(choices))


@dataclasses.dataclass(frozen=True)
class Tuned:
  """Weights tuned on a dev set, with the dev score of the list's first hypotheses (the
  decoder's choice) and of the reranked choices."""
  weights: Weights
  first_best: float
  reranked: float


def tune(candidates: Candidates, references: Sequence[str], metric: str, *,
         random_starts: int = 20, seed: int = 0) -> Tuned:
  """The weights that maximise corpus `metric` of the reranked `candidates` against
  `references`, found by coordinate ascent from the beam's own weights (1 on
  BEAM_SCORE, where the list has it) and from `random_starts` random weight vectors
  (uniform in [-1, 1] per feature, drawn from `seed`); the best end point wins, the
  earliest start on ties. The weights are scaled so the largest is 1 in magnitude.
  """
  objective = CorpusObjective(candidates, references, metric)
  features = len(candidates.feature_names)
  if features == 0:
    raise UserError('the n-best list has no features to weight')
  rng = np.random.default_rng(seed)
  starts = [rng.uniform(-1.0, 1.0, features) for _ in range(random_starts)]
  if BEAM_SCORE in candidates.feature_names:
    starts.insert(0, np.eye(features)[candidates.feature_names.index(BEAM_SCORE)])
  best_weights, best_score = None, -math.inf
  for start in starts:
    weights, score = _coordinate_ascent(candidates, objective, start)
    if score > best_score:
      best_weights, best_score = weights, score
  best_weights = best_weights / max(np.abs(best_weights).max(), 1e-300)
  return Tuned(
      weights=Weights(dict(zip(candidates.feature_names, best_weights.tolist())), metric),
      first_best=objective.score([0] * candidates.sentences),
      reranked=objective.score(candidates.choose(best_weights)))


def _coordinate_ascent(candidates: Candidates, objective: CorpusObjective,
                       weights: np.ndarray, max_rounds: int = 50) -> tuple[np.ndarray, float]:
  """(weights, score) where no single weight's change raises the score any more."""
  weights = np.array(weights, np.float64)
  score = objective.score(candidates.choose(weights))
  for _ in range(max_rounds):
    improved = False
    for feature in range(len(weights)):
      value, predicted = _line_search(candidates, objective, weights, feature)
      if predicted > score + 1e-9:
        trial = weights.copy()
        trial[feature] = value
        trial_score = objective.score(candidates.choose(trial))
        if trial_score > score + 1e-9:  # The line search's prediction, checked.
          weights, score, improved = trial, trial_score, True
    if not improved:
      break
  return weights, score


def _line_search(candidates: Candidates, objective: CorpusObjective, weights: np.ndarray,
                 feature: int) -> tuple[float, float]:
  """(the value of weight `feature` that maximises the corpus score with the other weights
  fixed, the score there).

  With one weight t free, each hypothesis's total is a line in t and each sentence's
  choice is the top of its lines (its upper envelope), which changes at a few points; the
  corpus score is constant between the changes of all sentences. Every interval between
  them is scored once, at its middle.
  """
  first_choices, changes = [], []
  for sentence, values in enumerate(candidates.features):
    slopes = values[:, feature]
    offsets = values @ weights - slopes * weights[feature]
    first, sentence_changes = _upper_envelope(offsets, slopes)
    first_choices.append(first)
    previous = first
    for point, choice in sentence_changes:
      changes.append((point, sentence, previous, choice))
      previous = choice
  totals = objective.totals(first_choices)
  if not changes:
    return weights[feature], objective.score_totals(totals)
  changes.sort(key=lambda change: change[0])  # Stable: a sentence's own stay in order.
  points = np.array([change[0] for change in changes])
  deltas = np.array([objective.statistics(sentence, new) - objective.statistics(sentence, old)
                     for _, sentence, old, new in changes])
  last_of_point = np.flatnonzero(np.append(points[1:] != points[:-1], True))
  interval_totals = [totals, *(totals + np.cumsum(deltas, axis=0))[last_of_point]]
  scores = [objective.score_totals(interval_total) for interval_total in interval_totals]
  best = int(np.argmax(scores))
  bounds = points[last_of_point]
  if best == 0:
    value = bounds[0] - max(1.0, abs(bounds[0]))
  elif best == len(bounds):
    value = bounds[-1] + max(1.0, abs(bounds[-1]))
  else:
    value = (bounds[best - 1] + bounds[best]) / 2
  return value, scores[best]


def _upper_envelope(offsets: np.ndarray, slopes: np.ndarray) -> tuple[int, list[tuple[float, int]]]:
  """The top of lines offsets[h] + slopes[h] * t as t grows: (the top line as t -> -inf,
  [(t, the line on top from t on), ...]). Of equal lines the lowest index is on top, as
  np.argmax chooses."""
  first = int(np.lexsort((np.arange(len(slopes)), -offsets, slopes))[0])
  current, point, changes = first, -math.inf, []
  while True:
    steeper = np.flatnonzero(slopes > slopes[current])
    if steeper.size == 0:
      return first, changes
    crossings = (offsets[current] - offsets[steeper]) / (slopes[steeper] - slopes[current])
    crossing = crossings.min()
    overtaking = steeper[crossings == crossing]
    current = int(overtaking[slopes[overtaking] == slopes[overtaking].max()].min())
    point = max(point, float(crossing))  # Rounding never moves a change before the last.
    changes.append((point, current))


def mbr_choices(candidates: Candidates, weighted: bool = False,
                temperature: float = 1.0) -> list[int]:
  """Each sentence's minimum-Bayes-risk hypothesis: the one with the highest expected
  sentence chrF++ against the hypotheses of its list.

  The expectation is uniform over the list, or (`weighted`) under the model's
  probabilities renormalised over the list: softmax(FORWARD / temperature). A hypothesis
  counts itself too (chrF++ 100 at its own probability), which under uniform weights
  adds the same to every hypothesis, so the choice is the best against the others. Ties
  go to the hypothesis ranked higher in the list.
  """
  if weighted and FORWARD not in candidates.feature_names:
    raise UserError(f'weighted MBR needs the {FORWARD} feature (log p of each hypothesis) '
                    f'in the n-best list; it has {", ".join(candidates.feature_names)}')
  if temperature <= 0:
    raise UserError(f'MBR temperature must be > 0, got {temperature}')
  chrf = corpus_metric('chrf++')
  choices = []
  for hypotheses, values in zip(candidates.hypotheses, candidates.features):
    utility = np.array([[chrf.sentence_score(hypothesis, [other]).score for other in hypotheses]
                        for hypothesis in hypotheses])
    probabilities = np.ones(len(hypotheses))
    if weighted:
      log_p = values[:, candidates.feature_names.index(FORWARD)] / temperature
      probabilities = np.exp(log_p - log_p.max())
    choices.append(int(np.argmax(utility @ (probabilities / probabilities.sum()))))
  return choices
