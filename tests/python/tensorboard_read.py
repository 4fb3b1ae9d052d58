#!/usr/bin/env python3
"""Checks a run's TensorBoard event files with TensorBoard's own reader.

usage: tensorboard_read.py RUN_DIR

Loads RUN_DIR/tensorboard/ with tensorboard's EventAccumulator (as `tensorboard --logdir` does)
and compares it with RUN_DIR/metrics.jsonl: the scalars loss, lr, grad_norm and val_loss, one
tag flattened from a nested object (memory_bytes/gradients) and one from an array
(activation_mib_by_stage/0) must each have exactly the steps of the metrics lines that carry the
key, with their values rounded to float32 (TensorBoard's simple_value). A resumed run's steps
after its checkpoint were written twice; TensorBoard must keep the later ones only, as
metrics.jsonl does. Exits 0 when all match, 1 with a message per mismatch otherwise.
"""
import json
import math
import os
import struct
import sys

try:
    from tensorboard.backend.event_processing import event_accumulator
except ImportError as error:
    sys.exit(f"tensorboard_read: cannot import tensorboard ({error}): "
             "run scripts/setup_python.sh and use .venv-test/bin/python")

CHECKED_TAGS = ["loss", "lr", "grad_norm", "val_loss", "memory_bytes/gradients",
                "activation_mib_by_stage/0"]


def metrics_by_tag(path):
    """{tag: {step: value}} of CHECKED_TAGS from metrics.jsonl (a later line wins)."""
    expected = {tag: {} for tag in CHECKED_TAGS}
    with open(path) as lines:
        for line in lines:
            record = json.loads(line)
            for tag in CHECKED_TAGS:
                value = record
                for part in tag.split("/"):
                    if isinstance(value, list) and part.isdigit() and int(part) < len(value):
                        value = value[int(part)]
                    elif isinstance(value, dict) and part in value:
                        value = value[part]
                    else:
                        value = None
                        break
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    expected[tag][record["step"]] = value
    return expected


def as_float32(value):
    return struct.unpack("f", struct.pack("f", value))[0]


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    run = sys.argv[1]
    expected = metrics_by_tag(os.path.join(run, "metrics.jsonl"))
    accumulator = event_accumulator.EventAccumulator(
        os.path.join(run, "tensorboard"), size_guidance={event_accumulator.SCALARS: 0})
    accumulator.Reload()
    tags = set(accumulator.Tags()["scalars"])
    problems = []
    for tag in CHECKED_TAGS:
        want = expected[tag]
        if not want:
            problems.append(f"{tag}: not in metrics.jsonl")
            continue
        if tag not in tags:
            problems.append(f"{tag}: no such scalar in TensorBoard (it has {sorted(tags)})")
            continue
        events = accumulator.Scalars(tag)
        steps = [event.step for event in events]
        if steps != sorted(want):
            problems.append(f"{tag}: steps {steps} in TensorBoard, {sorted(want)} in metrics.jsonl")
            continue
        for event in events:
            if not math.isclose(event.value, as_float32(want[event.step]), rel_tol=1e-7,
                                abs_tol=1e-30):
                problems.append(f"{tag} at step {event.step}: {event.value} in TensorBoard, "
                                f"{want[event.step]} in metrics.jsonl")
    for problem in problems:
        print("tensorboard_read:", problem)
    if problems:
        return 1
    print(f"tensorboard_read: {len(CHECKED_TAGS)} tags match metrics.jsonl "
          f"({len(tags)} scalar tags in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
