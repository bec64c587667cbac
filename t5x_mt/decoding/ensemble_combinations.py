"""How an ensemble combines its members' log-probabilities of the next piece, by name.

  mean_log_prob  sum_i w_i log p_i(y): the weighted mean of log-probabilities, a product
                 of experts left unnormalised (Marian's and the WMT ensembles'; the
                 default). A piece every member finds likely wins; one member's doubt
                 weighs as much as another's confidence.
  log_mean_prob  log sum_i w_i p_i(y): the log of the weighted mean probability, a
                 mixture (fairseq's EnsembleModel). A piece one member is sure of keeps
                 at least its weight's share of that probability.

A module of names alone, without JAX: the commands check --ensemble_combination with
their other flags, before JAX loads; `ensemble` computes them.
"""

from t5x_mt.core import validation

COMBINATIONS = ('mean_log_prob', 'log_mean_prob')
DEFAULT = COMBINATIONS[0]


def check(setting: str, combination: str) -> str:
  """`combination` if it is one of COMBINATIONS; a UserError naming `setting` if not."""
  return validation.choice(setting, combination, COMBINATIONS)
