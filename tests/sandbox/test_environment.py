"""Evaluation processes get an environment built from an allow-list."""

from kfoundry.sandbox.environment import evaluation_environment, looks_secret


def test_only_allowed_names_pass_and_never_one_named_like_a_secret():
    base = {
        "OPENAI_API_KEY": "sk-1", "HF_TOKEN": "hf_1", "AWS_SECRET_ACCESS_KEY": "a", "DB_PASSWORD": "p",
        "MY_SERVICE_URL": "https://user:pw@host", "SOMETHING_ELSE": "x", "KFOUNDRY_CACHE_DIR": "/c",
        "PATH": "/usr/bin", "LC_ALL": "C", "CUDA_VISIBLE_DEVICES": "0", "TRITON_INTERPRET": "1",
        "KFOUNDRY_WORKER_LABEL": "candidate", "TRITON_CACHE_DIR": "/t", "CUDA_HOME_TOKEN": "t",
    }
    assert evaluation_environment(base) == {"PATH": "/usr/bin", "LC_ALL": "C", "CUDA_VISIBLE_DEVICES": "0",
                                            "TRITON_INTERPRET": "1", "KFOUNDRY_WORKER_LABEL": "candidate",
                                            "TRITON_CACHE_DIR": "/t"}
    assert looks_secret("anthropic_api_key") and not looks_secret("PATH")


def test_defaults_to_this_process(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-passed")
    monkeypatch.setenv("LANG", "C.UTF-8")
    env = evaluation_environment()
    assert "OPENAI_API_KEY" not in env and env["LANG"] == "C.UTF-8"
