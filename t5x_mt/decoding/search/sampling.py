"""Sampling: every output token drawn from the model's distribution, tempered and truncated.

At each step the model's log-probabilities, under the rules every search keeps (banned
pieces, forced tag, output limits), are divided by `temperature`; then, each on the
distribution the one before left (renormalised), `top_k` keeps the k most likely tokens
(ties with the k-th too), `top_p` the fewest most likely whose probabilities reach p
(nucleus sampling, Holtzman et al. 2020), and `epsilon` the tokens of probability at least
epsilon (Hewitt et al. 2022). The most likely token always stays. This is the order of
Transformers' logits warpers.

Uses: sampled back-translation, whose noisier synthetic sources teach a model more than
beam outputs do (Edunov et al. 2018), and minimum-Bayes-risk decoding over epsilon samples,
which beats MBR over a beam's n-best (Freitag et al. 2023, "Epsilon Sampling Rocks").

Draws are reproducible and a sentence's own: copy j of source b draws with the key
fold_in(fold_in(key(seed), source_ids[b]), j), folded in with the step, where
`source_ids` depend on the source alone (`common.source_ids`). A sentence gets the
same samples whatever else its batch holds and however a caller orders its sentences.
An output's score is the model's log-probability of it (the tempered, truncated
distribution only chooses), as beam search scores hypotheses; several samples of a source
come back sorted by score / length_penalty.
"""

import dataclasses
import functools

from t5x_mt.core import validation
from t5x_mt.decoding.search.registry import SearchMethod
from t5x_mt.decoding.search.registry import check_settings
from t5x_mt.decoding.search.registry import setting


@dataclasses.dataclass(frozen=True)
class SamplingSettings:
  """Sampling's settings (see the module docstring); the defaults draw from the model's
  own distribution."""
  temperature: float = setting(
      1.0, 'divides the log-probabilities before sampling: below 1 sharpens the '
      'distribution, above 1 flattens it', functools.partial(validation.number, above=0.0))
  top_k: int = setting(
      0, 'sample among the k most likely pieces (0: all)',
      functools.partial(validation.integer, minimum=0))
  top_p: float = setting(
      1.0, 'sample among the fewest most likely pieces whose probabilities reach p '
      '(nucleus sampling; 1: all)', functools.partial(validation.number, above=0.0,
                                                       at_most=1.0))
  epsilon: float = setting(
      0.0, 'sample among the pieces of probability at least epsilon (epsilon sampling; '
      '0: all)', functools.partial(validation.number, at_least=0.0, below=1.0))
  seed: int = setting(
      0, 'seed of the draws: the same seed draws the same outputs',
      functools.partial(validation.integer, minimum=0))

  def __post_init__(self):
    check_settings(self)


METHOD = SearchMethod('sampling', SamplingSettings,
                               't5x_mt.decoding.search.sampling_search')
