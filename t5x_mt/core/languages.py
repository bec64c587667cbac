"""Language codes: FLORES-200 codes everywhere, and the maps that lead other codes to them.

Every file name, task name and target-language tag in t5x_mt uses a FLORES-200 code
(ISO 639-3 language + ISO 15924 script, e.g. `hau_Latn`). Corpora that name languages
otherwise (CLDR locale ids in `babel`, NTREX-128 file names) are mapped here, in one place,
so that a questionable mapping is visible and documented once.

A run's vocabulary may hold the tag of a language FLORES-200 lacks, named by a code of the
same shape (`ach_Latn`: launch/extend_vocab.py adds it). A command that reads such a
vocabulary makes its languages known here (`add_languages`), and from then on they pass
every check as FLORES-200's codes do.
"""

from collections.abc import Sequence
import difflib
import re
from typing import NamedTuple

from t5x_mt.core.errors import UserError
from t5x_mt.core.registry import Registry

# The 204 codes of FLORES-200 (github.com/facebookresearch/flores, flores200/README.md),
# sorted, so that a code's position is a stable small integer id.
FLORES200_CODES: tuple[str, ...] = tuple("""
    ace_Arab ace_Latn acm_Arab acq_Arab aeb_Arab afr_Latn ajp_Arab aka_Latn als_Latn amh_Ethi
    apc_Arab arb_Arab arb_Latn ars_Arab ary_Arab arz_Arab asm_Beng ast_Latn awa_Deva ayr_Latn
    azb_Arab azj_Latn bak_Cyrl bam_Latn ban_Latn bel_Cyrl bem_Latn ben_Beng bho_Deva bjn_Arab
    bjn_Latn bod_Tibt bos_Latn bug_Latn bul_Cyrl cat_Latn ceb_Latn ces_Latn cjk_Latn ckb_Arab
    crh_Latn cym_Latn dan_Latn deu_Latn dik_Latn dyu_Latn dzo_Tibt ell_Grek eng_Latn epo_Latn
    est_Latn eus_Latn ewe_Latn fao_Latn fij_Latn fin_Latn fon_Latn fra_Latn fur_Latn fuv_Latn
    gaz_Latn gla_Latn gle_Latn glg_Latn grn_Latn guj_Gujr hat_Latn hau_Latn heb_Hebr hin_Deva
    hne_Deva hrv_Latn hun_Latn hye_Armn ibo_Latn ilo_Latn ind_Latn isl_Latn ita_Latn jav_Latn
    jpn_Jpan kab_Latn kac_Latn kam_Latn kan_Knda kas_Arab kas_Deva kat_Geor kaz_Cyrl kbp_Latn
    kea_Latn khk_Cyrl khm_Khmr kik_Latn kin_Latn kir_Cyrl kmb_Latn kmr_Latn knc_Arab knc_Latn
    kon_Latn kor_Hang lao_Laoo lij_Latn lim_Latn lin_Latn lit_Latn lmo_Latn ltg_Latn ltz_Latn
    lua_Latn lug_Latn luo_Latn lus_Latn lvs_Latn mag_Deva mai_Deva mal_Mlym mar_Deva min_Arab
    min_Latn mkd_Cyrl mlt_Latn mni_Beng mos_Latn mri_Latn mya_Mymr nld_Latn nno_Latn nob_Latn
    npi_Deva nso_Latn nus_Latn nya_Latn oci_Latn ory_Orya pag_Latn pan_Guru pap_Latn pbt_Arab
    pes_Arab plt_Latn pol_Latn por_Latn prs_Arab quy_Latn ron_Latn run_Latn rus_Cyrl sag_Latn
    san_Deva sat_Olck scn_Latn shn_Mymr sin_Sinh slk_Latn slv_Latn smo_Latn sna_Latn snd_Arab
    som_Latn sot_Latn spa_Latn srd_Latn srp_Cyrl ssw_Latn sun_Latn swe_Latn swh_Latn szl_Latn
    tam_Taml taq_Latn taq_Tfng tat_Cyrl tel_Telu tgk_Cyrl tgl_Latn tha_Thai tir_Ethi tpi_Latn
    tsn_Latn tso_Latn tuk_Latn tum_Latn tur_Latn twi_Latn tzm_Tfng uig_Arab ukr_Cyrl umb_Latn
    urd_Arab uzn_Latn vec_Latn vie_Latn war_Latn wol_Latn xho_Latn ydd_Hebr yor_Latn yue_Hant
    zho_Hans zho_Hant zsm_Latn zul_Latn
""".split())

# English, French and the 24 African languages of the WMT22 large-scale African task.
WMT22_AFRICAN: tuple[str, ...] = (
    'eng_Latn', 'fra_Latn', 'afr_Latn', 'amh_Ethi', 'fuv_Latn', 'hau_Latn', 'ibo_Latn',
    'kam_Latn', 'kin_Latn', 'lin_Latn', 'lug_Latn', 'luo_Latn', 'nso_Latn', 'nya_Latn',
    'gaz_Latn', 'sna_Latn', 'som_Latn', 'ssw_Latn', 'swh_Latn', 'tsn_Latn', 'tso_Latn',
    'umb_Latn', 'wol_Latn', 'xho_Latn', 'yor_Latn', 'zul_Latn')

# babel/CLDR locale id -> FLORES-200 code, for the WMT22 African set (umb is not in CLDR).
# Three CLDR locales are macrolanguages mapped to the one variety FLORES-200 has:
# 'ff' (Fulah; CLDR's Latin data is Pular/Pulaar-based) -> fuv_Latn (Nigerian Fulfulde),
# 'om' (Oromo) -> gaz_Latn (West Central Oromo), 'sw' (Swahili) -> swh_Latn.
CLDR_LOCALE_TO_FLORES: dict[str, str] = {
    'en': 'eng_Latn', 'fr': 'fra_Latn', 'af': 'afr_Latn', 'am': 'amh_Ethi', 'ff': 'fuv_Latn',
    'ha': 'hau_Latn', 'ig': 'ibo_Latn', 'kam': 'kam_Latn', 'rw': 'kin_Latn', 'ln': 'lin_Latn',
    'lg': 'lug_Latn', 'luo': 'luo_Latn', 'nso': 'nso_Latn', 'ny': 'nya_Latn', 'om': 'gaz_Latn',
    'sn': 'sna_Latn', 'so': 'som_Latn', 'ss': 'ssw_Latn', 'sw': 'swh_Latn', 'tn': 'tsn_Latn',
    'ts': 'tso_Latn', 'umb': 'umb_Latn', 'wo': 'wol_Latn', 'xh': 'xho_Latn', 'yo': 'yor_Latn',
    'zu': 'zul_Latn',
}

# NTREX-128 file code (newstest2019-ref.<code>.txt) -> FLORES-200 code. 'orm' (Oromo) and
# 'swa' (Swahili) are macrolanguages mapped as in CLDR_LOCALE_TO_FLORES. NTREX's 'fuc'
# (Pulaar, Senegal/Mauritania) is deliberately NOT mapped: it is a different individual
# language from FLORES's fuv (Nigerian Fulfulde), and labelling it fuv_Latn would teach a
# model the wrong variety under the fuv tag.
NTREX_TO_FLORES: dict[str, str] = {
    'eng': 'eng_Latn', 'fra': 'fra_Latn', 'deu': 'deu_Latn', 'jpn': 'jpn_Jpan',
    'afr': 'afr_Latn', 'amh': 'amh_Ethi', 'hau': 'hau_Latn', 'ibo': 'ibo_Latn',
    'kin': 'kin_Latn', 'nso': 'nso_Latn', 'nya': 'nya_Latn', 'orm': 'gaz_Latn',
    'sna-Latn': 'sna_Latn', 'som': 'som_Latn', 'ssw': 'ssw_Latn', 'swa': 'swh_Latn',
    'tsn': 'tsn_Latn', 'wol': 'wol_Latn', 'xho': 'xho_Latn', 'yor': 'yor_Latn',
    'zul': 'zul_Latn',
}

# M-100's language tokens (`__xx__`, ISO 639-1 where a code exists) -> FLORES-200 codes,
# for checkpoints imported from M2M-100. Macrolanguages go to the individual language
# FLORES-200 holds (ar arb, fa pes, ms zsm, ne npi, no nob, sq als, uz uzn, mn khk, lv lvs,
# et est, ps pbt, sw swh, zh zho_Hans), ff to fuv as in CLDR_LOCALE_TO_FLORES; Breton (br)
# and Western Frisian (fy) have no FLORES-200 code and stay unnamed.
M2M100_TO_FLORES: dict[str, str] = dict(pair.split(':') for pair in """
    af:afr_Latn am:amh_Ethi ar:arb_Arab ast:ast_Latn az:azj_Latn ba:bak_Cyrl be:bel_Cyrl
    bg:bul_Cyrl bn:ben_Beng bs:bos_Latn ca:cat_Latn ceb:ceb_Latn cs:ces_Latn cy:cym_Latn
    da:dan_Latn de:deu_Latn el:ell_Grek en:eng_Latn es:spa_Latn et:est_Latn fa:pes_Arab
    ff:fuv_Latn fi:fin_Latn fr:fra_Latn ga:gle_Latn gd:gla_Latn gl:glg_Latn gu:guj_Gujr
    ha:hau_Latn he:heb_Hebr hi:hin_Deva hr:hrv_Latn ht:hat_Latn hu:hun_Latn hy:hye_Armn
    id:ind_Latn ig:ibo_Latn ilo:ilo_Latn is:isl_Latn it:ita_Latn ja:jpn_Jpan jv:jav_Latn
    ka:kat_Geor kk:kaz_Cyrl km:khm_Khmr kn:kan_Knda ko:kor_Hang lb:ltz_Latn lg:lug_Latn
    ln:lin_Latn lo:lao_Laoo lt:lit_Latn lv:lvs_Latn mg:plt_Latn mk:mkd_Cyrl ml:mal_Mlym
    mn:khk_Cyrl mr:mar_Deva ms:zsm_Latn my:mya_Mymr ne:npi_Deva nl:nld_Latn no:nob_Latn
    ns:nso_Latn oc:oci_Latn or:ory_Orya pa:pan_Guru pl:pol_Latn ps:pbt_Arab pt:por_Latn
    ro:ron_Latn ru:rus_Cyrl sd:snd_Arab si:sin_Sinh sk:slk_Latn sl:slv_Latn so:som_Latn
    sq:als_Latn sr:srp_Cyrl ss:ssw_Latn su:sun_Latn sv:swe_Latn sw:swh_Latn ta:tam_Taml
    th:tha_Thai tl:tgl_Latn tn:tsn_Latn tr:tur_Latn uk:ukr_Cyrl ur:urd_Arab uz:uzn_Latn
    vi:vie_Latn wo:wol_Latn xh:xho_Latn yi:ydd_Hebr yo:yor_Latn zh:zho_Hans zu:zul_Latn
""".split())

# NLLB-200's language tokens are FLORES-200 codes but one: its Santali token keeps the code
# FLORES-200 first gave the language, sat_Beng, since renamed after its script, Ol Chiki.
NLLB_TO_FLORES: dict[str, str] = {'sat_Beng': 'sat_Olck'}

# ISO 639-1 code -> FLORES-200 code: M2M-100's two-letter tokens (all ISO 639-1 but 'ns',
# its own name for Northern Sotho, which has no ISO 639-1 code) and CLDR's.
ISO639_1_TO_FLORES: dict[str, str] = {
    code: flores for code, flores in {**M2M100_TO_FLORES, **CLDR_LOCALE_TO_FLORES}.items()
    if len(code) == 2 and code != 'ns'}

def marian_to_flores(code: str) -> str | None:
  """The FLORES-200 code of a Marian target-language token's code (`>>hau<<`,
  `>>zho_Hans<<`): the code itself where it is one, else the one FLORES-200 code of that
  ISO 639-3 language; None where FLORES-200 has none or several (`>>zho<<`)."""
  if code in FLORES200_CODES:
    return code
  matches = [flores for flores in FLORES200_CODES if flores.split('_')[0] == code]
  return matches[0] if len(matches) == 1 else None


def any_code_to_flores(code: str) -> str | None:
  """The FLORES-200-shaped code a client means by `code`: a FLORES-200 code or a language
  a vocabulary added (`add_languages`), in any case; an ISO 639-1 code ('ha'), or an ISO
  639-3 code that names one FLORES-200 language ('hau'; a macrolanguage as NTREX-128
  names it: 'swa' -> swh_Latn); None for any other."""
  by_lower = {c.lower(): c for c in (*FLORES200_CODES, *ADDED_LANGUAGES.names())}
  lowered = code.strip().replace('-', '_').lower()
  if lowered in by_lower:
    return by_lower[lowered]
  if lowered in ISO639_1_TO_FLORES:
    return ISO639_1_TO_FLORES[lowered]
  return marian_to_flores(lowered) or NTREX_TO_FLORES.get(lowered)


def short_code(flores: str) -> str:
  """The code LibreTranslate's clients expect for a FLORES-200 code: its ISO 639-1 code
  where it has one and that code means it, else the code itself."""
  for iso, code in ISO639_1_TO_FLORES.items():
    if code == flores:
      return iso
  return flores


_INDEX: dict[str, int] = {code: i for i, code in enumerate(FLORES200_CODES)}
# Language indices are below this: FLORES-200's codes first, then the added languages (a
# direction's id packs two indices, `directions`).
INDEX_LIMIT = 256
# ISO 639-3 language, ISO 15924 script: the shape of every FLORES-200 code.
_CODE_SHAPE = re.compile(r'[a-z]{3}_[A-Z][a-z]{3}')


class AddedLanguage(NamedTuple):
  """A language a vocabulary adds beyond FLORES-200, and its index."""
  name: str
  index: int


# The languages added to this process by the vocabularies it read: the module's one
# registry.
ADDED_LANGUAGES: Registry[AddedLanguage] = Registry('added language')


def is_code_shaped(code: str) -> bool:
  """Whether `code` is shaped as a FLORES-200 code: three lower-case letters, '_', a
  capitalised four-letter script."""
  return bool(_CODE_SHAPE.fullmatch(code))


def add_languages(codes: Sequence[str]) -> None:
  """Makes `codes`, the languages a vocabulary adds (its tags' order), known to every
  check. Each code new to the process takes the next index after FLORES-200's: every
  process of a run reads the same vocabulary first, and gives its languages the same
  indices."""
  for code in codes:
    if code in _INDEX or code in ADDED_LANGUAGES.names():
      continue
    if not is_code_shaped(code):
      raise UserError(f'{code!r}: a language code is shaped as FLORES-200\'s (eng_Latn: '
                      'ISO 639-3 language, ISO 15924 script)')
    index = len(FLORES200_CODES) + len(ADDED_LANGUAGES.names())
    if index >= INDEX_LIMIT:
      raise UserError(f'{code}: at most {INDEX_LIMIT - len(FLORES200_CODES)} languages '
                      'beyond FLORES-200 can be known at once')
    ADDED_LANGUAGES.register(AddedLanguage(code, index))


def _suggestions(code: str) -> list[str]:
  """FLORES-200 codes a user most likely meant by `code`, best first."""
  lowered = code.strip().replace('-', '_').lower()
  by_lower = {c.lower(): c for c in FLORES200_CODES}
  if lowered in by_lower:
    return [by_lower[lowered]]
  for aliases in (CLDR_LOCALE_TO_FLORES, NTREX_TO_FLORES):
    for alias, flores in aliases.items():
      if alias.replace('-', '_').lower() == lowered:
        return [flores]
  same_language = [c for c in FLORES200_CODES if c.split('_')[0] == lowered.split('_')[0]]
  if same_language:
    return same_language
  return difflib.get_close_matches(code, FLORES200_CODES, n=3, cutoff=0.5)


def check_language(code: str, where: str) -> str:
  """Returns `code` if it is a FLORES-200 code or an added language's; else raises
  UserError naming `where`.

  The message suggests the closest code ('hau' -> 'hau_Latn', 'sw' -> 'swh_Latn'), since
  ISO 639-1/3 codes without a script are the commonest mistake.
  """
  if code in _INDEX or code in ADDED_LANGUAGES.names():
    return code
  suggestions = _suggestions(str(code))
  hint = (f"; did you mean {' or '.join(repr(s) for s in suggestions)}?" if suggestions else '')
  added = ('; a language launch/extend_vocab.py added is known where its run\'s vocabulary '
           'is read' if is_code_shaped(str(code)) else '')
  raise UserError(f'{where}: {code!r} is not a FLORES-200 language code{hint} '
                  f'(codes look like eng_Latn, hau_Latn, amh_Ethi){added}')


def language_tag(code: str) -> str:
  """The target-language token prepended to a source sentence, e.g. '<2hau_Latn>'."""
  return f'<2{check_language(code, "language tag")}>'


def tagged_language(piece: str) -> str | None:
  """The code of the language whose tag `piece` is shaped as ('<2ach_Latn>' -> 'ach_Latn'),
  None for any other piece."""
  code = piece[2:-1]
  return code if piece == f'<2{code}>' and is_code_shaped(code) else None


def language_index(code: str) -> int:
  """A stable id below INDEX_LIMIT: the position of `code` in the sorted FLORES200_CODES,
  from 204 on an added language's."""
  if code in _INDEX:
    return _INDEX[code]
  return ADDED_LANGUAGES.get(check_language(code, 'language index')).index


def code_at(index: int) -> str:
  """The language whose `language_index` is `index`."""
  if index < len(FLORES200_CODES):
    return FLORES200_CODES[index]
  return next(added.name for added in ADDED_LANGUAGES if added.index == index)
