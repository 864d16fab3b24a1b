"""The embedded models' tokenizer read without transformers (``models/tokenizer.py: PlainTokenizer``)
answers every call scalerl makes as transformers' own tokenizers-backed class does, on the tokenizers
scalerl ships; ``load_tokenizer`` picks it only where it computes the same."""
from __future__ import annotations

import json
import random
import shutil
import string

import pytest
import torch
from helpers import REPO

from scalerl.models.load import load_tokenizer
from scalerl.models.tokenizer import PlainTokenizer

SHIPPED = [REPO / "scalerl" / "models" / "assets" / name for name in ("tiny_warm", "tiny_moe_warm")]
TEXTS = ["", " ", "12+7=", "a <eos>b  c", "<pad><bos>", "Thinking budget spent. </think>", string.printable[:94],
         "\\boxed{19}", "<unk>~|"]


def theirs(path):
    import transformers

    return transformers.PreTrainedTokenizerFast.from_pretrained(path, local_files_only=True)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_it_encodes_decodes_and_names_its_tokens_as_transformers_does(path):
    ours, ref = PlainTokenizer(path), theirs(path)
    assert PlainTokenizer.serves(path)
    for role in PlainTokenizer.ROLES:
        assert getattr(ours, f"{role}_token") == getattr(ref, f"{role}_token")
        assert getattr(ours, f"{role}_token_id") == getattr(ref, f"{role}_token_id")
    assert ours.padding_side == ref.padding_side and ours.get_vocab() == ref.get_vocab() and len(ours) == len(ref)
    rng = random.Random(0)
    texts = TEXTS + ["".join(rng.choice(string.printable[:95]) for _ in range(rng.randrange(40))) for _ in range(200)]
    for special in (False, True):
        ids = ref(texts, add_special_tokens=special)["input_ids"]  # (and an attention mask, which scalerl never reads)
        assert ours(texts, add_special_tokens=special)["input_ids"] == ids
        assert [ours(text, add_special_tokens=special)["input_ids"] for text in texts] == ids
    n = len(ref.get_vocab())
    rows = [[rng.randrange(n) for _ in range(rng.randrange(50))] for _ in range(200)]
    for skip in (False, True):
        assert ours.batch_decode(rows, skip_special_tokens=skip) == ref.batch_decode(rows, skip_special_tokens=skip)
        assert ours.decode(torch.tensor(rows[1]), skip_special_tokens=skip) == ref.decode(torch.tensor(rows[1]),
                                                                                          skip_special_tokens=skip)
    assert ours.decode(ours.eos_token_id) == ref.decode(ref.eos_token_id)


def test_what_it_saves_loads_in_transformers_the_same(tmp_path):
    PlainTokenizer(SHIPPED[0]).save_pretrained(tmp_path / "saved")
    ref, again = theirs(SHIPPED[0]), theirs(tmp_path / "saved")
    assert again.get_vocab() == ref.get_vocab() and again.pad_token_id == ref.pad_token_id
    assert again(TEXTS, add_special_tokens=False)["input_ids"] == ref(TEXTS, add_special_tokens=False)["input_ids"]


def test_load_tokenizer_leaves_every_other_tokenizer_to_transformers(tmp_path):
    assert isinstance(load_tokenizer(SHIPPED[0]), PlainTokenizer)
    refused = {"a chat template": {"chat_template": "{{ messages }}"},
               "another class": {"tokenizer_class": "Qwen2Tokenizer"},
               "tokens added outside tokenizer.json": {"added_tokens_decoder": {"99": {"content": "<x>"}}}}
    for name, change in refused.items():
        folder = tmp_path / name.replace(" ", "_")
        shutil.copytree(SHIPPED[0], folder, ignore=shutil.ignore_patterns("*.safetensors"))
        config = json.loads((folder / "tokenizer_config.json").read_text())
        (folder / "tokenizer_config.json").write_text(json.dumps({**config, **change}))
        assert not PlainTokenizer.serves(folder), name
    folder = tmp_path / "a template file"
    shutil.copytree(SHIPPED[0], folder, ignore=shutil.ignore_patterns("*.safetensors"))
    (folder / "chat_template.jinja").write_text("{{ messages }}")
    assert not PlainTokenizer.serves(folder)
    assert not isinstance(load_tokenizer(folder), PlainTokenizer)
    assert not PlainTokenizer.serves(tmp_path / "nothing here")
