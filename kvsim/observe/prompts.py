"""What `kvsim observe` sends as a request's prompt: token ids (exact) or words (approximate).

A workload's prompt is segments of content ids (`kvsim.request`); a server needs tokens.

    content id c >= 0     a pinned pseudo-random stream of token ids for c
                          (`kvsim.validation.workload.TokenStreams`, the differential
                          harness's): equal ids give equal tokens, so prompts that share
                          segments share their token prefix exactly, as kvsim assumes
    content id -(r + 1)   request r's output, re-sent by a later turn: the token ids the
                          server streamed for r (``return_token_ids``), else a stream of its
                          own (the server's prefix cache then misses from there on, as it
                          would for re-tokenized text)

    [sys: 384 ids of c=0][user: 200 ids of c=17]   -> 584 token ids, the first 384 shared

With ``prompt_format="token_ids"`` (vLLM, SGLang: ``prompt`` as a list of integers) the
server sees exactly those tokens; ``"text"`` renders each token id as one common English
word, so that a server refusing token ids still gets the same shared prefixes, about one
token per word (its ``usage.prompt_tokens`` says how many it counted).
"""

from __future__ import annotations

from kvsim.request import RequestSpec
from kvsim.validation.workload import FIRST_TOKEN_ID, TokenStreams

#: Content ids of the streams standing in for outputs the server did not report: beyond
#: every workload content id (they lie in (-2**60, 2**60), `kvsim.request`).
OUTPUT_STREAM_BASE = 2**61
#: Fewest token ids a vocabulary must offer above the special tokens.
MIN_VOCAB_TOKENS = 16

#: Words that most tokenizers keep whole after a space (one token each in Llama's, GPT's,
#: Qwen's BPE): the text form of a token id is WORDS[id % len(WORDS)].
WORDS: tuple[str, ...] = (
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "was",
    "for",
    "on",
    "that",
    "with",
    "as",
    "by",
    "at",
    "from",
    "his",
    "her",
    "he",
    "it",
    "an",
    "are",
    "were",
    "be",
    "this",
    "which",
    "had",
    "not",
    "but",
    "or",
    "have",
    "one",
    "all",
    "their",
    "they",
    "has",
    "been",
    "more",
    "who",
    "its",
    "new",
    "can",
    "also",
    "after",
    "two",
    "first",
    "other",
    "into",
    "than",
    "only",
    "when",
    "some",
    "would",
    "time",
    "there",
    "over",
    "most",
    "made",
    "such",
    "about",
    "out",
    "three",
    "she",
    "up",
    "many",
    "may",
    "then",
    "these",
    "him",
    "them",
    "any",
    "where",
    "between",
    "used",
    "both",
    "under",
    "being",
    "during",
    "later",
    "while",
    "each",
    "same",
    "part",
    "well",
    "through",
    "year",
    "years",
    "called",
    "known",
    "state",
    "since",
    "world",
    "city",
    "before",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "end",
    "work",
    "way",
    "life",
    "long",
    "day",
    "found",
    "home",
    "group",
    "name",
    "line",
    "back",
    "high",
    "game",
    "house",
    "small",
    "side",
    "left",
    "right",
    "early",
    "water",
    "like",
    "near",
    "good",
    "local",
    "young",
    "power",
    "black",
    "white",
    "great",
    "light",
    "order",
    "level",
    "point",
    "head",
    "form",
    "place",
    "number",
    "music",
    "south",
    "north",
    "east",
    "west",
    "book",
    "hand",
    "land",
    "film",
    "team",
    "play",
    "show",
    "song",
    "area",
    "case",
    "lead",
    "role",
    "open",
    "door",
    "room",
    "road",
    "fire",
    "tree",
    "bird",
    "fish",
    "star",
    "moon",
    "rain",
    "wind",
    "snow",
    "rock",
    "sand",
    "gold",
    "iron",
    "wood",
    "blue",
    "red",
    "green",
    "river",
    "lake",
    "hill",
    "field",
    "farm",
    "town",
    "king",
    "queen",
    "army",
    "ship",
    "war",
    "peace",
    "art",
    "law",
    "body",
    "mind",
    "heart",
    "eye",
    "face",
    "word",
    "story",
    "voice",
    "sound",
    "note",
    "key",
    "code",
    "data",
    "test",
    "plan",
    "rule",
)


class PromptBuilder:
    """Token ids (or text) of each request's prompt; remembers what each request generated."""

    def __init__(self, vocab_size: int) -> None:
        if vocab_size < FIRST_TOKEN_ID + MIN_VOCAB_TOKENS:
            raise ValueError(
                f"vocab_size must be >= {FIRST_TOKEN_ID + MIN_VOCAB_TOKENS} (token ids start at "
                f"{FIRST_TOKEN_ID}), got {vocab_size}"
            )
        self.vocab_size = vocab_size
        self._streams = TokenStreams(vocab_size)
        self._outputs: dict[int, list[int]] = {}

    def record_output(self, request_id: int, token_ids: list[int]) -> None:
        """What request ``request_id`` generated (re-sent by its follow-up turns)."""
        self._outputs[request_id] = token_ids

    def token_ids(self, spec: RequestSpec) -> list[int]:
        """The prompt's token ids (see the module docstring)."""
        ids: list[int] = []
        for seg in spec.prompt:
            if seg.content_id >= 0:
                ids += self._streams.tokens(seg.content_id, seg.num_tokens)
                continue
            source = -(seg.content_id + 1)
            generated = self._outputs.get(source, [])[: seg.num_tokens]
            ids += generated
            missing = seg.num_tokens - len(generated)
            if missing:
                stream = self._streams.tokens(OUTPUT_STREAM_BASE + source, seg.num_tokens)
                ids += stream[len(generated) :]
        return ids

    def text(self, spec: RequestSpec) -> str:
        """The prompt as words, one per token id (see the module docstring)."""
        return " ".join(WORDS[i % len(WORDS)] for i in self.token_ids(spec))


__all__ = ["WORDS", "PromptBuilder"]
