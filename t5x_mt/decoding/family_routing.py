"""Language family grouping at inference: one run per target-language family group, each
direction routed to the run of its target's group."""

from collections.abc import Callable, Mapping, Sequence

from t5x_mt.core.errors import UserError
from t5x_mt.decoding import inference


class FamilyTranslator:
  """Language family grouping at inference (Tencent's WMT22 system): one model per
  target-language family group, each direction translated by the model of its target's
  group (`group_of`, e.g. `wmt22.inference_group`: swh goes to group 3). A pivoted
  direction X -> pivot -> Y
  routes each leg by its own target: X -> eng goes to the group that trains into English.
  Models load on first use and one is held at a time, so memory stays at one model
  whatever the number of groups.
  """

  def __init__(self, family_models: Mapping[int, str], load: Callable[[str], inference.Translator],
               group_of: Callable[[str], int], batch_size: int,
               pivot_language: str = 'eng_Latn', pivot_directions: Sequence[str] = ()):
    self.family_models = dict(family_models)
    self.group_of = group_of
    self.batch_size = batch_size
    self.pivot_language = pivot_language
    self.pivot_directions = tuple(pivot_directions)
    self._load = load
    self._loaded: tuple[str, inference.Translator] | None = None

  def model_for(self, tgt_lang: str) -> str:
    """The run folder that translates into `tgt_lang`; UserError if its group has none."""
    group = self.group_of(tgt_lang)
    if group not in self.family_models:
      raise UserError(f'--family_models: no model for family group {group}, which translates '
                      f'into {tgt_lang} (add {group}=DIR)')
    return self.family_models[group]

  def translate(self, sentences: Sequence[str], src_lang: str, tgt_lang: str,
                on_batch: Callable[[int], None] | None = None) -> list[str]:
    self.check_direction(src_lang, tgt_lang)
    for leg_src, leg_tgt in self.legs(src_lang, tgt_lang):
      sentences = self._translator(self.model_for(leg_tgt)).translate_directly(
          sentences, leg_src, leg_tgt, on_batch)
    return list(sentences)

  def check_direction(self, src_lang: str, tgt_lang: str) -> None:
    """A UserError before any work if a leg of src_lang -> tgt_lang has no model."""
    for _, leg_tgt in self.legs(src_lang, tgt_lang):
      self.model_for(leg_tgt)

  def legs(self, src_lang: str, tgt_lang: str) -> list[tuple[str, str]]:
    """The direct translations src_lang -> tgt_lang is made of (see `inference.translation_legs`)."""
    return inference.translation_legs(src_lang, tgt_lang, self.pivot_language, self.pivot_directions)

  def overlong(self, sentences: Sequence[str], src_lang: str, tgt_lang: str) -> list[int]:
    """Indices of the sentences too long for the model that reads them first."""
    first_target = self.legs(src_lang, tgt_lang)[0][1]
    return self._translator(self.model_for(first_target)).overlong(sentences, src_lang,
                                                                   first_target)

  def _translator(self, directory: str) -> inference.Translator:
    if self._loaded is None or self._loaded[0] != directory:
      self._loaded = None  # Frees the previous model before the next one loads.
      self._loaded = (directory, self._load(directory))
    return self._loaded[1]
