"""What a registered mixture is to its readers: plain values, not the seqio registry.

`data_tasks.mixture_view` builds a `MixtureView` from the registry; samplers, DRO's group
shares, plots and training take it as an argument, so nothing under `t5x_mt.data` needs to
import `data_tasks` or read its dictionaries.
"""

import dataclasses

from t5x_mt.data.directions import Direction


@dataclasses.dataclass(frozen=True)
class MixtureMember:
  """One task of a mixture: the corpus direction it reads, its sampling rate in the
  mixture, and its training pairs."""
  task: str
  corpus: str
  direction: Direction
  rate: float
  pairs: int


@dataclasses.dataclass(frozen=True)
class MixtureView:
  """A mixture's (or a single task's) members, in the mixture's task order."""
  name: str
  members: tuple[MixtureMember, ...]

  def directions(self) -> tuple[Direction, ...]:
    """Each direction once, in id order: the order of per-direction losses and metrics."""
    return tuple(sorted({member.direction for member in self.members},
                        key=lambda direction: direction.id))

  def total_pairs(self) -> int:
    return sum(member.pairs for member in self.members)

  def groups(self, grouping: str) -> dict[str, tuple[MixtureMember, ...]]:
    """The members by their direction's key under `grouping` (directions.GROUPINGS), in
    sorted group order."""
    groups: dict[str, list[MixtureMember]] = {}
    for member in self.members:
      groups.setdefault(member.direction.key(grouping), []).append(member)
    return {group: tuple(groups[group]) for group in sorted(groups)}

