"""The embedded models' tokenizer: built offline, in Hugging Face format, and read back.

A character-level tokenizer: every printable ASCII character is one token, so any task text
(digits, the length-interruption phrase of arXiv 2510.13786 §3.2, ``</think>``) tokenizes without
unknowns, and decoding is exact concatenation. ``build_char_tokenizer`` makes it (with transformers,
once per cache); ``PlainTokenizer`` reads it, or any plain tokenizer, back without transformers.
"""
from __future__ import annotations

import json
import shutil
import string
from pathlib import Path

from scalerl.core.lazy import tokenizers, transformers

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIALS = [PAD, BOS, EOS, UNK]
# string.printable minus the whitespace other than ' ' (tabs/newlines are not
# needed by the embedded tasks and would make vocab ids platform-sensitive).
CHARS = [c for c in string.printable if c not in "\t\n\r\x0b\x0c"]


def build_char_tokenizer():
    """Build the char tokenizer; ids are SPECIALS first, then CHARS in order."""
    vocab = {tok: i for i, tok in enumerate(SPECIALS + CHARS)}
    core = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab=vocab, unk_token=UNK))
    # Split into single characters (each char is its own "word").
    core.pre_tokenizer = tokenizers.pre_tokenizers.Split(tokenizers.Regex("."), behavior="isolated")
    core.decoder = tokenizers.decoders.Fuse()
    tok = transformers.PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        unk_token=UNK,
        padding_side="left",  # decoder-only generation pads on the left
    )
    return tok


PLAIN_TOKENIZERS = ("TokenizersBackend", "PreTrainedTokenizerFast")
"""``tokenizer_class`` values that name transformers' tokenizers-backed class itself (one class in transformers 5)."""


class PlainTokenizer:
    """A checkpoint's plain tokenizer (``tokenizer.json``, no chat template: the embedded models'),
    read by the ``tokenizers`` library alone. It answers the calls scalerl makes as transformers'
    tokenizers-backed class does (``tests/test_tokenizer.py`` holds the two equal on the embedded
    tokenizers): encoding, decoding, the special tokens and the vocabulary. transformers would cost
    every process that loads it about 0.85 CPU-s of imports (benchmarks/RESULTS.md); ``load_tokenizer``
    picks this class only where it computes the same (``PlainTokenizer.serves``)."""

    FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
    ROLES = ("bos", "eos", "pad", "unk")
    chat_template = None

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.backend_tokenizer = tokenizers.Tokenizer.from_file(str(self.path / "tokenizer.json"))
        config = json.loads((self.path / "tokenizer_config.json").read_text())
        self.padding_side = config.get("padding_side", "right")
        for role in self.ROLES:
            token = config.get(f"{role}_token")
            token = token.get("content") if isinstance(token, dict) else token
            setattr(self, f"{role}_token", token)
        if self.pad_token is None:  # as load_tokenizer does for transformers': many checkpoints ship without one
            self.pad_token = self.eos_token
        for role in self.ROLES:
            token = getattr(self, f"{role}_token")
            setattr(self, f"{role}_token_id", None if token is None else self.backend_tokenizer.token_to_id(token))

    @classmethod
    def serves(cls, path: str | Path) -> bool:
        """Whether ``path`` holds a tokenizer this class computes exactly: transformers' plain class
        (``tokenizer_class``), a ``tokenizer.json``, no chat template and no tokens added outside it."""
        path = Path(path)
        try:
            config = json.loads((path / "tokenizer_config.json").read_text())
        except (OSError, ValueError):
            return False
        return (config.get("tokenizer_class") in PLAIN_TOKENIZERS
                and (path / "tokenizer.json").is_file() and not config.get("chat_template")
                and not config.get("added_tokens_decoder") and not config.get("extra_special_tokens")
                and not any(path.glob("chat_template*")))

    def __call__(self, text, add_special_tokens: bool = True) -> dict:
        if isinstance(text, str):
            return {"input_ids": self.backend_tokenizer.encode(text, add_special_tokens=add_special_tokens).ids}
        encoded = self.backend_tokenizer.encode_batch(list(text), add_special_tokens=add_special_tokens)
        return {"input_ids": [e.ids for e in encoded]}

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        return self.backend_tokenizer.decode(_ints(ids), skip_special_tokens=skip_special_tokens)

    def batch_decode(self, rows, skip_special_tokens: bool = False) -> list[str]:
        return self.backend_tokenizer.decode_batch([_ints(r) for r in rows], skip_special_tokens=skip_special_tokens)

    def get_vocab(self) -> dict[str, int]:
        return self.backend_tokenizer.get_vocab(with_added_tokens=True)

    def __len__(self) -> int:
        return self.backend_tokenizer.get_vocab_size(with_added_tokens=True)

    def save_pretrained(self, out: str | Path) -> None:
        """The files it was read from, unchanged (a warm start or an export carries the tokenizer on)."""
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        for name in self.FILES:
            if (self.path / name).is_file():
                shutil.copyfile(self.path / name, out / name)


def _ints(ids) -> list[int]:
    if hasattr(ids, "tolist"):  # a tensor or an array, as transformers' decode takes
        ids = ids.tolist()
    return [ids] if isinstance(ids, int) else [int(i) for i in ids]
