"""Beam-search decoding throughput on CPU: our Translator against CTranslate2, same weights.

  pip install -r bench/requirements.txt
  python bench/decode_throughput.py [--checkpoint_dir=/tmp/t5x_mt/demo] \
      [--src_lang=eng_Latn] [--tgt_lang=fra_Latn] [--corpus=cldr] [--split=test] \
      [--sentences=256] [--beam_size=4] [--batch_size=16] [--repeats=5]

The run's checkpoint is converted into a CTranslate2 model directly through CTranslate2's
own model specification (`ctranslate2.specs.TransformerSpec`, the API its converters
use): pre-norm layers, learned or sinusoidal positions, unscaled embeddings, the fused
query/key/value projections, and the output projection as the tied embedding / sqrt(d)
(padding rows past the SentencePiece vocabulary get a -1e9 bias, as our decoder masks
them). Both decode the same source ids (encoder tag, pieces, EOS) with the same forced
target tag, beam size, length penalty (score / generated length ** alpha) and batch size,
in float32; ours on all of this machine's cores (a batch per core at once, the
Translator's default `parallel_batches`), CTranslate2 on one thread, with every core on
each batch (intra_threads) and with a batch per core (inter_threads), the fastest of the
three being the peer. Timing starts after a warm-up pass over the
same sentences (our compilation, CTranslate2's first-call allocations) and covers text
in to text out for both; the repeats are interleaved. The run reports how many outputs
are identical, and tokens/s counts the pieces of each side's own outputs.
"""

import argparse
import os
import tempfile
import time

import ctranslate2
import jax
import numpy as np
from ctranslate2.specs import common_spec
from ctranslate2.specs import transformer_spec

from t5x_mt import cli
from t5x_mt import layers
from t5x_mt import models
from t5x_mt import network
from t5x_mt.data import tags
from t5x_mt.errors import UserError

EXPORT_LAYER_NORM_EPSILON = 1e-6  # t5x_mt.layers.normalize.
# A pause before each timed run: thread pools spin-wait for work a while after a call
# (OpenMP's in CTranslate2, XLA's), which would slow whichever side runs next.
SETTLE_SECONDS = 1.0


def _linear(spec, kernel, bias, num_input_axes: int = 1) -> None:
  """Our DenseGeneral kernel [in..., out...] as CTranslate2's [out, in] weight."""
  kernel = np.asarray(kernel, np.float32)
  in_size = int(np.prod(kernel.shape[:num_input_axes]))
  spec.weight = kernel.reshape(in_size, -1).T.copy()
  spec.bias = np.asarray(bias, np.float32).reshape(-1)


def _fused(spec, projections) -> None:
  """Several of our [embed, heads, head_dim] projections as one fused linear layer."""
  spec.weight = np.concatenate([np.asarray(p['kernel'], np.float32).reshape(
      p['kernel'].shape[0], -1).T for p in projections])
  spec.bias = np.concatenate([np.asarray(p['bias'], np.float32).reshape(-1)
                              for p in projections])


def _layer_norm(spec, params) -> None:
  spec.gamma = np.asarray(params['scale'], np.float32)
  spec.beta = np.asarray(params['bias'], np.float32)


def _mlp(spec, norm, mlp) -> None:
  _layer_norm(spec.layer_norm, norm)
  _linear(spec.linear_0, mlp['wi']['kernel'], mlp['wi']['bias'])
  _linear(spec.linear_1, mlp['wo']['kernel'], mlp['wo']['bias'])


def _positions(config: network.TransformerConfig, side_params) -> np.ndarray:
  if config.position_embedding == 'learned':
    return np.asarray(side_params['posembed']['pos_embedding'], np.float32)
  return layers.sinusoidal_table(config.max_length, config.emb_dim)


def ctranslate2_spec(config: network.TransformerConfig, params, pieces: list[str]):
  """The CTranslate2 TransformerSpec of our model with its weights and vocabulary."""
  if config.adapter_keys:
    raise UserError('--checkpoint_dir: models with adapters have no CTranslate2 layout')
  if not config.logits_via_embedding or not config.share_encoder_embedding:
    raise UserError('--checkpoint_dir: only tied embeddings are converted')
  params = models.convert_layout(params, scanned=False)
  params = jax.tree.map(np.asarray, params)
  activation = {'relu': common_spec.Activation.RELU,
                'gelu': common_spec.Activation.GELU}[config.mlp_activation]
  spec = transformer_spec.TransformerSpec.from_config(
      (config.num_encoder_layers, config.num_decoder_layers), config.num_heads,
      pre_norm=True, activation=activation)
  embedding = params['shared_embedding']['embedding']
  encoder, decoder = params['encoder'], params['decoder']

  spec.encoder.embeddings[0].weight = embedding
  spec.encoder.scale_embeddings = False
  spec.encoder.position_encodings.encodings = _positions(config, encoder)
  _layer_norm(spec.encoder.layer_norm, encoder['encoder_norm'])
  for i, layer_spec in enumerate(spec.encoder.layer):
    layer = encoder[f'layers_{i}']
    attention = layer['attention']
    _layer_norm(layer_spec.self_attention.layer_norm, layer['pre_attention_norm'])
    _fused(layer_spec.self_attention.linear[0],
           [attention['query'], attention['key'], attention['value']])
    _linear(layer_spec.self_attention.linear[1], attention['out']['kernel'],
            attention['out']['bias'], num_input_axes=2)
    _mlp(layer_spec.ffn, layer['pre_mlp_norm'], layer['mlp'])

  spec.decoder.embeddings.weight = embedding
  spec.decoder.scale_embeddings = False
  spec.decoder.position_encodings.encodings = _positions(config, decoder)
  _layer_norm(spec.decoder.layer_norm, decoder['decoder_norm'])
  for i, layer_spec in enumerate(spec.decoder.layer):
    layer = decoder[f'layers_{i}']
    own, cross = layer['self_attention'], layer['encoder_decoder_attention']
    _layer_norm(layer_spec.self_attention.layer_norm, layer['pre_self_attention_norm'])
    _fused(layer_spec.self_attention.linear[0], [own['query'], own['key'], own['value']])
    _linear(layer_spec.self_attention.linear[1], own['out']['kernel'], own['out']['bias'],
            num_input_axes=2)
    _layer_norm(layer_spec.attention.layer_norm, layer['pre_cross_attention_norm'])
    _fused(layer_spec.attention.linear[0], [cross['query']])
    _fused(layer_spec.attention.linear[1], [cross['key'], cross['value']])
    _linear(layer_spec.attention.linear[2], cross['out']['kernel'], cross['out']['bias'],
            num_input_axes=2)
    _mlp(layer_spec.ffn, layer['pre_mlp_norm'], layer['mlp'])
  spec.decoder.projection.weight = embedding / np.sqrt(np.float32(config.emb_dim))
  spec.decoder.projection.bias = np.where(np.arange(embedding.shape[0]) < len(pieces), 0.0,
                                          -1e9).astype(np.float32)

  vocabulary = pieces + [f'<unused_{i}>' for i in range(len(pieces), embedding.shape[0])]
  spec.register_source_vocabulary(vocabulary)
  spec.register_target_vocabulary(vocabulary)
  spec.config.decoder_start_token = vocabulary[0]  # Our decoder starts from id 0.
  spec.config.bos_token = vocabulary[0]
  spec.config.eos_token = vocabulary[1]
  spec.config.unk_token = vocabulary[2]
  spec.config.layer_norm_epsilon = EXPORT_LAYER_NORM_EPSILON
  return spec


def ours_fn(translator, sentences, src_lang, tgt_lang):
  return lambda: translator.translate(sentences, src_lang, tgt_lang)


def ctranslate2_fn(model, translator, sentences, src_lang, tgt_lang, batch_size, beam_size):
  """Text in, text out through CTranslate2 with our tokenisation and tags, in our
  batches (sentences sorted by length) with our per-batch output length limit; all
  batches are queued at once, so a model with several `inter_threads` runs them in
  parallel."""
  direction_tags = tags.tags_for(translator.tag_strategy, src_lang, tgt_lang)
  tokenizer = translator.tokenizer
  prefix = direction_tags.decoder_tag

  def run():
    encoded = [translator.encode_source(s, direction_tags) for s in sentences]
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
    pending = []
    for start in range(0, len(order), batch_size):
      rows = order[start:start + batch_size]
      _, decode_length = translator.batch_lengths([encoded[i] for i in rows])
      pending.append((rows, model.translate_batch(
          [[tokenizer.id_to_piece(i) for i in encoded[row]] for row in rows],
          target_prefix=[[prefix]] * len(rows) if prefix else None,
          max_batch_size=batch_size, beam_size=beam_size, length_penalty=translator.settings.alpha,
          max_decoding_length=decode_length, asynchronous=True)))
    outputs = [''] * len(sentences)
    for rows, results in pending:
      for row, result in zip(rows, results):
        ids = [tokenizer.piece_to_id(p) for p in result.result().hypotheses[0]]
        outputs[row] = translator.decode_target(ids)
    return outputs
  return run


def interleaved_best(fns: dict, repeats: int) -> tuple[dict, dict]:
  """Best seconds and the last outputs of each function, the runs interleaved."""
  best = {name: float('inf') for name in fns}
  outputs = {}
  for _ in range(repeats):
    for name, fn in fns.items():
      time.sleep(SETTLE_SECONDS)
      start = time.perf_counter()
      outputs[name] = fn()
      best[name] = min(best[name], time.perf_counter() - start)
  return best, outputs


def main(argv: list[str]) -> int:
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--checkpoint_dir', default='/tmp/t5x_mt/demo')
  parser.add_argument('--src_lang', default='eng_Latn')
  parser.add_argument('--tgt_lang', default='fra_Latn')
  parser.add_argument('--corpus', default='cldr')
  parser.add_argument('--split', default='test')
  parser.add_argument('--sentences', type=int, default=256)
  parser.add_argument('--beam_size', type=int, default=4)
  parser.add_argument('--batch_size', type=int, default=16)
  parser.add_argument('--repeats', type=int, default=5)
  args = parser.parse_args(argv)
  from t5x_mt import run_loading  # pylint: disable=g-import-not-at-top  (TF after cli setup)
  from t5x_mt.data import corpora  # pylint: disable=g-import-not-at-top
  translator = run_loading.load_translator(args.checkpoint_dir, beam_size=args.beam_size,
                                           batch_size=args.batch_size)
  from data_tasks import from_gin  # pylint: disable=g-import-not-at-top
  from_gin.configure_data()
  pairs = corpora.get_corpus(args.corpus).pairs(args.split, args.src_lang, args.tgt_lang)
  sentences = [source for source, _ in pairs][:args.sentences]
  if not sentences:
    raise UserError(f'--corpus: {args.corpus} {args.split} has no {args.src_lang}-'
                    f'{args.tgt_lang} pairs')
  config = translator.model.config
  pieces = [translator.tokenizer.id_to_piece(i)
            for i in range(translator.tokenizer.get_piece_size())]
  # CTranslate2 runs on one thread, on every core for each batch (intra_threads) and on
  # every core with a batch per core (inter_threads, as our parallel_batches); the peer is
  # its fastest setting. On some 2-core machines its intra-op threads slow each other down
  # (bench/README.md, decode_throughput).
  cores = os.cpu_count() or 1
  settings = sorted({(1, 1), (cores, 1), (1, cores)})
  with tempfile.TemporaryDirectory() as export_dir:
    spec = ctranslate2_spec(config, translator.params, pieces)
    spec.validate()
    spec.save(export_dir)
    print(f'model: {args.checkpoint_dir} ({config.num_encoder_layers}+'
          f'{config.num_decoder_layers} layers, d {config.emb_dim}, '
          f'{models.count_params(config) / 1e6:.1f}M parameters, vocab {len(pieces)}); '
          f'{len(sentences)} {args.corpus} {args.split} sentences {args.src_lang}->'
          f'{args.tgt_lang}; beam {args.beam_size}, batch {args.batch_size}, float32; '
          f'ours on {cores} cores ({translator.parallel_batches} batches at once), '
          f'ctranslate2 (intra_threads x inter_threads) at '
          f'{", ".join(f"{a}x{b}" for a, b in settings)}; ctranslate2 '
          f'{ctranslate2.__version__}, jax {jax.__version__}', flush=True)
    fns = {'ours': ours_fn(translator, sentences, args.src_lang, args.tgt_lang)}
    for intra_threads, inter_threads in settings:
      model = ctranslate2.Translator(export_dir, device='cpu', compute_type='float32',
                                     intra_threads=intra_threads, inter_threads=inter_threads)
      fns[f'ctranslate2_{intra_threads}x{inter_threads}'] = ctranslate2_fn(
          model, translator, sentences, args.src_lang, args.tgt_lang, args.batch_size,
          args.beam_size)
    interleaved_best(fns, 1)  # Warm-up: our compilations, CTranslate2's allocations.
    seconds, outputs = interleaved_best(fns, args.repeats)
  for intra_threads, inter_threads in settings:
    name = f'ctranslate2_{intra_threads}x{inter_threads}'
    print(f'ctranslate2 at intra_threads={intra_threads} inter_threads={inter_threads}: '
          f'{len(sentences) / seconds[name]:.1f} sentences/s')
  peer = min((name for name in seconds if name != 'ours'), key=seconds.get)
  seconds['ctranslate2'] = seconds[peer]
  outputs = {'ours': outputs['ours'], 'ctranslate2': outputs[peer]}
  print(f'peer: ctranslate2 at its fastest setting, intra_threads x inter_threads = '
        f'{peer.split("_")[1]}')
  identical = sum(a == b for a, b in zip(outputs['ours'], outputs['ctranslate2']))
  tokens = {name: sum(len(translator.tokenizer.encode(text)) for text in texts)
            for name, texts in outputs.items()}
  print(f'identical outputs: {identical} of {len(sentences)}; output pieces: ours '
        f"{tokens['ours']}, ctranslate2 {tokens['ctranslate2']}")
  for name, texts in outputs.items():
    print(f'  {name}: {texts[0]!r}')
  sentences_per_s = {name: len(sentences) / seconds[name] for name in outputs}
  tokens_per_s = {name: tokens[name] / seconds[name] for name in outputs}
  print(f"decode_sentences_per_second: ours={sentences_per_s['ours']:.1f} sentences/s "
        f"ctranslate2={sentences_per_s['ctranslate2']:.1f} sentences/s "
        f"ratio={sentences_per_s['ours'] / sentences_per_s['ctranslate2']:.3f}")
  print(f"decode_tokens_per_second: ours={tokens_per_s['ours']:.1f} tokens/s "
        f"ctranslate2={tokens_per_s['ctranslate2']:.1f} tokens/s "
        f"ratio={tokens_per_s['ours'] / tokens_per_s['ctranslate2']:.3f}")
  return 0


if __name__ == '__main__':
  cli.run(main)
