"""Outputs appear whole or not at all."""

import os
import stat

import pytest

from t5x_mt import files


class Interrupted(Exception):
  pass


def test_interrupted_write_keeps_the_previous_file_and_no_temporary(tmp_path, monkeypatch):
  target = tmp_path / 'out' / 'metrics.jsonl'
  files.write_text_atomically(target, 'old\n')

  def fail_on_rename(src, dst):
    raise Interrupted()

  monkeypatch.setattr(os, 'replace', fail_on_rename)
  with pytest.raises(Interrupted):
    files.write_text_atomically(target, 'new\n')
  assert target.read_text() == 'old\n'
  assert sorted(p.name for p in target.parent.iterdir()) == ['metrics.jsonl']


def test_written_file_is_readable_by_others_as_umask_allows(tmp_path):
  previous = os.umask(0o022)
  try:
    path = files.write_bytes_atomically(tmp_path / 'vocab.model', b'\x00\x01')
  finally:
    os.umask(previous)
  assert path.read_bytes() == b'\x00\x01'
  assert stat.S_IMODE(path.stat().st_mode) == 0o644
