"""Language-tag strategies: where the source and target language tags go.

Multilingual models learn which language to produce from a tag token. Three placements are
in use (docs/methods.md#language-tags); this module is the one place that knows them, so
training data (data_tasks) and inference (forced decoder prefix) can never disagree.

  T-ENC        encoder: <2tgt> x            decoder: y
  S-ENC-T-DEC  encoder: <2src> x            decoder: <2tgt> y   (Tencent, fairseq langtoks)
  T-ENC-T-DEC  encoder: <2tgt> x            decoder: <2tgt> y   (VolcTrans; the default)
  none         encoder: x                   decoder: y          (a bilingual model, such as
                                                                 an imported OPUS-MT one)

When the decoder carries a tag, it is the first target token: the model learns to predict
it during training and inference forces it as the first decoded token. A language model
(a decoder alone, for n-best reranking) always starts its text with its language's tag,
whatever the strategy, so that one model serves several languages.

Synthetic pairs (back- or forward-translations) may carry one more tag that tells the model
the pair is synthetic (docs/methods.md#back-translation):

  bt   (Caswell et al.)  encoder: <lang tag> <BT> x'   the source, whichever side is synthetic
  da   (Tencent)         the synthetic side ends in <DA>: [x'; <DA>] -> y  or  x -> [y'; <DA>]
  none                   untagged synthetic data
"""

import dataclasses
from typing import Any

import numpy as np
from sentencepiece import sentencepiece_model_pb2 as model_pb2

from t5x_mt.core import languages
from t5x_mt.core.errors import UserError

T_ENC = 't_enc'
S_ENC_T_DEC = 's_enc_t_dec'
T_ENC_T_DEC = 't_enc_t_dec'
NO_TAGS = 'none'
TAG_STRATEGIES = (T_ENC, S_ENC_T_DEC, T_ENC_T_DEC, NO_TAGS)
DEFAULT_TAG_STRATEGY = T_ENC_T_DEC


@dataclasses.dataclass(frozen=True)
class Tags:
  """The tag tokens (as text pieces) one direction puts on each side."""
  encoder_tag: str | None
  decoder_tag: str | None


def check_tag_strategy(strategy: str, where: str = 'tag_strategy') -> str:
  """Returns `strategy` if known, else raises a UserError naming `where`."""
  if strategy not in TAG_STRATEGIES:
    raise UserError(f'{where}: unknown tag strategy {strategy!r}; '
                    f'choose one of {", ".join(TAG_STRATEGIES)}')
  return strategy


def tags_for(strategy: str, src_lang: str, tgt_lang: str) -> Tags:
  """The tags that `strategy` puts on the encoder and decoder for src_lang -> tgt_lang."""
  check_tag_strategy(strategy)
  if strategy == NO_TAGS:
    return Tags(encoder_tag=None, decoder_tag=None)
  target_tag = languages.language_tag(tgt_lang)
  if strategy == T_ENC:
    return Tags(encoder_tag=target_tag, decoder_tag=None)
  if strategy == S_ENC_T_DEC:
    return Tags(encoder_tag=languages.language_tag(src_lang), decoder_tag=target_tag)
  return Tags(encoder_tag=target_tag, decoder_tag=target_tag)


def language_model_tags(lang: str) -> Tags:
  """A language model's tags for text in `lang`: none on the encoder it lacks, the
  language's tag before the text."""
  return Tags(encoder_tag=None, decoder_tag=languages.language_tag(lang))


SYNTHETIC_TAG_SCHEMES = ('bt', 'da', 'none')
BT_TAG = '<BT>'
DA_TAG = '<DA>'


@dataclasses.dataclass(frozen=True)
class SyntheticTags:
  """Tags a synthetic pair adds: after the language tag before the source, after the
  source (before EOS), after the target (before EOS)."""
  source_prefix: str | None = None
  source_suffix: str | None = None
  target_suffix: str | None = None


def check_synthetic_tag_scheme(scheme: str, where: str) -> str:
  """Returns `scheme` if known, else raises a UserError naming `where`."""
  if scheme not in SYNTHETIC_TAG_SCHEMES:
    raise UserError(f'{where}: unknown synthetic-data tag scheme {scheme!r}; choose one of '
                    f'{", ".join(SYNTHETIC_TAG_SCHEMES)}')
  return scheme


def synthetic_tags(scheme: str, synthetic_side: str) -> SyntheticTags:
  """The tags `scheme` puts on a pair whose `synthetic_side` ('source' or 'target') is
  machine translated."""
  check_synthetic_tag_scheme(scheme, 'synthetic_tags')
  if synthetic_side not in ('source', 'target'):
    raise ValueError(f'synthetic_side must be source or target, got {synthetic_side!r}')
  if scheme == 'bt':
    return SyntheticTags(source_prefix=BT_TAG)
  if scheme == 'da':
    if synthetic_side == 'source':
      return SyntheticTags(source_suffix=DA_TAG)
    return SyntheticTags(target_suffix=DA_TAG)
  return SyntheticTags()


def special_symbols(num_spare: int = 32) -> list[str]:
  """Every user-defined symbol a vocabulary must hold as one piece.

  Tags for all FLORES-200 languages (so a language added later needs no new vocabulary
  for its tag), `<BT>` and `<DA>` for tagged synthetic data, and spare `TBD<i>` tokens.
  """
  tags = [languages.language_tag(code) for code in languages.FLORES200_CODES]
  return tags + [BT_TAG, DA_TAG] + [f'TBD{i}' for i in range(num_spare)]


def tag_piece_id(tokenizer: Any, tag: str, vocabulary_file: str) -> int:
  """The id of a tag's piece in a SentencePiece processor.

  A vocabulary without the tag would map it to <unk> and train or translate without any
  language signal, so that is an error naming the file: one not built by t5x_mt, or an
  imported checkpoint's, which has tags for its own languages alone.
  """
  piece_id = tokenizer.piece_to_id(tag)
  if piece_id == tokenizer.unk_id():
    raise UserError(f'{vocabulary_file}: the vocabulary has no piece {tag}: the model has no '
                    'token for that language (launch/extend_vocab.py adds a language to a '
                    'run)')
  return piece_id


def tag_languages(model: bytes) -> tuple[str, ...]:
  """The codes of the languages a serialized SentencePiece model has a tag for, in the
  order of its pieces."""
  proto = model_pb2.ModelProto.FromString(model)
  tagged = (languages.tagged_language(piece.piece) for piece in proto.pieces
            if piece.type == model_pb2.ModelProto.SentencePiece.USER_DEFINED)
  return tuple(code for code in tagged if code)


def check_new_language(model: bytes, code: str, run: str) -> None:
  """A UserError naming the flag at fault unless `code` (--language) is shaped as a
  FLORES-200 code and run `run` (--checkpoint_dir), whose vocabulary is the serialized
  SentencePiece model `model`, tags languages but not that one."""
  if not languages.is_code_shaped(code):
    raise UserError(f'--language: {code!r} is not shaped as a FLORES-200 code (ISO 639-3 '
                    'language, ISO 15924 script: ach_Latn)')
  known = add_vocabulary_languages(model)
  if not known:
    raise UserError(f'--checkpoint_dir: {run} tags no language (a bilingual model): it has '
                    'no tag to add a language by')
  if code in known:
    raise UserError(f'--language: {run} has {code} already (its vocabulary holds the tag '
                    f'{languages.language_tag(code)})')


def add_vocabulary_languages(model: bytes) -> tuple[str, ...]:
  """Makes the languages a serialized SentencePiece model has tags for known to every
  check of a language code (`languages.add_languages`), those beyond FLORES-200 included;
  returns them."""
  codes = tag_languages(model)
  languages.add_languages(codes)
  return codes


# SentencePiece piece types that spell text; every other piece marks data. Unused pieces
# are text that the model's own segmentation never cuts: an imported Marian model's pieces
# of the other side (`vocab.PieceTableProcessor`), which it may generate.
_TEXT_PIECE_TYPES = (model_pb2.ModelProto.SentencePiece.NORMAL,
                     model_pb2.ModelProto.SentencePiece.BYTE,
                     model_pb2.ModelProto.SentencePiece.UNUSED)


def reserved_pieces(tokenizer: Any) -> np.ndarray:
  """bool [pieces] of a SentencePiece processor: True for the pieces that are never text.

  Those are the user-defined symbols (language tags, `<BT>`, `<DA>`, the spare `TBD<i>`),
  the control pieces (padding, BOS where a vocabulary has one) and the unknown piece: a
  model must never generate them after the forced decoder tag, and detokenised text must
  never hold them. EOS is not among them: it ends a translation.
  """
  model = model_pb2.ModelProto.FromString(tokenizer.serialized_model_proto())
  eos_id = tokenizer.eos_id()
  return np.array([piece.type not in _TEXT_PIECE_TYPES and piece_id != eos_id
                   for piece_id, piece in enumerate(model.pieces)])
