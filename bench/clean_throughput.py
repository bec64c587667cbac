"""Cleaning throughput per core, Bloom filter memory and error, and what the filters remove.

  python bench/clean_throughput.py [--preset=default] [--skip_tables] [--rules_only]

On the real text of the shared data folder (gettext_l10n, NTREX-128, SALT; FLORES-200 dev for the
MDL false-positive rate), in this one process (one core):

* `rule_filters`: pairs/s through every rule filter that needs no model (all filters
  except language_id, mdl_repeat, decontaminate and mined_scores), chained in the batch
  cleaner both engines use (`pipeline.PairCleaner`), then each rule alone;
* `mdl`: sentences/s of the MDL repeat filter (both sides of each pair are sentences);
* `language_id`: sentences/s of the combined identifier (exact policy);
* `normalisation`: pairs/s of html_unescape + moses_punctuation + whitespace;
* `bloom`: bits per item against the bound -ln p / (ln 2)^2, and the measured false-
  positive rate against p, for 1M items at p = 1e-4 (1e-7 is the VolcTrans setting, but
  its rate cannot be measured with a feasible number of queries) and the memory at 1e-7;
* the removal tables of the chosen preset on gettext_l10n and NTREX-128, and the share of
  FLORES-200 dev sentences the MDL filter flags.

The peers are the rates cleaning must keep per core (50,000 pairs/s for rule filters,
2,000 sentences/s for MDL) and the Bloom filter's theoretical bound.
"""

import argparse
import collections
import math
import time

from t5x_mt.config import configurables
from t5x_mt.data import corpora
from t5x_mt.data import readers
from t5x_mt.data.cleaning import dedup
from t5x_mt.data.cleaning import io as cleaning_io
from t5x_mt.data.cleaning import langid
from t5x_mt.data.cleaning import mdl
from t5x_mt.data.cleaning import pipeline
from t5x_mt.data.cleaning.io import Record
from t5x_mt.data.cleaning.steps import Pair
from t5x_mt.data.cleaning.steps import STEPS
from t5x_mt.config.gin_utils import parse_gin

MODEL_FILTERS = ('language_id', 'mdl_repeat', 'decontaminate', 'mined_scores')
NORMALISATION = ('html_unescape', 'moses_punctuation', 'whitespace')


def figure(name: str, ours: float, unit: str, peer: str, peer_value: float,
           peer_unit: str | None = None) -> None:
  print(f'{name}: ours={ours:.4g} {unit} {peer}={peer_value:.4g} {peer_unit or unit} '
        f'ratio={ours / peer_value:.3f}')


def real_pairs() -> dict[tuple[str, str], list[Pair]]:
  """(src, tgt) -> pairs of gettext_l10n (all directions), NTREX-128 and SALT."""
  pairs = {}
  for name in ('gettext_l10n', 'ntrex128', 'salt'):
    for source in cleaning_io.corpus_sources(name):
      direction = (source.src_lang, source.tgt_lang)
      texts = corpora.get_corpus(name).pairs('train', *direction)
      pairs.setdefault(direction, []).extend(Pair(s, t) for s, t in texts)
  return pairs


def rate(pairs_by_direction, steps: list[str]) -> float:
  """Pairs per second through the cleaner both engines use, with the per-pair `steps`
  (parameters as gin binds them), over all pairs (best of 2 runs)."""
  specs = configurables.cleaning_specs(steps)
  cleaners = {direction: pipeline.PairCleaner(specs, *direction)
              for direction in pairs_by_direction}
  records = {direction: [Record(index, pair, pair[:2]) for index, pair in enumerate(pairs)]
             for direction, pairs in pairs_by_direction.items()}
  items = sum(len(pairs) for pairs in pairs_by_direction.values())
  best = math.inf
  for _ in range(2):
    start = time.perf_counter()
    for direction, cleaner in cleaners.items():
      collections.deque(cleaner.clean(records[direction], collections.Counter()), maxlen=0)
    best = min(best, time.perf_counter() - start)
  return items / best


def sentence_rate(test_for_language, pairs_by_direction) -> float:
  """Sentences per second of a per-language test over both sides of every pair."""
  start = time.perf_counter()
  count = 0
  for (src_lang, tgt_lang), pairs in pairs_by_direction.items():
    src_test, tgt_test = test_for_language(src_lang), test_for_language(tgt_lang)
    for pair in pairs:
      src_test(pair.src)
      tgt_test(pair.tgt)
    count += 2 * len(pairs)
  return count / (time.perf_counter() - start)


def bloom_figures() -> None:
  items, error_rate = 1_000_000, 1e-4
  bloom = dedup.BloomFilter(items, error_rate)
  keys = [dedup.text_key(f'item {i}') for i in range(items)]
  for start in range(0, items, 100_000):
    bloom.add(keys[start:start + 100_000])
  strangers = [dedup.text_key(f'stranger {i}') for i in range(items)]
  measured = float(bloom.contains(strangers).mean())
  bound_bits = -math.log(error_rate) / math.log(2) ** 2
  figure('bloom_bits_per_item_p1e-4', bloom.memory_bytes * 8 / items, 'bits', 'bound',
         bound_bits)
  figure('bloom_false_positive_rate_p1e-4', measured, '', 'p', error_rate)
  volctrans = dedup.BloomFilter(items, 1e-7)
  figure('bloom_bits_per_item_p1e-7', volctrans.memory_bytes * 8 / items, 'bits', 'bound',
         -math.log(1e-7) / math.log(2) ** 2)
  print(f'bloom at p=1e-7: k={volctrans.num_hashes} hashes; 4e9 pairs would take '
        f'{4e9 * volctrans.num_bits / items / 8 / 2**30:.1f} GiB')


def mdl_false_positives(threshold_step) -> None:
  flores = readers.shared_data_dir() / 'flores200' / 'dev'
  sentences = [line for path in sorted(flores.glob('*.dev')) for line in readers.read_lines(path)]
  flagged = sum(threshold_step.is_noisy(line) for line in sentences)
  print(f'mdl false positives on FLORES-200 dev: {flagged} of {len(sentences)} sentences '
        f'({100 * flagged / len(sentences):.3f}%) at threshold {threshold_step.threshold} '
        f'nats/{threshold_step.unit[:-1]}')


def removal_table(corpus: str, preset: str, output_root: str) -> None:
  parse_gin([str(pipeline.preset_file(preset))], [])
  specs = configurables.cleaning_specs(configurables.cleaning_step_names())
  report = pipeline.clean_locally(cleaning_io.corpus_sources(corpus), specs,
                                  f'{output_root}/{corpus}', overwrite=True, progress=False)
  print(f'\n{corpus}, preset {preset}: {report["total"]["pairs_out"]} of '
        f'{report["total"]["pairs_in"]} pairs kept')
  print(pipeline.format_report(report))


def rule_figures(pairs, preset: str) -> None:
  """Pairs/s of every rule filter chained, each alone, the preset's, and normalisation."""
  rule_filters = sorted(name for name, cls in STEPS.items()
                        if cls.kind == 'filter' and name not in MODEL_FILTERS)
  print(f'rule filters: {", ".join(rule_filters)}')
  figure('rule_filters_pairs_per_second', rate(pairs, rule_filters), 'pairs/s', 'target',
         50_000)
  for name in rule_filters:
    print(f'  {name:26} {rate(pairs, [name]):10.0f} pairs/s')
  figure('normalisation_pairs_per_second', rate(pairs, list(NORMALISATION)), 'pairs/s',
         'target', 50_000)
  parse_gin([str(pipeline.preset_file(preset))], [])
  preset_rules = [name for name in configurables.cleaning_step_names()
                  if name in rule_filters]
  print(f'rule filters of preset {preset}: {", ".join(preset_rules)}')
  figure(f'{preset}_rule_filters_pairs_per_second', rate(pairs, preset_rules), 'pairs/s',
         'target', 50_000)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--preset', default='default')
  parser.add_argument('--skip_tables', action='store_true')
  parser.add_argument('--rules_only', action='store_true',
                      help='only the rule filters and normalisation figures')
  parser.add_argument('--output_root', default='/tmp/t5x_mt/clean_bench')
  args = parser.parse_args()
  if readers.shared_data_dir() is None:
    raise SystemExit('the shared data folder is absent: this benchmark reads its real text')
  pairs = real_pairs()
  total = sum(len(p) for p in pairs.values())
  print(f'{total} pairs in {len(pairs)} directions (gettext_l10n, NTREX-128, SALT); one core')
  rule_figures(pairs, args.preset)
  if args.rules_only:
    return
  noisy = mdl.MdlRepeat().is_noisy
  figure('mdl_sentences_per_second', sentence_rate(lambda lang: noisy, pairs), 'sentences/s',
         'target', 2_000)
  figure('language_id_sentences_per_second', sentence_rate(langid.acceptor, pairs),
         'sentences/s', 'target', 2_000)
  bloom_figures()
  mdl_false_positives(mdl.MdlRepeat())
  if not args.skip_tables:
    for corpus in ('gettext_l10n', 'ntrex128'):
      removal_table(corpus, args.preset, args.output_root)


if __name__ == '__main__':
  main()
