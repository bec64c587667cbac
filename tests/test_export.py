"""launch/export.py --format=ctranslate2 and translate.py --ctranslate2: the exported model
computes what ours computes, for every architecture CTranslate2 can express, and the
ones it cannot are refused before anything is written.

Each model is a run folder with the tiny trained run's vocabulary and settings and random
parameters (the trained run barely depends on its input after four steps: two different
outputs for six sentences, so equal outputs would say little). The models compare token
by token: log-probabilities of a teacher-forced target, then greedy and beam outputs.

Our beam search and CTranslate2's keep different books (docs/serving.md): CTranslate2
bans pieces before its softmax, ours after it, and CTranslate2 counts a hypothesis as
finished only when EOS is among the beam_size best candidates of its step, ours among
the 2 x beam_size best. So beam outputs are compared on models where neither matters:
the pieces both ban (tags, control pieces) and EOS get no probability, every hypothesis
runs to the length limit, and the searches are the same top-k. Where EOS may end a
translation, the scores CTranslate2 gives its finished hypotheses are checked against
ours instead.
"""

import functools
import json
import pathlib

import ctranslate2
import flax.linen as nn
import jax
import numpy as np
import pytest

from t5x_mt.runs import checkpoints
from t5x_mt.model import models
from t5x_mt.model import network
from t5x_mt.model import parameter_layout as layout
from t5x_mt.runs import run_layout
from t5x_mt.config import run_loading
from t5x_mt.data import tags
from t5x_mt.data import vocab
from t5x_mt.export import ctranslate2_export
from t5x_mt.export import ctranslate2_translator

from test_launch_translate_evaluate import error_lines
from test_launch_translate_evaluate import run_in_process

SENTENCES = ['Monday', '10 kilometres', 'Tuesday, 3 March 2015', 'English and French',
             '45 minutes ago', 'Thursday']
# Architectures besides the trained run's (pre-LN, learned positions, tied embeddings), as
# bindings appended to its config.gin.
ARCHITECTURES = {
    'pre_ln_sinusoidal': {'LAYER_NORM': "'pre'", 'POSITION_EMBEDDING': "'sinusoidal'"},
    'post_ln': {'LAYER_NORM': "'post'", 'POSITION_EMBEDDING': "'learned'"},
    # What models imported from fairseq's family (M2M-100, NLLB-200) keep, but with an
    # output projection of its own: tied, the output rows `random_run` points away from
    # EOS would be input embeddings scaled up to drown everything else (the tied form is
    # exported in test_import_checkpoint.py, from a real imported model).
    'fairseq_conventions': {'POSITION_EMBEDDING': "'sinusoidal'",
                            'network.TransformerConfig.scale_embeddings': 'True',
                            'network.TransformerConfig.logits_via_embedding': 'False',
                            'network.TransformerConfig.position_offset': '2',
                            'network.TransformerConfig.decoder_start_token': '300',
                            'network.TransformerConfig.layer_norm_epsilon': '1e-5'},
    # Marian's (OPUS-MT's): post-LN, the paper's sinusoids, swish, a bias on the logits.
    'marian_conventions': {'LAYER_NORM': "'post'", 'POSITION_EMBEDDING': "'sinusoidal_vaswani'",
                           'network.TransformerConfig.mlp_activation': "'swish'",
                           'network.TransformerConfig.logits_bias': 'True',
                           'network.TransformerConfig.scale_embeddings': 'True',
                           'network.TransformerConfig.logits_via_embedding': 'False'},
    # Our default relative configuration: tables in the encoder, sinusoids in the decoder.
    'relative_encoder': {'POSITION_EMBEDDING': "'relative'",
                         'network.TransformerConfig.relative_max_distance': '3'},
    'relative_both_keys_only': {'LAYER_NORM': "'post'", 'POSITION_EMBEDDING': "'relative'",
                                'network.TransformerConfig.relative_max_distance': '3',
                                'network.TransformerConfig.relative_in_decoder': 'True',
                                'network.TransformerConfig.relative_values': 'False'},
    'separate_embeddings': {'network.TransformerConfig.share_encoder_embedding': 'False',
                            'network.TransformerConfig.logits_via_embedding': 'False',
                            'network.TransformerConfig.mlp_activation': "'gelu'",
                            'network.TransformerConfig.encoder_mlp_dim': '48',
                            'network.TransformerConfig.num_heads': '4'},
}
REFUSED = {
    'post_b2t': ({'LAYER_NORM': "'post_b2t'"},
                 "layer_norm='post_b2t' has no CTranslate2 form"),
    'adapters': ({'network.TransformerConfig.adapter_keys': "['hau_Latn']",
                  'network.TransformerConfig.adapter_bottlenecks': '[8]'},
                 'the model has adapters (by target: hau_Latn)'),
}
# Random weights: tables N(0, 1) as initialised, norm scales near 1, and the rest of
# standard deviation WEIGHT_SCALE, a few times the initialiser's, so that the output
# depends on the input (at the initialiser's scale the model says nearly the same
# whatever it reads).
WEIGHT_SCALE = 0.5
# A silenced piece's output row points against a bias of the decoder's last norm: its
# logit is about -SILENCE * (BIAS +- 1) times the logit scale, whatever the input.
SILENCE, BIAS = 40.0, 4.0


def _last_decoder_norm(params: dict, config: network.TransformerConfig) -> dict:
  """The norm the decoder's output states come from."""
  decoder = params['decoder']
  if layout.has_final_norm(config.layer_norm):
    return decoder[layout.FINAL_NORMS['decoder']]
  last_layer = decoder[layout.layer_name(config.num_decoder_layers - 1)]
  return last_layer[layout.layer_norm_names('decoder', config.layer_norm)[-1]]


def _point_output_rows(params: dict, config: network.TransformerConfig, ids: list[int],
                       weight: float) -> None:
  """Sets the output rows of `ids` to `weight` along the first state dimension, where
  the decoder's last norm adds BIAS: their logits follow `weight`, whatever the input."""
  _last_decoder_norm(params, config)[layout.BIAS][0] = BIAS
  projection, vocab_major = layout.output_projection(config, params)
  rows = projection if vocab_major else projection.T  # A view: rows[i] is piece i's.
  rows[ids] = 0.0
  rows[ids, 0] = weight


def _random_leaf(name: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
  if name == layout.NORM_SCALE:
    return (1.0 + rng.normal(scale=0.1, size=shape)).astype(np.float32)
  scale = 1.0 if name in (layout.EMBEDDING_TABLE, layout.POSITION_TABLE) else WEIGHT_SCALE
  return rng.normal(scale=scale, size=shape).astype(np.float32)


def random_run(trained_run: pathlib.Path, folder: pathlib.Path, bindings: dict[str, str], *,
               eos_weight: float | None = None, seed: int = 7
               ) -> tuple[pathlib.Path, network.TransformerConfig, dict]:
  """(folder, config, params): a run folder with the trained run's files, `bindings`
  appended to its config.gin and random parameters saved at step 1, in which the pieces
  that are not text never get any probability, and EOS neither (`eos_weight` None) or
  as its output row of that weight along the norm's bias says."""
  folder.mkdir(parents=True)
  run_loading.copy_run_files(run_layout.RunLayout(trained_run),
                             run_layout.RunLayout(folder))
  with open(folder / 'config.gin', 'a', encoding='utf-8') as config_file:
    config_file.write(''.join(f'{name} = {value}\n' for name, value in bindings.items()))
  config = run_loading.read_run(str(folder)).model
  rng = np.random.default_rng(seed)
  params = jax.tree_util.tree_map_with_path(
      lambda path, leaf: _random_leaf(path[-1].key, leaf.shape, rng),
      nn.meta.unbox(models.abstract_variables(config)['params']))
  not_text = np.flatnonzero(tags.reserved_pieces(vocab.sentencepiece_processor(
      folder / 'vocab.model'))).tolist()
  _point_output_rows(params, config, not_text, -SILENCE)
  _point_output_rows(params, config, [vocab.EOS_ID],
                     -SILENCE if eos_weight is None else eos_weight)
  run_checkpoints = checkpoints.RunCheckpoints(str(folder), keep=1)
  try:
    run_checkpoints.save_params(1, params)
  finally:
    run_checkpoints.close()
  return folder, config, params


def export(run: pathlib.Path, output: pathlib.Path, monkeypatch, capsys,
           *flags: str) -> tuple[int, str, str]:
  argv = [f'--checkpoint_dir={run}', '--format=ctranslate2', f'--output_dir={output}',
          *flags]
  return run_in_process('export.py', argv, monkeypatch, capsys)


def translate(model_flag: str, input_file: pathlib.Path, monkeypatch, capsys,
              *flags: str) -> list[str]:
  code, out, err = run_in_process('translate.py', [
      model_flag, '--src_lang=eng_Latn', '--tgt_lang=hau_Latn', f'--input={input_file}',
      *flags], monkeypatch, capsys)
  assert code == 0, err
  return out.splitlines()


def assert_nontrivial(translations: list[str], run: pathlib.Path) -> None:
  """Outputs that can tell two models apart: several different ones, of several pieces."""
  tokenizer = vocab.sentencepiece_processor(run / 'vocab.model')
  pieces = {piece for line in translations for piece in tokenizer.encode(line)}
  assert len(set(translations)) >= 3 and len(pieces) >= 5, translations


def test_exported_run_translates_through_translate_py_as_the_run_does(
    trained_run, tmp_path, monkeypatch, capsys):
  run, _, _ = random_run(trained_run, tmp_path / 'run', {})
  output = tmp_path / 'ct2'
  code, out, err = export(run, output, monkeypatch, capsys)
  assert code == 0, err
  assert out.startswith(f'exported {run} checkpoint 1 (1+1 layers, d 32, 2 heads of 16, '
                        'pre-LN, learned positions, ')
  assert {path.name for path in output.iterdir()} == {
      'model.bin', 'config.json', 'shared_vocabulary.json', 'vocab.model', 'config.gin',
      'directions.json', 'README.md', 'export_manifest.json'}
  readme = (output / 'README.md').read_text(encoding='utf-8')
  assert f'--ctranslate2={output}' in readme and "target_prefix=[['<2hau_Latn>']]" in readme
  input_file = tmp_path / 'input.eng'
  input_file.write_text(''.join(f'{line}\n' for line in SENTENCES), encoding='utf-8')
  for beam_size in (1, 4):
    flags = (f'--beam_size={beam_size}',)
    ours = translate(f'--checkpoint_dir={run}', input_file, monkeypatch, capsys, *flags)
    served = translate(f'--ctranslate2={output}', input_file, monkeypatch, capsys, *flags)
    assert served == ours
    assert_nontrivial(ours, run)


def _teacher_forced_log_probs(config: network.TransformerConfig, params: dict,
                              source: list[int], target: list[int], pieces: int,
                              padded_length: int = 16) -> np.ndarray:
  """Our log p of each target token (EOS last) after the ones before it; source and
  target are padded to `padded_length` (masked), so every call runs one program."""
  def padded(ids: list[int]) -> np.ndarray:
    return np.array([ids + [0] * (padded_length - len(ids))])

  logits = _apply(config)({'params': params}, padded(source), padded([0] + target[:-1]),
                          padded(target))
  log_probs = np.asarray(jax.nn.log_softmax(logits[0, :len(target), :pieces]))
  return log_probs[np.arange(len(target)), target]


@functools.cache
def _apply(config: network.TransformerConfig):
  return jax.jit(models.TranslationModel(config).module.apply)


# Post-LN and relative positions in the fast loop; the command test exports pre-LN.
FAST_ARCHITECTURES = ('fairseq_conventions', 'marian_conventions', 'post_ln',
                      'relative_encoder')


@pytest.mark.parametrize('architecture', [
    name if name in FAST_ARCHITECTURES else pytest.param(name, marks=pytest.mark.slow)
    for name in sorted(ARCHITECTURES)])
def test_every_exportable_architecture_scores_as_ours(architecture, trained_run, tmp_path):
  run, config, params = random_run(trained_run, tmp_path / 'run',
                                   ARCHITECTURES[architecture])
  ctranslate2_export.export_run(str(run), str(tmp_path / 'ct2'), 'float32')
  tokenizer = vocab.sentencepiece_processor(run / 'vocab.model')
  tag = tokenizer.piece_to_id('<2hau_Latn>')
  source = [tag] + tokenizer.encode('Monday, 3 May') + [vocab.EOS_ID]
  target = [tag] + tokenizer.encode('Litinin 3 Mayu') + [vocab.EOS_ID]
  served = ctranslate2.Translator(str(tmp_path / 'ct2'), device='cpu').score_batch(
      [[tokenizer.id_to_piece(i) for i in source]],
      [[tokenizer.id_to_piece(i) for i in target[:-1]]])[0].log_probs
  np.testing.assert_allclose(served, _teacher_forced_log_probs(
      config, params, source, target, tokenizer.get_piece_size()), rtol=1e-5, atol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize('architecture', sorted(ARCHITECTURES))
def test_every_exportable_architecture_translates_as_ours(architecture, trained_run,
                                                          tmp_path):
  run, _, _ = random_run(trained_run, tmp_path / 'run', ARCHITECTURES[architecture])
  ctranslate2_export.export_run(str(run), str(tmp_path / 'ct2'), 'float32')
  for beam_size in (1, 4):
    overrides = {'beam_size': beam_size}
    ours = run_loading.load_translator(str(run), **overrides).translate(
        SENTENCES, 'eng_Latn', 'hau_Latn')
    served = ctranslate2_translator.load_translator(
        str(tmp_path / 'ct2'), overrides).translate(SENTENCES, 'eng_Latn', 'hau_Latn')
    assert served == ours
    assert_nontrivial(ours, run)


def test_translations_that_end_early_match_and_are_ranked_by_our_length_penalty(
    trained_run, tmp_path):
  run, config, params = random_run(trained_run, tmp_path / 'run', {}, eos_weight=3.5,
                                   seed=1)
  output = tmp_path / 'ct2'
  ctranslate2_export.export_run(str(run), str(output), 'float32')
  ours = run_loading.load_translator(str(run), beam_size=1).translate(
      SENTENCES, 'eng_Latn', 'hau_Latn')
  served = ctranslate2_translator.load_translator(str(output), {'beam_size': 1})
  assert served.translate(SENTENCES, 'eng_Latn', 'hau_Latn') == ours
  assert_nontrivial(ours, run)
  # The beam's finished hypotheses, of several lengths, each scored as ours scores it:
  # sum log p over the generated pieces and EOS, divided by their number (alpha 1).
  tokenizer = served.tokenizer
  tag = tokenizer.piece_to_id('<2hau_Latn>')
  lengths = set()
  for sentence in SENTENCES:
    source = [tag] + tokenizer.encode(sentence) + [vocab.EOS_ID]
    result = served._engine.translate_batch(  # pylint: disable=protected-access
        [[tokenizer.id_to_piece(i) for i in source]], target_prefix=[['<2hau_Latn>']],
        beam_size=4, num_hypotheses=4, return_scores=True, return_end_token=True,
        max_decoding_length=16)[0]
    generated = [[tokenizer.piece_to_id(p) for p in hypothesis[1:]]
                 for hypothesis in result.hypotheses]
    lengths |= {len(ids) for ids in generated}
    ours_scores = [_teacher_forced_log_probs(config, params, source, [tag] + ids,
                                             tokenizer.get_piece_size())[1:].mean()
                   for ids in generated]
    np.testing.assert_allclose(
        [score * len(hypothesis) / (len(hypothesis) - 1)
         for score, hypothesis in zip(result.scores, result.hypotheses)], ours_scores,
        rtol=1e-4)
    best = ctranslate2_translator.best_hypothesis(result, alpha=1.0, prefix_length=1)
    assert best == result.hypotheses[int(np.argmax(ours_scores))]
  assert len(lengths) > 2, lengths


@pytest.mark.parametrize('refused', sorted(REFUSED))
def test_export_refuses_what_ctranslate2_cannot_compute_and_writes_nothing(
    refused, trained_run, tmp_path, monkeypatch, capsys):
  bindings, reason = REFUSED[refused]
  run, _, _ = random_run(trained_run, tmp_path / 'run', bindings)
  code, out, err = export(run, tmp_path / 'ct2', monkeypatch, capsys)
  assert code == 2 and not out
  assert len(error_lines(err)) == 1
  assert error_lines(err)[0].startswith(f'error: --checkpoint_dir: {reason}')
  assert not (tmp_path / 'ct2').exists() and not (tmp_path / '.ct2.partial').exists()


def test_int8_export_is_smaller_and_translates_alike(trained_run, tmp_path):
  run, _, _ = random_run(trained_run, tmp_path / 'run', {})
  sizes, translations = {}, {}
  for quantization in ('float32', 'int8'):
    output = tmp_path / quantization
    ctranslate2_export.export_run(str(run), str(output), quantization)
    sizes[quantization] = (output / 'model.bin').stat().st_size
    translations[quantization] = ctranslate2_translator.load_translator(
        str(output), {'beam_size': 1}).translate(SENTENCES, 'eng_Latn', 'hau_Latn')
  assert sizes['int8'] < 0.5 * sizes['float32']
  assert sum(a == b for a, b in zip(*translations.values())) >= len(SENTENCES) // 2


def test_a_setting_ctranslate2_cannot_honour_is_a_warning_at_export_and_refused_as_a_flag(
    trained_run, tmp_path, monkeypatch, capsys, caplog):
  run, _, _ = random_run(trained_run, tmp_path / 'run',
                         {'decoding.DecodeSettings.max_length_ratio': '1.5',
                          'decoding.DecodeSettings.stop': "'best'"})
  output = tmp_path / 'ct2'
  code, _, err = export(run, output, monkeypatch, capsys)
  assert code == 0, err
  reason = ('CTranslate2 limits the output of a whole batch and ends it without EOS, not '
            'each sentence at its own length')
  assert [record.getMessage() for record in caplog.records
          if record.levelname == 'WARNING'] == [
      f'{run}/config.gin: decoding.DecodeSettings.max_length_ratio = 1.5: {reason}; the '
      'export decodes with max_length_ratio = 0 (its config.gin binds it)',
      f"{run}/config.gin: decoding.DecodeSettings.stop = 'best': CTranslate2's beam search "
      "stops a sentence once beam_size hypotheses have finished ('beam_full') and cannot "
      "stop as this rule does; the export decodes with stop = 'beam_full' (its config.gin "
      'binds it)']
  served = run_loading.read_run(str(output)).decode
  assert (served.max_length_ratio, served.stop) == (0, 'beam_full')
  assert ('The run decodes with max_length_ratio 1.5, which CTranslate2 cannot honour'
          in ' '.join((output / 'README.md').read_text(encoding='utf-8').split()))
  input_file = tmp_path / 'input.eng'
  input_file.write_text('Monday\n', encoding='utf-8')
  common = [f'--ctranslate2={output}', '--src_lang=eng_Latn', '--tgt_lang=hau_Latn',
            f'--input={input_file}']
  code, out, err = run_in_process('translate.py', common, monkeypatch, capsys)
  assert code == 0 and len(out.splitlines()) == 1, err
  code, _, err = run_in_process('translate.py', common + ['--max_length_ratio=2'],
                                monkeypatch, capsys)
  assert code == 2 and error_lines(err) == [
      f'error: --max_length_ratio=2.0: {reason}; give --max_length_ratio=0, or decode with '
      '--checkpoint_dir']
  with open(output / 'config.gin', 'a', encoding='utf-8') as config:
    config.write('decoding.DecodeSettings.max_length_ratio = 1.25\n')
  code, _, err = run_in_process('translate.py', common, monkeypatch, capsys)
  assert code == 2 and error_lines(err)[0].startswith(
      f'error: decoding.DecodeSettings.max_length_ratio = 1.25 in {output}/config.gin: '
      f'{reason}; ')
  code, _, err = run_in_process('translate.py', common + [f'--checkpoint_dir={run}'],
                                monkeypatch, capsys)
  assert error_lines(err) == [
      'error: --checkpoint_dir: not with --ctranslate2, whose folder is the model']


def test_export_replaces_an_earlier_export_and_nothing_else(trained_run, tmp_path,
                                                           monkeypatch, capsys):
  run, _, _ = random_run(trained_run, tmp_path / 'run', {})
  output = tmp_path / 'ct2'
  for _ in range(2):
    code, _, err = export(run, output, monkeypatch, capsys, '--quantization=int8')
    assert code == 0, err
  # A folder with a file of CTranslate2's name but no export's list, and an export
  # that a user put a file of their own into.
  mine = tmp_path / 'mine'
  mine.mkdir()
  (mine / 'model.bin').write_text('x\n', encoding='utf-8')
  (mine / 'my_data.tsv').write_text('important\n', encoding='utf-8')
  (output / 'notes.txt').write_text('mine\n', encoding='utf-8')
  for folder, foreign in ((mine, 'model.bin, my_data.tsv'), (output, 'notes.txt')):
    before = {path.name: path.read_bytes() for path in folder.iterdir()}
    code, out, err = export(run, folder, monkeypatch, capsys)
    assert code == 2 and not out and err.splitlines() == [
        f'error: --output_dir: {folder} holds {foreign}, which no earlier export listed in '
        'its export_manifest.json; an export replaces the whole folder: give a new or '
        'empty one']
    assert {path.name: path.read_bytes() for path in folder.iterdir()} == before
  assert sorted(path.name for path in tmp_path.iterdir()) == ['ct2', 'mine', 'run']


def evaluate(model_flag: str, monkeypatch, capsys, *flags: str) -> str:
  code, out, err = run_in_process('evaluate.py', [model_flag, *flags], monkeypatch, capsys)
  assert code == 0, err
  return out


def test_evaluate_scores_an_export_as_the_run_it_was_exported_from(
    trained_run, tmp_path, monkeypatch, capsys):
  """evaluate.py --ctranslate2 gives the run's own scores, for files and for --tasks
  (whose scores of an export go to --output_json alone)."""
  run, _, _ = random_run(trained_run, tmp_path / 'run', {})
  output = tmp_path / 'ct2'
  ctranslate2_export.export_run(str(run), str(output), 'float32')
  src_file, ref_file = tmp_path / 'src.eng', tmp_path / 'ref.hau'
  src_file.write_text(''.join(f'{line}\n' for line in SENTENCES), encoding='utf-8')
  ref_file.write_text('Litinin\nkilomita 10\nTalata, 3 Maris 2015\nTuranci da Faransanci\n'
                      'mintuna 45 da suka wuce\nAlhamis\n', encoding='utf-8')
  files = ['--src_lang=eng_Latn', '--tgt_lang=hau_Latn', f'--src_file={src_file}',
           f'--ref_file={ref_file}']
  for beam_size in (1, 4):
    flags = (*files, f'--beam_size={beam_size}')
    ours = json.loads(evaluate(f'--checkpoint_dir={run}', monkeypatch, capsys, *flags))
    served = json.loads(evaluate(f'--ctranslate2={output}', monkeypatch, capsys, *flags))
    assert served == ours and ours['chrf'] > 0

  tasks = ['--tasks=cldr_eng_Latn.hau_Latn', '--beam_size=1']
  evaluate(f'--checkpoint_dir={run}', monkeypatch, capsys, *tasks)
  ours = json.loads((run / 'eval' / 'step_1.json').read_text())
  scores = tmp_path / 'scores.json'
  table = evaluate(f'--ctranslate2={output}', monkeypatch, capsys, *tasks,
                   f'--output_json={scores}')
  served = json.loads(scores.read_text())
  assert served['directions'] == ours['directions'] and served['step'] is None
  assert 'eng_Latn-hau_Latn' in table and not (output / 'eval').exists()
