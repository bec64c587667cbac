"""A run's checkpoint as a CTranslate2 model folder, with what it takes to call it.

  python launch/export.py --checkpoint_dir=RUN --format=ctranslate2 --quantization=int8 \
      --output_dir=OUT

OUT holds CTranslate2's model (model.bin, config.json, shared_vocabulary.json), the run's
SentencePiece model (vocab.model: the tokenisation; source_vocab.model too where sources
have one of their own), its config.gin (tag strategy,
decoding settings, pivots) and directions.json (the directions it trained on), and a
README.md that says how to translate with it: through `launch/translate.py
--ctranslate2=OUT`, which reads OUT as it reads a run, or through CTranslate2's own API,
and export_manifest.json, the list of what it wrote (`export_folder`). The folder
appears whole or not at all (`files.staged_folder`).
"""

from collections.abc import Sequence
import dataclasses
import logging
import textwrap

from t5x_mt import export
from t5x_mt.core import files
from t5x_mt.decoding import inference
from t5x_mt.core import languages
from t5x_mt.model import lora
from t5x_mt.model import network
from t5x_mt.runs import run_layout
from t5x_mt.config import run_loading
from t5x_mt.data import tags
from t5x_mt.core.directions import Direction
from t5x_mt.core.errors import UserError
from t5x_mt.export import ctranslate2_spec
from t5x_mt.export import ctranslate2_translator
from t5x_mt.export import export_folder

README = 'README.md'
README_WIDTH = 88


@dataclasses.dataclass(frozen=True)
class Export:
  """What `export_run` wrote: the folder, the checkpoint step, the weight type and a line
  describing the model."""
  output_dir: str
  step: int
  quantization: str
  model: str


def export_run(checkpoint_dir: str, output_dir: str, quantization: str,
               step: int | None = None) -> Export:
  """Writes the run's checkpoint at `step` (latest if None) as a CTranslate2 model with
  `quantization` weights into `output_dir`, replacing an earlier export there
  (`export_folder`).

  A model CTranslate2 cannot compute exactly is refused before its weights are read. A
  decoding setting of the run that CTranslate2 cannot honour is logged as a warning, and
  the export's config.gin binds what CTranslate2 decodes as instead (`_served_config`).
  """
  if quantization not in export.CTRANSLATE2_QUANTIZATIONS:
    raise UserError(f'--quantization: {quantization!r} is not one of '
                    f'{", ".join(export.CTRANSLATE2_QUANTIZATIONS)}')
  export_folder.check_output_dir(output_dir)
  step = run_loading.checkpoint_step(checkpoint_dir, step)
  run = run_loading.read_run(checkpoint_dir)
  run_dir = run.run_dir
  run_config = run_layout.RunLayout(run_dir).config
  if run.data.reverse_target:
    raise UserError('--checkpoint_dir: the run writes its targets right to left '
                    '(REVERSE_TARGET), which CTranslate2 would serve unturned; it scores '
                    'n-best lists, serve a left-to-right run')
  ctranslate2_spec.check_exportable(run.model)
  unhonoured = ctranslate2_translator.unhonoured_settings(run.decode)
  for field, served, reason in unhonoured:
    logging.warning('%s: decoding.DecodeSettings.%s = %r: %s; the export decodes with %s = '
                    '%r (its config.gin binds it)', run_config, field,
                    getattr(run.decode, field), reason, field, served)
  translator = run_loading.load_translator(checkpoint_dir, step)
  tokenizer = translator.tokenizer
  pieces = [tokenizer.id_to_piece(i) for i in range(tokenizer.get_piece_size())]
  # LoRA folded into the weights: CTranslate2 runs the model without it.
  config, params = translator.model.config, translator.params
  if config.lora_rank:
    params = lora.merged(params, config)
    config = lora.without_lora(config)
  spec = ctranslate2_spec.transformer_spec_of(config, params, pieces)
  spec.optimize(quantization=quantization)
  exported = Export(output_dir, step, quantization,
                    describe_model(translator.model.config, len(pieces)))
  with files.staged_folder(output_dir) as staging:
    spec.save(str(staging))
    run_loading.copy_run_files(run_layout.RunLayout(run_dir), run_layout.RunLayout(staging),
                               [name for name in run_loading.RUN_FILES
                                if name not in ('base_run', 'config')])
    files.write_text_atomically(run_layout.RunLayout(staging).config, _served_config(
        run_config.read_text(encoding='utf-8'), unhonoured))
    files.write_text_atomically(staging / README, readme(
        exported, checkpoint_dir, translator,
        run_layout.RunLayout(run_dir).trained_directions() or [], unhonoured))
    export_folder.write_manifest(staging)
  return exported


def _served_config(run_config: str,
                  unhonoured: Sequence[ctranslate2_translator.Unhonoured]) -> str:
  """The export's config.gin: the run's, and after it a binding of what CTranslate2
  decodes as for each setting of the run it cannot honour, so that translate.py and
  serve.py decode the folder as it stands."""
  if not unhonoured:
    return run_config
  return (run_config.rstrip('\n') + "\n\n# What CTranslate2 decodes as, in place of the "
          "run's settings above it cannot honour.\n" + ''.join(
              f'decoding.DecodeSettings.{field} = {served!r}\n'
              for field, served, _ in unhonoured))


def describe_model(config: network.TransformerConfig, num_pieces: int) -> str:
  """One line: depth, widths, norms, positions and vocabulary."""
  positions = {stack: config.positions_of(stack).describe(config)
               for stack in ('encoder', 'decoder')}
  if positions['encoder'] == positions['decoder']:
    position_text = f'{positions["encoder"]} positions'
  else:
    position_text = (f'{positions["encoder"]} positions in the encoder, '
                     f'{positions["decoder"]} in the decoder')
  return (f'{config.num_encoder_layers}+{config.num_decoder_layers} layers, d '
          f'{config.emb_dim}, {config.num_heads} heads of {config.head_dim}, '
          f'{config.layer_norm}-LN, {position_text}, {num_pieces} SentencePiece pieces')


def _tag_rule(tag: str | None, src_lang: str, tgt_lang: str) -> str:
  if tag is None:
    return 'no tag'
  side = 'target' if tag == languages.language_tag(tgt_lang) else 'source'
  return f"the {side} language's tag (`{tag}` for {src_lang} -> {tgt_lang})"


def _paragraphs(*paragraphs: str) -> str:
  return '\n\n'.join(textwrap.fill(paragraph, README_WIDTH, break_on_hyphens=False)
                     for paragraph in paragraphs)


def readme(exported: Export, checkpoint_dir: str, translator: inference.Translator,
           trained_directions: list[str],
           unhonoured: Sequence[ctranslate2_translator.Unhonoured]) -> str:
  """The README of an export: where it came from, how translate.py serves it, and the
  tags, settings and pieces a program calling CTranslate2 itself must use; the settings
  as the export decodes, `unhonoured` ones as CTranslate2 serves them."""
  example = (Direction.parse(trained_directions[0], 'directions.json') if trained_directions
             else Direction('eng_Latn', 'fra_Latn'))
  src_lang, tgt_lang = example.src_lang, example.tgt_lang
  direction_tags = tags.tags_for(translator.tag_strategy, src_lang, tgt_lang)
  settings = dataclasses.replace(translator.settings,
                                 **{field: served for field, served, _ in unhonoured})
  prefix = f'[[{direction_tags.decoder_tag!r}]]' if direction_tags.decoder_tag else 'None'
  source_tags = [direction_tags.encoder_tag] if direction_tags.encoder_tag else []
  # Sources are segmented by a model of their own where the run has one (Marian's).
  source_model = ('source_vocab.model' if translator.source_tokenizer is not translator.tokenizer
                  else 'vocab.model')
  origin = _paragraphs(
      f'Exported by t5x_mt from run `{checkpoint_dir}`, checkpoint {exported.step}, with '
      f'{exported.quantization} weights: {exported.model}.')
  chosen = ', '.join(f'{name} {value}' for name, value
                     in dataclasses.asdict(settings.search_settings).items())
  serving = _paragraphs(
      'translate.py reads this folder as it reads a run: the same tokenisation '
      '(`vocab.model`), language tags, pivots and decoding settings (`config.gin`: '
      f'{settings.search} search{f" ({chosen})" if chosen else ""}, length penalty '
      f'{settings.alpha}, batches of {settings.batch_size}); its decoding flags override '
      'them.')
  rules = _paragraphs(
      f'Tag strategy `{translator.tag_strategy}`. The source is '
      f"{_tag_rule(direction_tags.encoder_tag, src_lang, tgt_lang)}, the sentence's "
      f'SentencePiece pieces and `</s>`, at most {translator.max_input_length} in all. The '
      f'target starts with {_tag_rule(direction_tags.decoder_tag, src_lang, tgt_lang)}, '
      'forced as its first piece. Pieces that are not text (language tags, control and '
      'unknown pieces) are never generated and never part of a translation. translate.py '
      'lets a batch of sentences grow to twice its longest source plus 16 pieces, at most '
      f'{settings.max_decode_length}.')
  notes = _paragraphs(
      "CTranslate2's length penalty counts the forced tag in a translation's length; "
      "translate.py ranks the beam's finished translations without it, as the run does.",
      *(f'The run decodes with {field} {getattr(translator.settings, field)!r}, which '
        f'CTranslate2 cannot honour ({reason}): this export decodes with {field} '
        f'{served!r}, which its config.gin binds.' for field, served, reason in unhonoured),
      'Directions the run trained on: '
      f'{", ".join(trained_directions) or "not recorded by the run"}.')
  return f"""# CTranslate2 model

{origin}

## Translate

    python launch/translate.py --ctranslate2={exported.output_dir} \\
        --src_lang={src_lang} --tgt_lang={tgt_lang} < input.txt > output.txt

{serving}

## Call CTranslate2 directly

{rules}

```python
import ctranslate2
import sentencepiece
from sentencepiece import sentencepiece_model_pb2

folder = '{exported.output_dir}'
tokenizer = sentencepiece.SentencePieceProcessor(model_file=f'{{folder}}/vocab.model')
source_tokenizer = sentencepiece.SentencePieceProcessor(model_file=f'{{folder}}/{source_model}')
vocabulary = sentencepiece_model_pb2.ModelProto.FromString(
    open(f'{{folder}}/vocab.model', 'rb').read())
text = (vocabulary.SentencePiece.NORMAL, vocabulary.SentencePiece.BYTE,
        vocabulary.SentencePiece.UNUSED)
not_text = [p.piece for p in vocabulary.pieces if p.type not in text and p.piece != '</s>']
translator = ctranslate2.Translator(folder, device='cpu')
pieces = source_tokenizer.encode('Hello.', out_type=str)
source = {source_tags} + pieces + ['</s>']
result = translator.translate_batch(
    [source], target_prefix={prefix}, beam_size={settings.beam_size},
    length_penalty={settings.alpha}, no_repeat_ngram_size={settings.no_repeat_ngram_size},
    suppress_sequences=[[piece] for piece in not_text], min_decoding_length=0,
    max_decoding_length={settings.max_decode_length}, max_input_length=0)
print(tokenizer.decode([p for p in result[0].hypotheses[0] if p not in not_text]))
```

{notes}
"""
