"""Distributionally robust optimisation over groups (chi-square ball; docs/methods.md#dro).

Plain training minimises the loss averaged over the data's mix of groups (directions or
target languages), so large groups dominate. DRO instead trains on the worst mix inside a
ball around the data's: groups whose loss exceeds what a plain (ERM) model reaches are
sampled more. Tencent won the WMT22 African task with it (rho = 0.1, +1.68 BLEU).

`worst_case_weights` is the pure core: from per-group losses, baselines and data shares it
returns the sampling weights. Everything else (the EMA of losses, when weights are
recomputed, the sampler that applies them) builds on it.
"""

from collections.abc import Mapping, Sequence
import dataclasses
import json
from typing import Any

import numpy as np

from t5x_mt.core import charts
from t5x_mt.core import directions
from t5x_mt.core.directions import Direction
from t5x_mt.core.errors import UserError

BISECTION_TOLERANCE = 1e-4
# Excesses are compared at this many decimals (nats per token): differences below are the
# rounding noise of l_g - b_g, and would otherwise decide alone which of two tied groups
# takes the most concentrated weight.
EXCESS_DECIMALS = 9


def chi_square_divergence(weights: np.ndarray, proportions: np.ndarray) -> float:
  """(1/2) sum_g p_g (q_g / p_g - 1)^2: how far the weights q are from the data shares p."""
  return 0.5 * float(np.sum(proportions * (weights / proportions - 1.0) ** 2))


def _floored(weights: np.ndarray, floors: np.ndarray) -> np.ndarray:
  """max(s * weights, floors) with the one scale s that makes it sum to one.

  Flooring and then dividing by the sum would leave the floored entries below their floors;
  scaling only the entries above them keeps every entry at or above its floor and keeps
  the order of weights / floors. Needs sum(floors) <= 1.
  """
  below = np.zeros(weights.shape, bool)
  while not below.all():
    scale = (1.0 - floors[below].sum()) / weights[~below].sum()
    now_below = below | (scale * weights < floors)
    if np.array_equal(now_below, below):
      return np.where(below, floors, scale * weights)
    below = now_below
  return floors / floors.sum()


def _weights_at(eta: float, excess: np.ndarray, proportions: np.ndarray,
                min_ratio: float) -> np.ndarray:
  """q(eta): p_g max(excess_g - eta, 0) normalised, then q_g/p_g floored at min_ratio.

  From the largest excess up the positive parts vanish; their limit puts all weight on the
  groups of the largest excess, in proportion to p_g: the most concentrated q.
  """
  unnormalised = proportions * np.maximum(excess - eta, 0.0)
  if not unnormalised.sum() > 0:
    unnormalised = np.where(excess == excess.max(), proportions, 0.0)
  return _floored(unnormalised / unnormalised.sum(), min_ratio * proportions)


def _check(losses, baselines, proportions) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  arrays = [np.asarray(a, dtype=np.float64) for a in (losses, baselines, proportions)]
  if len({a.shape for a in arrays}) != 1 or arrays[0].ndim != 1 or not arrays[0].size:
    raise UserError('DRO: losses, baselines and proportions must be 1-D arrays of one length '
                    f'(got shapes {", ".join(str(a.shape) for a in arrays)})')
  if not np.all(np.isfinite(np.concatenate(arrays))):
    raise UserError('DRO: losses, baselines and proportions must be finite')
  if np.any(arrays[2] <= 0):
    raise UserError('DRO: every group needs a proportion > 0')
  return arrays[0], arrays[1], arrays[2] / arrays[2].sum()


def _check_ball(rho: float, min_ratio: float, where: str = 'DRO: ') -> None:
  if not rho > 0:
    raise UserError(f'{where}rho must be > 0, got {rho}')
  if not 0 <= min_ratio < 1:
    raise UserError(f'{where}min_ratio must be in [0, 1), got {min_ratio}')


def _root_bracket(divergence_at, top: float, rho: float) -> tuple[float, float]:
  """(low, high) with divergence_at(low) <= rho < divergence_at(high), for high = top.

  The reference's lower end -top / (sqrt(2 rho + 1) - 1) (moved just below top where
  top <= 0 puts it above) is inside the ball only when no excess is negative, so the
  bracket is doubled downwards until it is.
  """
  high = top
  low = min(-top / (np.sqrt(2 * rho + 1) - 1), top - 1e-6)
  while divergence_at(low) > rho:
    low, high = low - 2 * (high - low), low
  return low, high


def _bisect(divergence_at, low: float, high: float, rho: float) -> float:
  """eta in [low, high] with |divergence_at(eta) - rho| <= BISECTION_TOLERANCE, or the
  inside end once the bracket cannot shrink further."""
  while True:
    eta = 0.5 * (low + high)
    if eta in (low, high):
      return low
    divergence = divergence_at(eta)
    if abs(divergence - rho) <= BISECTION_TOLERANCE:
      return eta
    if divergence > rho:
      high = eta
    else:
      low = eta


def worst_case_weights(losses, baselines, proportions, rho: float = 0.1,
                       min_ratio: float = 0.2, floor_at_min_proportion: bool = False
                       ) -> np.ndarray:
  """The sampling weights q of the worst mix of groups inside the chi-square ball rho.

  Follows the reference code (fairseq-dro-mnmt, `chi_square_resample`): q(eta) takes q_g
  proportional to p_g max(excess_g - eta, 0), floors q_g/p_g at min_ratio and renormalises,
  and eta is found by bisection so that the divergence of this floored q(eta) is rho. The
  floor is where it departs from the reference: dividing by the sum after flooring would
  leave the floored ratios below min_ratio, so floored groups are held at exactly
  min_ratio and only the others are scaled down. The returned q thus has
  q_g/p_g >= min_ratio, and a group with more excess never has a smaller q_g/p_g.

  Args:
    losses: l_g, each group's per-token training loss (its EMA during training).
    baselines: b_g, the per-token loss a plain model reaches on the group; the excess
      l_g - b_g is what DRO chases. If every excess is negative, l_g itself is used.
    proportions: p_g, the groups' shares of the data (normalised here).
    rho: the radius of the ball, (1/2) sum_g p_g (q_g/p_g - 1)^2 <= rho.
    min_ratio: the floor of q_g/p_g, in [0, 1), so no group is starved.
    floor_at_min_proportion: also floor q_g at the smallest p (as the reference does by
      default), the same way, keeping the min_ratio floor; q may then leave the ball, and a
      small group can end above a larger one with more excess.

  Returns:
    q, non-negative, summing to one, with divergence rho (within BISECTION_TOLERANCE);
    where even the most concentrated q(eta) (all weight on the largest excess, then
    floored) stays inside the ball (one group, equal excesses, or a large rho), that q.
  """
  losses, baselines, proportions = _check(losses, baselines, proportions)
  _check_ball(rho, min_ratio)
  excess = losses - baselines
  if np.all(excess < 0):
    excess = losses
  excess = np.round(excess, EXCESS_DECIMALS)
  weights_at = lambda eta: _weights_at(eta, excess, proportions, min_ratio)
  divergence_at = lambda eta: chi_square_divergence(weights_at(eta), proportions)
  top = float(excess.max())
  weights = weights_at(top)
  if chi_square_divergence(weights, proportions) > rho:
    weights = weights_at(_bisect(divergence_at, *_root_bracket(divergence_at, top, rho), rho))
  if floor_at_min_proportion:
    weights = _floored(weights, np.maximum(min_ratio * proportions, proportions.min()))
  return weights


@dataclasses.dataclass
class GroupLosses:
  """The per-group state DRO keeps during training, saved with every checkpoint.

  Attributes:
    groups: group names, in a fixed order.
    proportions: p_g, each group's share of the training data.
    baselines: b_g, a plain model's per-token loss on each group.
    ema: l_g, the exponential moving average of each group's per-token training loss
      (NaN until the group is first seen).
    weights: q_g, the sampling weights in force (the data shares until recomputed).
  """
  groups: list[str]
  proportions: np.ndarray
  baselines: np.ndarray
  ema: np.ndarray
  weights: np.ndarray

  @classmethod
  def start(cls, groups: Sequence[str], proportions: Mapping[str, float],
            baselines: Mapping[str, float]) -> 'GroupLosses':
    missing = [g for g in groups if g not in baselines]
    if missing:
      raise UserError(f'DRO baselines: no baseline for {", ".join(missing)} (compute them with '
                      'launch/compute_baselines.py over the same mixture)')
    p = np.array([proportions[g] for g in groups], np.float64)
    p = p / p.sum()
    return cls(list(groups), p, np.array([baselines[g] for g in groups], np.float64),
               np.full(len(groups), np.nan), p.copy())

  def observe(self, loss_sums: Mapping[str, float], tokens: Mapping[str, float],
              decay: float = 0.1) -> None:
    """l_g <- (1 - a) l_g + a loss_g(batch) for the groups with tokens in the batch."""
    for index, group in enumerate(self.groups):
      count = tokens.get(group, 0.0)
      if count > 0:
        loss = loss_sums[group] / count
        previous = self.ema[index]
        self.ema[index] = loss if np.isnan(previous) else (1 - decay) * previous + decay * loss

  def recompute(self, rho: float = 0.1, min_ratio: float = 0.2) -> np.ndarray:
    """New weights from the current EMA; a group not yet seen counts at its baseline (no
    excess)."""
    losses = np.where(np.isnan(self.ema), self.baselines, self.ema)
    self.weights = worst_case_weights(losses, self.baselines, self.proportions, rho, min_ratio)
    return self.weights

  def state(self) -> dict:
    """JSON-compatible state (NaN as None)."""
    return {'groups': self.groups, 'proportions': self.proportions.tolist(),
            'baselines': self.baselines.tolist(),
            'ema': [None if np.isnan(v) else float(v) for v in self.ema],
            'weights': self.weights.tolist()}

  @classmethod
  def from_state(cls, state: Mapping) -> 'GroupLosses':
    return cls(list(state['groups']), np.array(state['proportions'], np.float64),
               np.array(state['baselines'], np.float64),
               np.array([np.nan if v is None else v for v in state['ema']], np.float64),
               np.array(state['weights'], np.float64))


MODES = ('sampling', 'reweighting')


@dataclasses.dataclass(frozen=True)
class DroConfig:
  """A DRO run's settings (gin: `training.TrainConfig.dro = @dro.DroConfig()`).

  Attributes:
    baselines: JSON written by launch/compute_baselines.py for the run's mixture and
      grouping (DRO_BASELINES).
    grouping: 'direction' or 'target' (a group per target language).
    interval: DRO_INTERVAL, steps between weight recomputations.
    rho, min_ratio: the ball's radius and the q/p floor of `worst_case_weights`.
    ema_decay: a in l_g <- (1 - a) l_g + a loss_g(batch).
    proportions: p_g, the ball's centre: each group's share of the training 'pairs'
      (docs/methods.md#dro), or of the plain mixture's sampling 'rates'.
    mode: 'sampling' draws batch rows from group g with probability q_g; 'reweighting'
      keeps the plain mixture's sampling and scales each token's loss by q_g / s_g (s_g the
      group's sampling share), which has the same expected objective.
  """
  baselines: str
  grouping: str = 'direction'
  interval: int = 100
  rho: float = 0.1
  min_ratio: float = 0.2
  ema_decay: float = 0.1
  proportions: str = 'pairs'
  mode: str = 'sampling'

  def check(self) -> None:
    directions.check_grouping(self.grouping, 'DroConfig.grouping')
    if self.mode not in MODES:
      raise UserError(f'DroConfig.mode: {self.mode!r} is not one of {", ".join(MODES)}')
    if self.interval < 1:
      raise UserError(f'DroConfig.interval (DRO_INTERVAL): must be >= 1, got {self.interval}')
    if not 0 < self.ema_decay <= 1:
      raise UserError(f'DroConfig.ema_decay: must be in (0, 1], got {self.ema_decay}')
    _check_ball(self.rho, self.min_ratio, where='DroConfig.')


def load_baselines(path: str, grouping: str) -> dict[str, float]:
  """{group: per-token loss} from a launch/compute_baselines.py file of this grouping."""
  try:
    with open(path, encoding='utf-8') as f:
      record = json.load(f)
  except OSError as error:
    raise UserError(f'DroConfig.baselines (DRO_BASELINES): cannot read {path} '
                    f'({error.strerror or error})') from None
  except json.JSONDecodeError as error:
    raise UserError(f'DroConfig.baselines: {path} line {error.lineno}: not JSON '
                    f'({error.msg})') from None
  if record.get('grouping') != grouping or not isinstance(record.get('losses'), dict):
    raise UserError(f'DroConfig.baselines: {path} holds {record.get("grouping")!r} groups, '
                    f'the run groups by {grouping!r} (launch/compute_baselines.py '
                    f'--grouping={grouping})')
  return {group: float(loss) for group, loss in record['losses'].items()}


class DroTraining:
  """The host side of a DRO run: loss averages in, group weights or loss scales out.

  The train step reports per-direction loss sums and token counts (in the order of
  `direction_names`); `observe` folds each step's into the groups' EMAs, and every
  `config.interval` steps `recompute` sets new weights.
  """

  def __init__(self, config: DroConfig, direction_names: Sequence[str],
               proportions: Mapping[str, float], sampling_shares: Mapping[str, float]):
    config.check()
    self.config = config
    self.direction_groups = [Direction.parse(name, 'DRO direction').key(config.grouping)
                             for name in direction_names]
    groups = sorted(proportions)
    baselines = load_baselines(config.baselines, config.grouping)
    try:
      self.losses = GroupLosses.start(groups, proportions, baselines)
    except UserError as error:
      raise UserError(f'DroConfig.baselines: {config.baselines}: {error}') from None
    shares = np.array([sampling_shares[g] for g in groups], np.float64)
    self.sampling_shares = shares / shares.sum()

  def observe(self, direction_loss_sums: Sequence[float],
              direction_tokens: Sequence[float]) -> None:
    """One step's per-direction sums, summed per group, into the EMAs."""
    loss_sums: dict[str, float] = {}
    tokens: dict[str, float] = {}
    for group, loss_sum, count in zip(self.direction_groups, direction_loss_sums,
                                      direction_tokens):
      loss_sums[group] = loss_sums.get(group, 0.0) + float(loss_sum)
      tokens[group] = tokens.get(group, 0.0) + float(count)
    self.losses.observe(loss_sums, tokens, self.config.ema_decay)

  def after_step(self, step: int) -> bool:
    """Recomputes the weights if `step` ends an interval; True if it did."""
    if step % self.config.interval:
      return False
    self.losses.recompute(self.config.rho, self.config.min_ratio)
    return True

  @property
  def weights(self) -> np.ndarray:
    """q_g, in the order of `self.losses.groups`."""
    return self.losses.weights

  def direction_scales(self) -> np.ndarray:
    """Per direction (the train step's order), q_g / s_g of its group: the loss scale of
    the reweighting variant (all ones while q equals the sampling shares)."""
    ratio = dict(zip(self.losses.groups, self.losses.weights / self.sampling_shares))
    return np.array([ratio[group] for group in self.direction_groups], np.float32)

  def log_record(self) -> dict[str, float]:
    """The weights and loss averages for metrics.jsonl (`dro_weight/<group>`, `dro_loss/..`)."""
    record = {f'dro_weight/{g}': float(w)
              for g, w in zip(self.losses.groups, self.losses.weights)}
    record.update({f'dro_loss/{g}': float(l) for g, l in zip(self.losses.groups,
                                                            self.losses.ema)
                   if not np.isnan(l)})
    return record

  def groups_record(self) -> dict:
    """The run's groups with p_g, sampling shares s_g and baselines b_g (dro_groups.json)."""
    return {'grouping': self.config.grouping, 'mode': self.config.mode,
            'groups': {group: {'proportion': float(p), 'sampling_share': float(s),
                               'baseline': float(b)}
                       for group, p, s, b in zip(self.losses.groups, self.losses.proportions,
                                                 self.sampling_shares,
                                                 self.losses.baselines)}}

  def state(self) -> dict:
    return self.losses.state()

  def restore(self, state: Mapping) -> None:
    restored = GroupLosses.from_state(state)
    if restored.groups != self.losses.groups:
      raise UserError(f'DRO state saved for groups {restored.groups}, the run has '
                      f'{self.losses.groups}; a different mixture or grouping needs a new '
                      'MODEL_DIR')
    self.losses = restored


WEIGHT_PREFIX = 'dro_weight/'


def weight_history(metrics: Sequence[Mapping[str, Any]]
                   ) -> tuple[list[int], dict[str, list[float]]]:
  """(steps, {group: q_g at each step}) from a DRO run's metrics.jsonl records."""
  steps: list[int] = []
  history: dict[str, list[float]] = {}
  for record in metrics:
    weights = {k[len(WEIGHT_PREFIX):]: v for k, v in record.items()
               if k.startswith(WEIGHT_PREFIX)}
    if not weights:
      continue
    steps.append(record['step'])
    for group, weight in weights.items():
      history.setdefault(group, []).append(weight)
  return steps, history


def weights_chart(steps: Sequence[int], history: Mapping[str, Sequence[float]],
                  proportions: Mapping[str, float], title: str) -> bytes:
  """PNG: each group's weight q_g over training as a line, its data share p_g dotted."""
  pyplot = charts.pyplot()
  figure, axes = pyplot.subplots(figsize=(9, 5))
  colours = pyplot.get_cmap('tab20')
  for number, (group, weights) in enumerate(sorted(history.items())):
    colour = colours(number % 20)
    axes.plot(steps, weights, label=group, color=colour, linewidth=1.4)
    if group in proportions:
      axes.axhline(proportions[group], color=colour, linestyle=':', linewidth=0.8)
  axes.set_xlabel('step')
  axes.set_ylabel('sampling weight q_g (dotted: data share p_g)')
  axes.set_title(title)
  axes.legend(fontsize='x-small', ncol=2, loc='center left', bbox_to_anchor=(1.0, 0.5))
  return charts.png_bytes(figure)
