"""The corpus a Yoruba diacritics restorer trains on: marked lines as (stripped, marked) pairs.

A `MarkingCorpus` holds marked Yoruba lines per split and serves the direction
yor_Latn -> yor_Latn as the chunks a restorer reads (`chunk_pairs`): the stripped chunk
and its decoder target (`yoruba_marks.decoder_target`). Every run trained on it keeps the
marking lexicon of its training lines (`run_files`), which restoration reads beside the
model.
"""

from collections.abc import Mapping, Sequence

from t5x_mt.data.yoruba import marking_lexicon
from t5x_mt.data.yoruba import yoruba_marks
from t5x_mt.data.corpus_types import MultiwayCorpus
from t5x_mt.core.errors import UserError

LANGUAGE = yoruba_marks.LANGUAGE


class MarkingCorpus(MultiwayCorpus):
  """Marked Yoruba lines, and the pairs (stripped text, decoder target) of the direction
  yor_Latn -> yor_Latn made of them; `sentences` gives the marked lines themselves."""

  def __init__(self, name: str, lines_by_split: Mapping[str, Sequence[str]],
               pairs_by_split: Mapping[str, Sequence[tuple[str, str]]]):
    super().__init__(name, {split: [{LANGUAGE: line} for line in lines]
                            for split, lines in lines_by_split.items()})
    self._pairs = {split: list(pairs) for split, pairs in pairs_by_split.items()}

  def pairs(self, split: str, src: str, tgt: str) -> list[tuple[str, str]]:
    if (src, tgt) != (LANGUAGE, LANGUAGE):
      raise UserError(f'corpus {self.name!r} holds {LANGUAGE}-{LANGUAGE} (marks restored) '
                      f'only, not {src}-{tgt}')
    self.sentences(split, LANGUAGE)  # A UserError for a split it does not have.
    return list(self._pairs[split])

  def run_files(self) -> dict[str, bytes]:
    """The marking lexicon of the training lines, which a restorer trained on this corpus
    reads beside its model (`mixtures.run_files`)."""
    lexicon = marking_lexicon.MarkingLexicon.from_lines(self.sentences('train', LANGUAGE))
    return {marking_lexicon.FILE_NAME: lexicon.to_json().encode('utf-8')}


def chunk_pairs(stripped: str, target: str) -> list[tuple[str, str]]:
  """(stripped chunk, its target) of each of the `chunks` of a line, as a restorer reads
  it: the target has one character per stripped one, so it is cut where the line is."""
  pairs, start = [], 0
  for chunk in yoruba_marks.chunks(stripped, yoruba_marks.CHUNK_CHARACTERS):
    pairs.append((chunk, target[start:start + len(chunk)]))
    start += len(chunk)
  return pairs


def marking_corpus(name: str, train: Sequence[str], validation: Sequence[str]
                   ) -> MarkingCorpus:
  """The restorer's corpus of `yoruba_marks.training_examples`, no training line
  repeating a validation one, each line as the `chunk_pairs` a restorer reads."""
  held_out = yoruba_marks.training_examples(validation)
  kept = {line: example for line, example in yoruba_marks.training_examples(train).items()
          if line not in held_out}
  return MarkingCorpus(
      name, {'train': list(kept), 'validation': list(held_out)},
      {split: [pair for example in examples.values() for pair in chunk_pairs(*example)]
       for split, examples in (('train', kept), ('validation', held_out))})
