#!/usr/bin/env python3
"""doc_citations.py on a small made-up repository: it reports exactly the broken citations (a
missing file or folder, a member no class or base declares, a function left only in a comment or a
string, an unknown class, a path valid only from another folder, a bare type or word the code
lacks, an unused allowlist entry) and accepts the rest
(paths from the document's folder, inherited members, namespaces, shell functions, allowlisted
outside names, URLs, globs, run outputs, fenced code). A check that silently passed everything
would pass the real docs too, so this is what says it checks at all."""

import subprocess
import sys
import tempfile
from pathlib import Path

SCRIPT = Path(__file__).with_name("doc_citations.py")

FILES = {
    "model/gpt.h": """
#pragma once
namespace strata {
namespace cuda {
class DeviceArena {};
}  // namespace cuda
template <typename Model>
class GptPasses {
 public:
  void backward_input(int slot);
  int moe_loss_ = 0;
};
class Gpt : public GptPasses<Gpt> {
 public:
  void forward();
};
void visit_fields();
// void stale_function();  a name left only in a comment
const char* kText = "void quoted_function();";
}  // namespace strata
""",
    "model/kernels/cpu/matmul.h": "#pragma once\n",
    "scripts/bench.sh": "#!/usr/bin/env bash\nhelper() {\n  true\n}\n",
    "tests/unit/bench_test.cpp": "",
    "tests/scripts/doc_citations_allowlist.txt": """# kind pattern reason
name  std::*        the standard library
name  MPI_Init()    MPI
path  unused/*.h    matches nothing: reported
""",
    "README.md": """# Made up

Good: `model/gpt.h`, `bash scripts/bench.sh`, `Gpt::forward`, `Gpt::backward_input` (from the
base), `GptPasses::moe_loss_`, `cuda::DeviceArena`, `visit_fields()`, `helper()`, `std::vector`,
`MPI_Init()`, `runs/demo/metrics.jsonl`, `configs/*.yaml`, `https://example.org/a.h`,
`<run>/config.yaml`, `model/kernels/`, `gpt.h`, `GptPasses`, `backward_input`, `bench_test`.

```sh
bash scripts/missing.sh   # fenced: not read
```

Broken: `scripts/chaos.sh`, `Gpt::head_backward`, `stale_function()`,
`quoted_function()`, `Trainer::run`, `kernels/cpu/matmul.h`, `model/kernels/cuda/`, `chaos.sh`,
a span over two lines `GptPasses::backward_weight(int
slot)`, `NoSuchType`, `gone_name`.
""",
    "model/README.md": "From here: `kernels/cpu/matmul.h`, `../model/gpt.h`.\n",
    "docs/GUIDE.md": "`scripts/fuzz.sh` and `tests/unit/model_recompute_test.cpp`.\n",
}

EXPECTED = """\
README.md:12: `scripts/chaos.sh`: no such file (from the root or ./)
README.md:12: `Gpt::head_backward`: `Gpt` (nor a base of it) declares no `head_backward`
README.md:12: `stale_function()`: no function `stale_function` is declared in the code
README.md:13: `quoted_function()`: no function `quoted_function` is declared in the code
README.md:13: `Trainer::run`: no class, enum, namespace or alias `Trainer` in the code
README.md:13: `kernels/cpu/matmul.h`: no such file (from the root or ./)
README.md:13: `model/kernels/cuda/`: no such folder (from the root or ./)
README.md:13: `chaos.sh`: no file of this name in the tree
README.md:14: `GptPasses::backward_weight(int slot)`: `GptPasses` (nor a base of it) declares no `backward_weight`
README.md:15: `NoSuchType`: no class, enum, alias, namespace or test `NoSuchType` in the code
README.md:15: `gone_name`: no such word in the code, scripts, configs or file names
docs/GUIDE.md:1: `scripts/fuzz.sh`: no such file (from the root or docs/)
docs/GUIDE.md:1: `tests/unit/model_recompute_test.cpp`: no such file (from the root or docs/)
tests/scripts/doc_citations_allowlist.txt:4: `unused/*.h`: matches no citation in the docs (remove the entry)
14 broken citation(s)
"""


def main():
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        for name, text in FILES.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text(text)
        result = subprocess.run([sys.executable, str(SCRIPT), "--root", str(root)],
                                capture_output=True, text=True)
    if result.returncode != 1 or result.stdout != EXPECTED:
        print(f"exit {result.returncode} (want 1); stderr: {result.stderr}")
        print("--- got\n" + result.stdout + "--- want\n" + EXPECTED, end="")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
