#!/usr/bin/python3
# `plot RUN_DIR... [--out DIR]`: PNG charts of training runs, drawn from their metrics.jsonl.
#
# Reads each run directory's metrics.jsonl (README "Outputs") and config.yaml (the effective config
# `train` wrote, for the tokens a step trains on) and writes, into RUN_DIR/plots/ (one run) or
# --out DIR (needed for several runs, which are overlaid on every chart, labelled by run name):
#   loss.png        train loss (every step) and val loss (each evaluation), against step and tokens
#   lr.png          the learning rate
#   throughput.png  tokens/s
#   grad_norm.png   the gradient norm before clipping
#   multiple_choice.png  runs with train.eval_multiple_choice only: mc_acc and mc_acc_norm at each
#                   evaluation
#   outer.png       DiLoCo runs only: each outer sync's outer gradient norm, the workers' losses,
#                   the sync's seconds (and how many an inner step hid), the consensus distance
#   overview.png    the loss, lr, throughput and grad-norm panels (and the outer gradient norm, the
#                   multiple-choice accuracy) in one picture
# and prints one line per file: its path, then per run each series it drew and its points
# (`plot: runs/a/plots/loss.png | a: loss 400, val_loss 4`), which the tests check.
#
# Tokens: step × train.global_batch × model.seq_len, times diloco.workers for a DiLoCo run, whose
# global_batch counts one worker's sequences (README "DiLoCo"): the tokens the whole job trained on,
# so a DiLoCo run and a data-parallel run at equal compute line up. tokens_per_s is scaled the same
# way (metrics.jsonl's is the first worker's).
#
# Lines: training lines have `loss`, evaluation lines `val_loss` or `mc_acc`, DiLoCo sync lines
# `outer_step`;
# the final summary line is not drawn. A step written twice keeps its last line (a resumed run
# truncates the file at its checkpoint, but a copy may hold both). null values (a non-finite loss)
# are left out of the curves. A last line without its newline that does not parse is a line
# `train` is still writing, and is skipped; any other line that is not a JSON object is an error.
#
# Uses Debian's python3 with python3-matplotlib (Agg, no display) and python3-yaml, installed by
# scripts/setup.sh. Errors print one `error: ...` line and exit 1 (2 for a bad command line).
import argparse
import json
import math
import os
import sys


def fail(message, status=1):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(status)


try:
    import yaml
except ImportError:
    fail("yaml is not installed for /usr/bin/python3: run scripts/setup.sh (it installs "
         "python3-yaml and python3-matplotlib)")

# matplotlib's, imported once the inputs are read.
plt = EngFormatter = FuncFormatter = MaxNLocator = NullLocator = None


def import_matplotlib():
    """Imports matplotlib (about a second) only once the inputs have been read, so that a bad
    input fails at once."""
    global plt, EngFormatter, FuncFormatter, MaxNLocator, NullLocator
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only, no display
        import matplotlib.pyplot as pyplot
        from matplotlib import ticker
    except ImportError:
        fail("matplotlib is not installed for /usr/bin/python3: run scripts/setup.sh (it "
             "installs python3-matplotlib)")
    plt = pyplot
    EngFormatter, FuncFormatter = ticker.EngFormatter, ticker.FuncFormatter
    MaxNLocator, NullLocator = ticker.MaxNLocator, ticker.NullLocator


# The keys drawn, by kind of line; each must be a number or null (a non-finite value).
NUMBERS = {"train": ("loss", "lr", "grad_norm", "tokens_per_s"),
           "eval": ("val_loss", "mc_acc", "mc_acc_norm"),
           "outer": ("outer_grad_norm", "outer_sync_s", "outer_hidden_s", "consensus_distance",
                     "outer_wait_s", "outer_wall_s")}


def is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class Run:
    """One run's curves: name, tokens per step, and per kind of line the points by step."""

    def __init__(self, directory, name):
        self.directory = directory
        self.name = name
        self.tokens_per_step = 0  # the whole job's (every DiLoCo worker's)
        self.workers = 1  # DiLoCo workers, 1 for plain training
        self.train = {}  # step -> training line
        self.evals = {}  # step -> evaluation line
        self.outer = {}  # (step, fragment) -> outer_step line

    def series(self, lines, key, scale=1.0):
        """(steps, values) of `key` over the lines by step, nulls left out."""
        steps, values = [], []
        for at in sorted(lines):
            step = at[0] if isinstance(at, tuple) else at  # outer lines: (step, fragment)
            value = lines[at].get(key)
            if value is not None and math.isfinite(value):
                steps.append(step)
                values.append(value * scale)
        return steps, values

    def tokens(self, steps):
        return [step * self.tokens_per_step for step in steps]


def read_config(run):
    path = os.path.join(run.directory, "config.yaml")
    if not os.path.isfile(path):
        fail(f"{path}: no such file (the run's effective config, written by train: it gives the "
             "tokens per step)")
    try:
        with open(path, encoding="utf-8") as file:
            config = yaml.safe_load(file)
        batch = int(config["train"]["global_batch"])
        seq_len = int(config["model"]["seq_len"])
        diloco = config.get("diloco") or {}
        if diloco.get("enabled"):
            run.workers = int(diloco["workers"])
    except (yaml.YAMLError, KeyError, TypeError, ValueError, AttributeError) as problem:
        fail(f"{path}: not a Strata run config ({type(problem).__name__}: {problem})")
    run.tokens_per_step = batch * seq_len * run.workers


def read_metrics(run):
    path = os.path.join(run.directory, "metrics.jsonl")
    if not os.path.isfile(path):
        fail(f"{path}: no such file (is {run.directory} a run directory?)")
    with open(path, encoding="utf-8", errors="replace") as file:
        lines = file.read().split("\n")
    # The text after the last newline: empty, or a line still being written.
    last = lines.pop()
    numbered = list(enumerate(lines, start=1))
    if last:
        numbered.append((len(lines) + 1, last))
    for number, text in numbered:
        try:
            line = json.loads(text)
        except json.JSONDecodeError:
            line = None
        if not isinstance(line, dict) or type(line.get("step")) is not int:
            if number == len(lines) + 1:
                continue  # unterminated last line: train is writing it
            shown = text if len(text) <= 60 else text[:57] + "..."
            fail(f"{path} line {number}: not a metrics line (a JSON object with an integer "
                 f"step): {shown!r}")
        step = line["step"]
        if "outer_step" in line:
            kind, table, at = "outer", run.outer, (step, line.get("fragment", 0))
        elif "val_loss" in line or "mc_acc" in line:
            kind, table, at = "eval", run.evals, step
        elif "loss" in line:
            kind, table, at = "train", run.train, step
        else:
            continue  # the final summary line
        for key in NUMBERS[kind]:
            if line.get(key) is not None and not is_number(line[key]):
                fail(f"{path} line {number}: '{key}' is {line[key]!r}, not a number")
        losses = line.get("worker_loss", [])
        if kind == "outer" and not (isinstance(losses, list) and
                                    all(v is None or is_number(v) for v in losses)):
            fail(f"{path} line {number}: 'worker_loss' is {losses!r}, not an array of numbers")
        table[at] = line  # a step written again keeps its last line
    if not run.train:
        fail(f"{path}: no training lines (lines with a loss) to plot")


def run_names(directories):
    """Each run's name: its directory's name, with its parent's where two runs share it."""
    names = [os.path.basename(os.path.abspath(d)) for d in directories]
    return [os.path.join(os.path.basename(os.path.dirname(os.path.abspath(d))), n)
            if names.count(n) > 1 else n for d, n in zip(directories, names)]


class Chart:
    """One figure being drawn: its runs, and the points of every series drawn, for the report."""

    def __init__(self, runs, panels, columns):
        self.runs = runs
        rows = (panels + columns - 1) // columns
        self.figure, axes = plt.subplots(rows, columns, figsize=(6.4 * columns, 4.2 * rows),
                                         squeeze=False)
        self.axes = [ax for row in axes for ax in row]
        for unused in self.axes[panels:]:
            unused.set_visible(False)
        self.points = {run.name: {} for run in runs}

    def count(self, run, key, points):
        self.points[run.name][key] = points  # for the report

    def label(self, run, what):
        return f"{run.name} {what}" if len(self.runs) > 1 else what

    def save(self, path, title):
        names = [run.name for run in self.runs]
        visible = [ax for ax in self.axes if ax.get_visible()]
        if len(visible) == 1:  # one panel: its own title heads the figure
            title = visible[0].get_title()
            visible[0].set_title("")
        self.figure.suptitle(f"{title}: {' vs '.join(names)}", fontsize=13)
        self.figure.tight_layout()
        self.figure.savefig(path, dpi=100)
        plt.close(self.figure)
        counts = " | ".join(
            f"{name}: " + ", ".join(f"{key} {n}" for key, n in series.items())
            for name, series in self.points.items() if series)
        print(f"plot: {path} | {counts}")


def color(index):
    return f"C{index % 10}"


def log_scale(ax):
    """A log y axis with plain-number ticks (6, 7, 8 rather than 8×10⁰). Under a decade (a loss
    curve's usual span) log ticks would be too few, so ticks are evenly spaced round numbers;
    wider, 1, 2 and 5 × 10ⁿ are labelled under three decades, else 10ⁿ only."""
    ax.set_yscale("log")
    low, high = ax.get_ylim()  # the data's range, autoscaled once the curves are drawn
    decades = math.log10(high / low) if 0 < low < high else 0
    plain = FuncFormatter(lambda value, _: f"{value:.3g}")
    if decades < 1:
        ax.yaxis.set_major_locator(MaxNLocator(nbins=6))
        ax.yaxis.set_minor_locator(NullLocator())
        ax.yaxis.set_major_formatter(plain)
        return
    shown = (1,) if decades >= 3 else (1, 2, 5)

    def label(value, _):
        if value <= 0:
            return ""
        mantissa = round(value / 10 ** math.floor(math.log10(value) + 1e-9), 6)
        return f"{value:.3g}" if mantissa in shown else ""

    ax.yaxis.set_major_formatter(FuncFormatter(label))
    ax.yaxis.set_minor_formatter(FuncFormatter(label))


def style(ax, title, xlabel, ylabel, log=False):
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if log:
        log_scale(ax)
    ax.grid(True, which="major", alpha=0.3)
    ax.grid(True, which="minor", alpha=0.1)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=9)


def tokens_label(runs):
    return "tokens (DiLoCo: all workers)" if any(r.workers > 1 for r in runs) else "tokens"


def draw_loss(chart, ax, against_tokens):
    for i, run in enumerate(chart.runs):
        steps, loss = run.series(run.train, "loss")
        val_steps, val_loss = run.series(run.evals, "val_loss")
        x = run.tokens(steps) if against_tokens else steps
        val_x = run.tokens(val_steps) if against_tokens else val_steps
        ax.plot(x, loss, color=color(i), linewidth=1, alpha=0.75, label=chart.label(run, "train"))
        ax.plot(val_x, val_loss, color=color(i), linestyle="--", marker="o", markersize=4,
                label=chart.label(run, "val"))
        chart.count(run, "loss", len(loss))
        chart.count(run, "val_loss", len(val_loss))
        if not against_tokens:
            # Each DiLoCo sync as a faint line: the loss often moves there.
            syncs = sorted({step for step, _ in run.outer})
            for j, step in enumerate(syncs):
                ax.axvline(step, color=color(i), alpha=0.15, linewidth=0.8,
                           label=chart.label(run, "outer syncs") if j == 0 else None)
    if against_tokens:
        ax.xaxis.set_major_formatter(EngFormatter())
    style(ax, f"loss vs {'tokens' if against_tokens else 'step'}",
          tokens_label(chart.runs) if against_tokens else "step", "cross-entropy (nats)", log=True)


def draw_lr(chart, ax):
    for i, run in enumerate(chart.runs):
        steps, lr = run.series(run.train, "lr")
        ax.plot(steps, lr, color=color(i), label=chart.label(run, "lr") if len(chart.runs) > 1
                else None)
        chart.count(run, "lr", len(lr))
    style(ax, "learning rate", "step", "lr")


def draw_throughput(chart, ax):
    for i, run in enumerate(chart.runs):
        steps, rate = run.series(run.train, "tokens_per_s", scale=run.workers)
        ax.plot(steps, rate, color=color(i), linewidth=1,
                label=run.name if len(chart.runs) > 1 else None)
        chart.count(run, "tokens_per_s", len(rate))
    ax.yaxis.set_major_formatter(EngFormatter())
    ax.set_ylim(bottom=0)
    diloco = any(r.workers > 1 for r in chart.runs)
    style(ax, "throughput", "step", "tokens/s" + (" (DiLoCo: all workers)" if diloco else ""))


def draw_grad_norm(chart, ax):
    for i, run in enumerate(chart.runs):
        steps, norm = run.series(run.train, "grad_norm")
        ax.plot(steps, norm, color=color(i), linewidth=1,
                label=run.name if len(chart.runs) > 1 else None)
        chart.count(run, "grad_norm", len(norm))
    style(ax, "gradient norm (before clipping)", "step", "‖g‖", log=True)


def draw_outer_grad_norm(chart, ax):
    for i, run in enumerate(chart.runs):
        if not run.outer:
            continue  # a plain run beside a DiLoCo one (the overview)
        # Streaming DiLoCo: each fragment (a range of layers) has its own norm and curve.
        fragments = sorted({fragment for _, fragment in run.outer})
        points = 0
        for f, fragment in enumerate(fragments):
            lines = {at: line for at, line in run.outer.items() if at[1] == fragment}
            steps, norm = run.series(lines, "outer_grad_norm")
            what = f"fragment {fragment}" if len(fragments) > 1 else ""
            name = run.name if len(chart.runs) > 1 else ""
            ax.plot(steps, norm, color=color(i), marker="os^vDx*+"[f % 8], markersize=3,
                    alpha=1 - 0.5 * f / len(fragments), label=f"{name} {what}".strip() or None)
            points += len(norm)
        chart.count(run, "outer_grad_norm", points)
    style(ax, "DiLoCo outer gradient norm", "step", "‖anchor − mean θ‖", log=True)


def draw_worker_loss(chart, ax):
    for i, run in enumerate(chart.runs):
        steps, low, high, mean = [], [], [], []
        for (step, _), line in sorted(run.outer.items()):
            losses = [v for v in line.get("worker_loss", []) if v is not None and math.isfinite(v)]
            if losses:
                steps.append(step)
                low.append(min(losses))
                high.append(max(losses))
                mean.append(sum(losses) / len(losses))
        ax.fill_between(steps, low, high, color=color(i), alpha=0.25,
                        label=chart.label(run, "min–max over workers"))
        ax.plot(steps, mean, color=color(i), marker="o", markersize=3,
                label=chart.label(run, "mean of workers"))
        chart.count(run, "worker_loss", len(mean))
    style(ax, "workers' loss at each sync", "step", "cross-entropy (nats)")


def draw_sync_seconds(chart, ax):
    for i, run in enumerate(chart.runs):
        steps, total = run.series(run.outer, "outer_sync_s")
        hidden_steps, hidden = run.series(run.outer, "outer_hidden_s")
        ax.plot(steps, total, color=color(i), marker="o", markersize=3,
                label=chart.label(run, "sync (slowest rank)"))
        chart.count(run, "outer_sync_s", len(total))
        if any(h > 0 for h in hidden):
            ax.plot(hidden_steps, hidden, color=color(i), linestyle=":", marker="x", markersize=4,
                    label=chart.label(run, "hidden behind compute"))
            chart.count(run, "outer_hidden_s", len(hidden))
    ax.set_ylim(bottom=0)
    style(ax, "outer sync wall time", "step", "seconds")


def draw_consensus(chart, ax):
    for i, run in enumerate(chart.runs):
        steps, distance = run.series(run.outer, "consensus_distance")
        if distance:
            ax.plot(steps, distance, color=color(i), marker="o", markersize=3,
                    label=run.name if len(chart.runs) > 1 else None)
            chart.count(run, "consensus_distance", len(distance))
    if not ax.lines:
        ax.text(0.5, 0.5, "exact averaging: the workers agree after each sync\n"
                "(reported with gossip averaging or dropped workers)", ha="center",
                va="center", transform=ax.transAxes, fontsize=9, color="0.4")
        ax.set_xticks([])
        ax.set_yticks([])
    style(ax, "consensus distance", "step",
          r"mean $\Vert\theta_i - \bar\theta\Vert \,/\, \Vert\bar\theta\Vert$")


def slots_of(line, key):
    """The slot list `key` of an elastic sync line ([] when absent or not a list of numbers)."""
    value = line.get(key, [])
    return [v for v in value if is_number(v)] if isinstance(value, list) else []


def draw_members(chart, ax):
    """Elastic DiLoCo: the members of each sync, the slots that joined at it and those lost."""
    for i, run in enumerate(chart.runs):
        steps, members, joins, losses = [], [], ([], []), ([], [])
        for (step, _), line in sorted(run.outer.items()):
            if "members" not in line:
                continue
            steps.append(step)
            members.append(len(slots_of(line, "members")))
            for slots, points in ((slots_of(line, "joining"), joins),
                                  (slots_of(line, "dropped_workers"), losses)):
                for slot in slots:
                    points[0].append(step)
                    points[1].append(slot)
        ax.step(steps, members, where="post", color=color(i), marker="o", markersize=3,
                label=chart.label(run, "members"))
        ax.scatter(joins[0], joins[1], color=color(i), marker="^", s=40,
                   label=chart.label(run, "joined (its slot)"))
        ax.scatter(losses[0], losses[1], color=color(i), marker="x", s=40,
                   label=chart.label(run, "lost (its slot)"))
        chart.count(run, "members", len(members))
        chart.count(run, "joins", len(joins[0]))
        chart.count(run, "lost", len(losses[0]))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylim(bottom=-0.5)
    style(ax, "elastic group: members, joins, lost workers", "step", "workers / slot")


def draw_member_waits(chart, ax):
    """Elastic DiLoCo: each sync's wait for its members beside its whole wall time."""
    for i, run in enumerate(chart.runs):
        steps, wait = run.series(run.outer, "outer_wait_s")
        wall_steps, wall = run.series(run.outer, "outer_wall_s")
        ax.plot(wall_steps, wall, color=color(i), marker="o", markersize=3,
                label=chart.label(run, "whole sync (outer_wall_s)"))
        ax.plot(steps, wait, color=color(i), linestyle=":", marker="x", markersize=4,
                label=chart.label(run, "waiting for members (outer_wait_s)"))
        chart.count(run, "outer_wall_s", len(wall))
        chart.count(run, "outer_wait_s", len(wait))
    ax.set_ylim(bottom=0)
    style(ax, "elastic sync: wait for members", "step", "seconds")
def has_multiple_choice(run):
    return any("mc_acc" in line for line in run.evals.values())


def draw_multiple_choice(chart, ax):
    for i, run in enumerate(chart.runs):
        for key, what, line_style in (("mc_acc", "acc", "-"), ("mc_acc_norm", "acc_norm", "--")):
            steps, accuracy = run.series(run.evals, key)
            if accuracy:
                ax.plot(steps, accuracy, color=color(i), linestyle=line_style, marker="o",
                        markersize=4, label=chart.label(run, what))
                chart.count(run, key, len(accuracy))
    ax.set_ylim(0, 1)
    style(ax, "multiple-choice accuracy", "step", "fraction of examples right")


def write_charts(runs, out):
    os.makedirs(out, exist_ok=True)

    def save(chart, name, title):
        chart.save(os.path.join(out, name), title)

    chart = Chart(runs, 2, 2)
    draw_loss(chart, chart.axes[0], against_tokens=False)
    draw_loss(chart, chart.axes[1], against_tokens=True)
    save(chart, "loss.png", "loss")
    for name, title, draw in (("lr.png", "learning rate", draw_lr),
                              ("throughput.png", "throughput", draw_throughput),
                              ("grad_norm.png", "gradient norm", draw_grad_norm)):
        chart = Chart(runs, 1, 1)
        draw(chart, chart.axes[0])
        save(chart, name, title)
    diloco = [run for run in runs if run.outer]
    if diloco:
        chart = Chart(diloco, 4, 2)
        for ax, draw in zip(chart.axes, (draw_outer_grad_norm, draw_worker_loss,
                                         draw_sync_seconds, draw_consensus)):
            draw(chart, ax)
        save(chart, "outer.png", "DiLoCo outer steps")
    elastic = [run for run in diloco if any("members" in line for line in run.outer.values())]
    if elastic:
        chart = Chart(elastic, 2, 2)
        draw_members(chart, chart.axes[0])
        draw_member_waits(chart, chart.axes[1])
        save(chart, "elastic.png", "elastic DiLoCo group")
    choice = any(has_multiple_choice(run) for run in runs)
    if choice:
        chart = Chart(runs, 1, 1)
        draw_multiple_choice(chart, chart.axes[0])
        save(chart, "multiple_choice.png", "multiple choice")
    chart = Chart(runs, 5 + bool(diloco) + choice, 3)
    draw_loss(chart, chart.axes[0], against_tokens=False)
    draw_loss(chart, chart.axes[1], against_tokens=True)
    draw_lr(chart, chart.axes[2])
    draw_throughput(chart, chart.axes[3])
    draw_grad_norm(chart, chart.axes[4])
    if diloco:
        draw_outer_grad_norm(chart, chart.axes[5])
    if choice:
        draw_multiple_choice(chart, chart.axes[5 + bool(diloco)])
    save(chart, "overview.png", "overview")


class Arguments(argparse.ArgumentParser):
    def error(self, message):  # one `error:` line, as every Strata tool
        fail(f"{message} (usage: plot RUN_DIR... [--out DIR])", status=2)


def main():
    parser = Arguments(prog="plot", description="PNG charts of Strata runs' metrics.jsonl; "
                       "several runs are overlaid on each chart.")
    parser.add_argument("runs", nargs="+", metavar="RUN_DIR", help="a run directory (runs/NAME)")
    parser.add_argument("--out", metavar="DIR", help="where to write the PNGs (default: "
                        "RUN_DIR/plots for one run; needed for several)")
    args = parser.parse_args()
    for directory in args.runs:
        if not os.path.isdir(directory):
            fail(f"{directory}: no such run directory")
    if len(args.runs) > 1 and args.out is None:
        fail("several runs need --out DIR (where to write their comparison)", status=2)
    runs = []
    for directory, name in zip(args.runs, run_names(args.runs)):
        run = Run(directory.rstrip("/") or "/", name)
        read_metrics(run)
        read_config(run)
        runs.append(run)
    out = args.out if args.out is not None else os.path.join(args.runs[0], "plots")
    import_matplotlib()
    try:
        write_charts(runs, out)
    except OSError as problem:
        fail(f"{out}: cannot write the charts ({problem.strerror or problem})")


if __name__ == "__main__":
    main()
