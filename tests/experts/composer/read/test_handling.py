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
