"""Text in, text out: tags, length-bucketed batching, search, detokenisation.

The same path serves `launch/translate.py`, `launch/evaluate.py` and evaluation during
training, so the scores a run reports are the scores its users get.
"""

from collections.abc import Callable, Collection, Iterator, Sequence
import concurrent.futures
import contextlib
import dataclasses
import os
from typing import Any, NamedTuple

import jax
import numpy as np

from t5x_mt.decoding import search
from t5x_mt.decoding.search import common
from t5x_mt.core import partitioning
from t5x_mt.decoding import prediction
from t5x_mt.core import processes
from t5x_mt.core import validation
from t5x_mt.data import tags
from t5x_mt.data import vocab
from t5x_mt.core.directions import Direction
from t5x_mt.core.errors import UserError

# The search's inputs are padded up to one of these lengths, so a corpus compiles few
# search programs (the encoder runs before, at the batch's own longest length: its
# program has no loop and compiles in a fraction of the search's time). Steps of at most
# 1.5x keep the cross-attention's padding under a third.
LENGTH_BUCKETS = (8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024)


def bucket_length(length: int, limit: int) -> int:
  """The smallest bucket that holds `length` tokens, capped at `limit`."""
  return min(next((b for b in LENGTH_BUCKETS if b >= length), LENGTH_BUCKETS[-1]), limit)


def translation_legs(src_lang: str, tgt_lang: str, pivot_language: str,
                     pivot_directions: Sequence[str]) -> list[tuple[str, str]]:
  """[(src_lang, pivot_language), (pivot_language, tgt_lang)] for a pivoted direction,
  else [(src_lang, tgt_lang)].

  `pivot_directions` names directions ('hau_Latn-zul_Latn') or holds '*' for every
  direction that does not involve the pivot language.
  """
  if pivot_language in (src_lang, tgt_lang) or not (
      '*' in pivot_directions or f'{src_lang}-{tgt_lang}' in pivot_directions):
    return [(src_lang, tgt_lang)]
  return [(src_lang, pivot_language), (pivot_language, tgt_lang)]


class Hypothesis(NamedTuple):
  """One of a sentence's n-best translations and the search's scores of it."""
  text: str
  log_prob: float  # summed log-probability of its pieces, EOS included (ensemble: score)
  score: float     # log_prob / length ** alpha, by which n-best lists are ranked
  length: int      # generated pieces, EOS included, the forced tag not


@search.with_method_settings
@dataclasses.dataclass(frozen=True)
class DecodeSettings:
  """How a Translator decodes; bound in gin as `decoding.DecodeSettings.<field>`.

  Besides the fields below it has every registered search method's settings as fields
  of the same names (`search.with_method_settings`): beam_size and stop (beam search),
  temperature, top_k, top_p, epsilon and seed (sampling). `search` chooses the method;
  the others' settings are kept, unused, so that a config may hold them for a command
  that chooses another method (`--search`).

  Attributes:
    search: the search method's name (`search.names()`): 'beam' (with beam_size 1:
      greedy), 'greedy' or 'sampling'.
    alpha: length penalty: hypotheses are ranked by sum log p / length^alpha, length
      counting generated tokens up to and including EOS (fairseq's --lenpen).
    batch_size: sentences per decoding batch (rounded up to the data-parallel devices).
    max_input_length: source tokens kept (tag and EOS included); longer input is cut.
    max_decode_length: generated tokens at most; each batch allows twice its bucketed
      input length plus 16, up to this limit.
    pivot_language: the language pivoted directions go through.
    pivot_directions: directions ('hau_Latn-zul_Latn') translated X -> pivot -> Y instead
      of directly; '*' pivots every direction that does not involve the pivot language.
    no_repeat_ngram_size: > 0 never outputs an n-gram of that size twice in a sentence
      (fairseq's --no-repeat-ngram-size): a weak model's loops end.
    max_length_ratio, max_length_offset: with ratio > 0 an output has at most
      ceil(ratio * source pieces + offset) pieces and ends there with EOS (fairseq's
      --max-len-a and --max-len-b), within max_decode_length.
    parallel_batches: batches decoded at once, each by its own thread (CTranslate2's
      `inter_threads`). A beam step's products are too small to keep several CPU cores
      busy, while independent batches use them fully. None: the number of CPU cores when
      decoding on one CPU device, else 1 (a mesh's devices already share every batch).
    yoruba_diacritics: the MODEL_DIR of a Yoruba diacritics run (gin/runs/
      yoruba_diacritics.gin) whose model restores the tone marks and underdots of outputs
      into yor_Latn, as `run_loading.load_model` wires it (None: outputs as decoded).
  """
  search: str = search.DEFAULT
  alpha: float = 1.0
  batch_size: int = 64
  max_input_length: int = 256
  max_decode_length: int = 256
  pivot_language: str = 'eng_Latn'
  pivot_directions: Sequence[str] = ()
  no_repeat_ngram_size: int = 0
  max_length_ratio: float = 0.0
  max_length_offset: int = 10
  parallel_batches: int | None = None
  yoruba_diacritics: str | None = None

  def __post_init__(self):
    # gin may give a list; the settings are hashable values.
    object.__setattr__(self, 'pivot_directions', tuple(self.pivot_directions))
    name = search.binding_name
    validation.choice(name('search'), self.search, search.names())
    for field in ('batch_size', 'max_input_length', 'max_decode_length'):
      validation.integer(name(field), getattr(self, field), minimum=1)
    validation.number(name('alpha'), self.alpha)
    validation.integer(name('no_repeat_ngram_size'), self.no_repeat_ngram_size, minimum=0)
    validation.number(name('max_length_ratio'), self.max_length_ratio, at_least=0.0)
    validation.integer(name('max_length_offset'), self.max_length_offset, minimum=0)
    if self.parallel_batches is not None:
      validation.integer(name('parallel_batches'), self.parallel_batches, minimum=1)
    search.check_method_settings(self)

  @property
  def search_settings(self) -> Any:
    """The chosen method's settings (`search.BeamSettings`, ...), from the fields."""
    return search.get(self.search).settings_from(self)

  def output_limits(self) -> common.OutputLimits:
    return common.OutputLimits(self.no_repeat_ngram_size, self.max_length_ratio,
                                 self.max_length_offset)


class Translator:
  """Translates sentences with a model's parameters and the run's vocabulary: text to
  tagged ids, ids to length-bucketed batches, batches through the search method its
  settings choose (`prediction.predict_batch`), ids back to text; pivoted directions leg by leg. The
  model is a run's `models.TranslationModel` or an `ensemble.Ensemble` of runs.

  `target_languages`: the languages the model was trained to translate into; any other
  target is refused (None: not known, nothing refused). `reverse_target`: the model
  writes each target's pieces right to left (trained with REVERSE_TARGET); its outputs
  are turned back before detokenising.
  """

  def __init__(self, model: prediction.StepwiseModel, params: Any, vocabulary_file: str,
               tag_strategy: str, settings: DecodeSettings, *,
               mesh: jax.sharding.Mesh | None = None,
               rules: partitioning.LogicalRules | None = None,
               target_languages: Collection[str] | None = None,
               reverse_target: bool = False,
               source_vocabulary_file: str | None = None):
    self.model = model
    self.params = params  # In the model's layout (scanned layers stay stacked).
    self.settings = settings
    self.vocabulary_file = str(vocabulary_file)
    self.tokenizer = vocab.sentencepiece_processor(self.vocabulary_file)
    # What segments sources: the vocabulary, or a model of their own that numbers its
    # pieces alike (an imported Marian model's).
    self.source_tokenizer = (vocab.sentencepiece_processor(str(source_vocabulary_file))
                             if source_vocabulary_file else self.tokenizer)
    self.tag_strategy = tags.check_tag_strategy(tag_strategy)
    # Tags and control pieces mark data, never text: the search never generates one after
    # the forced tag, however much a model prefers it (a weak model repeats the forced tag,
    # one trained on [y'; <DA>] ends with <DA>), and detokenisation drops any it is given.
    self._reserved_pieces = tags.reserved_pieces(self.tokenizer)
    self.mesh = mesh
    self.rules = rules if rules is not None else partitioning.logical_axis_rules()
    self.target_languages = None if target_languages is None else frozenset(target_languages)
    self.reverse_target = reverse_target
    self.max_input_length = min(settings.max_input_length, model.max_length)
    self.max_decode_length = min(settings.max_decode_length, model.max_length)
    self._data_parallel = partitioning.batch_shards(mesh) if mesh is not None else 1
    parallel_batches = settings.parallel_batches
    if mesh is not None and mesh.is_multi_process:
      # Every process must issue its batches in the same order: one at a time.
      parallel_batches = 1
    elif parallel_batches is None:
      on_cpu = (mesh is None or mesh.size == 1) and jax.default_backend() == 'cpu'
      parallel_batches = (os.cpu_count() or 1) if on_cpu else 1
    self.parallel_batches = parallel_batches
    self.batch_size = -(-settings.batch_size // self._data_parallel) * self._data_parallel

  def _tag_id(self, tag: str) -> int:
    return tags.tag_piece_id(self.tokenizer, tag, self.vocabulary_file)

  def forced_tag_id(self, direction_tags: tags.Tags) -> int | None:
    """The piece id the search forces as a direction's first output: its decoder tag's,
    None where the tag strategy puts none on the decoder."""
    return None if direction_tags.decoder_tag is None else self._tag_id(direction_tags.decoder_tag)

  @property
  def max_source_pieces(self) -> int:
    """A sentence's pieces that fit the input beside the encoder tag and EOS."""
    return self.max_input_length - 2

  def encode_source(self, sentence: str, direction_tags: tags.Tags) -> list[int]:
    """Encoder token ids: the encoder tag (if the tag strategy has one), the sentence's
    pieces, EOS (cut to fit)."""
    pieces = self.source_tokenizer.encode(sentence)[:self.max_source_pieces]
    tag = [self._tag_id(direction_tags.encoder_tag)] if direction_tags.encoder_tag else []
    return tag + pieces + [vocab.EOS_ID]

  def overlong(self, sentences: Sequence[str], src_lang: str, tgt_lang: str) -> list[int]:
    """Indices of the sentences that do not fit the model's input: only their start is
    translated."""
    del src_lang, tgt_lang  # One model reads every direction.
    return [i for i, pieces in enumerate(self.source_tokenizer.encode(list(sentences)))
            if len(pieces) > self.max_source_pieces]

  def check_target(self, tgt_lang: str) -> None:
    """A UserError if the model never learned to translate into `tgt_lang`."""
    if self.target_languages is not None and tgt_lang not in self.target_languages:
      raise UserError(f'{tgt_lang}: the model was never trained to translate into it; it '
                      f'translates into {", ".join(sorted(self.target_languages))}')

  def decode_target(self, ids: Sequence[int]) -> str:
    """Text of generated ids up to the first EOS: without the forced tag, or any other
    tag or control piece (`tags.reserved_pieces`) a search that bans none let through,
    and without the space a word piece generated last would leave (a line of text, as
    Marian's tokenizer decodes it)."""
    ids = list(ids)
    if vocab.EOS_ID in ids:
      ids = ids[:ids.index(vocab.EOS_ID)]
    if self.reverse_target:
      ids.reverse()
    return self.tokenizer.decode([i for i in ids if not self._reserved_pieces[i]]).strip()

  def _batch_rows(self, num_sentences: int) -> int:
    """Rows to decode: a power of two (few shapes to compile), no more than needed."""
    rows = max(self._data_parallel, 8)
    while rows < num_sentences:
      rows *= 2
    return min(rows, self.batch_size)

  def batch_lengths(self, encoder_ids: Sequence[Sequence[int]]) -> tuple[int, int]:
    """(encoder length, most output tokens) of a batch: the bucketed longest input, and
    twice that plus 16 within max_decode_length."""
    length = bucket_length(max(len(ids) for ids in encoder_ids), self.max_input_length)
    return length, min(2 * length + 16, self.max_decode_length)

  def _run_batch(self, encoder_ids: list[list[int]], prefix_ids: list[int | None],
                 directions: list[int]) -> np.ndarray:
    """The batch's best output ids per sentence, each after its own forced tag (if any)
    in its own direction (an id); rows past the sentences are padding."""
    return self._search_batch(encoder_ids, prefix_ids, directions, 0)

  def _run_nbest_batch(self, encoder_ids: list[list[int]], prefix_ids: list[int | None],
                       directions: list[int], nbest: int) -> common.NBest:
    """The batch's `nbest` best outputs per sentence and their scores."""
    return self._search_batch(encoder_ids, prefix_ids, directions, nbest)

  def _search_batch(self, encoder_ids: list[list[int]], prefix_ids: list[int | None],
                    directions: list[int], nbest: int) -> np.ndarray | common.NBest:
    """`prediction.predict_batch` over the batch, gathered from every process."""
    length, decode_length = self.batch_lengths(encoder_ids)
    rows = self._batch_rows(len(encoder_ids))
    # Rows beyond the real sentences repeat the last one, so they finish when it does
    # instead of holding the batch's beam search to its length limit.
    source_of_row = [min(row, len(encoder_ids) - 1) for row in range(rows)]
    tokens = np.zeros((rows, length), np.int32)
    for row, source in enumerate(source_of_row):
      tokens[row, :len(encoder_ids[source])] = encoder_ids[source]
    prefixes = (None if prefix_ids[0] is None
                else np.array([prefix_ids[source] for source in source_of_row], np.int32))
    with contextlib.ExitStack() as stack:
      if self.mesh is not None:
        stack.enter_context(partitioning.activation_sharding(self.mesh, self.rules))
      outputs = prediction.predict_batch(
          self.model, self.params, self._global_rows(tokens),
          input_length=max(len(ids) for ids in encoder_ids),
          direction=np.array([directions[source] for source in source_of_row], np.int32),
          prefix_id=prefixes, max_decode_length=decode_length,
          search_settings=self.settings.search_settings, alpha=self.settings.alpha,
          num_pieces=self.tokenizer.get_piece_size(),
          limits=self.settings.output_limits(), banned_pieces=self._reserved_pieces,
          nbest=nbest)
      return jax.tree_util.tree_map(processes.gather, outputs)

  def _global_rows(self, tokens: np.ndarray) -> np.ndarray | jax.Array:
    """A batch every process made alike as one array whose rows are split among the
    processes' devices (on one process, the batch as it is)."""
    if self.mesh is None or not self.mesh.is_multi_process:
      return tokens
    return jax.make_array_from_process_local_data(partitioning.batch_sharding(self.mesh),
                                                  tokens, tokens.shape)

  def pivots(self, src_lang: str, tgt_lang: str) -> bool:
    """Whether src_lang -> tgt_lang goes through the pivot language."""
    return len(self.legs(src_lang, tgt_lang)) > 1

  def legs(self, src_lang: str, tgt_lang: str) -> list[tuple[str, str]]:
    """The direct translations src_lang -> tgt_lang is made of (see `translation_legs`)."""
    return translation_legs(src_lang, tgt_lang, self.settings.pivot_language,
                            self.settings.pivot_directions)

  def translate(self, sentences: Sequence[str], src_lang: str, tgt_lang: str,
                on_batch: Callable[[int], None] | None = None) -> list[str]:
    """Translations of `sentences` from src_lang into tgt_lang, in input order; through
    the pivot language where `pivots` says so. `on_batch` gets the number of sentences
    of each batch once decoded, in each leg (a progress bar's update)."""
    self.check_direction(src_lang, tgt_lang)
    for leg_src, leg_tgt in self.legs(src_lang, tgt_lang):
      sentences = self.translate_directly(sentences, leg_src, leg_tgt, on_batch)
    return list(sentences)

  def check_direction(self, src_lang: str, tgt_lang: str) -> None:
    """A UserError before any work if a leg of src_lang -> tgt_lang goes into a language
    the model never learned."""
    for _, leg_tgt in self.legs(src_lang, tgt_lang):
      self.check_target(leg_tgt)

  def translate_directly(self, sentences: Sequence[str], src_lang: str, tgt_lang: str,
                         on_batch: Callable[[int], None] | None = None) -> list[str]:
    """Translations of `sentences` from src_lang into tgt_lang by the model alone;
    `on_batch` as in `translate`."""
    outputs: list[str] = [''] * len(sentences)
    for index, generated in self._decoded(sentences, src_lang, tgt_lang, 0, on_batch):
      outputs[index] = self.decode_target(generated)
    return outputs

  def translate_nbest(self, sentences: Sequence[str], src_lang: str, tgt_lang: str,
                      nbest: int, on_batch: Callable[[int], None] | None = None
                      ) -> list[list[Hypothesis]]:
    """The `nbest` best translations of each sentence from src_lang into tgt_lang by the
    model alone, best first by their scores: beam search's `nbest` best (at most its
    beam; fewer where fewer hypotheses exist), or `nbest` independent samples;
    `on_batch` as in `translate`. A pivoted direction is refused:
    its n-best list would rank the second leg's outputs of the first leg's best."""
    if self.pivots(src_lang, tgt_lang):
      raise UserError(f'n-best lists: {src_lang}-{tgt_lang} pivots through '
                      f'{self.settings.pivot_language}; translate each leg on its own')
    outputs: list[list[Hypothesis]] = [[] for _ in sentences]
    for index, found in self._decoded(sentences, src_lang, tgt_lang, nbest, on_batch):
      outputs[index] = [
          Hypothesis(self.decode_target(ids), float(log_prob), float(score), int(length))
          for ids, score, log_prob, length in zip(*found)
          if score > common.NEG_INF / 2]
    return outputs

  def translate_mixed(self, sentences: Sequence[str], directions: Sequence[tuple[str, str]],
                      spread_over: int | None = None) -> list[str]:
    """Translations of `sentences`, each from and into its own (src_lang, tgt_lang), in
    batches that mix directions: each row reads its own tags and direction (the search
    forces each row's target tag on its own, and adapters follow each row's direction).
    Batches are made as `translate` makes them (by length, their output limit), so that
    a sentence gets the translation `translate` gives it among the sentences of its own
    direction; fewer sentences than `spread_over` (default: parallel_batches) full
    batches are spread over `spread_over` batches, so that each of that many threads
    decodes some (1: one batch, for a caller that keeps the other threads busy itself).
    No direction may pivot."""
    for src_lang, tgt_lang in set(directions):
      if self.pivots(src_lang, tgt_lang):
        raise UserError(f'{src_lang}-{tgt_lang} pivots through '
                        f'{self.settings.pivot_language}; translate it with `translate`')
      self.check_direction(src_lang, tgt_lang)
      self.model.check_direction(Direction(src_lang, tgt_lang), 'translate')
    row_tags = [tags.tags_for(self.tag_strategy, *direction) for direction in directions]
    encoded = [self.encode_source(sentence, row)
               for sentence, row in zip(sentences, row_tags)]
    prefix_ids = [self.forced_tag_id(row) for row in row_tags]
    direction_ids = [Direction(*direction).id for direction in directions]
    outputs = [''] * len(sentences)
    run = lambda rows: self._run_batch([encoded[i] for i in rows], [prefix_ids[i] for i in rows],
                                       [direction_ids[i] for i in rows])
    spread = -(-len(sentences) // (spread_over or self.parallel_batches))
    for rows, generated in self._in_batches(encoded, run, min(spread, self.batch_size)):
      for index, ids in zip(rows, generated):
        outputs[index] = self.decode_target(ids)
    return outputs

  def _decoded(self, sentences: Sequence[str], src_lang: str, tgt_lang: str, nbest: int,
               on_batch: Callable[[int], None] | None) -> Iterator[tuple[int, Any]]:
    """(index, the search's output for it) for every sentence, batch by batch: its ids,
    or with `nbest` its rows of `common.NBest`."""
    self.check_target(tgt_lang)
    self.model.check_direction(Direction(src_lang, tgt_lang), 'translate')
    direction = Direction(src_lang, tgt_lang).id
    direction_tags = tags.tags_for(self.tag_strategy, src_lang, tgt_lang)
    prefix_id = self.forced_tag_id(direction_tags)
    encoded = [self.encode_source(s, direction_tags) for s in sentences]
    if nbest:
      run = lambda rows: self._run_nbest_batch([encoded[i] for i in rows],
                                               [prefix_id] * len(rows), [direction] * len(rows),
                                               nbest)
    else:
      run = lambda rows: self._run_batch([encoded[i] for i in rows], [prefix_id] * len(rows),
                                         [direction] * len(rows))
    for rows, generated in self._in_batches(encoded, run):
      for row, index in enumerate(rows):
        yield index, (generated[row] if not nbest
                      else [np.asarray(part[row]) for part in generated])
      if on_batch is not None:
        on_batch(len(rows))

  def _in_batches(self, encoded: Sequence[Sequence[int]], run: Callable[[list[int]], Any],
                  batch_size: int | None = None) -> Iterator[tuple[list[int], Any]]:
    """(indices, `run` of them) of each batch of the encoded sentences: sorted by length,
    `batch_size` (default: the settings') at a time, parallel_batches batches decoding at
    once."""
    batch_size = batch_size or self.batch_size
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
    batches = [order[start:start + batch_size] for start in range(0, len(order), batch_size)]
    with concurrent.futures.ThreadPoolExecutor(self.parallel_batches) as pool:
      yield from zip(batches, pool.map(run, batches))
