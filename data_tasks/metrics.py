"""What seqio's Evaluator (and so T5X's) computes on a translation Task: its postprocessing
of decoded outputs and its metric function.

seqio decodes a model's output ids with the Task's vocabulary; the decoded text holds the
pieces that mark data, not text: the forced decoder tag (`<2hau_Latn>`), a synthetic-data
tag (`<BT>`, `<DA>`), a spare `TBD<i>` or the unknown piece (which SentencePiece spells
`⁇`) a model let through. `postprocess_translation` drops them, as t5x_mt's own
translator does, so that the metric scores the text a user would read. References are the Tasks' raw target text (`targets_pretokenized`) and are
left as they are. The metric is the project's own sacreBLEU scoring (`t5x_mt.evaluation.scoring`:
BLEU with 13a tokenisation, chrF++), so T5X's evaluator reports what t5x_mt's does.
"""

from collections.abc import Mapping, Sequence
import re
from typing import Any

from t5x_mt.evaluation import scoring
from t5x_mt.data import tags

# SentencePiece's text for the unknown piece.
UNKNOWN_PIECE_TEXT = '\u2047'
# Every user-defined piece of a t5x_mt vocabulary and the unknown piece, longest first so
# that `TBD12` is never read as `TBD1` followed by `2`.
_RESERVED_PIECES = re.compile('|'.join(
    re.escape(piece) for piece in sorted([*tags.special_symbols(), UNKNOWN_PIECE_TEXT],
                                         key=len, reverse=True)))


def postprocess_translation(text: str, example: Mapping[str, Any] | None = None,
                            is_target: bool = False) -> str:
  """A decoded prediction without its reserved pieces, its spaces normalised (seqio's
  postprocess_fn); a reference unchanged.

  A reserved piece spells no space of its own (the piece after it carries one), so one
  inside a word leaves the word whole.
  """
  del example  # seqio passes the example; the text alone decides.
  if is_target:
    return text
  return ' '.join(_RESERVED_PIECES.sub('', text).split())


def translation_metrics(targets: Sequence[str], predictions: Sequence[str]
                        ) -> dict[str, float]:
  """{'bleu': sacreBLEU BLEU, 'chrf': chrF++} of `predictions` against one reference each
  (a seqio metric_fn)."""
  scores = scoring.score_direction(predictions, targets)
  return {'bleu': scores['bleu'], 'chrf': scores['chrf']}
