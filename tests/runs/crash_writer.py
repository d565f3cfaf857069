"""Run as a script by test_crash: writes candidates and evaluations in a loop until killed.

Prints a line after each commit, so every printed fact is known to be committed."""

import sys

from kfoundry.runs import RunStore

store = RunStore.open(sys.argv[1])
previous = None  # (candidate id, evaluation id) still in flight
for i in range(100_000):
    parents = [previous[0]] if previous else []
    cid = store.add_candidate(f"x = {i}\n", parents, "writer", i % 2, i // 5, "llm")
    print(f"cand {cid} {i}", flush=True)
    eid = store.start_evaluation(cid)
    print(f"start {eid} {cid}", flush=True)
    if previous is not None:
        store.finish_evaluation(previous[1], {"status": "ok", "message": "fine",
                                              "timing": {"speedup_eager": 1.0 + i / 100}})
        print(f"finish {previous[1]}", flush=True)
    store.save_state("generation", i)
    print(f"state {i}", flush=True)
    previous = (cid, eid)
