"""Reading a run's metrics.jsonl (docs/ARCHITECTURE.md §5): one JSON object per line; training
lines carry "loss", evaluation lines "val_loss", summary lines their own keys. The benchmarks'
selections of those lines live here, once, instead of in every script."""
import json
import statistics


def read(path):
    """Every line of the file, parsed."""
    with open(path) as file:
        return [json.loads(line) for line in file if line.strip()]


def training(lines):
    """The training steps' lines (those with a "loss")."""
    return [line for line in lines if "loss" in line]


def last_with(lines, key):
    """The last line holding `key` (a KeyError naming it when none does)."""
    for line in reversed(lines):
        if key in line:
            return line
    raise KeyError(f"no metrics line holds {key!r}")


def median_step_ms(steps, skip=1):
    """The median step time of the training lines `steps` after the first `skip` (warm-up), or of
    all of them when there are no more."""
    return statistics.median(line["step_ms"] for line in steps[skip:] or steps)


def final_val_loss(lines):
    """The last evaluation's val_loss, or None."""
    values = [line["val_loss"] for line in lines if "val_loss" in line]
    return values[-1] if values else None


def bytes_by_kind(comm_bytes):
    """{kind: bytes over all link classes} of a comm_bytes object ({kind: {link: bytes}})."""
    return {kind: sum(by_link.values()) for kind, by_link in comm_bytes.items()}


def model_state(memory_bytes):
    """The model state of a memory_bytes account (MemoryAccount::model_state: weights, gradients,
    optimizer state, secondary copies; not the transient buffers)."""
    return sum(memory_bytes[k] for k in ("master_weights", "compute_weights", "gradients",
                                         "optimizer_state", "secondary_weights"))
