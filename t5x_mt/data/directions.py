"""Translation directions: names (`eng_Latn-hau_Latn`) and compact integer ids.

An id travels with every target token through packing (see feature_converters), so it
must be a small integer that is the same in every process: it is derived from the
languages' positions in the fixed FLORES-200 code list, never from registration order.
"""

from t5x_mt import languages

_STRIDE = 256  # > number of FLORES-200 codes, so src and tgt indices never collide.


def direction_name(src_lang: str, tgt_lang: str) -> str:
  """`<src>-<tgt>`, the name used in task names, metrics and eval files."""
  return f'{src_lang}-{tgt_lang}'


def split_direction(name: str) -> tuple[str, str]:
  """Inverse of direction_name."""
  src_lang, _, tgt_lang = name.partition('-')
  return src_lang, tgt_lang


def direction_id(src_lang: str, tgt_lang: str) -> int:
  """A positive id (0 is reserved for padding) unique to the ordered language pair."""
  return languages.language_index(src_lang) * _STRIDE + languages.language_index(tgt_lang) + 1


def direction_from_id(direction: int) -> str:
  """Inverse of direction_id: the direction's name."""
  src_index, tgt_index = divmod(direction - 1, _STRIDE)
  codes = sorted(languages.FLORES200_CODES)
  return direction_name(codes[src_index], codes[tgt_index])


def target_index(direction_ids):
  """The target language's index (languages.language_index) of direction ids (ints or
  integer arrays)."""
  return (direction_ids - 1) % _STRIDE
