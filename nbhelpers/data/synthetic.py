"""Synthetic instruction/response pairs with long-tailed (log-normal) token lengths.

The text is pseudo-English drawn from a fixed word list: no real data and no licence questions. What
matters for padding and packing is the distribution of lengths, which follows the log-normal shape of
real instruction-tuning sets: most pairs a few hundred tokens, a long tail up to about 2,000.
"""

from __future__ import annotations

import gzip
import json
import math
import random
from pathlib import Path

WORDS = (
    "the model data training step batch token sequence kernel memory time fast slow value number "
    "result answer question first second third because therefore however which where when while "
    "compute measure profile padding length attention layer weight gradient loss learning rate "
    "optimizer update epoch sample dataset table figure report speed throughput latency device "
    "simple clear small large short long better worse equal total average median spread each every "
    "explain describe compare list write summarize translate solve count find show check give make "
    "use run read see take keep move turn start stop open close build test fix change add remove "
    "city river mountain garden market school library kitchen window student teacher doctor farmer "
    "apple bread water coffee paper letter story music color light sound idea plan rule reason "
    "is are was were be been has have had will would can could should must may might do does did "
    "a an and or but not no yes of to in on at by for with from into over under about after before"
).split()
INSTRUCTIONS = (
    "Explain",
    "Summarize",
    "Describe",
    "Compare",
    "List the steps to",
    "Write a short story about",
    "Answer the question about",
    "Give three reasons for",
    "Translate into plain words",
    "Solve",
)
TOKENS_PER_WORD = 1.3  # measured on this word list with the Qwen3 tokenizer, roughly


def _text(rng: random.Random, n_words: int) -> str:
    words = [rng.choice(WORDS) for _ in range(max(1, n_words))]
    sentences, start = [], 0
    while start < len(words):
        end = start + rng.randint(6, 18)
        sentence = " ".join(words[start:end])
        sentences.append(sentence[0].upper() + sentence[1:] + ".")
        start = end
    return " ".join(sentences)


def make(
    n: int = 1000,
    seed: int = 0,
    prompt_median: float = 50,
    response_median: float = 260,
    sigma: float = 0.9,
    max_response_tokens: int = 2000,
) -> list[dict[str, str]]:
    """Rows with log-normal prompt and response lengths (in approximate Qwen3 tokens)."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        prompt_tokens = min(400, max(8, int(rng.lognormvariate(math.log(prompt_median), 0.7))))
        response_tokens = min(max_response_tokens, max(4, int(rng.lognormvariate(math.log(response_median), sigma))))
        prompt = f"{rng.choice(INSTRUCTIONS)} {_text(rng, int(prompt_tokens / TOKENS_PER_WORD))}"
        rows.append({"id": i, "prompt": prompt, "response": _text(rng, int(response_tokens / TOKENS_PER_WORD))})
    return rows


def write_jsonl(rows: list[dict[str, str]], path: str | Path) -> Path:
    """Write rows as JSON lines (gzip when the name ends in .gz)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wt", encoding="utf-8", **({"compresslevel": 9} if path.suffix == ".gz" else {})) as handle:
        for row in rows:
            handle.write(json.dumps(row) + "\n")
    return path
