"""The WMT22 large-scale African task's direction sets (docs/methods.md#language-family-grouping).

English, French and 24 African languages (`languages.WMT22_AFRICAN`). Directions are
`directions.Direction`s of FLORES-200 codes. What is here:

  * pair groups of evaluated directions, as Tencent names them: ENGC (English-centric,
    eng <-> all 24), FRAC (French-centric, fra <-> kin, lin, swh, wol) and SSEA
    (South/South-East Africa: the ring xho-zul-sna-afr-ssw-tsn-tso-nso-xho), both ways;
  * the five target-language family groups of Tencent's language family grouping (LFG),
    with swh routed to group 3;
  * Base (every pair with bitext, both directions), Large (Base plus synthetic corpora)
    and Eval (the evaluated directions plus every English-centric one), which depend on
    the corpora a run has, so data_tasks builds them over the corpora its settings name.

The task's other clusters (HCEA, NGG, CA, OTHER) are not listed here: their membership is
only published in the task's own tables, not in any source this project could check.
A user who has them adds them as extra groups (gin `pair_groups.extra`), and they join Eval.
"""

from collections.abc import Iterable, Mapping, Sequence

from t5x_mt.core import languages
from t5x_mt.core.directions import Direction
from t5x_mt.core.errors import UserError

ENGLISH, FRENCH = 'eng_Latn', 'fra_Latn'
AFRICAN = tuple(lang for lang in languages.WMT22_AFRICAN if lang not in (ENGLISH, FRENCH))

def _both_ways(pairs: Sequence[tuple[str, str]]) -> tuple[Direction, ...]:
  return tuple(d for a, b in pairs for d in (Direction(a, b), Direction(b, a)))


_SSEA_RING = ('xho_Latn', 'zul_Latn', 'sna_Latn', 'afr_Latn', 'ssw_Latn', 'tsn_Latn',
              'tso_Latn', 'nso_Latn')

PAIR_GROUPS: dict[str, tuple[Direction, ...]] = {
    'ENGC': _both_ways([(ENGLISH, lang) for lang in AFRICAN]),
    'FRAC': _both_ways([(FRENCH, lang) for lang in
                        ('kin_Latn', 'lin_Latn', 'swh_Latn', 'wol_Latn')]),
    'SSEA': _both_ways([(a, _SSEA_RING[(i + 1) % len(_SSEA_RING)])
                        for i, a in enumerate(_SSEA_RING)]),
}

# Tencent Table 2: one model per target-language group; swh trains in 3 and 5.
FAMILY_GROUPS: dict[int, tuple[str, ...]] = {
    1: ('eng_Latn', 'fra_Latn'),
    2: ('afr_Latn', 'nso_Latn', 'sna_Latn', 'ssw_Latn', 'tsn_Latn', 'tso_Latn', 'xho_Latn',
        'zul_Latn'),
    3: ('amh_Ethi', 'luo_Latn', 'gaz_Latn', 'som_Latn', 'swh_Latn', 'wol_Latn'),
    4: ('fuv_Latn', 'hau_Latn', 'ibo_Latn', 'yor_Latn'),
    5: ('kam_Latn', 'kin_Latn', 'lin_Latn', 'lug_Latn', 'nya_Latn', 'swh_Latn', 'umb_Latn'),
}


def inference_group(tgt_lang: str) -> int:
  """The family group whose model translates into `tgt_lang` (swh: group 3)."""
  for group, members in FAMILY_GROUPS.items():
    if tgt_lang in members:
      return group
  raise UserError(f'{tgt_lang} is in no WMT22 language family group (groups: '
                  + '; '.join(f'{g}: {", ".join(m)}' for g, m in FAMILY_GROUPS.items()) + ')')


def pair_groups(extra: Mapping[str, Sequence[str]] | None = None
                ) -> dict[str, tuple[Direction, ...]]:
  """PAIR_GROUPS plus the `extra` groups a user names ({'HCEA': ['amh_Ethi-swh_Latn', ...]})."""
  groups = dict(PAIR_GROUPS)
  for name, directions in (extra or {}).items():
    groups[name] = tuple(Direction.parse(d, f'pair_groups.extra[{name!r}]')
                         for d in directions)
  return groups


def evaluated_directions(groups: Iterable[Sequence[Direction]] = PAIR_GROUPS.values()
                         ) -> tuple[Direction, ...]:
  """Every direction of the pair groups, in group order, each once."""
  return tuple(dict.fromkeys(d for group in groups for d in group))


def english_centric() -> tuple[Direction, ...]:
  return PAIR_GROUPS['ENGC']


def all_directions() -> tuple[Direction, ...]:
  """Every ordered pair of two WMT22 languages: the candidates for Base."""
  return tuple(Direction(a, b) for a in languages.WMT22_AFRICAN
               for b in languages.WMT22_AFRICAN if a != b)


def family_directions(group: int, candidates: Sequence[Direction]) -> tuple[Direction, ...]:
  """The candidates whose target is in family group `group` (one LFG model's data)."""
  if group not in FAMILY_GROUPS:
    raise UserError(f'family group {group}: choose one of {", ".join(map(str, FAMILY_GROUPS))}')
  return tuple(d for d in candidates if d.tgt_lang in FAMILY_GROUPS[group])
