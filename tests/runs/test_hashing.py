import random

from kfoundry.runs import (
    normalize_source,
    random_state_from_json,
    random_state_to_json,
    source_hash,
)


def test_comments_blank_lines_and_trailing_spaces_do_not_change_the_hash():
    a = "import torch  # the import\n\n\nx = 1   \n# a note\ny = '#not a comment'\n"
    b = "import torch\nx = 1\ny = '#not a comment'\n"
    assert normalize_source(a) == b
    assert source_hash(a) == source_hash(b)
    assert source_hash(b) != source_hash(b.replace("x = 1", "x = 2"))


def test_source_that_does_not_tokenize_still_hashes():
    assert normalize_source("x = (1,  \n\n") == "x = (1,\n"


def test_random_state_survives_json():
    import json

    rng = random.Random(5)
    rng.random()
    restored = random.Random()
    restored.setstate(random_state_from_json(json.loads(json.dumps(random_state_to_json(rng)))))
    assert restored.random() == rng.random()
