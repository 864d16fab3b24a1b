"""A character-level tokenizer in Hugging Face format, built offline.

Every printable ASCII character is one token, so any task text (digits, the
length-interruption phrase of arXiv 2510.13786 §3.2, ``</think>``) tokenizes without
unknowns, and decoding is exact concatenation.
"""
from __future__ import annotations

import string

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
