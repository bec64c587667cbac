"""Distributionally robust optimisation over groups (chi-square ball; METHODS.md section 6).

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

import numpy as np

from t5x_mt.errors import UserError

BISECTION_TOLERANCE = 1e-4


def chi_square_divergence(weights: np.ndarray, proportions: np.ndarray) -> float:
  """(1/2) sum_g p_g (q_g / p_g - 1)^2: how far the weights q are from the data shares p."""
  return 0.5 * float(np.sum(proportions * (weights / proportions - 1.0) ** 2))


def _weights_at(eta: float, excess: np.ndarray, proportions: np.ndarray) -> np.ndarray:
  """q_g proportional to p_g * max(excess_g - eta, 0)."""
  unnormalised = proportions * np.maximum(excess - eta, 0.0)
  return unnormalised / unnormalised.sum()


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


def worst_case_weights(losses, baselines, proportions, rho: float = 0.1,
                       min_ratio: float = 0.2, floor_at_min_proportion: bool = False
                       ) -> np.ndarray:
  """The sampling weights q of the worst mix of groups inside the chi-square ball rho.

  Args:
    losses: l_g, each group's per-token training loss (its EMA during training).
    baselines: b_g, the per-token loss a plain model reaches on the group; the excess
      l_g - b_g is what DRO chases. If every excess is negative, l_g itself is used.
    proportions: p_g, the groups' shares of the data (normalised here).
    rho: the radius of the ball, (1/2) sum_g p_g (q_g/p_g - 1)^2 <= rho.
    min_ratio: q_g/p_g is floored here (then renormalised), so no group is starved.
    floor_at_min_proportion: also floor q_g at the smallest p before renormalising.

  Returns:
    q, non-negative, summing to one. Before the floors, q_g is proportional to
    p_g max(excess_g - eta, 0) with eta found by bisection so that the divergence equals
    rho; where even the most concentrated q stays inside the ball (one group, or equal
    excesses), eta is the bisection's upper end and q that most concentrated q.
  """
  losses, baselines, proportions = _check(losses, baselines, proportions)
  if rho <= 0:
    raise UserError(f'DRO: rho must be > 0, got {rho}')
  excess = losses - baselines
  if np.all(excess < 0):
    excess = losses
  top = float(excess.max())
  # Below this eta every q is inside the ball (the bound of METHODS.md section 6).
  low, high = -max(abs(top), 1e-12) / (np.sqrt(2 * rho + 1) - 1), top
  weights = proportions
  while high - low > 1e-12 * max(1.0, abs(high)):
    eta = 0.5 * (low + high)
    weights = _weights_at(eta, excess, proportions)
    divergence = chi_square_divergence(weights, proportions)
    if abs(divergence - rho) < BISECTION_TOLERANCE * 1e-3:
      break
    if divergence > rho:
      high = eta
    else:
      low = eta
  ratios = np.maximum(weights / proportions, min_ratio)
  floored = proportions * ratios
  if floor_at_min_proportion:
    floored = np.maximum(floored, proportions.min())
  return floored / floored.sum()


GROUPINGS = ('direction', 'target')


def group_of(direction: str, grouping: str) -> str:
  """The DRO group of a direction ('eng_Latn-hau_Latn'): itself, or its target language."""
  if grouping not in GROUPINGS:
    raise UserError(f'DRO grouping: {grouping!r} is not one of {", ".join(GROUPINGS)}')
  return direction if grouping == 'direction' else direction.partition('-')[2]


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
