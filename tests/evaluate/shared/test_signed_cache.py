"""The cache's records are signed: one that was forged, edited or written unsigned is ignored."""

import json
import os
import stat

from kfoundry.evaluate.reference.baselines import load_baselines, save_baselines
from kfoundry.evaluate.shared.signed_cache import KEY_FILE, read_signed, write_signed


def test_a_signed_record_reads_back_and_a_tampered_one_does_not(tmp_path):
    path = tmp_path / "baselines" / "k.json"
    write_signed(tmp_path, path, {"key": "k", "stats": {"eager": {"median_ms": 3.0}}})
    assert read_signed(tmp_path, path) == {"key": "k", "stats": {"eager": {"median_ms": 3.0}}}
    assert stat.S_IMODE(os.stat(tmp_path / KEY_FILE).st_mode) == 0o600
    data = json.loads(path.read_text())
    data["record"]["stats"]["eager"]["median_ms"] = 30.0  # a slower baseline fakes every later speedup
    path.write_text(json.dumps(data))
    assert read_signed(tmp_path, path) is None
    path.write_text(json.dumps({"key": "k", "stats": {}}))  # the old unsigned format, or a forged file
    assert read_signed(tmp_path, path) is None
    path.write_text("{not json")
    assert read_signed(tmp_path, path) is None and read_signed(tmp_path, tmp_path / "missing.json") is None


def test_baselines_signed_with_another_key_are_measured_again(tmp_path):
    save_baselines(tmp_path, "abc", {"key": "abc", "stats": {}, "errors": {}})
    assert load_baselines(tmp_path, "abc")["key"] == "abc"
    assert load_baselines(tmp_path, "other") is None
    (tmp_path / KEY_FILE).write_text(os.urandom(32).hex())  # a new key: old records no longer verify
    assert load_baselines(tmp_path, "abc") is None
