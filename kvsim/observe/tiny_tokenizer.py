"""A tokenizer for a config-only model, built offline: one word per token id.

    .venv-vllm/bin/python kvsim/observe/tiny_tokenizer.py MODEL_DIR VOCAB_SIZE

Writes ``tokenizer.json`` (a Hugging Face ``tokenizers`` WordLevel model: ``<unk>`` 0, ``<s>``
1, ``</s>`` 2, then ``t3`` ... ``t{VOCAB_SIZE - 1}``, split on whitespace) and
``tokenizer_config.json`` into MODEL_DIR, so that vLLM's OpenAI server can start, count and
detokenize for a model folder holding only a ``config.json`` (``load_format=dummy``). Token
id i decodes to the word ``t{i}``; kvsim observe sends token ids, so the words never matter.

Runs under any interpreter that has the ``tokenizers`` package (vLLM's has it); imports
nothing of kvsim.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

SPECIAL = {"<unk>": 0, "<s>": 1, "</s>": 2}


def build(folder: Path, vocab_size: int) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    if vocab_size <= len(SPECIAL):
        raise ValueError(f"vocab_size must be > {len(SPECIAL)}, got {vocab_size}")
    vocab = dict(SPECIAL)
    vocab.update({f"t{i}": i for i in range(len(SPECIAL), vocab_size)})
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "model_max_length": 1_000_000,
        "clean_up_tokenization_spaces": False,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=1) + "\n")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(f"usage: {sys.argv[0]} MODEL_DIR VOCAB_SIZE")
    build(Path(sys.argv[1]), int(sys.argv[2]))
