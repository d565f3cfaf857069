import json
import random

from kfoundry.random_state import random_state_from_json, random_state_to_json


def test_random_state_survives_json():
    rng = random.Random(5)
    rng.random()
    restored = random.Random()
    restored.setstate(random_state_from_json(json.loads(json.dumps(random_state_to_json(rng)))))
    assert restored.random() == rng.random()
