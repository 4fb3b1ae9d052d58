#!/usr/bin/env bash
# Whether a change left training bit-for-bit unchanged: runs sixteen layouts (dp, tp, sp, pp with
# both schedules, 3D, dp 3, fp16, bf16 with full recompute; interleaved, zbv and zb-h1 schedules;
# a mixture of experts alone, over tp, and with expert parallelism; selective recompute under tp)
# for 12 steps with two `train` binaries, e.g. a build of main and one of a change, and compares
# every step's loss and grad_norm, the val_loss, and every tensor of the final checkpoint (`ckpt
# diff` beside the new binary) exactly.
#
#   scripts/compare_builds.sh BASE_BUILD/bin/train NEW_BUILD/bin/train
set -uo pipefail
cd "$(dirname "$0")/.."
if [ $# -ne 2 ]; then
  echo "usage: $0 BASE_TRAIN NEW_TRAIN" >&2
  exit 2
fi
base=$1 new=$2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# The same threads for both binaries: some CPU reductions (the gradient norm's partial sums) add
# per-thread parts, so their last bits depend on the thread count.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
bash scripts/prepare_fortunes.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
layouts=(
  "1|"
  "2|--set parallel.dp=2"
  "2|--set parallel.tp=2"
  "2|--set parallel.tp=2 --set parallel.sequence_parallel=true"
  "2|--set parallel.pp=2"
  "4|--set parallel.pp=2 --set parallel.dp=2 --set parallel.pipeline_schedule=gpipe"
  "8|--set parallel.pp=2 --set parallel.dp=2 --set parallel.tp=2 --set parallel.sequence_parallel=true"
  "6|--set parallel.pp=2 --set parallel.dp=3 --set train.global_batch=24"
  "2|--set parallel.dp=2 --set precision.compute=fp16"
  "2|--set parallel.pp=2 --set precision.compute=bf16 --set recompute=full"
  "2|--set parallel.pp=2 --set parallel.pipeline_schedule=interleaved --set parallel.virtual_stages=2"
  "2|--set parallel.pp=2 --set parallel.pipeline_schedule=zbv"
  "2|--set parallel.pp=2 --set parallel.pipeline_schedule=zb-h1"
  "1|--set model.moe.experts=4 --set model.moe.every=2"
  "4|--set model.moe.experts=4 --set parallel.tp=2 --set parallel.dp=2 --set recompute=selective"
  "4|--set model.moe.experts=4 --set parallel.dp=4 --set parallel.ep=2"
)
# The step, loss, grad_norm and val_loss of every line of a metrics file.
numbers() {
  /usr/bin/python3 -c '
import json, sys
for line in open(sys.argv[1]):
    d = json.loads(line)
    print(d.get("step"), d.get("loss"), d.get("grad_norm"), d.get("val_loss"))' "$1"
}
status=0
for i in "${!layouts[@]}"; do
  np=${layouts[$i]%%|*} args=${layouts[$i]#*|}
  for which in base new; do
    bin=$base
    [ "$which" = new ] && bin=$new
    # shellcheck disable=SC2086
    mpirun --oversubscribe -np "$np" "$bin" configs/fortunes.yaml --set run.name="l$i" \
      --set run.dir="$work/$which" --set train.steps=12 --set train.eval_every=6 \
      --set train.eval_tokens=8192 --set checkpoint.every=0 --set train.micro_batch=4 $args \
      >"$work/$which.l$i.log" 2>&1 || { echo "layout $i ($which) failed:"; tail -3 "$work/$which.l$i.log"; }
  done
  # The final checkpoints, tensor by tensor (the last one each run wrote).
  ckpts=()
  for which in base new; do
    ckpts+=("$(ls "$work/$which/l$i/checkpoints/"step_*.h5 2>/dev/null | tail -1)")
  done
  if diff <(numbers "$work/base/l$i/metrics.jsonl") <(numbers "$work/new/l$i/metrics.jsonl") \
    >/dev/null 2>&1 && "$(dirname "$new")/ckpt" diff "${ckpts[0]}" "${ckpts[1]}" >/dev/null 2>&1; then
    echo "np $np $args: bitwise equal"
  else
    echo "np $np $args: DIFFERENT"
    status=1
  fi
done
exit $status
