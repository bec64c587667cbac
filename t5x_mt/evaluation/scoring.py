"""Translation quality: sacreBLEU BLEU, chrF++ and spBLEU, per direction and per category.

Scores follow docs/methods.md#evaluation: BLEU (13a tokenisation) and chrF++ (`word_order=2`) on
detokenised text, and spBLEU when a FLORES-200 SentencePiece model is given. sacreBLEU's
own `tokenize='flores200'` downloads that model at run time, so spBLEU here segments both
sides with the given model file and scores them with `tokenize='none'`, which is the same
computation without the download.

Directions are named `src-tgt` with FLORES-200 codes. The WMT22 African task reports
averages over categories of directions (X-ENG, ENG-X, X-FRA, FRA-X, X-X, ALL);
`summarize` builds the `MODEL_DIR/eval/step_<N>.json` record (see `run_layout`). A language
model (a decoder alone, for n-best reranking) translates nothing: its record
(`summarize_losses`) holds each language's held-out loss and perplexity instead.
"""

import collections
import json
import logging
import math
import os
import statistics
from typing import Any, Optional, Sequence

import sacrebleu
import sentencepiece as spm

from t5x_mt.core import files
from t5x_mt.runs import run_layout
from t5x_mt.core.directions import Direction
from t5x_mt.core.errors import UserError

ENGLISH = 'eng_Latn'
FRENCH = 'fra_Latn'
CATEGORIES = ('X-ENG', 'ENG-X', 'X-FRA', 'FRA-X', 'X-X', 'ALL')


def _sentencepiece_tokenize(lines: Sequence[str], processor: spm.SentencePieceProcessor):
  return [' '.join(processor.encode(line, out_type=str)) for line in lines]


def _load_sentencepiece(spm_model_path: str) -> spm.SentencePieceProcessor:
  if not os.path.isfile(spm_model_path):
    raise UserError(f'{spm_model_path}: SentencePiece model for spBLEU not found')
  return spm.SentencePieceProcessor(model_file=str(spm_model_path))


def score_direction(hypotheses: Sequence[str], references: Sequence[str], *,
                    spm_model_path: Optional[str] = None) -> dict[str, Any]:
  """Corpus-level scores of one direction's translations against one reference each.

  Returns {'bleu', 'chrf', 'spbleu', 'n'}: sacreBLEU BLEU with its default 13a tokenisation,
  chrF++ (character 6-grams plus word 2-grams, beta 2), BLEU over SentencePiece pieces of
  `spm_model_path` (None when no model is given), and the number of sentences.
  """
  if len(hypotheses) != len(references):
    raise UserError(f'{len(hypotheses)} hypotheses but {len(references)} references: '
                    'each hypothesis needs exactly one reference line')
  if not hypotheses:
    raise UserError('no sentences to score: the hypothesis and reference lists are empty')
  hypotheses, references = list(hypotheses), list(references)
  spbleu = None
  if spm_model_path is not None:
    processor = _load_sentencepiece(spm_model_path)
    spbleu = sacrebleu.BLEU(tokenize='none').corpus_score(
        _sentencepiece_tokenize(hypotheses, processor),
        [_sentencepiece_tokenize(references, processor)]).score
  return {
      'bleu': sacrebleu.BLEU().corpus_score(hypotheses, [references]).score,
      'chrf': sacrebleu.CHRF(word_order=2).corpus_score(hypotheses, [references]).score,
      'spbleu': spbleu,
      'n': len(hypotheses),
  }


def score_translations(sources: Sequence[str], hypotheses: Sequence[str],
                       references: Sequence[str], *, spm_model_path: Optional[str] = None,
                       baseline: Optional[str] = None) -> dict[str, Any]:
  """`score_direction`, with the share of looping outputs (`looping_share`) and, for
  baseline='copy', the scores of the sources copied unchanged as their translations."""
  scores = score_direction(hypotheses, references, spm_model_path=spm_model_path)
  scores['looping'] = looping_share(hypotheses)
  if baseline == 'copy':
    scores['copy'] = score_direction(sources, references, spm_model_path=spm_model_path)
  return scores


def looping_share(hypotheses: Sequence[str], n: int = 4, times: int = 3) -> float:
  """The share of hypotheses in which some word n-gram occurs `times` times or more: the
  outputs of a model caught in a loop ("the house of the house of the house of ...")."""
  def loops(hypothesis: str) -> bool:
    words = hypothesis.split()
    counts = collections.Counter(tuple(words[i:i + n]) for i in range(len(words) - n + 1))
    return any(count >= times for count in counts.values())
  return sum(map(loops, hypotheses)) / len(hypotheses) if hypotheses else 0.0


def category_of(direction: str) -> tuple[str, ...]:
  """The categories a 'src-tgt' direction is averaged into, in CATEGORIES order.

  X-ENG: into English from any other language; ENG-X: out of English; X-FRA and FRA-X
  likewise for French; X-X: neither side English nor French; ALL: every direction. A
  direction can sit in two categories: eng_Latn-fra_Latn is ENG-X and X-FRA, and
  fra_Latn-eng_Latn is X-ENG and FRA-X. A copy direction (src == tgt) is in ALL only.
  """
  src, tgt = Direction.parse(direction, 'evaluated direction')
  categories = set()
  if src != tgt:
    if tgt == ENGLISH:
      categories.add('X-ENG')
    if src == ENGLISH:
      categories.add('ENG-X')
    if tgt == FRENCH:
      categories.add('X-FRA')
    if src == FRENCH:
      categories.add('FRA-X')
    if not {src, tgt} & {ENGLISH, FRENCH}:
      categories.add('X-X')
  categories.add('ALL')
  return tuple(category for category in CATEGORIES if category in categories)


def _mean_scores(scores: Sequence[dict[str, Any]]) -> dict[str, Any]:
  """Unweighted means over directions; spBLEU only when every direction has one, the
  looping share when every direction's was measured, and the copy baseline's chrF++ when
  every direction was scored against it."""
  spbleus = [score['spbleu'] for score in scores]
  means = {
      'bleu': statistics.fmean(score['bleu'] for score in scores),
      'chrf': statistics.fmean(score['chrf'] for score in scores),
      'spbleu': None if None in spbleus else statistics.fmean(spbleus),
      'n': len(scores),
  }
  if all('looping' in score for score in scores):
    means['looping'] = statistics.fmean(score['looping'] for score in scores)
  if all('copy' in score for score in scores):
    means['copy'] = {'chrf': statistics.fmean(score['copy']['chrf'] for score in scores)}
  return means


def summarize(step: int | None, direction_scores: dict[str, dict[str, Any]]) -> dict[str, Any]:
  """The eval record for one step (None: several models, e.g. one per family group):
  per-direction scores, category means and the average.

  Each category's bleu/chrf/spbleu is the unweighted mean over its directions (a direction
  counts once whatever its sentence count), its 'n' the number of directions; categories
  without directions are left out. 'average' is the mean BLEU and chrF++ over all directions.
  """
  if not direction_scores:
    raise UserError(f'step {step}: no directions were scored')
  directions = {name: dict(direction_scores[name]) for name in sorted(direction_scores)}
  members = {category: [] for category in CATEGORIES}
  for name, scores in directions.items():
    for category in category_of(name):
      members[category].append(scores)
  categories = {category: _mean_scores(scores)
                for category, scores in members.items() if scores}
  return {
      'step': None if step is None else int(step),
      'directions': directions,
      'categories': categories,
      'average': {'bleu': categories['ALL']['bleu'], 'chrf': categories['ALL']['chrf']},
  }


def summarize_losses(step: int, losses: dict[str, float], tokens: dict[str, float]
                     ) -> dict[str, Any]:
  """A language model's eval record for one step: per direction (its language's text,
  `<lang>-<lang>`) the mean per-token loss in nats (`losses`), its perplexity and the
  `tokens` scored; 'average' over every token scored."""
  if not losses:
    raise UserError(f'step {step}: no directions were scored')
  total_tokens = sum(tokens[name] for name in losses)
  mean = sum(losses[name] * tokens[name] for name in losses) / total_tokens
  return {
      'step': int(step),
      'directions': {name: {'loss': losses[name], 'perplexity': math.exp(losses[name]),
                            'tokens': int(tokens[name])} for name in sorted(losses)},
      'average': {'loss': mean, 'perplexity': math.exp(mean)},
  }


def _is_loss_record(summary: dict[str, Any]) -> bool:
  """Whether `summary` is a language model's record (`summarize_losses`)."""
  return 'loss' in summary['average']


def write_eval_json(model_dir: str | os.PathLike, summary: dict[str, Any],
                    split: str = 'validation') -> files.AnyPath:
  """Writes `summary`, scores on `split`, as the run's record of its step
  (`RunLayout.eval_record`) atomically and returns the path.

  The JSON goes to a temporary file in the same folder, then replaces the target in one
  rename, so a reader never sees a half-written record, even after a preemption.
  """
  path = run_layout.RunLayout(model_dir).eval_record(int(summary['step']), split)
  files.write_text_atomically(path, json.dumps(summary, indent=2, ensure_ascii=False) + '\n')
  logging.info('Wrote %s', path)
  return path


def scalars(summary: dict[str, Any], split: str) -> dict[str, float]:
  """A `summarize` record's BLEU and chrF++ as TensorBoard scalars of `split`:
  '<split>/chrf' for the average over directions, '<split>/chrf/<direction>' for each
  (as the training losses are 'loss' and 'loss/<direction>'); likewise 'bleu', and a
  `summarize_losses` record's 'loss' and 'perplexity'."""
  values = {}
  for metric in ('loss', 'perplexity') if _is_loss_record(summary) else ('bleu', 'chrf'):
    values[f'{split}/{metric}'] = summary['average'][metric]
    values.update({f'{split}/{metric}/{direction}': scores[metric]
                   for direction, scores in summary['directions'].items()})
  return values


def _format_score(value: Optional[float]) -> str:
  return f'{"-":>7}' if value is None else f'{value:7.2f}'


def _format_row(name: str, scores: dict[str, Any], width: int, with_looping: bool,
                with_copy: bool) -> str:
  row = (f'{name:<{width}} {_format_score(scores["bleu"])} {_format_score(scores["chrf"])} '
         f'{_format_score(scores.get("spbleu"))} {scores["n"]:>7}')
  if with_looping:
    row += f' {100 * scores["looping"]:6.1f}%'
  if with_copy:
    copy = scores['copy']['chrf']
    row += f' {_format_score(copy)} {scores["chrf"] - copy:+7.2f}'
  return row


def _table_title(summary: dict[str, Any]) -> str:
  """What a table's scores are of: the split, the mixture or task, and the step (or the
  family models), as far as the record names them."""
  scored = f'{summary["split"]} split' if 'split' in summary else 'scores'
  if 'task' in summary:
    scored += f' of {summary["task"]}'
  if summary['step'] is None:
    return f'{scored}, family models'
  return f'{scored} at step {summary["step"]}'


def format_table(summary: dict[str, Any]) -> str:
  """A fixed-width table of a `summarize` record under a title naming its split, task
  and step (as far as the record names them): directions, then categories.

  For directions `n` is the number of sentences; for categories, the number of directions.
  The looping share and the copy baseline get columns where every direction has them. A
  language model's record (`summarize_losses`) gives each direction's loss and perplexity.
  """
  if _is_loss_record(summary):
    return _format_loss_table(summary)
  names = list(summary['directions']) + list(summary['categories'])
  width = max(len(name) for name in names + ['direction'])
  directions = summary['directions'].values()
  # Records written before the looping share was measured have it for no category.
  with_looping = all('looping' in scores
                     for scores in [*directions, *summary['categories'].values()])
  with_copy = all('copy' in scores for scores in directions)
  extra_columns = ((f' {"looping":>7}' if with_looping else '') +
                   (f' {"copy":>7} {"gain":>7}' if with_copy else ''))
  header = f'{"direction":<{width}} {"BLEU":>7} {"chrF++":>7} {"spBLEU":>7} {"n":>7}'
  header += extra_columns
  rule = '-' * len(header)
  lines = [_table_title(summary), header, rule]
  lines += [_format_row(name, scores, width, with_looping, with_copy)
            for name, scores in summary['directions'].items()]
  lines += [rule, f'{"category":<{width}} {"BLEU":>7} {"chrF++":>7} {"spBLEU":>7} '
            f'{"dirs":>7}{extra_columns}', rule]
  lines += [_format_row(name, scores, width, with_looping, with_copy)
            for name, scores in summary['categories'].items()]
  if with_looping:
    lines.append('looping: share of translations that repeat a word 4-gram 3 times or more')
  if with_copy:
    lines.append("copy: chrF++ of the source copied unchanged; gain: the model's chrF++ "
                 'above it')
  return '\n'.join(lines)


def _format_loss_table(summary: dict[str, Any]) -> str:
  """A fixed-width table of a `summarize_losses` record under its title."""
  width = max(len(name) for name in [*summary['directions'], 'direction'])
  header = f'{"direction":<{width}} {"loss":>7} {"ppl":>9} {"tokens":>9}'
  rule = '-' * len(header)
  rows = [f'{name:<{width}} {scores["loss"]:7.4f} {scores["perplexity"]:9.2f} '
          f'{scores["tokens"]:>9}' for name, scores in summary['directions'].items()]
  average = summary['average']
  return '\n'.join([_table_title(summary), header, rule, *rows, rule,
                    f'{"average":<{width}} {average["loss"]:7.4f} {average["perplexity"]:9.2f}',
                    'loss: nats per target token (language tag, pieces and EOS); ppl: '
                    'its perplexity'])
