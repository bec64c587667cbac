"""The tokenizer of a Hugging Face checkpoint (M2M-100, NLLB-200, Marian) as SentencePiece
models t5x_mt reads like its own.

Those tokenizers are a SentencePiece model plus a table of ids: fairseq numbers its
dictionary `<s> <pad> </s> <unk>` first and then the pieces (NLLB-200 in the SentencePiece
model's order, M2M-100 in an order of its own, vocab.json), and appends a token per
language and a few more (`<mask>`, M2M-100's made-up words). t5x_mt's vocabularies are
SentencePiece models whose piece ids are the model's token ids, with padding 0, EOS 1 and
unknown 2, and a user-defined piece `<2xxx_Xxxx>` per language tag. The conversion
reorders the pieces into that numbering (padding, EOS and unknown first, then every other
token in the checkpoint's order), keeps each piece's score, so that the SentencePiece model
segments text exactly as before, and renames each language token to the tag of its
FLORES-200 code. `checkpoint_ids` maps each t5x_mt id back to the checkpoint's row, which
is how the embedding is reordered.

fairseq's convention of tags is t5x_mt's S-ENC-T-DEC (`tags.S_ENC_T_DEC`): the source
language's token before the source, the target language's token first in the target.

Marian (OPUS-MT) numbers the pieces of two SentencePiece models, one per side, in one
joint vocab.json (EOS first, padding last), and a multilingual model's target-language
token (`>>hau<<`) starts the source: t5x_mt's T-ENC, or no tags at all for a bilingual
model. Its tokens become two t5x_mt models numbered alike: the target side's, which the
run's vocabulary is, and the source side's (`source_model`), which segments sources; in
each, the pieces only the other side's model has are unused pieces. SentencePiece never
cuts them, but Marian's tokenizer looks every piece it cuts up in vocab.json, so a run of
characters a side's model has no piece for is the other side's piece that spells it
(`vocab.PieceTableProcessor` numbers text so), and a model may generate one.
"""

import dataclasses
import json
import pathlib
from typing import Any

import numpy as np
from sentencepiece import sentencepiece_model_pb2 as model_pb2

from t5x_mt.core import languages
from t5x_mt.core.errors import UserError

SENTENCEPIECE_FILE = 'sentencepiece.bpe.model'
_PIECE = model_pb2.ModelProto.SentencePiece
# M2M-100's language lists (its tokenizer's `language_codes` setting), in id order.
M2M100_LANGUAGE_CODES = {
    'm2m100': ('af am ar ast az ba be bg bn br bs ca ceb cs cy da de el en es et fa ff fi fr '
               'fy ga gd gl gu ha he hi hr ht hu hy id ig ilo is it ja jv ka kk km kn ko lb '
               'lg ln lo lt lv mg mk ml mn mr ms my ne nl no ns oc or pa pl ps pt ro ru sd si '
               'sk sl so sq sr ss su sv sw ta th tl tn tr uk ur uz vi wo xh yi yo zh zu').split(),
    'wmt21': 'en ha is ja cs ru zh de'.split(),
}


@dataclasses.dataclass(frozen=True)
class ConvertedVocabulary:
  """`model`: the serialized SentencePiece model t5x_mt keeps as vocab.model;
  `source_model`: the one that segments sources where they have one of their own (Marian),
  else None; `checkpoint_ids[i]`: the checkpoint's id (embedding row) of t5x_mt's token i;
  `languages`: FLORES-200 codes of the languages the checkpoint has a token for."""
  model: bytes
  source_model: bytes | None
  checkpoint_ids: np.ndarray
  languages: tuple[str, ...]


def _read_json(path: pathlib.Path) -> Any:
  try:
    return json.loads(path.read_text(encoding='utf-8'))
  except (OSError, ValueError) as error:
    raise UserError(f'{path}: not readable JSON ({error})') from None


def _required(directory: pathlib.Path, name: str, what: str) -> pathlib.Path:
  path = directory / name
  if not path.is_file():
    raise UserError(f'{path}: not found; the checkpoint folder must hold {what}')
  return path


def tokenizer_family(directory: pathlib.Path) -> str:
  """'nllb', 'm2m100' or 'marian', from tokenizer_config.json's tokenizer class."""
  config = _read_json(_required(directory, 'tokenizer_config.json',
                                'its tokenizer_config.json (save_pretrained writes it)'))
  name = str(config.get('tokenizer_class', ''))
  for family, prefix in (('nllb', 'Nllb'), ('m2m100', 'M2M100'), ('marian', 'Marian')):
    if name.startswith(prefix):
      return family
  raise UserError(f'{directory / "tokenizer_config.json"}: tokenizer_class {name!r} is not '
                  'NLLB\'s, M2M-100\'s or Marian\'s, the tokenizers t5x_mt imports')


def _nllb_ids(directory: pathlib.Path) -> tuple[dict[str, int], dict[str, str]]:
  """NLLB-200: every token's id from tokenizer.json, and {token: FLORES-200 code} of its
  language tokens (its added tokens named by FLORES-200 codes)."""
  path = _required(directory, 'tokenizer.json', 'NLLB\'s tokenizer.json (its ids of every token)')
  tokenizer = _read_json(path)
  vocab = tokenizer.get('model', {}).get('vocab')
  if isinstance(vocab, list):  # A unigram model's [piece, score] pairs, in id order.
    vocab = {piece: index for index, (piece, _) in enumerate(vocab)}
  if not isinstance(vocab, dict):
    raise UserError(f'{path}: has no model.vocab of token ids')
  ids = dict(vocab)
  language_tokens = {}
  for added in tokenizer.get('added_tokens', []):
    ids[added['content']] = added['id']
    code = languages.NLLB_TO_FLORES.get(added['content'], added['content'])
    if code in languages.FLORES200_CODES:
      language_tokens[added['content']] = code
  return ids, language_tokens


def _m2m100_ids(directory: pathlib.Path) -> tuple[dict[str, int], dict[str, str]]:
  """M2M-100: the dictionary of vocab.json, then a token per language of the tokenizer's
  `language_codes` list and `num_madeup_words` made-up words, as its tokenizer numbers
  them."""
  ids = dict(_read_json(_required(directory, 'vocab.json',
                                  'M2M-100\'s vocab.json (its dictionary)')))
  config = _read_json(directory / 'tokenizer_config.json')
  codes = M2M100_LANGUAGE_CODES.get(config.get('language_codes', 'm2m100'))
  if codes is None:
    raise UserError(f'{directory / "tokenizer_config.json"}: unknown language_codes '
                    f'{config.get("language_codes")!r} (known: '
                    f'{", ".join(M2M100_LANGUAGE_CODES)})')
  dictionary_size = len(ids)
  language_tokens = {}
  for index, code in enumerate(codes):
    ids[f'__{code}__'] = dictionary_size + index
    if code in languages.M2M100_TO_FLORES:
      language_tokens[f'__{code}__'] = languages.M2M100_TO_FLORES[code]
  for index in range(int(config.get('num_madeup_words', 8))):
    ids[f'madeupword{index:04d}'] = dictionary_size + len(codes) + index
  return ids, language_tokens


def _marian_ids(directory: pathlib.Path) -> tuple[dict[str, int], dict[str, str]]:
  """Marian: the joint vocab.json, whose `>>xxx<<` tokens name target languages."""
  config = _read_json(directory / 'tokenizer_config.json')
  if config.get('separate_vocabs'):
    raise UserError(f'{directory / "tokenizer_config.json"}: separate_vocabs is true; a '
                    't5x_mt model numbers the tokens of both sides alike')
  ids = dict(_read_json(_required(directory, 'vocab.json', 'Marian\'s vocab.json')))
  language_tokens = {}
  for token in ids:
    code = languages.marian_to_flores(token[2:-2]) if (
        token.startswith('>>') and token.endswith('<<')) else None
    if code:
      language_tokens[token] = code
  return ids, language_tokens


_IDS = {'nllb': _nllb_ids, 'm2m100': _m2m100_ids, 'marian': _marian_ids}
# Each family's SentencePiece files: (the one the vocabulary segments with, the sources').
_SENTENCEPIECE_FILES = {'nllb': (SENTENCEPIECE_FILE, None), 'm2m100': (SENTENCEPIECE_FILE, None),
                        'marian': ('target.spm', 'source.spm')}


def convert(directory: pathlib.Path, special_ids: dict[str, int | None],
            embedding_rows: int) -> ConvertedVocabulary:
  """The checkpoint's tokenizer in `directory` as t5x_mt SentencePiece models.

  `special_ids` are config.json's token ids by role ('pad', 'eos', 'bos'; 'unk' is the
  tokenizer's `<unk>` unless given); `embedding_rows` its vocab_size. A UserError where
  the tokenizer and the model disagree or a SentencePiece model cannot number the tokens
  as the model does.
  """
  family = tokenizer_family(directory)
  ids, language_tokens = _IDS[family](directory)
  language_tokens = _one_token_per_language(language_tokens, ids)
  special_ids = {'unk': ids.get('<unk>'), **special_ids}
  names = {token_id: token for token, token_id in ids.items()}
  _check_ids(directory, ids, names, special_ids, embedding_rows)
  first = [special_ids['pad'], special_ids['eos'], special_ids['unk']]
  order = first + sorted(set(names) - set(first))
  tokens = [names[token_id] for token_id in order]
  bos = order.index(special_ids['bos']) if special_ids.get('bos') in order else -1
  target_file, source_file = _SENTENCEPIECE_FILES[family]
  originals = {name: _sentencepiece(directory, name) for name in (target_file, source_file)
               if name}
  models = {name: _reordered(original, tokens, language_tokens, directory / name, bos,
                             [other for key, other in originals.items() if key != name])
            for name, original in originals.items()}
  return ConvertedVocabulary(models[target_file],
                             models[source_file] if source_file else None,
                             np.asarray(order, np.int64), tuple(sorted(language_tokens.values())))


def _one_token_per_language(language_tokens: dict[str, str],
                            ids: dict[str, int]) -> dict[str, str]:
  """The first token (by id) of each language: a tag is one piece, and a tokenizer may name
  a language twice (Marian's `>>por<<` and `>>por_Latn<<`); the others stay unnamed."""
  first: dict[str, str] = {}
  for token in sorted(language_tokens, key=ids.__getitem__):
    first.setdefault(language_tokens[token], token)
  return {token: code for code, token in first.items()}


def _sentencepiece(directory: pathlib.Path, name: str) -> Any:
  path = _required(directory, name, 'the SentencePiece model its tokenizer segments text with')
  try:
    return model_pb2.ModelProto.FromString(path.read_bytes())
  except Exception as error:  # protobuf's DecodeError and its kin.
    raise UserError(f'{path}: not a SentencePiece model ({error})') from None


def _check_ids(directory: pathlib.Path, ids: dict[str, int], names: dict[int, str],
               special_ids: dict[str, int], embedding_rows: int) -> None:
  if len(names) != len(ids):
    raise UserError(f'{directory}: the tokenizer gives two tokens one id')
  past = [token for token, token_id in ids.items() if not 0 <= token_id < embedding_rows]
  if past:
    raise UserError(f'{directory}: token {past[0]!r} has id {ids[past[0]]}, past the '
                    f'model\'s {embedding_rows} embedding rows (config.json vocab_size)')
  for role in ('pad', 'eos', 'unk'):
    if special_ids.get(role) not in names:
      raise UserError(f'{directory / "config.json"}: {role} id {special_ids.get(role)} is '
                      'no token of the tokenizer')


def _reordered(original: Any, tokens: list[str], language_tokens: dict[str, str],
               spm_path: pathlib.Path, bos: int, others: list[Any]) -> bytes:
  """`original` with `tokens` as its pieces, in order, and padding, EOS, unknown and BOS
  (-1: none) at 0, 1, 2 and `bos`: pieces keep their score and type, language tokens
  become user-defined tags, the pieces of `others` alone (the other side's models) unused
  pieces, and other added tokens control pieces."""
  pieces = {piece.piece: piece for piece in original.pieces}
  tokens_set = set(tokens)
  untokenized = [piece.piece for piece in original.pieces
                 if piece.type == _PIECE.NORMAL and piece.piece not in tokens_set]
  if untokenized:
    raise UserError(f'{spm_path}: {len(untokenized)} pieces (such as {untokenized[0]!r}) '
                    'have no id in the tokenizer, which reads them as <unk>; a SentencePiece '
                    'vocabulary cannot')
  elsewhere = {piece.piece for other in others for piece in other.pieces
               if piece.type == _PIECE.NORMAL}
  proto = model_pb2.ModelProto()
  proto.CopyFrom(original)
  del proto.pieces[:]
  for index, token in enumerate(tokens):
    piece = proto.pieces.add()
    if token in language_tokens:
      piece.piece = languages.language_tag(language_tokens[token])
      piece.type = _PIECE.USER_DEFINED
    elif token in pieces and pieces[token].type == _PIECE.NORMAL:
      piece.CopyFrom(pieces[token])
    else:  # <pad>, <s>, </s>, <unk>, <mask>, made-up words, unnamed languages, and pieces
      piece.piece = token  # the other side's model alone produces.
      piece.type = (_PIECE.UNKNOWN if index == 2 else
                    _PIECE.UNUSED if token in elsewhere else _PIECE.CONTROL)
  spec = proto.trainer_spec
  spec.pad_id, spec.eos_id, spec.unk_id, spec.bos_id = 0, 1, 2, bos
  return proto.SerializeToString()
