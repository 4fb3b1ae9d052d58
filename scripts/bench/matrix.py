"""Running a benchmark's matrix: building the tools it needs, the fortunes corpus, a scratch
folder, the line that dates a result, and one `train` run per configuration under mpirun with
`--set` overrides. The benchmarks say which runs; this module says how a run is started."""
import datetime
import os
import shutil
import subprocess
import sys
import tempfile


def build(build_dir, targets):
    """The targets built in `build_dir` (configured first when it holds no build)."""
    if not os.path.exists(os.path.join(build_dir, "build.ninja")):
        subprocess.run(["cmake", "-S", ".", "-B", build_dir, "-G", "Ninja",
                        "-DCMAKE_BUILD_TYPE=Release"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["ninja", "-C", build_dir, *targets], check=True, stdout=subprocess.DEVNULL)


def prepare_fortunes(build_dir):
    """data/fortunes, tokenized by `build_dir`'s tokenize unless it is there
    (scripts/prepare_fortunes.sh)."""
    env = dict(os.environ, STRATA_BIN_DIR=os.path.join(build_dir, "bin"))
    subprocess.run(["bash", "scripts/prepare_fortunes.sh"], check=True, env=env)


def allow_mpirun_as_root():
    os.environ.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")


class Scratch:
    """A temporary folder for the runs, removed on exit (`with Scratch() as work:`)."""

    def __enter__(self):
        self.path = tempfile.mkdtemp()
        return self.path

    def __exit__(self, *exc):
        shutil.rmtree(self.path, ignore_errors=True)


def output(args):
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout.strip()


def cpu_model():
    for line in output(["lscpu"]).splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return ""


def stamp():
    """Time and commit: `2026-01-01T12:00Z commit abc1234`."""
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%MZ")
    return f"{now} commit {output(['git', 'rev-parse', '--short', 'HEAD'])}"


def header(settings):
    """The line that dates a result: time, commit, CPU, every core of the host and the
    benchmark's own settings."""
    return f"# {stamp()} cpu '{cpu_model()}' nproc {os.cpu_count()} {settings}"


def load():
    """The 1, 5 and 15 minute load averages."""
    with open("/proc/loadavg") as file:
        return " ".join(file.read().split()[:3])


def sets(overrides):
    """`--set` arguments for key=value strings."""
    return [arg for override in overrides for arg in ("--set", override)]


def train(build_dir, ranks, overrides, name, work, config="configs/fortunes.yaml",
          mpirun=("--oversubscribe",), fail="exit", extra=()):
    """Runs `train CONFIG --set run.name=NAME --set run.dir=WORK --set OVERRIDES... EXTRA...` on
    `ranks` ranks, its output in WORK/NAME.log; returns the run's metrics.jsonl. On failure,
    fail="exit" prints the log to stderr and stops the benchmark; fail="return" returns None."""
    log = os.path.join(work, f"{name}.log")
    args = ["mpirun", *mpirun, "-np", str(ranks), os.path.join(build_dir, "bin", "train"), config,
            *sets([f"run.name={name}", f"run.dir={work}", *overrides]), *extra]
    with open(log, "w") as out:
        status = subprocess.run(args, stdout=out, stderr=subprocess.STDOUT).returncode
    if status != 0:
        if fail == "return":
            return None
        with open(log) as text:
            sys.stderr.write(text.read())
        sys.exit(1)
    return os.path.join(work, name, "metrics.jsonl")


def first_error(log):
    """The first line of a run's log that holds "error:"."""
    with open(log) as text:
        return next((line.rstrip("\n") for line in text if "error:" in line), "")
