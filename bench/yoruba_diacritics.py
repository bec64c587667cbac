"""Yoruba diacritic restoration on FLORES-200 dev: a trained restorer against two baselines.

  python bench/yoruba_diacritics.py [--checkpoint_dir=/tmp/t5x_mt/yoruba_diacritics] \
      [--batch_size=64]

Every line of FLORES-200 dev yor_Latn is stripped of its tone marks and underdots
(`yoruba_marks.strip_marks`) and restored by the run of gin/runs/yoruba_diacritics.gin
(`diacritics.restore_lines`, as launch/restore_diacritics.py restores with its defaults),
by its model alone (no lexicon, every word marked by the model), by the identity baseline
(left unmarked) and by the dictionary baseline (each word's most frequent marking in the
run's training lines, the 'yoruba_diacritics' corpus's train split). Each is scored by
`diacritic_accuracy`: character accuracy on the letters that can carry a mark and word
accuracy on the words that hold one, on every line and on the fully marked lines alone
(about a fifth of the references carry no tones at all, where leaving text bare is right).

First, the lexicon's weight and the treatment of unknown words are compared on the run's
own validation lines (NTREX-128's last 200 Yoruba lines), where the restorer's defaults
were chosen. The figure lines compare the restorer with each baseline on FLORES-200 dev.
"""

import argparse
import dataclasses
import time

from t5x_mt.core import cli
from t5x_mt.evaluation import diacritic_accuracy
from t5x_mt.data.yoruba import yoruba_marks
from t5x_mt.core.errors import UserError


def parse_flags(argv: list[str]) -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--checkpoint_dir', default='/tmp/t5x_mt/yoruba_diacritics')
  parser.add_argument('--batch_size', type=int, default=64)
  return parser.parse_args(argv)


# (lexicon weight, unknown words) compared on the validation lines.
SETTINGS = [(0.0, 'model'), (0.0, 'bare'), (2.0, 'bare'), (4.0, 'bare'), (8.0, 'model'),
            (8.0, 'bare'), (16.0, 'bare')]


def report(references: list[str], restored: dict[str, list[str]]) -> None:
  """A table of both accuracies of each system, on every line and on the marked ones,
  then the figure lines."""
  marked = [i for i, line in enumerate(references)
            if yoruba_marks.toned_vowel_share(line) >= yoruba_marks.MIN_TONED_VOWEL_SHARE]
  subsets = {f'all {len(references)} lines': range(len(references)),
             f'{len(marked)} marked lines': marked}
  scores = {}
  print(f'{"system":12} {"lines":>18} {"letters":>8} {"char acc":>9} {"words":>7} '
        f'{"word acc":>9}')
  for name, hypotheses in restored.items():
    for subset, rows in subsets.items():
      score = diacritic_accuracy.accuracy([hypotheses[i] for i in rows],
                                          [references[i] for i in rows])
      scores.setdefault(name, score)
      print(f'{name:12} {subset:>18} {score.letters:8d} {score.char_accuracy:9.2%} '
            f'{score.words:7d} {score.word_accuracy:9.2%}')
  ours = scores['restorer']
  for peer in ('identity', 'dictionary', 'model alone'):
    for figure in ('char_accuracy', 'word_accuracy'):
      mine, theirs = getattr(ours, figure), getattr(scores[peer], figure)
      print(f'{figure}: ours={100 * mine:.2f} % {peer}={100 * theirs:.2f} % '
            f'ratio={mine / theirs:.3f}')


def compare_settings(restorer, validation: list[str], dictionary) -> None:
  """Both accuracies on the run's validation lines for each of SETTINGS, beside the
  dictionary's."""
  # pylint: disable-next=g-import-not-at-top  (JAX after cli setup)
  from t5x_mt.decoding import diacritics
  stripped = [yoruba_marks.strip_marks(line) for line in validation]
  score = diacritic_accuracy.accuracy(dictionary.restore_lines(stripped), validation)
  print(f'{len(validation)} validation lines: dictionary {score.char_accuracy:.2%} '
        f'{score.word_accuracy:.2%}')
  print(f'{"lexicon weight":>14} {"unknown words":>13} {"char acc":>9} {"word acc":>9}')
  for weight, unknown_words in SETTINGS:
    setting = dataclasses.replace(restorer, lexicon_weight=weight, unknown_words=unknown_words)
    score = diacritic_accuracy.accuracy(diacritics.restore_lines(setting, stripped), validation)
    print(f'{weight:14g} {unknown_words:>13} {score.char_accuracy:9.2%} '
          f'{score.word_accuracy:9.2%}')


def main(argv: list[str]) -> int:
  args = parse_flags(argv)
  cli.start_tensorflow()
  # pylint: disable=g-import-not-at-top  (TF after cli setup)
  from t5x_mt.decoding import diacritics
  from t5x_mt.data import corpora
  # pylint: enable=g-import-not-at-top
  references = corpora.get_corpus('flores200').sentences('validation', yoruba_marks.LANGUAGE)
  corpus = corpora.get_corpus('yoruba_diacritics')
  training = corpus.sentences('train', yoruba_marks.LANGUAGE)
  if set(references) & set(training):
    raise UserError('yoruba_diacritics: FLORES-200 dev lines are among its training lines')
  stripped = [yoruba_marks.strip_marks(line) for line in references]
  restorer = diacritics.load_restorer(args.checkpoint_dir, batch_size=args.batch_size)
  dictionary = diacritic_accuracy.Dictionary(training)
  compare_settings(restorer, corpus.sentences('validation', yoruba_marks.LANGUAGE), dictionary)
  start = time.perf_counter()
  ours = diacritics.restore_lines(restorer, stripped)
  seconds = time.perf_counter() - start
  model_alone = dataclasses.replace(restorer, lexicon=None, unknown_words='model')
  config = restorer.translator.model.config
  print(f'model: {args.checkpoint_dir} ({config.num_encoder_layers}+'
        f'{config.num_decoder_layers} layers, d {config.emb_dim}), lexicon weight '
        f'{restorer.lexicon_weight:g}, unknown words {restorer.unknown_words}; '
        f'{len(references)} FLORES-200 dev yor_Latn lines restored in {seconds:.1f} s '
        f'(compilation included); dictionary of {len(dictionary)} words from '
        f'{len(training)} training lines')
  report(references, {'restorer': ours,
                      'model alone': diacritics.restore_lines(model_alone, stripped),
                      'identity': diacritic_accuracy.identity(stripped),
                      'dictionary': dictionary.restore_lines(stripped)})
  return 0


if __name__ == '__main__':
  cli.run(main)
