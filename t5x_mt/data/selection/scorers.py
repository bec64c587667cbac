"""In-domain data selection: candidate sentence pairs scored by how much they resemble an
in-domain sample (a dev set, a few hundred sentences of the domain), for gradual
fine-tuning on ever smaller, ever more in-domain subsets.

Two scorers, each giving higher scores to pairs more like the sample:
- `CrossEntropyDifference`: Moore and Lewis (2010) in its bilingual form (Axelrod et al.,
  2011): for each side, the pair's cross-entropy under a language model of the in-domain
  sample minus its cross-entropy under a model of the candidates, summed over both sides and
  negated. The models are character n-gram models with Witten-Bell interpolation.
- `DomainClassifier`: TenTrans's selection, with the in-domain sample as positives and
  random candidates as negatives; the score is the probability of in-domain. TenTrans
  fine-tuned mBERT; here a logistic regression over hashed character n-grams of both sides
  is trained, which needs no pretrained model and no accelerator.

Character n-grams rather than words: they need no tokenizer, work the same in every
script, and pick up a domain's vocabulary, spelling and numbers from a few hundred
sentences, where a word model of so little text sees most words once.
"""

import collections
import dataclasses
import math
from collections.abc import Sequence

import numpy as np
from scipy import optimize
from scipy import sparse

from t5x_mt.core.errors import UserError

Pair = tuple[str, str]
_START, _END = '\x02', '\x03'  # Sentence boundaries: control characters no text holds.
_MEMORY_LIMIT = 1 << 19  # N-grams whose bits a model remembers (~60 MB at most).


@dataclasses.dataclass
class CharNgramModel:
  """A character n-gram language model with Witten-Bell interpolation down to a unigram
  model, itself interpolated with a uniform distribution over the characters seen plus
  one for any unseen character."""
  order: int
  counts: dict[str, collections.Counter]  # Context (0 to order-1 characters) -> next.
  _memory: dict[str, float] = dataclasses.field(default_factory=dict, init=False,
                                                repr=False, compare=False)

  @classmethod
  def train(cls, lines: Sequence[str], order: int = 4) -> 'CharNgramModel':
    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for line in lines:
      text = _START * (order - 1) + line + _END
      for end in range(order - 1, len(text)):
        for length in range(order):
          counts[text[end - length:end]][text[end]] += 1
    return cls(order, dict(counts))

  def probability(self, context: str, char: str) -> float:
    """P(char | the last order-1 characters of context), interpolated (Witten-Bell)."""
    unigram = self.counts.get('', collections.Counter())
    probability = 1.0 / (len(unigram) + 1)
    for length in range(len(context) + 1):
      following = self.counts.get(context[len(context) - length:])
      if not following:
        continue
      total, types = sum(following.values()), len(following)
      probability = (following[char] + types * probability) / (total + types)
    return probability

  def cross_entropy(self, line: str) -> float:
    """Bits per character of `line` (its end included)."""
    text = _START * (self.order - 1) + line + _END
    bits = sum(self._bits(text[end - self.order + 1:end + 1])
               for end in range(self.order - 1, len(text)))
    return bits / (len(line) + 1)

  def _bits(self, ngram: str) -> float:
    """-log2 P(last character | the ones before), remembered: text repeats its n-grams, so
    most are looked up once (the memory starts afresh when it holds _MEMORY_LIMIT)."""
    bits = self._memory.get(ngram)
    if bits is None:
      if len(self._memory) >= _MEMORY_LIMIT:
        self._memory.clear()
      bits = self._memory[ngram] = -math.log2(self.probability(ngram[:-1], ngram[-1]))
    return bits


def _checked_sample(in_domain: Sequence[Pair]) -> None:
  if not any(source.strip() or target.strip() for source, target in in_domain):
    raise UserError('the in-domain sample is empty: give sentence pairs of the domain to '
                    'select for')


@dataclasses.dataclass
class CrossEntropyDifference:
  """Bilingual Moore-Lewis: -(H_in(source) - H_general(source) + H_in(target) -
  H_general(target)), character n-gram models of the in-domain sample and of the
  candidates."""
  in_domain: tuple[CharNgramModel, CharNgramModel]
  general: tuple[CharNgramModel, CharNgramModel]

  @classmethod
  def train(cls, in_domain: Sequence[Pair], candidates: Sequence[Pair],
            order: int = 4) -> 'CrossEntropyDifference':
    _checked_sample(in_domain)

    def models(pairs):
      return tuple(CharNgramModel.train([pair[side] for pair in pairs], order)
                   for side in (0, 1))
    return cls(models(in_domain), models(candidates))

  def scores(self, pairs: Sequence[Pair]) -> np.ndarray:
    return np.asarray([
        -sum(self.in_domain[side].cross_entropy(pair[side])
             - self.general[side].cross_entropy(pair[side]) for side in (0, 1))
        for pair in pairs])


def _features(pairs: Sequence[Pair], buckets: int, orders: Sequence[int]) -> sparse.csr_matrix:
  """Hashed character n-gram counts of each side, sides hashed apart, each row scaled to
  unit length so that long and short sentences weigh alike.

  Every n-gram of every text is hashed at once (numpy over the code points of all texts
  end to end), so a batch costs a few array passes rather than a loop per n-gram."""
  columns, rows = [], []
  for side in (0, 1):
    texts = [f' {pair[side]} ' for pair in pairs]
    codes = np.frombuffer(''.join(texts).encode('utf-32-le'), dtype=np.uint32)
    lengths = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
    ends = np.repeat(np.cumsum(lengths), lengths)
    owner = np.repeat(np.arange(len(texts)), lengths)
    for order in orders:
      starts = np.flatnonzero(np.arange(len(codes)) + order <= ends)
      columns.append(_ngram_hashes(codes, starts, order, salt=side) % buckets)
      rows.append(owner[starts])
  rows, columns = np.concatenate(rows), np.concatenate(columns).astype(np.int64)
  counts = sparse.csr_matrix((np.ones(len(rows)), (rows, columns)),
                             shape=(len(pairs), buckets))
  counts.sum_duplicates()
  norms = np.sqrt(np.asarray(counts.multiply(counts).sum(axis=1)).ravel())
  return sparse.diags(1.0 / norms) @ counts  # Every row has the padding's unigrams.


_FNV_OFFSET, _FNV_PRIME = np.uint64(0xcbf29ce484222325), np.uint64(0x100000001b3)


def _ngram_hashes(codes: np.ndarray, starts: np.ndarray, order: int, salt: int) -> np.ndarray:
  """FNV-1a over (salt, order, the n-gram's code points) for the n-gram at each start: the
  same bucket in every process (Python's hash() is salted)."""
  hashes = np.full(len(starts), _FNV_OFFSET, dtype=np.uint64)
  with np.errstate(over='ignore'):  # Multiplication modulo 2**64 is the hash.
    for value in (np.uint64(salt), np.uint64(order)):
      hashes = (hashes ^ value) * _FNV_PRIME
    for offset in range(order):
      hashes = (hashes ^ codes[starts + offset].astype(np.uint64)) * _FNV_PRIME
  return hashes


@dataclasses.dataclass
class DomainClassifier:
  """Logistic regression over hashed character n-grams (1 to 4) of both sides: positives the
  in-domain sample, negatives as many random candidates (drawn with `seed`), L2-regularised,
  fitted by L-BFGS. `scores` are probabilities of in-domain."""
  weights: np.ndarray
  bias: float
  buckets: int
  orders: tuple[int, ...]

  @classmethod
  def train(cls, in_domain: Sequence[Pair], candidates: Sequence[Pair], *, seed: int = 0,
            buckets: int = 1 << 18, orders: tuple[int, ...] = (1, 2, 3, 4),
            l2: float = 0.01) -> 'DomainClassifier':
    _checked_sample(in_domain)
    rng = np.random.default_rng(seed)
    count = min(len(in_domain), len(candidates))
    negatives = [candidates[index] for index in rng.choice(len(candidates), count,
                                                           replace=False)]
    features = _features(list(in_domain) + negatives, buckets, orders)
    # Buckets no training pair fills keep weight 0 at the optimum (only the L2 term pulls
    # on them): the fit runs over the filled ones, thousands of weights rather than 2**18.
    filled = np.unique(features.indices)
    features = features[:, filled]
    labels = np.concatenate([np.ones(len(in_domain)), np.zeros(count)])

    def loss_and_gradient(theta):
      logits = features @ theta[:-1] + theta[-1]
      probabilities = 1.0 / (1.0 + np.exp(-logits))
      loss = np.sum(np.logaddexp(0.0, logits) - labels * logits)
      loss += 0.5 * l2 * theta[:-1] @ theta[:-1]
      residual = probabilities - labels
      gradient = np.append(features.T @ residual + l2 * theta[:-1], residual.sum())
      return loss, gradient

    fitted = optimize.minimize(loss_and_gradient, np.zeros(len(filled) + 1), jac=True,
                               method='L-BFGS-B')
    weights = np.zeros(buckets)
    weights[filled] = fitted.x[:-1]
    return cls(weights, float(fitted.x[-1]), buckets, orders)

  def scores(self, pairs: Sequence[Pair]) -> np.ndarray:
    logits = _features(pairs, self.buckets, self.orders) @ self.weights + self.bias
    return 1.0 / (1.0 + np.exp(-logits))


def selections(scores: np.ndarray, thresholds: Sequence[float]) -> list[np.ndarray]:
  """For each threshold, the indices of the pairs scoring at least it, in corpus order.
  Thresholds ascending give nested subsets, each inside the one before."""
  if list(thresholds) != sorted(thresholds):
    raise UserError(f'thresholds must ascend, got {list(thresholds)}')
  return [np.flatnonzero(scores >= threshold) for threshold in thresholds]


def percentile_ranks(scores: np.ndarray, among: np.ndarray | None = None) -> np.ndarray:
  """Each score's rank among the scores `among` (by default, `scores` themselves) as a
  fraction in [0, 1]: the share of the others it is above, ties sharing the lower rank and
  scores above all of `among` ranked 1. A scale on which thresholds such as 0.7 and 0.9
  keep the top 30% and 10%, for scorers whose scores are not probabilities (cross-entropy
  differences); `among` places other pairs (a held-out sample) on the candidates' scale."""
  among = scores if among is None else among
  if len(among) < 2:
    return np.ones(len(scores))
  order = np.searchsorted(np.sort(among), scores, side='left')
  return np.minimum(order / (len(among) - 1), 1.0)
