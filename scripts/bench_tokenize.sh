#!/usr/bin/env bash
# `tokenize` on generated corpora, for docs/PERFORMANCE.md ("tokenize"): peak memory as the input
# grows, and encoding throughput against SentencePiece's own Python encoder.
#
#   scripts/bench_tokenize.sh memory [GB...]    # default: 0.5 2 8
#   scripts/bench_tokenize.sh throughput [MB]   # default: 50
#
# memory: for each size, a corpus of that many GB of JSON Lines (scripts/bench_corpus.py, fixed
# seed) compressed to .jsonl.zst, then the whole `tokenize` (pass 1 with the tokenizer's training
# on its sample, pass 2 encoding into shards) under /usr/bin/time -v: peak RSS, wall time and the
# summary line. TOKENIZER=MODEL skips the training (--tokenizer MODEL) where it is not the point.
# throughput: one corpus of MB megabytes (.jsonl), a tokenizer trained on it, then ROUNDS
# alternating rounds of `tokenize --tokenizer` (its summary's tokens/s: pass 2, which reads,
# encodes and writes the shards) and scripts/bench_sentencepiece.py (SentencePiece's Python
# encode(list, num_threads=N) on the documents loaded beforehand) at each of THREADS; the best
# round of each is kept, so a round disturbed by another job does not decide the result. Where
# DEBIAN_PYTHON (/usr/bin/python3) imports sentencepiece (Debian's python3-sentencepiece, the
# same SentencePiece release `tokenize` links, 0.1.97 on Debian 12, where PyPI's is newer), that
# encoder is timed too. All count the same tokens (ids plus one EOS per document); the script
# says if they do not agree.
#
# Environment: BUILD_DIR (build), TOKENIZE (a tokenize binary to use instead of building one),
# WORK (a scratch folder, default /tmp/strata-bench-tokenize, removed at the end), THREADS
# ("1 2"), ROUNDS (2), VOCAB (4096), PYTHON (.venv-test/bin/python, which
# scripts/setup_python.sh makes with sentencepiece). Needs the zstd command for the .zst corpora.
# Timings are never asserted anywhere.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-}
shift || true
BUILD_DIR=${BUILD_DIR:-build}
WORK=${WORK:-/tmp/strata-bench-tokenize}
THREADS=${THREADS:-"1 2"}
ROUNDS=${ROUNDS:-2}
VOCAB=${VOCAB:-4096}
PYTHON=${PYTHON:-.venv-test/bin/python}
DEBIAN_PYTHON=${DEBIAN_PYTHON:-/usr/bin/python3}
if [[ -n ${TOKENIZE:-} ]]; then
  tokenize=$TOKENIZE  # a copy that later builds cannot replace while a long series runs
else
  tokenize="$BUILD_DIR/bin/tokenize"
  if [[ ! -x $tokenize ]]; then
    cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  fi
  ninja -C "$BUILD_DIR" tokenize >/dev/null
fi
mkdir -p "$WORK"
trap 'rm -rf "$WORK"' EXIT

echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(git rev-parse --short HEAD) on $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores"
echo "# load: $(uptime | sed 's/.*load average/load average/')"

# corpus BYTES FILE: the generated corpus; .zst compressed when FILE ends so. (BYTES comes from
# awk's %.0f: its %d stops at 2^31 - 1 in Debian's mawk, which made an "8 GB" corpus 2.1 GB.)
corpus() {
  if [[ $2 == *.zst ]]; then
    python3 scripts/bench_corpus.py --bytes "$1" | zstd -q -T2 -3 -o "$2"
  else
    python3 scripts/bench_corpus.py --bytes "$1" >"$2"
  fi
}

# The value of a `/usr/bin/time -v` field.
time_field() { sed -n "s/^\s*$1: //p" "$2"; }

memory() {
  local sizes=("$@")
  ((${#sizes[@]})) || sizes=(0.5 2 8)
  local extra=()
  [[ -n ${TOKENIZER:-} ]] && extra=(--tokenizer "$TOKENIZER") || extra=(--vocab-size "$VOCAB")
  for gb in "${sizes[@]}"; do
    local input="$WORK/corpus_${gb}GB.jsonl.zst" out="$WORK/out_${gb}GB" log="$WORK/time.log"
    corpus "$(awk -v gb="$gb" 'BEGIN { printf "%.0f", gb * 1e9 }')" "$input"
    echo "# ${gb} GB: $(du -b "$input" | cut -f1) bytes of .jsonl.zst;" \
      "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
    /usr/bin/time -v -o "$log" "$tokenize" --input "$input" --out "$out" --threads 2 \
      --val-fraction 0.01 "${extra[@]}" | tee "$WORK/summary.txt"
    printf 'memory\t%s GB\tpeak_rss_mb %d\twall %s\t%s\n' "$gb" \
      "$(($(time_field 'Maximum resident set size (kbytes)' "$log") / 1024))" \
      "$(time_field 'Elapsed (wall clock) time (h:mm:ss or m:ss)' "$log")" \
      "$(grep -o 'encoded in [0-9.]* s: [0-9]* tokens/s' "$WORK/summary.txt")"
    rm -rf "$input" "$out"
  done
}

throughput() {
  local mb=${1:-50}
  local input="$WORK/corpus_${mb}MB.jsonl" raw="$WORK/rounds.txt"
  corpus "$(awk -v mb="$mb" 'BEGIN { printf "%.0f", mb * 1e6 }')" "$input"
  "$tokenize" --input "$input" --out "$WORK/trained" --vocab-size "$VOCAB" --val-fraction 0 \
    --threads 2 >/dev/null
  local model="$WORK/trained/tokenizer.model"
  for round in $(seq "$ROUNDS"); do
    for threads in $THREADS; do
      local ours
      ours=$("$tokenize" --input "$input" --out "$WORK/encoded" --tokenizer "$model" \
        --val-fraction 0 --threads "$threads" --force)
      printf 'strata\tround %s\tthreads %s\t%s\n' "$round" "$threads" \
        "$(grep -o 'train [0-9]* tokens\|[0-9]* tokens/s' <<<"$ours" | paste -sd' ')" | tee -a "$raw"
      printf 'python\tround %s\tthreads %s\t%s\n' "$round" "$threads" \
        "$("$PYTHON" scripts/bench_sentencepiece.py --model "$model" --input "$input" \
          --threads "$threads")" | tee -a "$raw"
      if "$DEBIAN_PYTHON" -c "import sentencepiece" 2>/dev/null; then
        printf 'debian\tround %s\tthreads %s\t%s\n' "$round" "$threads" \
          "$("$DEBIAN_PYTHON" scripts/bench_sentencepiece.py --model "$model" --input "$input" \
            --threads "$threads")" | tee -a "$raw"
      fi
    done
  done
  # Best round per side and thread count, and Strata's ratio to each Python encoder.
  awk -F'\t' '
    { threads = $3; sub("threads ", "", threads)
      if ($1 == "strata") { match($4, /[0-9]+ tokens\/s/); rate = substr($4, RSTART, RLENGTH) + 0
                            match($4, /train [0-9]+/); count = substr($4, RSTART + 6, RLENGTH - 6) }
      else { match($4, /"tokens_per_s": [0-9]+/); rate = substr($4, RSTART + 16, RLENGTH - 16) + 0
             match($4, /"tokens": [0-9]+/); count = substr($4, RSTART + 10, RLENGTH - 10) }
      if (rate > best[$1, threads]) best[$1, threads] = rate
      if (count != first_count[threads] && first_count[threads] != "") differ = 1
      first_count[threads] = count; seen[threads] = 1 }
    END { for (t in seen) {
            line = sprintf("best\tthreads %s\tstrata %d tokens/s\tpython %d tokens/s (ratio %.2f)", t,
                           best["strata", t], best["python", t], best["strata", t] / best["python", t])
            if (best["debian", t]) line = line sprintf("\tdebian python %d tokens/s (ratio %.2f)",
                                                       best["debian", t], best["strata", t] / best["debian", t])
            print line
          }
          if (differ) print "TOKEN COUNTS DIFFER between the encoders" }' "$raw"
}

case $mode in
  memory) memory "$@" ;;
  throughput) throughput "$@" ;;
  *)
    echo "usage: scripts/bench_tokenize.sh memory [GB...] | throughput [MB]" >&2
    exit 2
    ;;
esac
echo "# load after: $(uptime | sed 's/.*load average/load average/')"
