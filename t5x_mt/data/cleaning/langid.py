"""Offline language identification for the WMT22 African languages, English and French.

No single installable package covers the task's languages, so two are combined, each
for the languages it knows best (both ship their models inside the wheel; nothing
downloads):

* py3langid 0.4 (langid.py's Naive Bayes over byte n-grams), for eng, fra, afr, amh, fuv,
  hau, ibo, kin, lin, lug, nso, gaz, sna, som, swh, xho, yor, zul, choosing among those and
  a few languages often found by mistake in African web text;
* pycld2 (Compact Language Detector 2), for nya, ssw, tsn, tso and wol, which py3langid
  lacks (it calls Setswana Northern Sotho).

kam, luo and umb are in no installable package. A side in one of those languages cannot
be confirmed, only refuted: it is dropped when py3langid is confident it is a language
outside the African set (English, French, German...), so English left untranslated in an
unsupported-language column still goes. `docs/cleaning.md` reports each language's
accuracy on FLORES-200 dev (`bench/langid_accuracy.py`).

Policies: 'exact' keeps a side identified as its own language with probability at least
`threshold`. 'tencent' (Tencent's WMT22 rule) accepts, on an African side, any of the 24
African languages (identification confuses close relatives such as zul/xho/ssw), and
requires English and French sides to be exactly that.
"""

import dataclasses
import functools
from collections.abc import Collection
from typing import Callable, ClassVar

from t5x_mt.data.cleaning.steps import Keep
from t5x_mt.data.cleaning.steps import Step
from t5x_mt.data.cleaning.steps import per_language
from t5x_mt.data.cleaning.steps import register_step
from t5x_mt.core.errors import UserError
from t5x_mt.core.languages import WMT22_AFRICAN

# FLORES code -> py3langid label.
PY3LANGID_LABELS = {
    'eng_Latn': 'en', 'fra_Latn': 'fr', 'afr_Latn': 'af', 'amh_Ethi': 'am', 'fuv_Latn': 'fuv',
    'hau_Latn': 'ha', 'ibo_Latn': 'ig', 'kin_Latn': 'rw', 'lin_Latn': 'ln', 'lug_Latn': 'lg',
    'nso_Latn': 'nso', 'gaz_Latn': 'om', 'sna_Latn': 'sn', 'som_Latn': 'so', 'swh_Latn': 'sw',
    'xho_Latn': 'xh', 'yor_Latn': 'yo', 'zul_Latn': 'zu', 'deu_Latn': 'de', 'jpn_Jpan': 'ja',
}
# FLORES code -> CLD2 code, for the languages py3langid lacks.
CLD2_CODES = {'nya_Latn': 'ny', 'ssw_Latn': 'ss', 'tsn_Latn': 'tn', 'tso_Latn': 'ts',
              'wol_Latn': 'wo'}
EUROPEAN = frozenset({'eng_Latn', 'fra_Latn'})
AFRICAN = frozenset(WMT22_AFRICAN) - EUROPEAN
# py3langid labels of African languages (including relatives outside the task, such as
# Sesotho 'st' and Kikuyu 'kik', which close relatives are often taken for).
_AFRICAN_PY3LANGID = frozenset(PY3LANGID_LABELS[code] for code in AFRICAN
                               if code in PY3LANGID_LABELS) | {'st', 'kik', 'mg', 'pcm'}
# CLD2 codes of African languages, the task's and their close relatives.
_AFRICAN_CLD2 = frozenset(CLD2_CODES.values()) | {
    'af', 'am', 'ha', 'ig', 'rw', 'ln', 'lg', 'nso', 'om', 'sn', 'so', 'sw', 'xh', 'yo', 'zu',
    'st', 'mg', 'rn', 'ti', 'ff'}
# py3langid chooses among these only: the task's languages, their relatives, and the
# languages most often found by mistake in African web corpora. Fewer rivals keep short
# texts (headlines, UI strings) from being spread thin over 97 languages.
_PY3LANGID_CHOICES = sorted(set(PY3LANGID_LABELS.values()) | _AFRICAN_PY3LANGID
                            | {'es', 'pt', 'it', 'nl', 'ar', 'zh', 'ru'})


def supported_languages() -> tuple[str, ...]:
  """FLORES codes the combined identifier can confirm."""
  return tuple(sorted({*PY3LANGID_LABELS, *CLD2_CODES}))


@functools.lru_cache(maxsize=None)
def _py3langid():
  from py3langid import langid  # pylint: disable=g-import-not-at-top  (cleaning only)
  identifier = langid.LanguageIdentifier.from_model_file(langid.MODEL_FILE, norm_probs=True)
  identifier.set_languages(_PY3LANGID_CHOICES)
  return identifier


def py3langid_guess(text: str) -> tuple[str, float]:
  """(py3langid label, normalised probability) of the most likely language; the text is
  lower-cased, which keeps Title Case Headlines from looking foreign."""
  label, probability = _py3langid().classify(text.lower())
  return label, float(probability)


def identify(text: str, among: Collection[str] | None = None) -> tuple[str | None, float]:
  """(FLORES code, probability) of the language py3langid finds most likely among its
  languages with a FLORES code here (those in `among` alone, if given), or CLD2's where
  that is one of CLD2_CODES' (which py3langid lacks) and surer; (None, 0) if none is."""
  by_label = {code: flores for flores, code in PY3LANGID_LABELS.items()}
  found = next(((by_label[label], float(probability))
                for label, probability in _py3langid().rank(text.lower())
                if by_label.get(label) in (by_label.values() if among is None else among)),
               (None, 0.0))
  cld2_code, share = cld2_guess(text)
  by_cld2 = {code: flores for flores, code in CLD2_CODES.items()}
  if by_cld2.get(cld2_code) in (by_cld2.values() if among is None else among) and (
      share > found[1]):
    return by_cld2[cld2_code], share
  return found


def cld2_guess(text: str) -> tuple[str, float]:
  """(CLD2 code, share of the text in it) of CLD2's first language; ('un', 0) if none."""
  import pycld2  # pylint: disable=g-import-not-at-top  (cleaning only)
  try:
    _, _, details = pycld2.detect(text)
  except pycld2.error:  # Text CLD2 cannot read (stray surrogates and the like).
    return 'un', 0.0
  return details[0][1], details[0][2] / 100


def acceptor(lang: str, policy: str = 'exact', threshold: float = 0.5
             ) -> Callable[[str], bool]:
  """A test: is this text in `lang` (under `policy`), as far as identification can tell?"""
  if policy not in ('exact', 'tencent'):
    raise UserError(f"language_id.policy must be 'exact' or 'tencent', not {policy!r}")
  african_side = policy == 'tencent' and lang in AFRICAN
  if african_side and lang in {*PY3LANGID_LABELS, *CLD2_CODES}:
    return lambda text: _py3langid_african(text) or _cld2_african(text, threshold)
  if lang in PY3LANGID_LABELS:
    expected = PY3LANGID_LABELS[lang]

    def accept_py3langid(text: str) -> bool:
      label, probability = py3langid_guess(text)
      return label == expected and probability >= threshold
    return accept_py3langid
  if lang in CLD2_CODES:
    expected = CLD2_CODES[lang]

    def accept_cld2(text: str) -> bool:
      code, share = cld2_guess(text)
      return code == expected and share >= threshold
    return accept_cld2

  def refute_only(text: str) -> bool:
    return _py3langid_african(text) or py3langid_guess(text)[1] < threshold
  return refute_only


def _py3langid_african(text: str) -> bool:
  return py3langid_guess(text)[0] in _AFRICAN_PY3LANGID


def _cld2_african(text: str, threshold: float) -> bool:
  code, share = cld2_guess(text)
  return code in _AFRICAN_CLD2 and share >= threshold


@register_step
@dataclasses.dataclass
class LanguageId(Step):
  """Drops pairs with a side not identified as its language (py3langid and CLD2,
  see `t5x_mt.data.cleaning.langid`): `policy` 'exact' or 'tencent' (any African language on an
  African side), identification probability at least `threshold` (Lan-Bridge 0.8).
  Sides shorter than `min_chars` characters pass unjudged: identifying a two-word UI
  string or lexicon entry is a guess."""
  name: ClassVar[str] = 'language_id'
  kind: ClassVar[str] = 'filter'
  policy: str = 'exact'
  threshold: float = 0.5
  min_chars: int = 0

  def bind(self, src_lang, tgt_lang) -> Keep:
    def test_for(lang):
      accept = acceptor(lang, self.policy, self.threshold)
      return lambda text: len(text) < self.min_chars or accept(text)
    return per_language(test_for, src_lang, tgt_lang)
