#!/usr/bin/env python3
"""SentencePiece's own Python encoder on a .jsonl corpus: tokens/s, for scripts/bench_tokenize.sh.

The documents (each line's "text") are loaded first and not timed; then SentencePieceProcessor's
encode(list, num_threads=N) runs over them in batches of --batch documents (the batches bound
the memory of Python's id lists; the thread pool works within each batch). Prints one JSON line:
documents, tokens (the ids plus one EOS per document, as tokenize counts them), seconds,
tokens_per_s and the sentencepiece version.
"""

import argparse
import json
import time

import sentencepiece


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--input", required=True, help="a .jsonl file")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch", type=int, default=2000)
    args = parser.parse_args()
    processor = sentencepiece.SentencePieceProcessor(model_file=args.model)
    with open(args.input, encoding="utf-8") as lines:
        documents = [json.loads(line)["text"] for line in lines if line.strip()]
    tokens = 0
    start = time.perf_counter()
    for first in range(0, len(documents), args.batch):
        batch = processor.encode(documents[first:first + args.batch], num_threads=args.threads)
        tokens += sum(len(ids) + 1 for ids in batch)
    seconds = time.perf_counter() - start
    print(json.dumps({"threads": args.threads, "documents": len(documents), "tokens": tokens,
                      "seconds": round(seconds, 3), "tokens_per_s": round(tokens / seconds),
                      "sentencepiece": sentencepiece.__version__}))


if __name__ == "__main__":
    main()
