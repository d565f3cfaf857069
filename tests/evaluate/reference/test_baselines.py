"""The baselines' cache: a later job's figures join what an earlier job saved under the same key (reduce-overhead
timed after a search whose best replays a CUDA graph keeps eager's and torch.compile's figures)."""

from kfoundry.evaluate.reference.baselines import load_baselines, merged_records, save_baselines


def test_a_later_job_adds_its_baselines_to_the_saved_record(tmp_path):
    save_baselines(tmp_path, "k1", {"key": "k1", "stats": {"eager": {"median_ms": 2.0}, "compile": {"median_ms": 1.5}},
                                    "errors": {"compile-max-autotune": "OOM"}, "peak_memory_bytes": 1024})
    save_baselines(tmp_path, "k1", {"key": "k1", "stats": {"compile-reduce-overhead": {"median_ms": 0.9}},
                                    "errors": {}, "peak_memory_bytes": None})
    record = load_baselines(tmp_path, "k1")
    assert set(record["stats"]) == {"eager", "compile", "compile-reduce-overhead"}
    assert record["errors"] == {"compile-max-autotune": "OOM"} and record["peak_memory_bytes"] == 1024


def test_a_figure_measured_later_replaces_an_earlier_error_and_an_earlier_figure():
    earlier = {"stats": {"eager": {"median_ms": 2.0}}, "errors": {"compile": "timeout"}}
    later = {"stats": {"compile": {"median_ms": 1.4}, "eager": {"median_ms": 2.1}}, "errors": {}}
    merged = merged_records(earlier, later)
    assert merged["stats"] == {"eager": {"median_ms": 2.1}, "compile": {"median_ms": 1.4}}
    assert merged["errors"] == {}
