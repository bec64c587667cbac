"""Tests for t5x_mt.training.dro: worst-case weights against hand-worked examples."""

import json

import numpy as np
import pytest

from t5x_mt.training import dro
from t5x_mt.core.directions import Direction
from t5x_mt.core.errors import UserError


def test_weights_inside_the_floor_match_the_closed_form():
  # Excess e = l - b = (0.5, 1.0, 1.5); while eta < min(e) every group stays positive and
  # D(eta) = Var_p(e) / (2 (mean_p(e) - eta)^2): Var = 0.1525, mean 0.85, so D = 0.1 at
  # mean - eta = sqrt(0.1525 / 0.2) = 0.873212, and q_g = p_g (e_g - eta) / (mean - eta).
  # The bisection stops once the divergence is within 1e-4 of rho, so q is that close.
  p = np.array([0.5, 0.3, 0.2])
  q = dro.worst_case_weights([2.0, 3.0, 4.0], [1.5, 2.0, 2.5], p, rho=0.1)
  gap = np.sqrt(0.1525 / 0.2)
  eta = 0.85 - gap
  assert q == pytest.approx(p * (np.array([0.5, 1.0, 1.5]) - eta) / gap, abs=1e-4)
  assert q == pytest.approx([0.299591, 0.351534, 0.348876], abs=1e-4)
  assert dro.chi_square_divergence(q, p) == pytest.approx(0.1, abs=dro.BISECTION_TOLERANCE)


def test_floored_groups_keep_min_ratio_and_the_divergence_stays_rho():
  # p = (0.5, 0.25, 0.25), e = (0, 0.5, 1), rho = 0.5: group 1 (no excess) is floored and
  # stays at exactly q_1/p_1 = 0.2 (the reference renormalises it to 0.2 / 1.1). The other
  # two share 0.9 with divergence 0.5: 0.5 (0.5 * 0.8^2 + 0.25 (4 q_2 - 1)^2 +
  # 0.25 (4 q_3 - 1)^2) = 0.5 gives q_2,3 = 0.45 -+ 0.15 sqrt(2).
  p = np.array([0.5, 0.25, 0.25])
  q = dro.worst_case_weights([0.0, 0.5, 1.0], [0.0, 0.0, 0.0], p, rho=0.5, min_ratio=0.2)
  assert q[0] == pytest.approx(0.1, abs=1e-12)
  assert q[1:] == pytest.approx([0.45 - 0.15 * np.sqrt(2), 0.45 + 0.15 * np.sqrt(2)], abs=2e-4)
  assert dro.chi_square_divergence(q, p) == pytest.approx(0.5, abs=dro.BISECTION_TOLERANCE)


def test_a_group_below_its_baseline_keeps_the_weights_inside_the_ball():
  # Two groups, neither floored: the divergence 0.5 d^2 / (p_1 p_2) = rho moves
  # d = sqrt(2 rho p_1 p_2) = 0.130510 of weight to the group with more excess.
  p = np.array([0.094, 0.906])
  q = dro.worst_case_weights([0.0024, -0.7065], [0.0, 0.0], p, rho=0.1)
  shift = np.sqrt(2 * 0.1 * 0.094 * 0.906)
  assert q == pytest.approx([0.094 + shift, 0.906 - shift], abs=1e-4)
  assert dro.chi_square_divergence(q, p) == pytest.approx(0.1, abs=dro.BISECTION_TOLERANCE)


def test_excesses_equal_but_for_rounding_noise_keep_the_data_shares():
  # 0.1 + 0.2 - 0.0 = 0.30000000000000004, one ulp above the other group's 0.3.
  q = dro.worst_case_weights([0.1 + 0.2, 0.3], [0.0, 0.0], [0.4, 0.6])
  assert q == pytest.approx([0.4, 0.6], abs=1e-12)


def test_negative_excess_everywhere_uses_the_losses():
  p = [0.5, 0.5]
  assert dro.worst_case_weights([1.0, 2.0], [1.5, 2.5], p) == pytest.approx(
      dro.worst_case_weights([1.0, 2.0], [0.0, 0.0], p))


def test_equal_excess_or_one_group_keeps_the_data_shares():
  assert dro.worst_case_weights([1.0, 1.0], [0.5, 0.5], [0.3, 0.7]) == pytest.approx([0.3, 0.7])
  assert dro.worst_case_weights([2.0], [1.0], [5.0]) == pytest.approx([1.0])


def test_floor_at_min_proportion():
  # p = (0.1, 0.3, 0.6), e = (0, 1, 2): mean 1.5, Var 0.45, so divergence 0.1 at
  # mean - eta = sqrt(0.45 / 0.2) = 1.5, eta = 0 and q = (0, 0.2, 0.8). q_1 is floored at
  # min p = 0.1 and stays there; the rest is scaled to 0.9 (the reference divides all by 1.1).
  q = dro.worst_case_weights([0.0, 1.0, 2.0], [0.0, 0.0, 0.0], [0.1, 0.3, 0.6], rho=0.1,
                             min_ratio=0.0, floor_at_min_proportion=True)
  assert q == pytest.approx([0.1, 0.18, 0.72], abs=1e-4)
  assert q[0] == pytest.approx(0.1, abs=1e-12)


CASE_KINDS = ('mixed_signs', 'tiny_shares', 'all_negative', 'equal', 'one_group')


def _random_case(rng: np.random.Generator, kind: str) -> dict:
  """Losses, baselines, shares and ball of one case; excesses on a grid of 1/64 and
  baselines on one of 2^-20, so l - b is exact and ties are real ties."""
  groups = 1 if kind == 'one_group' else int(rng.integers(2, 41))
  if kind == 'tiny_shares':
    proportions = np.maximum(rng.dirichlet(np.full(groups, 0.05)), 1e-9)
  else:
    proportions = rng.dirichlet(np.ones(groups))
  excess = rng.integers(-128, 128, groups) / 64
  if kind == 'all_negative':
    excess = -np.abs(excess) - 1 / 64
  elif kind == 'equal':
    excess = np.full(groups, excess[0] % 2)
  baselines = rng.integers(2**19, 5 * 2**20, groups) / 2**20
  return {'losses': baselines + excess, 'baselines': baselines,
          'proportions': proportions / proportions.sum(),
          'rho': float(rng.choice([0.01, 0.1, 0.5, 2.0])),
          'min_ratio': float(rng.choice([0.0, 0.2, 0.5]))}


def _excess(case: dict) -> np.ndarray:
  excess = case['losses'] - case['baselines']
  return case['losses'] if np.all(excess < 0) else excess


@pytest.mark.parametrize('kind', CASE_KINDS)
def test_weights_stay_in_the_ball_above_the_floor_and_ordered_by_excess(kind):
  rng = np.random.default_rng(CASE_KINDS.index(kind))
  for number in range(80):
    case = _random_case(rng, kind)
    p, m, rho = case['proportions'], case['min_ratio'], case['rho']
    q = dro.worst_case_weights(**case)
    where = f'{kind} case {number}: {case}'
    assert np.all(q >= 0) and q.sum() == pytest.approx(1.0, abs=1e-12), where
    ratios = q / p
    assert np.all(ratios >= m * (1 - 1e-12)), where
    # The most concentrated q: the groups of the largest excess (share P) at one ratio r,
    # the others floored at m, m (1 - P) + r P = 1; its divergence is (1 - m)^2 (1/P - 1) / 2.
    excess = _excess(case)
    top_share = p[excess == excess.max()].sum()
    if (1 - m) ** 2 * (1 / top_share - 1) / 2 > rho:
      assert dro.chi_square_divergence(q, p) == pytest.approx(
          rho, abs=dro.BISECTION_TOLERANCE), where
    else:
      assert dro.chi_square_divergence(q, p) <= rho, where
    order = np.argsort(excess, kind='stable')
    steps = np.diff(ratios[order])
    ties = np.diff(excess[order]) == 0
    assert np.all(steps >= -1e-12 * ratios.max()), where
    assert np.all(np.abs(steps[ties]) <= 1e-12 * ratios.max()), where


@pytest.mark.parametrize('kind', CASE_KINDS)
def test_min_proportion_floor_keeps_both_floors(kind):
  rng = np.random.default_rng(CASE_KINDS.index(kind))
  for number in range(80):
    case = _random_case(rng, kind)
    p = case['proportions']
    q = dro.worst_case_weights(**case, floor_at_min_proportion=True)
    where = f'{kind} case {number}: {case}'
    assert q.sum() == pytest.approx(1.0, abs=1e-12), where
    assert np.all(q >= p.min() * (1 - 1e-12)), where
    assert np.all(q / p >= case['min_ratio'] * (1 - 1e-12)), where


def test_bad_arrays_are_refused():
  with pytest.raises(UserError, match='1-D arrays of one length'):
    dro.worst_case_weights([1.0, 2.0], [1.0], [0.5, 0.5])
  with pytest.raises(UserError, match='proportion > 0'):
    dro.worst_case_weights([1.0, 2.0], [1.0, 1.0], [0.0, 1.0])
  with pytest.raises(UserError, match='rho must be > 0'):
    dro.worst_case_weights([1.0, 2.0], [1.0, 1.0], [0.5, 0.5], rho=0.0)
  with pytest.raises(UserError, match=r'min_ratio must be in \[0, 1\), got 1.0'):
    dro.worst_case_weights([1.0, 2.0], [1.0, 1.0], [0.5, 0.5], min_ratio=1.0)


def test_config_refuses_a_ball_it_cannot_use():
  with pytest.raises(UserError, match='DroConfig.rho must be > 0, got -0.1'):
    dro.DroConfig('b.json', rho=-0.1).check()
  with pytest.raises(UserError, match=r'DroConfig.min_ratio must be in \[0, 1\), got 1.5'):
    dro.DroConfig('b.json', min_ratio=1.5).check()


def test_group_of_direction_or_target():
  direction = Direction('eng_Latn', 'hau_Latn')
  assert direction.key('direction') == 'eng_Latn-hau_Latn'
  assert direction.key('target') == 'hau_Latn'
  with pytest.raises(UserError, match="'source' is not one of direction, target"):
    direction.key('source')
  with pytest.raises(UserError, match="DroConfig.grouping: 'source' is not one of direction"):
    dro.DroConfig('b.json', grouping='source').check()


def test_ema_weights_and_state_round_trip():
  state = dro.GroupLosses.start(['a', 'b'], {'a': 3.0, 'b': 1.0}, {'a': 1.0, 'b': 1.0})
  assert state.weights == pytest.approx([0.75, 0.25])
  state.observe({'a': 20.0, 'b': 0.0}, {'a': 10.0, 'b': 0.0})  # a: 2.0; b unseen.
  state.observe({'a': 30.0, 'b': 9.0}, {'a': 10.0, 'b': 3.0})  # a: 0.9*2 + 0.1*3; b: 3.0.
  assert state.ema == pytest.approx([2.1, 3.0])
  weights = state.recompute(rho=0.1)
  assert weights == pytest.approx(dro.worst_case_weights([2.1, 3.0], [1.0, 1.0], [0.75, 0.25]))
  assert weights[1] > 0.25  # The group further above its baseline gains.
  restored = dro.GroupLosses.from_state(json.loads(json.dumps(state.state())))
  assert restored.state() == state.state()


def test_unseen_group_counts_at_its_baseline():
  state = dro.GroupLosses.start(['a', 'b'], {'a': 1.0, 'b': 1.0}, {'a': 1.0, 'b': 2.0})
  state.observe({'a': 30.0}, {'a': 10.0})
  assert state.recompute() == pytest.approx(dro.worst_case_weights([3.0, 2.0], [1.0, 2.0],
                                                                   [0.5, 0.5]))
  assert json.loads(json.dumps(state.state()))['ema'] == [3.0, None]


def test_baselines_must_cover_every_group():
  with pytest.raises(UserError, match='no baseline for b, c'):
    dro.GroupLosses.start(['a', 'b', 'c'], {'a': 1, 'b': 1, 'c': 1}, {'a': 1.0})
