"""Beam-search decoding on CPU: our Translator against its CTranslate2 exports, same weights.

  python bench/decode_throughput.py [--checkpoint_dir=/tmp/t5x_mt/demo] [--corpus=cldr] \
      [--split=test] [--sentences=100] [--beam_size=4] [--batch_size=16] [--repeats=3] \
      [--quantizations=float32,int8]

The run is exported with the library's exporter (`t5x_mt.export.ctranslate2_export`, as
`launch/export.py` does) at each quantization and served as `translate.py --ctranslate2`
serves it: our tags, length-sorted batches, per-batch output limit and detokenisation,
CTranslate2's search on CPU with a batch per core (`inter_threads`, our
`parallel_batches`). Ours runs as `translate.py --checkpoint_dir` does, also a batch per
core. Both translate the --split of --corpus in every direction the run trained on (at most
--sentences each) with the same beam size, length penalty and batch size.

Timing covers text in to text out over all directions, after a warm-up pass (our
compilations, CTranslate2's allocations), best of --repeats interleaved runs, each after a
pause (thread pools spin-wait a while after a call and would slow whichever side runs
next). tokens/s counts the SentencePiece pieces of each side's own outputs. chrF++ is
sacreBLEU's corpus chrF++ per direction, averaged over the directions (the ALL figure of an
evaluation). The run also prints how many outputs equal ours.
"""

import argparse
import tempfile
import time
from collections.abc import Callable

import ctranslate2
import jax

from t5x_mt.core import cli
from t5x_mt.evaluation import scoring
from t5x_mt import export
from t5x_mt.model import models
from t5x_mt.runs import run_layout
from t5x_mt.core.directions import Direction
from t5x_mt.core.errors import UserError

# A pause before each timed run: thread pools spin-wait for work a while after a call
# (OpenMP's in CTranslate2, XLA's), which would slow whichever side runs next.
SETTLE_SECONDS = 1.0

Outputs = dict[str, list[str]]  # Direction -> translations.


def interleaved_best(fns: dict[str, Callable[[], Outputs]],
                     repeats: int) -> tuple[dict[str, float], dict[str, Outputs]]:
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


def translate_all(translator, sources: dict[str, list[str]]) -> Callable[[], Outputs]:
  """Translates every direction's sentences, one direction after another."""
  def run() -> Outputs:
    return {direction: translator.translate(sentences, *direction.split('-'))
            for direction, sentences in sources.items()}
  return run


def parse_flags(argv: list[str]) -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--checkpoint_dir', default='/tmp/t5x_mt/demo')
  parser.add_argument('--corpus', default='cldr')
  parser.add_argument('--split', default='test')
  parser.add_argument('--sentences', type=int, default=100, help='per direction, at most')
  parser.add_argument('--beam_size', type=int, default=4)
  parser.add_argument('--batch_size', type=int, default=16)
  parser.add_argument('--repeats', type=int, default=3)
  parser.add_argument('--quantizations', default='float32,int8',
                      help=f'comma-separated, of {", ".join(export.CTRANSLATE2_QUANTIZATIONS)}')
  args = parser.parse_args(argv)
  args.quantizations = args.quantizations.split(',')
  for quantization in args.quantizations:
    if quantization not in export.CTRANSLATE2_QUANTIZATIONS:
      raise UserError(f'--quantizations: {quantization!r} is not one of '
                      f'{", ".join(export.CTRANSLATE2_QUANTIZATIONS)}')
  return args


def read_sources(args: argparse.Namespace) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
  """(sources, references) of every trained direction the corpus's split holds."""
  from data_tasks import from_gin  # pylint: disable=g-import-not-at-top  (TF after cli setup)
  from t5x_mt.data import corpora  # pylint: disable=g-import-not-at-top
  from_gin.configure_data()
  trained = run_layout.RunLayout(args.checkpoint_dir).trained_directions()
  if not trained:
    raise UserError(f'--checkpoint_dir: {args.checkpoint_dir} records no trained directions')
  sources, references = {}, {}
  for name in trained:
    direction = Direction.parse(name, 'directions.json')
    pairs = corpora.get_corpus(args.corpus).pairs(args.split, direction.src_lang,
                                                  direction.tgt_lang)[:args.sentences]
    if pairs:
      sources[name] = [source for source, _ in pairs]
      references[name] = [reference for _, reference in pairs]
  if not sources:
    raise UserError(f'--corpus: {args.corpus} {args.split} has no pairs in the run\'s '
                    'directions')
  return sources, references


def main(argv: list[str]) -> int:
  args = parse_flags(argv)
  cli.start_tensorflow()
  from t5x_mt.config import run_loading  # pylint: disable=g-import-not-at-top  (TF after cli setup)
  from t5x_mt.export import ctranslate2_export  # pylint: disable=g-import-not-at-top
  from t5x_mt.export import ctranslate2_translator  # pylint: disable=g-import-not-at-top
  overrides = {'beam_size': args.beam_size, 'batch_size': args.batch_size}
  ours = run_loading.load_translator(args.checkpoint_dir, **overrides)
  run_loading.adopt_run_config(args.checkpoint_dir)  # Its corpora, for read_sources.
  sources, references = read_sources(args)
  fns = {'ours': translate_all(ours, sources)}
  with tempfile.TemporaryDirectory() as export_root:
    for quantization in args.quantizations:
      folder = f'{export_root}/{quantization}'
      ctranslate2_export.export_run(args.checkpoint_dir, folder, quantization)
      served = ctranslate2_translator.load_translator(folder, overrides)
      fns[f'ctranslate2_{quantization}'] = translate_all(served, sources)
    config = ours.model.config
    print(f'model: {args.checkpoint_dir} ({config.num_encoder_layers}+'
          f'{config.num_decoder_layers} layers, d {config.emb_dim}, '
          f'{models.count_params(config) / 1e6:.1f}M parameters, vocab '
          f'{ours.tokenizer.get_piece_size()}); {sum(map(len, sources.values()))} '
          f'{args.corpus} {args.split} sentences in {len(sources)} directions; beam '
          f'{args.beam_size}, batch {args.batch_size}; ours and ctranslate2 a batch per core '
          f'({ours.parallel_batches} at once); ctranslate2 {ctranslate2.__version__}, jax '
          f'{jax.__version__}', flush=True)
    interleaved_best(fns, 1)  # Warm-up: our compilations, CTranslate2's allocations.
    seconds, outputs = interleaved_best(fns, args.repeats)
  report(ours.tokenizer, seconds, outputs, references)
  return 0


def report(tokenizer, seconds: dict[str, float], outputs: dict[str, Outputs],
           references: dict[str, list[str]]) -> None:
  """Identical outputs, then tokens/s and chrF++ of each export beside ours."""
  def flat(name: str) -> list[str]:
    return [line for direction in references for line in outputs[name][direction]]

  tokens_per_second = {name: sum(len(tokenizer.encode(line)) for line in flat(name)) /
                       seconds[name] for name in outputs}
  chrf = {name: sum(scoring.score_direction(outputs[name][direction],
                                               references[direction])['chrf']
                    for direction in references) / len(references) for name in outputs}
  for name in outputs:
    same = sum(a == b for a, b in zip(flat('ours'), flat(name)))
    print(f'{name}: {len(flat(name))} sentences in {seconds[name]:.2f} s, '
          f'{same} outputs equal to ours; e.g. {flat(name)[0]!r}')
  for name in outputs:
    if name == 'ours':
      continue
    quantization = name.removeprefix('ctranslate2_')
    print(f'decode_tokens_per_second_{quantization}: '
          f"ours={tokens_per_second['ours']:.1f} tokens/s "
          f'{name}={tokens_per_second[name]:.1f} tokens/s '
          f"ratio={tokens_per_second['ours'] / tokens_per_second[name]:.3f}")
    print(f"chrf_{quantization}: ours={chrf['ours']:.2f} chrF++ "
          f'{name}={chrf[name]:.2f} chrF++ ratio={chrf["ours"] / chrf[name]:.3f}')


if __name__ == '__main__':
  cli.run(main)
