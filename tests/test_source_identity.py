from kfoundry.source_identity import normalize_source, source_hash


def test_comments_blank_lines_and_trailing_spaces_do_not_change_the_hash():
    a = "import torch  # the import\n\n\nx = 1   \n# a note\ny = '#not a comment'\n"
    b = "import torch\nx = 1\ny = '#not a comment'\n"
    assert normalize_source(a) == b
    assert source_hash(a) == source_hash(b)
    assert source_hash(b) != source_hash(b.replace("x = 1", "x = 2"))


def test_source_that_does_not_tokenize_still_hashes():
    assert normalize_source("x = (1,  \n\n") == "x = (1,\n"
