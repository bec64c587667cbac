"""Growing a SentencePiece unigram vocabulary with a new language (VolcTrans).

A model trained on the old languages keeps working only if the old languages segment
exactly as before. So the merged model keeps every old piece with its id and score, and
appends only those pieces of the new language's model that cannot be spelled by
concatenating old pieces (normal and user-defined ones; byte-fallback pieces spell
anything and do not count), with their scores lowered by log(1/lambda): score + log
lambda, lambda < 1, so that they win only where the old pieces cannot cover the text. A
new piece that cannot be spelled holds a character no old piece has, so it never matches
text the old model covered without falling back to bytes, and that text keeps its ids.

A BPE model (NLLB-200's and M2M-100's) merges pieces in the order of their scores, and a
text's merges stop at old pieces; the appended pieces of a BPE model of the new language
(whose every piece is a merge of two before it) take scores below every old piece, in
their own order. An old text's merges all come first, and its pieces then could merge
only into a piece that old pieces spell, which none of the appended is.
"""

import dataclasses
import math
import os

from sentencepiece import sentencepiece_model_pb2 as model_pb2

from t5x_mt.core import files
from t5x_mt.core import languages
from t5x_mt.core.errors import UserError

_SPELLING_TYPES = (model_pb2.ModelProto.SentencePiece.NORMAL,
                   model_pb2.ModelProto.SentencePiece.USER_DEFINED)
_MERGEABLE_TYPES = (model_pb2.TrainerSpec.UNIGRAM, model_pb2.TrainerSpec.BPE)


@dataclasses.dataclass(frozen=True)
class MergeSummary:
  """What a merge did: pieces kept, appended and dropped as spellable."""
  old_pieces: int
  new_model_pieces: int
  appended: int
  spellable: int
  already_present: int


def load_model(path: str | os.PathLike[str], flag: str) -> model_pb2.ModelProto:
  """The ModelProto of a unigram SentencePiece model file; UserError naming `flag`."""
  try:
    with open(path, 'rb') as f:
      data = f.read()
  except OSError as e:
    raise UserError(f'{flag}: cannot read {path}: {e.strerror}') from None
  model = model_pb2.ModelProto()
  try:
    model.ParseFromString(data)
  except Exception:  # pylint: disable=broad-except  (protobuf raises a private DecodeError)
    raise UserError(f'{flag}: {path} is not a SentencePiece model') from None
  if not model.pieces:
    raise UserError(f'{flag}: {path} is not a SentencePiece model (no pieces)')
  if model.trainer_spec.model_type not in _MERGEABLE_TYPES:
    raise UserError(f'{flag}: {path} is a {model_type(model)} model; only unigram and BPE '
                    'models can be merged')
  return model


def model_type(model: model_pb2.ModelProto) -> str:
  """'unigram', 'bpe', 'char' or 'word': the kind of a SentencePiece model, as its trainer
  names it."""
  return model_pb2.TrainerSpec.ModelType.Name(model.trainer_spec.model_type).lower()


def spellable(piece: str, vocabulary: set[str], longest: int) -> bool:
  """Whether `piece` is a concatenation of strings of `vocabulary` (longest `longest`)."""
  reachable = [True] + [False] * len(piece)
  for end in range(1, len(piece) + 1):
    for start in range(max(0, end - longest), end):
      if reachable[start] and piece[start:end] in vocabulary:
        reachable[end] = True
        break
  return reachable[-1]


def merge_models(base: model_pb2.ModelProto, new: model_pb2.ModelProto,
                 score_scale: float) -> tuple[model_pb2.ModelProto, MergeSummary]:
  """`base` with the unspellable normal pieces of `new` appended: a unigram model's with
  score + log lambda, a BPE model's below every old score, in their order."""
  if not 0 < score_scale <= 1:
    raise UserError(f'--score_scale: lambda must be in (0, 1], got {score_scale}')
  if model_type(new) != model_type(base):
    raise UserError(f'--new_model: a {model_type(new)} model cannot grow a '
                    f'{model_type(base)} model')
  merged = model_pb2.ModelProto()
  merged.CopyFrom(base)
  present = {piece.piece for piece in base.pieces}
  vocabulary = {piece.piece for piece in base.pieces if piece.type in _SPELLING_TYPES}
  longest = max(map(len, vocabulary), default=1)
  appended = spellable_count = duplicate = 0
  bpe = base.trainer_spec.model_type == model_pb2.TrainerSpec.BPE
  lowest = min(piece.score for piece in base.pieces)
  for piece in new.pieces:
    if piece.type != model_pb2.ModelProto.SentencePiece.NORMAL:
      continue
    if piece.piece in present:
      duplicate += 1
    elif spellable(piece.piece, vocabulary, longest):
      spellable_count += 1
    else:
      score = lowest - 1 - appended if bpe else piece.score + math.log(score_scale)
      merged.pieces.add(piece=piece.piece, score=score,
                        type=model_pb2.ModelProto.SentencePiece.NORMAL)
      present.add(piece.piece)
      appended += 1
  summary = MergeSummary(len(base.pieces), len(new.pieces), appended, spellable_count,
                         duplicate)
  return merged, summary


def with_language(base: model_pb2.ModelProto, learned: model_pb2.ModelProto, code: str,
                  max_pieces: int, score_scale: float = 0.5
                  ) -> tuple[model_pb2.ModelProto, MergeSummary]:
  """`base` grown by language `code`: at most `max_pieces` of the pieces of `learned` (a
  model of its text) that old pieces cannot spell, appended as `merge_models` appends
  them, its characters first (a character left out is unknown to the model) and then the
  rest in `learned`'s order (a BPE piece's merges come before it), then the language's tag
  as a user-defined piece. The summary is the merge's, before the cut to `max_pieces`."""
  merged, summary = merge_models(base, learned, score_scale)
  appended = [(piece.piece, piece.score) for piece in merged.pieces[len(base.pieces):]]
  del merged.pieces[len(base.pieces):]
  for piece, score in sorted(appended, key=lambda entry: len(entry[0]) > 1)[:max_pieces]:
    merged.pieces.add(piece=piece, score=score,
                      type=model_pb2.ModelProto.SentencePiece.NORMAL)
  merged.pieces.add(piece=languages.language_tag(code),
                    type=model_pb2.ModelProto.SentencePiece.USER_DEFINED)
  return merged, summary


def extends(old_model: bytes, new_model: bytes) -> bool:
  """Whether `new_model` holds every piece of `old_model` first, with the same id, score
  and type (a grown vocabulary), and the same normalisation."""
  old, new = model_pb2.ModelProto(), model_pb2.ModelProto()
  old.ParseFromString(old_model)
  new.ParseFromString(new_model)
  if len(new.pieces) < len(old.pieces) or old.normalizer_spec != new.normalizer_spec:
    return False
  return all((a.piece, a.score, a.type) == (b.piece, b.score, b.type)
             for a, b in zip(old.pieces, new.pieces))


def merge_files(base_model: str, new_model: str, output: str,
                score_scale: float = 0.5) -> MergeSummary:
  """Merges two model files into `output` (written atomically); returns the summary."""
  merged, summary = merge_models(load_model(base_model, '--base_model'),
                                 load_model(new_model, '--new_model'), score_scale)
  files.write_bytes_atomically(output, merged.SerializeToString())
  return summary


def byte_fallback_share(processor, lines) -> float:
  """Share of pieces that are byte-fallback pieces: the text the model cannot spell."""
  pieces = [piece for ids in processor.encode(list(lines)) for piece in ids]
  if not pieces:
    return 0.0
  return sum(processor.is_byte(piece) for piece in pieces) / len(pieces)


def changed_segmentations(old_processor, merged_processor, lines) -> tuple[int, int]:
  """(sentences the old model covers without byte fallback or the unknown piece, how many
  of them the merged model segments differently): the second must be zero."""
  covered = changed = 0
  for line, old_ids, new_ids in zip(lines, old_processor.encode(list(lines)),
                                    merged_processor.encode(list(lines))):
    del line
    if any(old_processor.is_byte(piece) or old_processor.is_unknown(piece)
           for piece in old_ids):
      continue
    covered += 1
    changed += old_ids != new_ids
  return covered, changed
