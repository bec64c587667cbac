"""Tests for t5x_mt.dro: worst-case weights against hand-worked examples."""

import json

import numpy as np
import pytest

from t5x_mt import dro
from t5x_mt.errors import UserError


def test_weights_inside_the_floor_match_the_closed_form():
  # Excess e = l - b = (0.5, 1.0, 1.5); while eta < min(e) every group stays positive and
  # D(eta) = Var_p(e) / (2 (mean_p(e) - eta)^2): Var = 0.1525, mean 0.85, so D = 0.1 at
  # mean - eta = sqrt(0.1525 / 0.2) = 0.873212, and q_g = p_g (e_g - eta) / (mean - eta).
  p = np.array([0.5, 0.3, 0.2])
  q = dro.worst_case_weights([2.0, 3.0, 4.0], [1.5, 2.0, 2.5], p, rho=0.1)
  gap = np.sqrt(0.1525 / 0.2)
  eta = 0.85 - gap
  assert q == pytest.approx(p * (np.array([0.5, 1.0, 1.5]) - eta) / gap, abs=1e-6)
  assert q == pytest.approx([0.299591, 0.351534, 0.348876], abs=1e-6)
  assert dro.chi_square_divergence(q, p) == pytest.approx(0.1, abs=1e-4)


def test_ratio_floor_then_renormalise():
  # p = (0.6, 0.4), e = (0.1, 1.0), rho = 0.5: mean 0.46, Var 0.1944, mean - eta = 0.440908,
  # q = (0.110088, 0.889912); q_1/p_1 = 0.1835 is floored to 0.2 (q_1 = 0.12), then
  # (0.12, 0.889912) / 1.009912.
  q = dro.worst_case_weights([0.1, 1.0], [0.0, 0.0], [0.6, 0.4], rho=0.5)
  assert q == pytest.approx([0.12 / 1.009912, 0.889912 / 1.009912], abs=1e-5)
  assert q.sum() == pytest.approx(1.0)


def test_negative_excess_everywhere_uses_the_losses():
  p = [0.5, 0.5]
  assert dro.worst_case_weights([1.0, 2.0], [1.5, 2.5], p) == pytest.approx(
      dro.worst_case_weights([1.0, 2.0], [0.0, 0.0], p))


def test_equal_excess_or_one_group_keeps_the_data_shares():
  assert dro.worst_case_weights([1.0, 1.0], [0.5, 0.5], [0.3, 0.7]) == pytest.approx([0.3, 0.7])
  assert dro.worst_case_weights([2.0], [1.0], [5.0]) == pytest.approx([1.0])


def test_floor_at_min_proportion():
  # p = (0.2, 0.4, 0.4), e = (0, 1, 1): mean 0.8, Var 0.16, mean - eta = sqrt(0.8), so
  # q = (0.021115, 0.489443, 0.489443); q_1 is floored at min p = 0.2, then renormalised.
  q = dro.worst_case_weights([0.0, 1.0, 1.0], [0.0, 0.0, 0.0], [0.2, 0.4, 0.4], rho=0.1,
                             min_ratio=0.0, floor_at_min_proportion=True)
  assert q == pytest.approx(np.array([0.2, 0.489443, 0.489443]) / 1.178885, abs=1e-5)


def test_bad_arrays_are_refused():
  with pytest.raises(UserError, match='1-D arrays of one length'):
    dro.worst_case_weights([1.0, 2.0], [1.0], [0.5, 0.5])
  with pytest.raises(UserError, match='proportion > 0'):
    dro.worst_case_weights([1.0, 2.0], [1.0, 1.0], [0.0, 1.0])
  with pytest.raises(UserError, match='rho must be > 0'):
    dro.worst_case_weights([1.0, 2.0], [1.0, 1.0], [0.5, 0.5], rho=0.0)


def test_group_of_direction_or_target():
  assert dro.group_of('eng_Latn-hau_Latn', 'direction') == 'eng_Latn-hau_Latn'
  assert dro.group_of('eng_Latn-hau_Latn', 'target') == 'hau_Latn'
  with pytest.raises(UserError, match="'source' is not one of direction, target"):
    dro.group_of('eng_Latn-hau_Latn', 'source')


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
