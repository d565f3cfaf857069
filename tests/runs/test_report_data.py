"""kfoundry.runs.report_data: the report's label of what the sandbox held."""

from kfoundry.runs.report_data import sandbox_label


def test_the_sandbox_label_says_what_held_and_what_was_missing():
    held = {"filesystem": "landlock ABI 7 (...)", "network": "seccomp: sockets AF_UNIX only", "processes": "own session",
            "missing": []}
    assert sandbox_label(held) == "filesystem: landlock ABI 7 (...); network: seccomp: sockets AF_UNIX only; " \
                                  "processes: own session"
    short = {"filesystem": None, "network": "seccomp", "missing": ["filesystem: Landlock is not available (ENOSYS)"]}
    text = sandbox_label(short)
    assert text.startswith("network: seccomp; MISSING filesystem: Landlock") and "unprotected" in text
    assert sandbox_label({}) == "-"
