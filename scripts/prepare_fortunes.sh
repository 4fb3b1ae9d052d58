#!/usr/bin/env bash
# Tokenizes the fortunes corpus into data/fortunes (4096-token BPE, 5 % validation) unless it is
# there already. Needs build/bin/tokenize (scripts/build.sh), or the tokenize of STRATA_BIN_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -f data/fortunes/tokenizer.model ]; then
  # shellcheck disable=SC2046
  "${STRATA_BIN_DIR:-build/bin}/tokenize" --input $(bash scripts/fortunes.sh) --out data/fortunes --vocab-size 4096 \
    --val-fraction 0.05 --threads 2
fi
