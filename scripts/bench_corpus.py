#!/usr/bin/env python3
"""Writes a deterministic JSON Lines corpus of about --bytes bytes to stdout, for benchmarks.

Each line is {"id": N, "text": "...", "source": "fortunes"}, the text 1 to 48 fortunes (Debian's
`fortunes` package, the files scripts/fortunes.sh lists) drawn with a fixed seed and joined by
blank lines, then a paragraph of 20 to 60 made-up words. Documents run from a few hundred bytes
to about 20 KB (mean about 2.5 KB), near the size of web-crawl documents. The made-up words are
drawn by Zipf's law from 4 million of them, so, as in real text, a larger corpus holds
more distinct words (Heaps' law), which is what makes a tokenizer's training grow with its input;
the fortunes alone are 2.6 MB, repeated. The same --bytes and --seed always give the same bytes.
Pipe it into `zstd` or `gzip` for a compressed input (scripts/bench_tokenize.sh does).
"""

import argparse
import json
import random
import subprocess
import sys
from pathlib import Path


def fortunes(root: Path):
    listing = subprocess.run(["bash", str(root / "scripts/fortunes.sh")], check=True,
                             capture_output=True, text=True).stdout.split()
    texts = []
    for name in listing:
        raw = Path(name).read_bytes().decode("utf-8", errors="replace")
        texts += [t.strip("\n") for t in raw.split("\n%\n") if t.strip()]
    return texts


WORDS = 4_000_000
SYLLABLES = [c + v for c in "bdfghklmnprstvz" for v in "aeiou"] + ["qu", "th", "sh", "ch"]


def made_up_word(rank: int) -> str:
    """Rank 0, 1, 2, ... spelled in syllables: distinct ranks give distinct words."""
    word = ""
    while True:
        word += SYLLABLES[rank % len(SYLLABLES)]
        rank //= len(SYLLABLES)
        if rank == 0:
            return word


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bytes", type=float, required=True, help="corpus size, e.g. 5e8")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    root = Path(__file__).resolve().parent.parent
    # Escaped once: a document is then a join of ready JSON string pieces.
    pieces = [json.dumps(t, ensure_ascii=False)[1:-1] for t in fortunes(root)]
    rng = random.Random(args.seed)
    out = sys.stdout.buffer
    written, document, batch = 0, 0, []
    while written < args.bytes:
        count = min(48, 1 + int(rng.expovariate(1 / 12)))
        text = "\\n\\n".join(rng.choices(pieces, k=count))
        # Zipf's law: log-uniform ranks, so rank r comes about 1/r as often as rank 1.
        ranks = [int(WORDS ** rng.random()) - 1 for _ in range(rng.randint(20, 60))]
        text += "\\n\\n" + " ".join(made_up_word(r) for r in ranks) + "."
        line = f'{{"id": {document}, "text": "{text}", "source": "fortunes"}}\n'.encode()
        batch.append(line)
        written += len(line)
        document += 1
        if len(batch) == 4096:
            out.write(b"".join(batch))
            batch = []
    out.write(b"".join(batch))


if __name__ == "__main__":
    main()
