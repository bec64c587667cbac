"""Translation with an exported CTranslate2 folder, through the Translator interface.

`launch/translate.py --ctranslate2=OUT` reads the folder as it reads a run: config.gin
gives the tag strategy and the decoding settings (the decoding flags override them),
vocab.model the tokenisation, directions.json the languages it translates into. The
sentences are tagged, cut, sorted into batches, given each batch's output limit,
pivoted and detokenised by `inference.Translator`'s own code; only each batch's search
runs in CTranslate2, on CPU, `parallel_batches` batches at once (its `inter_threads`).

The search is CTranslate2's: the registered search methods it runs are in SEARCH_OPTIONS
(beam, greedy, sampling with top-k, top-p and temperature), and any other is refused in
one line, as are settings it cannot honour exactly: `max_length_ratio` (CTranslate2's
output limit holds for a whole batch and does not end a translation with EOS), a `stop`
rule other than 'beam_full' (its beam search ends a sentence once beam_size hypotheses
have finished) and sampling's `epsilon` (it has no epsilon sampling). An export binds in
its own config.gin what CTranslate2 decodes as in place of such a setting of its run
(`unhonoured_settings`), so that it serves as written; a flag that asks for one again is
refused. Its length penalty counts the forced target tag; the best translation is chosen
among its finished hypotheses by the run's own score, sum log p / (generated length
incl. EOS) ** alpha, and an n-best list is the N best by that score (N <= its
num_hypotheses, the beam; or N samples). docs/serving.md lists where its beam search may
still choose another translation than ours. Its samples come from its own generator,
seeded once with `seed`: unlike ours (`decoding.search.sampling`), they depend on a
sentence's batch.
"""

from collections.abc import Mapping, Sequence
import argparse
import os
from typing import Any, NamedTuple

import ctranslate2
import numpy as np

from t5x_mt.core import files
from t5x_mt.decoding import inference
from t5x_mt.decoding import search
from t5x_mt.decoding.search import common
from t5x_mt.model import models
from t5x_mt.model import network
from t5x_mt.runs import run_layout
from t5x_mt.config import decoding_flags
from t5x_mt.config import run_loading
from t5x_mt.data import tags
from t5x_mt.core.errors import UserError

FLAG = '--ctranslate2'

# CTranslate2's `translate_batch` arguments for the settings of each search method it runs.
SEARCH_OPTIONS = {
    'beam': lambda beam: dict(beam_size=beam.beam_size, num_hypotheses=beam.beam_size),
    'greedy': lambda greedy: dict(beam_size=1, num_hypotheses=1),
    'sampling': lambda sampling: dict(
        beam_size=1, num_hypotheses=1, sampling_topk=sampling.top_k,
        sampling_topp=sampling.top_p, sampling_temperature=sampling.temperature),
}


class Unhonoured(NamedTuple):
  """A decoding setting CTranslate2 cannot honour exactly: the DecodeSettings `field`,
  the value CTranslate2 decodes as (`served`), and why it cannot do as the setting says."""
  field: str
  served: Any
  reason: str


def unhonoured_settings(settings: inference.DecodeSettings) -> list[Unhonoured]:
  """The settings of `settings` (of a method in SEARCH_OPTIONS) that CTranslate2 cannot
  honour exactly, each with the value it decodes as instead."""
  unhonoured = []
  if settings.max_length_ratio > 0:
    unhonoured.append(Unhonoured(
        'max_length_ratio', 0, 'CTranslate2 limits the output of a whole batch and ends '
        'it without EOS, not each sentence at its own length'))
  chosen = settings.search_settings
  if isinstance(chosen, search.BeamSettings) and chosen.stop != 'beam_full':
    unhonoured.append(Unhonoured(
        'stop', 'beam_full', "CTranslate2's beam search stops a sentence once beam_size "
        "hypotheses have finished ('beam_full') and cannot stop as this rule does"))
  if isinstance(chosen, search.SamplingSettings) and chosen.epsilon > 0:
    unhonoured.append(Unhonoured(
        'epsilon', 0, 'CTranslate2 samples with top-k, top-p and temperature, not '
        'epsilon'))
  return unhonoured


def check_settings(settings: inference.DecodeSettings, overrides: Mapping[str, Any],
                   config_file: files.AnyPath) -> None:
  """A UserError naming the flag, or the binding in `config_file`, of a decoding setting
  CTranslate2 cannot honour exactly."""
  def where(field: str) -> str:
    if field in overrides:
      return f'--{field}={overrides[field]}'
    return f'decoding.DecodeSettings.{field} = {getattr(settings, field)!r} in {config_file}'

  if settings.search not in SEARCH_OPTIONS:
    raise UserError(f'{where("search")}: CTranslate2 cannot decode with {settings.search} '
                    f'search; it runs {", ".join(SEARCH_OPTIONS)}')
  unhonoured = unhonoured_settings(settings)
  if unhonoured:
    field, served, reason = unhonoured[0]
    raise UserError(f'{where(field)}: {reason}; give --{field}={served}, or decode with '
                    '--checkpoint_dir')


class CTranslate2Translator(inference.Translator):
  """An `inference.Translator` whose batches a CTranslate2 model decodes.

  `config` is the exported model's architecture; the Translator reads only its limits
  (max_length) from it, since the weights are CTranslate2's.
  """

  def __init__(self, model_dir: str, config: network.TransformerConfig,
               vocabulary_file: str, tag_strategy: str, settings: inference.DecodeSettings,
               target_languages: set[str] | None = None,
               source_vocabulary_file: str | None = None):
    super().__init__(models.TranslationModel(config), None, vocabulary_file, tag_strategy,
                     settings, target_languages=target_languages,
                     source_vocabulary_file=source_vocabulary_file)
    cores = os.cpu_count() or 1
    self.parallel_batches = settings.parallel_batches or cores
    self._engine = ctranslate2.Translator(
        model_dir, device='cpu', inter_threads=self.parallel_batches,
        intra_threads=max(1, cores // self.parallel_batches))
    if isinstance(settings.search_settings, search.SamplingSettings):
      ctranslate2.set_random_seed(settings.search_settings.seed)
    reserved = np.flatnonzero(tags.reserved_pieces(self.tokenizer))
    self._not_text = [[self.tokenizer.id_to_piece(int(i))] for i in reserved]

  def _run_batch(self, encoder_ids: list[list[int]], prefix_ids: list[int | None],
                 directions: list[int]) -> list[list[int]]:
    """Each sentence's best output ids after its own forced tag (if any): CTranslate2's
    search within the batch's output limit, its finished hypotheses ranked by ours."""
    del directions  # Choose adapters, which no export has.
    results, prefix_lengths = self._search(encoder_ids, prefix_ids)
    return [self._ids(best_hypothesis(result, self.settings.alpha, prefix_length))
            for result, prefix_length in zip(results, prefix_lengths)]

  def _run_nbest_batch(self, encoder_ids: list[list[int]], prefix_ids: list[int | None],
                       directions: list[int], nbest: int) -> common.NBest:
    """Each sentence's `nbest` best finished hypotheses of CTranslate2's search, ranked
    and scored as ours are (`common.NBest`; a slot without a hypothesis scores NEG_INF)."""
    del directions  # Choose adapters, which no export has.
    settings = self.settings
    search.method_of(settings.search_settings).check_outputs(settings.search_settings, nbest)
    results, prefix_lengths = self._search(encoder_ids, prefix_ids, hypotheses=nbest)
    longest = max(len(hypothesis) for result in results for hypothesis in result.hypotheses)
    sequences = np.zeros((len(results), nbest, longest), np.int32)
    scored = np.full((3, len(results), nbest), common.NEG_INF, np.float32)
    for row, (result, prefix_length) in enumerate(zip(results, prefix_lengths)):
      ranked = sorted(zip(result.hypotheses, our_scores(result, settings.alpha, prefix_length)),
                      key=lambda pair: -pair[1].score)[:nbest]
      for slot, (hypothesis, score) in enumerate(ranked):
        ids = self._ids(hypothesis)
        sequences[row, slot, :len(ids)] = ids
        scored[:, row, slot] = score.score, score.log_prob, score.length
    return common.NBest(sequences, scored[0], scored[1], scored[2].astype(np.int32))

  def _search(self, encoder_ids: list[list[int]], prefix_ids: list[int | None],
              hypotheses: int | None = None
              ) -> tuple[list[ctranslate2.TranslationResult], list[int]]:
    """CTranslate2's results for the batch, within its output limit, each with the length
    of its forced tag (0 or 1); `hypotheses` asks for that many of each sentence (default:
    what the search method returns, a beam's whole beam)."""
    _, decode_length = self.batch_lengths(encoder_ids)
    pieces = self.tokenizer.id_to_piece
    prefixes = [[] if prefix_id is None else [pieces(prefix_id)] for prefix_id in prefix_ids]
    settings = self.settings
    options = SEARCH_OPTIONS[settings.search](settings.search_settings)
    if hypotheses is not None:
      options['num_hypotheses'] = max(options['num_hypotheses'], hypotheses)
    results = self._engine.translate_batch(
        [[pieces(i) for i in ids] for ids in encoder_ids],
        target_prefix=prefixes if any(prefixes) else None, **options,
        length_penalty=settings.alpha, no_repeat_ngram_size=settings.no_repeat_ngram_size,
        suppress_sequences=self._not_text, return_end_token=True, return_scores=True,
        max_input_length=0, max_decoding_length=decode_length, min_decoding_length=0)
    return results, [len(prefix) for prefix in prefixes]

  def _ids(self, hypothesis: Sequence[str]) -> list[int]:
    return [self.tokenizer.piece_to_id(piece) for piece in hypothesis]

class OurScore(NamedTuple):
  """A CTranslate2 hypothesis scored as ours is (`inference.Hypothesis`)."""
  log_prob: float  # summed log-probability of the generated pieces, EOS included
  score: float     # log_prob / length ** alpha
  length: int      # generated pieces, EOS included, the forced tag not


def our_scores(result: ctranslate2.TranslationResult, alpha: float,
               prefix_length: int) -> list[OurScore]:
  """Each hypothesis of `result` scored as ours scores it.

  CTranslate2 divides the summed log-probability (to which the forced prefix adds
  nothing) by the length of the whole hypothesis, forced prefix and EOS included; ours
  leaves the prefix out (`decoding.length_penalty`).
  """
  scores = []
  for hypothesis, score in zip(result.hypotheses, result.scores):
    length = len(hypothesis)
    generated = max(length - prefix_length, 1)
    scores.append(OurScore(score * length ** alpha, score * (length / generated) ** alpha,
                           generated))
  return scores


def best_hypothesis(result: ctranslate2.TranslationResult, alpha: float,
                    prefix_length: int) -> Sequence[str]:
  """The hypothesis with the best sum log p / generated length ** alpha (`our_scores`)."""
  scores = our_scores(result, alpha, prefix_length)
  return result.hypotheses[max(range(len(scores)), key=lambda i: scores[i].score)]


def load_translator(model_dir: str,
                    overrides: Mapping[str, Any]) -> CTranslate2Translator:
  """The translator of an exported folder, with the decoding settings of its config.gin
  under `overrides` (`decoding_flags.decoding_overrides`)."""
  layout = run_layout.RunLayout(model_dir)
  if not ctranslate2.contains_model(model_dir):
    raise UserError(f'{FLAG}: {model_dir} holds no CTranslate2 model (write one with '
                    'launch/export.py --format=ctranslate2)')
  for needed in (layout.config, layout.vocabulary):
    if not needed.is_file():
      raise UserError(f'{FLAG}: {needed} is missing; launch/export.py writes it beside the '
                      'model')
  run = run_loading.read_run(model_dir, FLAG)
  settings = run.decode_settings(overrides)
  check_settings(settings, overrides, layout.config)
  return CTranslate2Translator(
      model_dir, run.model, str(layout.vocabulary), run.data.tag_strategy, settings,
      target_languages=run_loading.trained_target_languages(model_dir),
      source_vocabulary_file=run_loading.source_vocabulary_file(model_dir))


def load_model(args: argparse.Namespace, overrides: Mapping[str, Any],
               step: int | None = None) -> Any:
  """The translator the model flags name (`decoding_flags.add_ctranslate2_flag` and
  `add_decoding_flags`): the folder --ctranslate2 names, its outputs into yor_Latn restored
  as its settings say (`run_loading.with_restored_marks`), else the run, ensemble or family
  models of `decoding_flags.load_model` at `step` (default: --step)."""
  if args.ctranslate2 is None:
    return decoding_flags.load_model(args, args.step if step is None else step, overrides)
  translator = load_translator(args.ctranslate2, overrides)
  return run_loading.with_restored_marks(translator, translator.settings)


def load_for_direction(args: argparse.Namespace, overrides: Mapping[str, Any], src_lang: str,
                       tgt_lang: str) -> Any:
  """`load_model`, with a warning for each leg of src_lang -> tgt_lang that the run
  (--checkpoint_dir, or the run --ctranslate2 exported) never trained on."""
  translator = load_model(args, overrides)
  model_dir = args.checkpoint_dir or args.ctranslate2
  if model_dir is not None:
    run_layout.RunLayout(model_dir).warn_untrained(translator.legs(src_lang, tgt_lang))
  return translator
