"""Each cleaning rule of docs/methods.md#cleaning on pairs that must go and pairs that must stay."""

import pytest

import gin

from t5x_mt.config import configurables
from t5x_mt.config import gin_utils
from t5x_mt.data.cleaning import pipeline
from t5x_mt.data.cleaning.steps import Pair
from t5x_mt.data.cleaning.steps import build_step
from t5x_mt.core.errors import UserError


def keeps(name, src, tgt, src_lang='eng_Latn', tgt_lang='fra_Latn', **params):
  return build_step(name, params).bind(src_lang, tgt_lang)(Pair(src, tgt))


def rewrite(name, src, tgt, src_lang='eng_Latn', tgt_lang='fra_Latn', **params):
  return tuple(build_step(name, params).bind(src_lang, tgt_lang)(Pair(src, tgt))[:2])


@pytest.mark.parametrize('name, src, tgt, kept, params', [
    ('empty', 'Hello', '  ', False, {}),
    ('empty', 'Hello', 'Bonjour', True, {}),
    ('min_chars', 'x' * 29, 'y' * 40, False, {}),
    ('min_chars', 'x' * 30, 'y' * 30, True, {}),
    ('max_chars', 'x' * 501, 'y', False, {}),
    ('url_or_email', 'See https://example.org', 'Voir le site', False, {}),
    ('url_or_email', 'Write to a.b@example.com', 'Écrivez-nous', False, {}),
    ('url_or_email', 'See www.example.org', 'Voir', False, {}),
    ('url_or_email', 'A sentence. Another one.', 'Une phrase. Une autre.', True, {}),
    ('long_word', 'a' * 101, 'b', False, {}),
    ('long_word', 'a' * 41, 'b', False, {'max_chars': 40}),
    ('long_word', 'a' * 40, 'b', True, {'max_chars': 40}),
    ('programming_code', 'if (x == 1) return;', 'si x vaut 1', False, {}),
    ('programming_code', 'el.getAttribute("id")', "l'attribut", False, {}),
    ('programming_code', 'If you go, call me.', 'Si tu pars, appelle-moi.', True, {}),
    ('number_mismatch', 'In 2017 we had 3 cats', 'En 2017 nous avions 4 chats', False, {}),
    ('number_mismatch', 'Paid 1,000.50 in 2019', 'Payé 1 000,50 en 2019', True, {}),
    ('number_mismatch', '13 years', 'treize ans', False, {}),
    ('number_mismatch', '13 years', 'treize ans', True, {'mode': 'subset'}),
    ('number_mismatch', 'In 1930', 'En 30', False, {'mode': 'subset'}),
    ('end_punctuation_mismatch', 'Are you there?', 'Tu es là.', False, {}),
    ('end_punctuation_mismatch', 'Are you there?', 'Tu es là ?', True, {}),
    ('end_punctuation_mismatch', 'Wait...', 'Attends…', True, {}),
    ('end_punctuation_mismatch', 'Note:', 'Remarque', False, {}),
    ('end_punctuation_mismatch', 'He said "stop!"', 'Il a dit « stop ! »', True, {}),
    ('parenthesis_mismatch', 'Nairobi (Kenya)', 'Nairobi', False, {}),
    ('parenthesis_mismatch', 'Nairobi (Kenya)', 'Nairobi (Kenya)', True, {}),
    ('repeated_units', 'Sooooo good', 'Trop bien', False, {}),
    ('repeated_units', 'Soooo good', 'Trop bien', True, {}),
    ('repeated_units', 'hahahaha', 'mdr', False, {}),
    ('repeated_units', 'hahaha', 'mdr', True, {}),
    ('repeated_units', 'buy now buy now buy now buy now', 'achetez', False, {}),
    ('repeated_units', 'buy now buy now', 'achetez', True, {}),
    ('token_count', 'one two three four', 'un deux trois quatre cinq', False, {'min_tokens': 5}),
    ('token_count', ' '.join(['w'] * 151), 'x', False, {'max_tokens': 150}),
    ('token_ratio', 'a b c d', 'x', False, {}),
    ('token_ratio', 'a b c', 'x', True, {}),
    ('char_ratio', 'x' * 70, 'y' * 10, False, {}),
    ('char_ratio', 'x' * 60, 'y' * 10, True, {}),
    ('chars_per_word', 'aaaaaaaaaaaaaaaaaaaaaaaaa bbbbbbbbbbbbbbbbbbbbbbbb', 'deux mots', False, {}),
    ('chars_per_word', 'ordinary words here', 'des mots', True, {}),
    ('identical', 'Hello World', 'hello  world', False, {}),
    ('punctuation_ratio', '!!! ??? ...', 'Quoi', False, {}),
    ('punctuation_ratio', 'Yes!', 'Oui !', True, {}),
    ('invalid_unicode', 'bad \ufffd byte', 'mauvais', False, {}),
    ('invalid_unicode', 'bell \x07', 'cloche', False, {}),
    ('invalid_unicode', 'café ünïcode', 'café', True, {}),
    ('mined_scores', 'a', 'b', True, {}),
])
def test_filter_keeps_or_drops(name, src, tgt, kept, params):
  assert keeps(name, src, tgt, **params) is kept


def test_token_rules_count_characters_in_unspaced_scripts():
  assert keeps('token_count', 'Hello there friend', '今日は良い天気', tgt_lang='jpn_Jpan',
               max_tokens=6) is False
  assert keeps('token_count', 'Hello there friend', '今日は良い天気', tgt_lang='jpn_Jpan',
               max_tokens=7) is True
  assert keeps('long_word', 'Hi', '今' * 200, tgt_lang='jpn_Jpan') is True


def test_foreign_script_counts_letters_outside_the_languages_script():
  assert keeps('foreign_script', 'Hello', 'ሰላም ነው', tgt_lang='amh_Ethi') is True
  assert keeps('foreign_script', 'Hello', 'Hello ሰላም', tgt_lang='amh_Ethi') is False
  assert keeps('foreign_script', 'Hello 123 !!!', 'ሰላም', tgt_lang='amh_Ethi') is True
  assert keeps('foreign_script', 'Привет мир and', 'Bonjour') is False
  assert keeps('foreign_script', '今日はテスト', 'test', src_lang='jpn_Jpan') is True


def test_mined_scores_apply_only_where_present():
  step = build_step('mined_scores').bind('eng_Latn', 'hau_Latn')
  assert step(Pair('a', 'b', (('laser', 1.06), ('language_score', 0.95))))
  assert not step(Pair('a', 'b', (('laser', 1.05),)))
  assert not step(Pair('a', 'b', (('language_score', 0.9),)))


def test_rewrites():
  assert rewrite('html_unescape', 'Tom &amp;amp; Jerry', 'caf&eacute;') == ('Tom & Jerry',
                                                                          'café')
  assert rewrite('whitespace', ' a\t b\n', 'c\u00a0 d ') == ('a b', 'c d')
  assert rewrite('moses_punctuation', '“Quoted” — text…', '«Cité»') == ('"Quoted" - text...',
                                                                        '"Cité"')
  assert rewrite('parenthesised_text', 'Nairobi (Kenya) is big', 'Nairobi est grande') == (
      'Nairobi is big', 'Nairobi est grande')
  assert rewrite('parenthesised_text', 'A (b)', 'C (d)') == ('A (b)', 'C (d)')
  assert rewrite('traditional_to_simplified', 'Chinese', '漢語簡體', tgt_lang='zho_Hans') == (
      'Chinese', '汉语简体')
  assert rewrite('traditional_to_simplified', '漢語', 'x', src_lang='zho_Hant') == ('漢語', 'x')


def test_unknown_step_and_bad_parameter_are_user_errors():
  with pytest.raises(UserError, match="unknown cleaning step 'lenght_ratio'"):
    build_step('lenght_ratio')
  with pytest.raises(UserError, match="cleaning step 'min_chars'"):
    build_step('min_chars', {'minimum': 3})


@pytest.mark.parametrize('preset', ['default', 'volctrans', 'lanbridge', 'nt5', 'm2m',
                                    'tencent'])
def test_presets_name_registered_steps_with_their_settings(preset):
  gin_utils.parse_gin([str(pipeline.preset_file(preset))], [])
  specs = {spec.name: dict(spec.params)
           for spec in configurables.cleaning_specs(configurables.cleaning_step_names())}
  expected = {'volctrans': ('min_chars', 'min_chars', 30),
              'lanbridge': ('token_count', 'min_tokens', 5),
              'nt5': ('long_word', 'max_chars', 40),
              'm2m': ('token_count', 'max_tokens', 250),
              'tencent': ('language_id', 'policy', 'tencent'),
              'default': ('number_mismatch', 'mode', 'subset')}[preset]
  assert specs[expected[0]][expected[1]] == expected[2]
  gin.clear_config()
