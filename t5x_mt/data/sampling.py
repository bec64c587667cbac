"""What temperature sampling does to a mixture: original and sampled shares per language.

With tau = 1 a mixture samples each direction in proportion to its pairs; larger tau
flattens the distribution towards uniform, so low-resource languages are seen more often
than their share of the data (docs/methods.md#temperature-sampling). This module computes both
distributions from a registered mixture's own rates and draws them side by side, as the
data figure of Tencent's WMT22 paper does.
"""

import dataclasses

from t5x_mt.core import charts
from t5x_mt.data.mixtures import MixtureView


@dataclasses.dataclass(frozen=True)
class Share:
  """One language's (or direction's) training pairs, and its original and sampled shares."""
  name: str
  pairs: int
  original: float
  sampled: float


def _shares(counts: dict[str, tuple[float, float]]) -> list[Share]:
  """Shares from {name: (pairs, rate)}, largest original share first."""
  total_pairs = sum(pairs for pairs, _ in counts.values())
  total_rate = sum(rate for _, rate in counts.values())
  shares = [Share(name, int(pairs), pairs / total_pairs, rate / total_rate)
            for name, (pairs, rate) in counts.items()]
  return sorted(shares, key=lambda share: (-share.original, share.name))


def mixture_shares(mixture: MixtureView, by: str = 'language') -> list[Share]:
  """Original and sampled shares of a mixture's directions, or of its languages.

  A language's share counts the pairs (and sampling rate) of every direction it is the
  source or the target of, halved, so that the shares of all languages sum to one.
  """
  counts: dict[str, tuple[float, float]] = {}
  for member in mixture.members:
    direction = member.direction
    if by == 'direction':
      keys = [(direction.name, 1.0)]
    else:
      keys = [(direction.src_lang, 0.5), (direction.tgt_lang, 0.5)]
    for key, weight in keys:
      old_pairs, old_rate = counts.get(key, (0.0, 0.0))
      counts[key] = (old_pairs + weight * member.pairs, old_rate + weight * member.rate)
  return _shares(counts)


def format_shares(shares: list[Share]) -> str:
  lines = [f'{"":<20}{"pairs":>10}{"original %":>12}{"sampled %":>11}']
  lines += [f'{s.name:<20}{s.pairs:>10}{100 * s.original:>12.2f}{100 * s.sampled:>11.2f}'
            for s in shares]
  return '\n'.join(lines)


def shares_chart(shares: list[Share], title: str) -> bytes:
  """PNG: per language (or direction), original and sampled shares as paired bars on a
  log scale, so that the smallest languages stay visible."""
  pyplot = charts.pyplot()
  import matplotlib.ticker  # pylint: disable=g-import-not-at-top  (plotting only here)
  figure, axes = pyplot.subplots(figsize=(3.8 + 0.34 * max(4, len(shares)), 4.5))
  positions = range(len(shares))
  axes.bar([p - 0.2 for p in positions], [100 * s.original for s in shares], width=0.4,
           label='original (pairs)', color='#7a9cc6')
  axes.bar([p + 0.2 for p in positions], [100 * s.sampled for s in shares], width=0.4,
           label='sampled (temperature)', color='#e08a3c')
  axes.set_yscale('log')
  plain = matplotlib.ticker.FuncFormatter(lambda value, _: f'{value:g}')
  axes.yaxis.set_major_formatter(plain)
  axes.yaxis.set_minor_formatter(plain)
  axes.tick_params(axis='y', which='minor', labelsize='x-small')
  axes.set_ylabel('% of training examples')
  axes.set_xticks(list(positions))
  axes.set_xticklabels([s.name for s in shares], rotation=60, ha='right', fontsize='small')
  axes.set_xlim(-0.6, len(shares) - 0.4)
  charts.legend_outside(axes, fontsize='small')
  axes.set_title(title)
  return charts.png_bytes(figure)
