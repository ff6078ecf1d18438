"""Deterministic tokens and prefix caches.

Tokenizer: one token per whitespace-separated word; a chat prompt is, per message, a `<|role|>` token
followed by the words of its text, then one `<|assistant|>` token (the generation prompt). Completions
take a string, or a list of token ids (one token each). Prefix caches hash the token sequence in
chained blocks, as vLLM's prefix caching and LMCache's chunking do, and evict least-recently used.
"""

from __future__ import annotations

import re
import zlib
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})


class PromptError(ValueError):
    """The request's messages or prompt cannot be rendered (vLLM answers 400)."""


def words(text: str) -> list[str]:
    return text.split()


def chat_tokens(messages: list[Any]) -> list[str]:
    out: list[str] = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            raise PromptError(f"messages[{i}]: needs a role out of {', '.join(sorted(ROLES))}")
        out.append(f"<|{message['role']}|>")
        out += words(_text(message.get("content"), where=f"messages[{i}].content"))
    out.append("<|assistant|>")
    return out


def _text(content: Any, *, where: str) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        parts = []
        for part in content:
            if (
                not isinstance(part, dict)
                or part.get("type") != "text"
                or not isinstance(part.get("text"), str)
            ):
                raise PromptError(f"{where}: only text parts are simulated")
            parts.append(part["text"])
        return " ".join(parts)
    raise PromptError(f"{where}: must be a string or a list of parts")


def completion_tokens(prompt: Any) -> list[str]:
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str):
        return words(prompt)
    ids = isinstance(prompt, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt)
    if ids and prompt:
        return [f"#{t}" for t in prompt]
    raise PromptError("prompt: a string or a list of token ids (batched prompts are not simulated)")


def answer_seed(tokens: Sequence[str]) -> int:
    """What a prompt's answer follows from: its tokens (a greedy engine answers a prompt the same way
    every time, and different prompts differently)."""
    return zlib.crc32("\x1f".join(tokens).encode())


def output_word(index: int, seed: int = 0, known: Sequence[str] = ()) -> str:
    """The index-th generated token of the answer to the prompt SEED stands for (answer_seed):
    reproducible, and different per prompt, so that answers can be compared. KNOWN: the words of an answer
    the simulator can give (known_answer), its first tokens."""
    if index < len(known):
        return known[index]
    return f"w{index}" if not seed else f"w{index}-{(seed + index * 7919) % 1000:03d}"


# A made-up GSM8K question (recipes/staging.py writes them for the local runners), after lm-eval's "Question:"
_SUM = re.compile(r"What is ([0-9]{1,6}) plus ([0-9]{1,6})\?")


def known_answer(tokens: Sequence[str], off_by: int = 0) -> tuple[str, ...]:
    """A worked answer, in GSM8K's form, to the last made-up sum the prompt asks (the simulator's stand-in
    for a model that can add, so that a graded eval scores something here); () for any other prompt. OFF_BY:
    every sum answered that much too high (a model path that is wrong, the same way on every engine)."""
    text = " ".join(tokens)
    at = text.rfind("Question:")
    found = _SUM.match(text[at + len("Question:") :].strip()) if at >= 0 else None
    if found is None:
        return ()
    a, b = found.groups()
    total = str(int(a) + int(b) + off_by)
    return (a, "plus", b, "is", f"{total}.", "####", total)


def block_hashes(tokens: Sequence[str], block: int, salt: str = "") -> list[int]:
    """Chained hashes of the full blocks of `tokens` (a partial last block is never cached). A request's
    cache_salt enters the first block's hash, so every chained one (as vLLM salts them, and LMCache keys by
    it): requests of different salts never share a cached block."""
    out, parent = [], hash(("cache_salt", salt)) if salt else 0
    for start in range(0, len(tokens) - block + 1, block):
        parent = hash((parent, tuple(tokens[start : start + block])))
        out.append(parent)
    return out


class PrefixCache:
    """Block-hash LRU: `match` counts leading blocks present, `insert` adds and evicts."""

    def __init__(self, *, block: int, capacity_tokens: int) -> None:
        self.block = block
        self.capacity = max(0, capacity_tokens // block)
        self._blocks: OrderedDict[int, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._blocks)

    def match(self, hashes: Sequence[int]) -> int:
        """Tokens of the longest cached prefix (whole blocks)."""
        hit = 0
        for h in hashes:
            if h not in self._blocks:
                break
            self._blocks.move_to_end(h)
            hit += 1
        return hit * self.block

    def insert(self, hashes: Sequence[int]) -> int:
        """Adds blocks; returns how many were new."""
        new = 0
        for h in hashes:
            if h in self._blocks:
                self._blocks.move_to_end(h)
            else:
                self._blocks[h] = None
                new += 1
        while len(self._blocks) > self.capacity:
            self._blocks.popitem(last=False)
        return new

    def clear(self) -> None:
        self._blocks.clear()

    @property
    def usage(self) -> float:
        return len(self._blocks) / self.capacity if self.capacity else 0.0
