"""A run grown by a language it lacks (launch/extend_vocab.py): pieces, tag and rows.

A SentencePiece model learned from the new language's text offers its pieces; those the
run's pieces cannot spell are appended to the run's vocabulary (`vocab_merge`: old text
segments as before), then the language's tag, the way the run's vocabulary holds every
language: a user-defined piece `<2ach_Latn>`, whatever tokens the checkpoint it was
imported from named languages with. Each table with a row per token (the embedding, the
encoder's own, an output projection of its own, the logits' bias) grows by a row per new
token, and the old rows stay as they were, so every old token's logit is what it was:

- a new piece starts from the mean of the rows of the old pieces that spell it: the new
  piece's string segmented by the old vocabulary as written (without normalisation or a
  dummy space), the unknown piece standing for the characters no old piece has. The
  model reads the piece as it read that text before, and, having learned that the
  unknown piece is rare, gives it little probability until fine-tuning teaches it more;
- the tag starts from the mean of the old language tags' rows: a language like the
  average of those the model knows, which fine-tuning makes its own.

A new row's logit is then the mean of those old pieces' logits: greedy translations into
the old languages stay as they were unless the model's best token were the unknown piece
(which translation never generates), and a beam's scores shift by the share of the
probability the new tokens take. The new folder holds the grown vocabulary,
config.gin naming it, the directions the parent recorded and the grown parameters as a
parameters-only checkpoint at the parent's step, with those a LoRA run reads from its
base run included.
"""

import dataclasses
import pathlib
import re
import tempfile
from typing import Any

from flax import traverse_util
import jax
import numpy as np
import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2 as model_pb2

from t5x_mt.core import files
from t5x_mt.core import languages
from t5x_mt.core.errors import UserError
from t5x_mt.data import tags
from t5x_mt.data import vocab
from t5x_mt.data import vocab_merge
from t5x_mt.model import parameter_layout as layout
from t5x_mt.runs import checkpoints
from t5x_mt.runs import run_layout
from t5x_mt.runs import run_vocabulary

# The pieces a learned model holds besides those of the text: every tag and symbol
# `vocab.train_sentencepiece` reserves, 256 bytes, padding, EOS and unknown.
_RESERVED_PIECES = len(tags.special_symbols()) + 256 + 3
# Each table with a row per token, by path, and the axis its tokens are on.
_TOKEN_AXES = {(layout.DECODER_EMBEDDING, layout.EMBEDDING_TABLE): 0,
               (layout.ENCODER_EMBEDDING, layout.EMBEDDING_TABLE): 0,
               ('decoder', layout.OUTPUT_PROJECTION, layout.KERNEL): -1,
               ('decoder', layout.LOGITS_BIAS): 0}
_VOCABULARY_MACRO = re.compile(r'VOCABULARY_PATH\s*=')


@dataclasses.dataclass(frozen=True)
class Extension:
  """What an extension added: `pieces` appended of the `learned` pieces of the text's
  model (`spellable` of those left out as old pieces spell them, `present` as the
  vocabulary has them, the rest past the most asked for); the tag's id; how many new
  pieces start at the unknown piece's row (no old piece spells any part of them); the
  rows of the token tables before and after; the checkpoint step they came from and were
  saved at."""
  language: str
  pieces: int
  learned: int
  spellable: int
  present: int
  tag_id: int
  unknown: int
  rows: tuple[int, int]
  step: int


def learned_model(lines: list[str], code: str, new_pieces: int,
                  model_type: str) -> model_pb2.ModelProto:
  """A model of `model_type` ('unigram', 'bpe': the vocabulary's) of `lines`, with room
  for `new_pieces` pieces of the text beside its reserved ones and its characters (fewer
  where the text supports fewer)."""
  characters = len(set(''.join(lines)))
  with tempfile.TemporaryDirectory() as folder:
    path = vocab.train_sentencepiece({code: lines}, str(pathlib.Path(folder) / 'new.model'),
                                     vocab_size=new_pieces + characters + _RESERVED_PIECES,
                                     model_type=model_type)
    return model_pb2.ModelProto.FromString(pathlib.Path(path).read_bytes())


def _spelling_processor(base: model_pb2.ModelProto) -> spm.SentencePieceProcessor:
  """The old vocabulary segmenting a piece's string as written: no normalisation, no
  dummy space before it, its spaces kept."""
  spelling = model_pb2.ModelProto()
  spelling.CopyFrom(base)
  normalizer = spelling.normalizer_spec
  normalizer.name, normalizer.precompiled_charsmap = 'identity', b''
  normalizer.add_dummy_prefix = normalizer.remove_extra_whitespaces = False
  return spm.SentencePieceProcessor(model_proto=spelling.SerializeToString())


def row_sources(base: model_pb2.ModelProto, grown: model_pb2.ModelProto
                ) -> tuple[list[list[int]], int]:
  """For each token `grown` appends to `base`, the old tokens whose rows its row is the
  mean of (see the module's docstring); and how many new pieces the unknown piece alone
  spells."""
  processor = _spelling_processor(base)
  tag_ids = [i for i, piece in enumerate(base.pieces)
             if piece.type == model_pb2.ModelProto.SentencePiece.USER_DEFINED
             and languages.tagged_language(piece.piece)]
  sources = []
  for piece in grown.pieces[len(base.pieces):]:
    sources.append(tag_ids if piece.type == model_pb2.ModelProto.SentencePiece.USER_DEFINED
                   else processor.encode(piece.piece.replace('▁', ' ')))
  unknown = sum(set(ids) == {processor.unk_id()} for ids in sources)
  return sources, unknown


def grown_table(table: Any, axis: int, rows: int, sources: list[list[int]],
                first: int) -> np.ndarray:
  """`table` with `rows` token rows on `axis`: the old ones as they were, token
  `first + i` the mean of the old rows `sources[i]` (computed in float32)."""
  table = np.moveaxis(np.asarray(table), axis, 0)
  grown = np.zeros((rows, *table.shape[1:]), table.dtype)
  grown[:len(table)] = table
  for offset, ids in enumerate(sources):
    grown[first + offset] = table[ids].astype(np.float32).mean(0).astype(table.dtype)
  return np.moveaxis(grown, 0, axis)


def grown_params(params: Any, rows: int, sources: list[list[int]], first: int) -> Any:
  """`params` with every table that has a row per token grown (`grown_table`)."""
  flat = traverse_util.flatten_dict(params)
  for path, axis in _TOKEN_AXES.items():
    if path in flat:
      flat[path] = jax.device_put(grown_table(flat[path], axis, rows, sources, first))
  return traverse_util.unflatten_dict(flat)


def config_naming(config: str, vocabulary: files.AnyPath, where: str) -> str:
  """The run's config.gin text with VOCABULARY_PATH set to `vocabulary`."""
  lines = config.splitlines()
  named = [f'VOCABULARY_PATH = {str(vocabulary)!r}' if _VOCABULARY_MACRO.match(line) else line
           for line in lines]
  if named == lines:
    raise UserError(f'{where}: binds no VOCABULARY_PATH, which the extended run names its '
                    'vocabulary by')
  return '\n'.join(named) + '\n'


def extend_run(checkpoint_dir: str, code: str, lines: list[str], output_dir: str,
               new_pieces: int) -> Extension:
  """Writes run `checkpoint_dir` grown by language `code` (whose text is `lines`, at most
  `new_pieces` new pieces) as a new run folder at `output_dir` (whole or not at all)."""
  files.check_new_folder(output_dir, '--output_dir')
  parent = run_layout.RunLayout(checkpoint_dir)
  parent.check_is_run('--checkpoint_dir')
  parent.check_one_vocabulary('--checkpoint_dir')
  base = vocab_merge.load_model(parent.vocabulary, '--checkpoint_dir')
  tags.check_new_language(base.SerializeToString(), code, checkpoint_dir)
  languages.add_languages([code])
  learned = learned_model(lines, code, new_pieces, vocab_merge.model_type(base))
  grown, summary = vocab_merge.with_language(base, learned, code, new_pieces)
  sources, unknown = row_sources(base, grown)
  rows = run_vocabulary.padded_vocab_size(len(grown.pieces))
  saved = checkpoints.RunCheckpoints(checkpoint_dir, read_only=True)
  try:
    step = saved.latest_step()
    if step is None:
      raise UserError(f'--checkpoint_dir: {parent.checkpoints} holds no finished checkpoint')
    params = saved.restore_saved_params(step)
  finally:
    saved.close()
  old_rows = traverse_util.flatten_dict(params)[
      (layout.DECODER_EMBEDDING, layout.EMBEDDING_TABLE)].shape[0]
  params = grown_params(params, rows, sources, len(base.pieces))
  final = run_layout.RunLayout(files.absolute(output_dir))
  config = config_naming(parent.config.read_text(encoding='utf-8'), final.vocabulary,
                         str(parent.config))
  with files.staged_folder(output_dir) as staging:
    run = run_layout.RunLayout(staging)
    files.write_bytes_atomically(run.vocabulary, grown.SerializeToString())
    files.write_text_atomically(run.config, config)
    if parent.directions.is_file():
      files.write_text_atomically(run.directions,
                                  parent.directions.read_text(encoding='utf-8'))
    writer = checkpoints.RunCheckpoints(str(staging), keep=1, asynchronous=False)
    try:
      writer.save_params(step, params)
    finally:
      writer.close()
  return Extension(code, len(grown.pieces) - len(base.pieces) - 1,
                   summary.appended + summary.spellable + summary.already_present,
                   summary.spellable, summary.already_present, len(grown.pieces) - 1,
                   unknown, (old_rows, rows), step)
