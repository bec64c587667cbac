"""Writes the tiny Hugging Face checkpoints that the import tests read, with what
`transformers` computes from them.

  # torch and transformers, in an environment of their own: t5x_mt never needs them.
  python3 -m venv /tmp/hf && . /tmp/hf/bin/activate
  pip install -r bench/requirements.txt sentencepiece protobuf babel==2.18.0
  python tools/make_hf_checkpoints.py --output_dir=tests/checkpoints/huggingface

Each checkpoint is a real `transformers` model of a random tiny configuration (seeded),
saved by `save_pretrained` beside the tokenizer files its family ships:
- `nllb`: M2M100ForConditionalGeneration with NLLB-200's tokenizer (sentencepiece.bpe.model
  and tokenizer.json, FLORES-200 language codes), two embedding rows past the tokenizer as
  NLLB-200's own configuration has;
- `m2m100`: the same architecture with M2M-100's tokenizer (vocab.json in an order of its
  own, not the SentencePiece model's, `__xx__` language tokens and made-up words);
- `marian`, `marian_mul`: MarianMTModel (post-LN, swish, a bias on the logits) with
  OPUS-MT's tokenizer: a SentencePiece model per side and a joint vocab.json, with
  target-language tokens (`>>hau<<`, `>>yor<<`) in `marian_mul`.
The SentencePiece models are small ones trained here on CLDR text from `babel`.

Beside them, `expected.json` holds fixed source and target sentences, the ids the
checkpoint's tokenizer gives them, the greedy outputs of `generate` (ids and text) and
`expected_logits.npy` the teacher-forced logits, all in float32 on the CPU.
"""

import argparse
import json
import pathlib
import shutil
import tempfile

import babel
import numpy as np
import sentencepiece as spm
import torch
import transformers
from transformers.models.m2m_100 import tokenization_m2m_100
from transformers.models.nllb import tokenization_nllb

SOURCES = ['Kenya and Nigeria', 'the Republic of South Africa', 'English']
TARGETS = ['Kenya da Najeriya', 'Afirka ta Kudu', 'Turanci']
# Marian's also hold characters one side's SentencePiece model has no piece for: a comma
# and Yoruba letters in English, whose model's text has none, and 'ã', '&' in Hausa; the
# joint vocab.json has some of them as the other side's pieces ('Ọ̀' and '€5' are runs it
# has not).
MARIAN_SOURCES = SOURCES + ['Kenya, Nigeria', 'Ìbàdàn, Ọ̀yọ́']
MARIAN_TARGETS = TARGETS + ['Kenya, Najeriya', 'São Tomé & Príncipe, €5']
MAX_NEW_TOKENS = 8
SEED = 0


def _train_sentencepiece(directory: pathlib.Path, name: str = 'bpe',
                         locales: tuple[str, ...] = ('en', 'fr', 'ha', 'sw', 'yo', 'zu', 'de'),
                         model_type: str = 'bpe', vocab_size: int = 300) -> pathlib.Path:
  lines = []
  for locale in locales:
    names = babel.Locale.parse(locale)
    lines += list(names.territories.values()) + list(names.languages.values())
  text = directory / 'text.txt'  # Its name is kept in the model.
  text.write_text('\n'.join(lines), encoding='utf-8')
  spm.SentencePieceTrainer.train(input=str(text), model_prefix=str(directory / name),
                                 vocab_size=vocab_size, model_type=model_type,
                                 character_coverage=1.0, normalization_rule_name='identity',
                                 minloglevel=2)
  return directory / f'{name}.model'


def _tiny_config(vocab_size: int) -> transformers.M2M100Config:
  return transformers.M2M100Config(
      vocab_size=vocab_size, d_model=16, encoder_layers=2, decoder_layers=2,
      encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
      decoder_ffn_dim=32, max_position_embeddings=64, scale_embedding=True,
      activation_function='relu', dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
      init_std=0.3, pad_token_id=1, bos_token_id=0, eos_token_id=2,
      decoder_start_token_id=2)


def _nllb_tokenizer(spm_file: pathlib.Path, directory: pathlib.Path):
  shutil.copy(spm_file, directory / 'sentencepiece.bpe.model')
  return transformers.NllbTokenizer.from_pretrained(
      directory, extra_special_tokens=tokenization_nllb.FAIRSEQ_LANGUAGE_CODES)


def _m2m100_tokenizer(spm_file: pathlib.Path, directory: pathlib.Path):
  """M2M-100's vocab.json lists fairseq's dictionary, whose order is not the SentencePiece
  model's: here the pieces are listed in a seeded random order."""
  shutil.copy(spm_file, directory / 'sentencepiece.bpe.model')
  processor = spm.SentencePieceProcessor(model_file=str(spm_file))
  pieces = [processor.id_to_piece(i) for i in range(3, processor.get_piece_size())]
  np.random.default_rng(SEED).shuffle(pieces)
  vocab = {'<s>': 0, '<pad>': 1, '</s>': 2, '<unk>': 3}
  vocab.update({piece: index + 4 for index, piece in enumerate(pieces)})
  (directory / 'vocab.json').write_text(json.dumps(vocab, ensure_ascii=False), encoding='utf-8')
  return tokenization_m2m_100.M2M100Tokenizer(
      vocab_file=str(directory / 'vocab.json'),
      spm_file=str(directory / 'sentencepiece.bpe.model'))


# name: (tokenizer maker, source and target language codes of the tokenizer, extra rows)
CHECKPOINTS = {
    'nllb': (_nllb_tokenizer, 'eng_Latn', 'hau_Latn', 2),
    'm2m100': (_m2m100_tokenizer, 'en', 'ha', 0),
}


class _Ban(transformers.LogitsProcessor):
  """Bans `ids` from the prediction `after` on (0 from the first; 1 after a forced language
  token, whose own step the forcing decides), as t5x_mt's search does."""

  def __init__(self, ids: list[int], after: int):
    self.ids, self.after = ids, after

  def __call__(self, input_ids, scores):
    if input_ids.shape[1] > self.after:
      scores[:, self.ids] = -float('inf')
    return scores


def _first_added_id(tokenizer) -> int:
  """The first id past the SentencePiece pieces: language tokens and the like follow."""
  if isinstance(tokenizer, tokenization_m2m_100.M2M100Tokenizer):
    return tokenizer.encoder_size
  return min(set(tokenizer.all_special_ids) - {0, 1, 2, 3})


def _model_vocab_size(tokenizer, extra_rows: int) -> int:
  if isinstance(tokenizer, tokenization_m2m_100.M2M100Tokenizer):
    return (tokenizer.encoder_size + len(tokenizer.lang_token_to_id)
            + tokenizer.num_madeup_words + extra_rows)
  return len(tokenizer) + extra_rows


def _reserved_ids(tokenizer, vocab_size: int) -> list[int]:
  """Ids t5x_mt never generates after the forced language token: <s>, <pad>, <unk> and
  everything past the pieces (language tokens, <mask>, made-up words, spare rows)."""
  return [tokenizer.bos_token_id, tokenizer.pad_token_id, tokenizer.unk_token_id] + list(
      range(_first_added_id(tokenizer), vocab_size))


def _write_checkpoint(name: str, spm_file: pathlib.Path, output: pathlib.Path) -> None:
  make_tokenizer, src_lang, tgt_lang, extra_rows = CHECKPOINTS[name]
  output.mkdir(parents=True, exist_ok=True)
  tokenizer = make_tokenizer(spm_file, output)
  tokenizer.src_lang, tokenizer.tgt_lang = src_lang, tgt_lang
  torch.manual_seed(SEED)
  vocab_size = _model_vocab_size(tokenizer, extra_rows)
  model = transformers.M2M100ForConditionalGeneration(_tiny_config(vocab_size)).eval()
  with torch.no_grad():
    for parameter in model.parameters():
      # Biases start at zero and norms at one: noise makes every one of them matter, so
      # that a weight imported into the wrong place changes the logits.
      parameter.add_(torch.randn_like(parameter) * 0.1)
  model.save_pretrained(output)
  tokenizer.save_pretrained(output)

  batch = tokenizer(SOURCES, text_target=TARGETS, padding=True, return_tensors='pt')
  _write_expected(output, tokenizer, model, SOURCES, TARGETS, batch, start_id=2,
                  forced_id=_lang_id(tokenizer, tgt_lang),
                  reserved=_reserved_ids(tokenizer, vocab_size), src_lang=src_lang,
                  tgt_lang=tgt_lang)


def _write_expected(output: pathlib.Path, tokenizer, model, sources: list[str],
                    targets: list[str], batch, *, start_id: int, forced_id: int | None,
                    reserved: list[int], src_lang: str, tgt_lang: str) -> None:
  """expected.json and expected_logits.npy: what the model computes for the batch of
  `sources` and `targets`."""
  labels = batch['labels']
  decoder_input_ids = torch.cat([torch.full_like(labels[:, :1], start_id), labels[:, :-1]],
                                dim=1)
  forced = 1 if forced_id is not None else 0
  with torch.no_grad():
    logits = model(input_ids=batch['input_ids'], attention_mask=batch['attention_mask'],
                   decoder_input_ids=decoder_input_ids,
                   decoder_attention_mask=(labels != tokenizer.pad_token_id).long()).logits
    generated = model.generate(
        input_ids=batch['input_ids'], attention_mask=batch['attention_mask'],
        forced_bos_token_id=forced_id, forced_eos_token_id=None, num_beams=1,
        do_sample=False, max_new_tokens=MAX_NEW_TOKENS,
        logits_processor=[_Ban(reserved, after=forced)])
  np.save(output / 'expected_logits.npy', logits.numpy().astype(np.float32))
  expected = {
      'src_lang': src_lang, 'tgt_lang': tgt_lang, 'sources': sources, 'targets': targets,
      'input_ids': batch['input_ids'].tolist(), 'labels': labels.tolist(),
      'input_tokens': [tokenizer.convert_ids_to_tokens(row) for row in batch['input_ids']],
      'decoder_input_ids': decoder_input_ids.tolist(),
      'greedy_ids': generated.tolist(),
      # After the decoder start and any forced language token, which the search bans.
      'greedy_texts': tokenizer.batch_decode(generated[:, 1 + forced:],
                                             skip_special_tokens=True),
      'max_new_tokens': MAX_NEW_TOKENS,
      'transformers': transformers.__version__, 'torch': torch.__version__,
  }
  lines = [f'  {json.dumps(key)}: {json.dumps(value, ensure_ascii=False)}'
           for key, value in expected.items()]
  (output / 'expected.json').write_text('{\n' + ',\n'.join(lines) + '\n}\n', encoding='utf-8')


def _lang_id(tokenizer, lang: str) -> int:
  if isinstance(tokenizer, tokenization_m2m_100.M2M100Tokenizer):
    return tokenizer.get_lang_id(lang)
  return tokenizer.convert_tokens_to_ids(lang)


# Marian (OPUS-MT) checkpoints: name -> the target-language tokens of a multilingual one.
MARIAN_CHECKPOINTS = {'marian': (), 'marian_mul': ('>>hau<<', '>>yor<<')}


def _marian_vocab(source_spm: pathlib.Path, target_spm: pathlib.Path,
                  language_tokens: tuple[str, ...]) -> dict[str, int]:
  """Marian's joint vocab.json: </s> and <unk> first, the pieces of both SentencePiece
  models (in a seeded random order), the language tokens, and <pad> last."""
  pieces = []
  for path in (source_spm, target_spm):
    processor = spm.SentencePieceProcessor(model_file=str(path))
    pieces += [processor.id_to_piece(i) for i in range(processor.get_piece_size())
               if not processor.is_control(i) and not processor.is_unknown(i)]
  pieces = sorted(set(pieces))
  np.random.default_rng(SEED).shuffle(pieces)
  tokens = ['</s>', '<unk>', *pieces, *language_tokens, '<pad>']
  return {token: index for index, token in enumerate(tokens)}


def _write_marian(name: str, scratch: pathlib.Path, output: pathlib.Path) -> None:
  """A post-LN Marian model with swish, the paper's sinusoids, a bias on the logits and a
  SentencePiece model per side (English sources, Hausa and Yoruba targets)."""
  language_tokens = MARIAN_CHECKPOINTS[name]
  output.mkdir(parents=True, exist_ok=True)
  source_spm = _train_sentencepiece(scratch, 'source', ('en',), 'unigram', 200)
  target_spm = _train_sentencepiece(scratch, 'target', ('ha', 'yo'), 'unigram', 220)
  vocab = _marian_vocab(source_spm, target_spm, language_tokens)
  (scratch / 'vocab.json').write_text(json.dumps(vocab, ensure_ascii=False), encoding='utf-8')
  tokenizer = transformers.MarianTokenizer(source_spm=str(source_spm),
                                           target_spm=str(target_spm),
                                           vocab=str(scratch / 'vocab.json'))
  pad = vocab['<pad>']
  torch.manual_seed(SEED)
  model = transformers.MarianMTModel(transformers.MarianConfig(
      vocab_size=len(vocab), d_model=16, encoder_layers=2, decoder_layers=2,
      encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
      decoder_ffn_dim=32, max_position_embeddings=64, scale_embedding=True,
      activation_function='swish', dropout=0.0, attention_dropout=0.0,
      activation_dropout=0.0, init_std=0.3, pad_token_id=pad, eos_token_id=0,
      decoder_start_token_id=pad, forced_eos_token_id=None)).eval()
  with torch.no_grad():
    for parameter_name, parameter in model.named_parameters():
      if 'embed_positions' not in parameter_name:  # Fixed sinusoids.
        parameter.add_(torch.randn_like(parameter) * 0.1)
    model.final_logits_bias.add_(torch.randn_like(model.final_logits_bias) * 0.1)
  model.save_pretrained(output)
  tokenizer.save_pretrained(output)
  prefix = f'{language_tokens[0]} ' if language_tokens else ''
  batch = tokenizer([prefix + source for source in MARIAN_SOURCES], text_target=MARIAN_TARGETS,
                    padding=True, return_tensors='pt')
  # Never generated by t5x_mt: <pad>, <unk> and language tokens. The pieces of the source
  # side's model alone are text, which t5x_mt generates as Marian does.
  reserved = sorted(vocab[token] for token in ('<pad>', '<unk>', *language_tokens))
  _write_expected(output, tokenizer, model, MARIAN_SOURCES, MARIAN_TARGETS, batch,
                  start_id=pad, forced_id=None, reserved=reserved, src_lang='eng_Latn',
                  tgt_lang='hau_Latn')


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--output_dir', required=True)
  args = parser.parse_args()
  with tempfile.TemporaryDirectory() as scratch:
    spm_file = _train_sentencepiece(pathlib.Path(scratch))
    for name in CHECKPOINTS:
      _write_checkpoint(name, spm_file, pathlib.Path(args.output_dir) / name)
      print(f'{name}: {pathlib.Path(args.output_dir) / name}')
    for name in MARIAN_CHECKPOINTS:
      _write_marian(name, pathlib.Path(scratch), pathlib.Path(args.output_dir) / name)
      print(f'{name}: {pathlib.Path(args.output_dir) / name}')


if __name__ == '__main__':
  main()
