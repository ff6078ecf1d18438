"""Write the deterministic agentic-coding trace set (AIPerf multi_turn JSONL) and its word-level tokenizer."""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
TRACE_FILE = HERE / "agentic-sim.jsonl"
TOKENIZER_DIR = HERE / "tokenizer"
SEED = "disagg-recipes/agentic-sim/v1"

SESSIONS = 24
SESSIONS_PER_REPO = 2  # sessions 2k and 2k+1 work on the same repository
SYSTEM_PROMPTS = 3
TURNS = (4, 6)  # user turns per session, system prompt not counted
LEXICON_SIZE = 2048
SYSTEM_WORDS = (260, 360)
CONTEXT_WORDS = (2600, 3400)
TASK_WORDS = (30, 70)
TOOL_WORDS = (60, 360)
ASK_WORDS = (8, 24)
OUTPUT_TOKENS = (16, 64)

ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "kr", "st", "tr", "sh")
VOWELS = ("a", "e", "i", "o", "u", "ai", "ou", "ei")
CODAS = ("", "", "", "n", "r", "s", "x", "l", "k")
SIGILS = ("=", "->", "(", ")", "{", "}", ":", ",", "+", "==")
EXTENSIONS = ("py", "rs", "go", "ts", "toml", "md")
UNK = "[UNK]"


def rng_for(*parts: object) -> random.Random:
    return random.Random(":".join([SEED, *map(str, parts)]))


def syllable(rng: random.Random) -> str:
    return rng.choice(ONSETS) + rng.choice(VOWELS) + rng.choice(CODAS)


def pseudo_word(rng: random.Random) -> str:
    return "".join(syllable(rng) for _ in range(rng.randint(1, 3)))


def lexicon() -> list[str]:
    rng, seen = rng_for("lexicon"), dict[str, None]()
    while len(seen) < LEXICON_SIZE:
        seen.setdefault(pseudo_word(rng), None)
    return list(seen)


def prose(rng: random.Random, words: list[str], count: int) -> str:
    return " ".join(rng.choice(words) for _ in range(count))


def code_line(rng: random.Random, words: list[str]) -> str:
    out = [rng.choice(words) for _ in range(rng.randint(3, 9))]
    for _ in range(rng.randint(0, 3)):
        out.insert(rng.randrange(len(out) + 1), rng.choice(SIGILS))
    return " ".join(out)


def source_file(rng: random.Random, words: list[str], budget: int) -> str:
    path = "/".join(rng.choice(words) for _ in range(rng.randint(1, 3)))
    lines, used = [f"### {path}.{rng.choice(EXTENSIONS)}"], 2
    while used < budget:
        lines.append(code_line(rng, words))
        used += len(lines[-1].split())
    return "\n".join(lines)


def repository_context(repo: int, words: list[str]) -> str:
    rng = rng_for("repo", repo)
    target, files, used = rng.randint(*CONTEXT_WORDS), [], 0
    while used < target:
        files.append(source_file(rng, words, min(rng.randint(150, 500), target - used + 2)))
        used += len(files[-1].split())
    return f"<repository id={repo}>\n" + "\n\n".join(files) + "\n</repository>"


def system_prompt(index: int, words: list[str]) -> str:
    rng = rng_for("system", index)
    return f"agent profile {index} : " + prose(rng, words, rng.randint(*SYSTEM_WORDS))


def user_turn(rng: random.Random, words: list[str], index: int) -> str:
    ask = prose(rng, words, rng.randint(*ASK_WORDS))
    if index == 0:
        return "task : " + prose(rng, words, rng.randint(*TASK_WORDS)) + "\n" + ask
    return "tool result :\n" + prose(rng, words, rng.randint(*TOOL_WORDS)) + "\nnext : " + ask


def session(index: int, words: list[str]) -> dict:
    rng = rng_for("session", index)
    repo = index // SESSIONS_PER_REPO
    turns: list[dict] = [{"role": "system", "text": system_prompt(repo % SYSTEM_PROMPTS, words)}]
    for t in range(rng.randint(*TURNS)):
        text = user_turn(rng, words, t)
        if t == 0:
            text = repository_context(repo, words) + "\n\n" + text
        turns.append({"text": text, "output_length": rng.randint(*OUTPUT_TOKENS)})
    return {"session_id": f"agent-{index:02d}-repo-{repo:02d}", "turns": turns}


def sessions() -> list[dict]:
    words = lexicon()
    return [session(i, words) for i in range(SESSIONS)]


def vocabulary(records: list[dict]) -> list[str]:
    seen = dict.fromkeys(lexicon())
    for record in records:
        for turn in record["turns"]:
            seen.update(dict.fromkeys(turn["text"].split()))
    return [UNK, *seen]


def tokenizer_json(vocab: list[str]) -> dict:
    flags = dict.fromkeys(("single_word", "lstrip", "rstrip", "normalized"), False)
    unk = {"id": 0, "content": UNK, **flags, "special": True}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [unk],
        "normalizer": None,
        "pre_tokenizer": {"type": "WhitespaceSplit"},
        "post_processor": None,
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": {w: i for i, w in enumerate(vocab)}, "unk_token": UNK},
    }


def tokenizer_config() -> dict:
    return {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": UNK, "model_max_length": 1048576}


def write_json(path: Path, obj: dict) -> None:
    path.write_text(json.dumps(obj, indent=1, ensure_ascii=True) + "\n", encoding="utf-8")


def write_traces(records: list[dict]) -> None:
    lines = (json.dumps(r, ensure_ascii=True, separators=(",", ":")) for r in records)
    TRACE_FILE.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def summary(records: list[dict]) -> str:
    turns = sum(len(r["turns"]) - 1 for r in records)
    words = sum(len(t["text"].split()) for r in records for t in r["turns"])
    return f"{len(records)} sessions, {turns} turns, {words} words, {TRACE_FILE.stat().st_size} bytes"


def main() -> None:
    records = sessions()
    write_traces(records)
    TOKENIZER_DIR.mkdir(exist_ok=True)
    write_json(TOKENIZER_DIR / "tokenizer.json", tokenizer_json(vocabulary(records)))
    write_json(TOKENIZER_DIR / "tokenizer_config.json", tokenizer_config())
    print(f"{TRACE_FILE.name}: {summary(records)}")


if __name__ == "__main__":
    main()
