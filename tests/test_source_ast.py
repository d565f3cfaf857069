"""Parsing from several threads at once: CPython before 3.13 shares the AST builder's depth counter
between threads, and a garbage collection inside one parse lets another thread move it."""

from __future__ import annotations

import ast
import gc
import sys
import threading

import pytest

from kfoundry import source_ast

# Nested comprehensions make deep trees; many small objects make collections happen mid-parse.
SOURCE = "\n".join(f"def f{i}(a, b):\n    return [(x + {i}) * (y - a) for x in range(b) for y in (1, 2, 3)"
                   f" if x % 2 and (a or b)]" for i in range(300))


def _hammer(parse, threads: int = 4, rounds: int = 15) -> list[str]:
    errors: list[str] = []

    def work():
        for _ in range(rounds):
            try:
                tree = parse(SOURCE)
                assert len(tree.body) == 300
            except SystemError as error:
                errors.append(str(error))

    def busy_collection(phase, info):  # Python code inside a collection: a point where threads switch
        sum(range(50))

    old_interval, old_threshold = sys.getswitchinterval(), gc.get_threshold()
    sys.setswitchinterval(1e-6)
    gc.set_threshold(50, 2, 2)
    gc.callbacks.append(busy_collection)
    try:
        workers = [threading.Thread(target=work) for _ in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    finally:
        gc.callbacks.remove(busy_collection)
        gc.set_threshold(*old_threshold)
        sys.setswitchinterval(old_interval)
    return errors


def test_parses_from_many_threads_never_trip_the_depth_check():
    assert _hammer(source_ast.parse) == []


def test_parse_keeps_filename_and_mode():
    with pytest.raises(SyntaxError) as raised:
        source_ast.parse("def broken(:\n", filename="candidate.py")
    assert raised.value.filename == "candidate.py"
    assert isinstance(source_ast.parse("1 + 2", mode="eval"), ast.Expression)


def test_a_second_thread_waits_while_a_parse_holds_the_lock():
    done = threading.Event()
    with source_ast._LOCK:
        worker = threading.Thread(target=lambda: (source_ast.parse("x = 1"), done.set()))
        worker.start()
        assert not done.wait(0.2)
    worker.join(5)
    assert done.is_set()


def test_literal_eval_reads_literals_and_refuses_names():
    assert source_ast.literal_eval(" [1, (2, 'a')]") == [1, (2, "a")]
    with pytest.raises(ValueError):
        source_ast.literal_eval("open('x')")
