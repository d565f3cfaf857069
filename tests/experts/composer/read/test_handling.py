"""What the handlers share: binding a call's arguments to a signature."""

import pytest

from kfoundry.experts.composer.read.handling import bind


def test_bind_matches_positional_and_keyword_arguments():
    assert bind((1, 2), {"keepdim": True}, "input, dim=None, keepdim=False") == {"input": 1, "dim": 2,
                                                                                 "keepdim": True}
    with pytest.raises(TypeError):
        bind((1, 2, 3), {}, "input, dim=None")
    with pytest.raises(TypeError):
        bind((), {}, "input")
    with pytest.raises(TypeError):
        bind((1,), {"bogus": 2}, "input")


def test_the_readers_offer_what_a_handler_may_ask_of_them():
    """Reader is what the handler modules see of the reader, which they do not import: FxReader (and the ATen
    reader built on it) has every member of it, with the same parameters."""
    import inspect

    from kfoundry.experts.composer.read.handling import Reader
    from kfoundry.experts.composer.read.lower_fx import HANDLERS, FxReader

    members = [name for name in vars(Reader) if not name.startswith("_")] + list(Reader.__annotations__)
    assert {"b", "key", "origin", "handler", "op", "tensor"} <= set(members)
    for name in members:
        if name in Reader.__annotations__:
            continue  # attributes set by FxReader.__init__
        ours, theirs = getattr(Reader, name), getattr(FxReader, name)
        if isinstance(ours, property):
            assert isinstance(theirs, property), name
            continue
        assert list(inspect.signature(theirs).parameters) == list(inspect.signature(ours).parameters), name
    reader = FxReader.__new__(FxReader)
    assert reader.handler("nn.Linear") is HANDLERS["nn.Linear"] and reader.handler("no such op") is None
