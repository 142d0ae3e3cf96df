"""The prompt checks name the fix for shapes at their edges: an empty chat prompt is an empty
message list (not token ids), and a token id equal to the vocabulary size is outside it."""
from __future__ import annotations

import pytest

from dllm.api.inputs import check_token_ids, prompt_batch


def test_an_empty_prompt_list_is_an_empty_chat():
    with pytest.raises(ValueError, match="prompt 0 is an empty list; a chat prompt needs at least one message"):
        prompt_batch([[]])
    with pytest.raises(ValueError, match="prompt 1 is an empty list"):
        prompt_batch(["hi", []])


def test_the_vocabulary_ends_before_its_size():
    assert check_token_ids([[0, 3]], 4) == [[0, 3]]
    with pytest.raises(ValueError, match=r"prompt 0, token 1 is id 4, outside the model's vocabulary \[0, 4\)"):
        check_token_ids([[0, 4]], 4)
