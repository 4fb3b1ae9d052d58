#!/usr/bin/env python3
"""Docs cite only what exists: the repository paths and the code's names that the Markdown docs put
in backticks must be in the tree, so that a rename or a removal cannot leave a doc behind.

Documents: README.md, docs/*.md and every folder's README.md. Fenced code blocks are left out
(commands and sample output); inline code spans are read, over line breaks as Markdown does.

Paths. Each whitespace-separated word of a span (after `key=`, surrounding quotes, brackets and
trailing punctuation are taken off) that contains a `/` and ends in a file extension (`.h`, `.md`,
`.yaml`, ...) must name a file or folder of the tree, from the repository root or from the
document's own folder (`kernels/cpu/matmul.h` in model/README.md). A word that ends in `/` and has
a `/` before that (`model/kernels/cuda/`) must name a folder the same way. A bare file name with a
source extension (.h .cpp .cu .cuh .py .sh .cmake: `trainer.cpp` in a table of train/) must be the
name of some file of the tree. Not checked:
  - URLs (`://`), absolute and home paths (`/proc/self/exe`, `~/.cache/...`);
  - placeholders and globs: a word with any of  < > * ? [ ] { } $ …  or `...`;
  - what a build or a run creates: words under build/, build-*/, runs/, .gpu/, .venv*/.
"The tree" is what git tracks plus new files it does not ignore (the filesystem outside git).

Names. A span that is a qualified name (`Gpt::backward_input`, `cuda::DeviceArena`,
`Gpt<T>::forward`, `Trainer::State::load_state`, optionally with a call's parentheses) or a call
(`visit_fields()`, `slot_for(layer)`) must name something the code defines, read from the C++
sources (.h .cpp .cu .cuh; comments and string literals removed), the Python and shell scripts and
the CMake files, by grep-level rules rather than a C++ parser:
  - a qualifier `Q` must be a class/struct/union/enum, a namespace, a type alias or a template
    parameter of that name somewhere;
  - when the last qualifier is a class (or enum), the member must be declared in its body (a
    function, a data member, a nested type or an enumerator), in the body of a base class named in
    its base clause (followed transitively: `Gpt::moe_loss` may come from `GptPasses`), or defined
    out of line as `Q::member` anywhere. Classes of the same name in different namespaces count
    together;
  - when it is a namespace, an alias or a template parameter (`Ops::Reservation`), the member must
    be declared somewhere in the code base;
  - a call's name must be declared somewhere: a C++ function or macro, a Python `def`, a shell
    function or a CMake function.
"Declared" means a declaration or definition (`Type name(`, `Type name;`, `Type name = ...`,
`class name`, `#define name`, ...), not a mere use, so that a name left only at its call sites or
in comments does not pass. Two looser rules cover the spans that are one bare word:
  - a CamelCase word of two or more parts (`GptPasses`, `CudaOps<T>`) must be a class, enum,
    alias, namespace or declared name, or a GoogleTest test or suite (`TEST(Suite, Name)`);
  - a snake_case word (`slot_for`, `micro_batch`) must occur as a word somewhere in the C++ code
    (comments left out, strings kept: config keys and metric names are strings), the scripts, the
    CMake files and the YAML configs, or be the stem of a file (`config_test`). Config keys and
    metric fields are such words too, so this only catches a name gone from everywhere.

Outside names (the standard library, MPI, CUDA, NCCL, SentencePiece, PyTorch, ...) and the few
exceptions to the path rules are listed in doc_citations_allowlist.txt beside this script, one
pattern per line with its reason; an entry that matches no citation is itself reported, so the list
cannot outgrow the docs.

Prints `FILE:LINE: `token`: reason` for each broken citation and exits 1 if there is any. Takes
about 3 s on a 2-core machine; needs Python 3 only (and git, when the tree is a git checkout).
`--root DIR` checks another repository (doc_citations_test.py's made-up one).
"""

import fnmatch
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # another with --root (the script's own test)
ALLOWLIST_PATH = "tests/scripts/doc_citations_allowlist.txt"

OUTPUT_PREFIXES = ("build/", "build-", "runs/", ".gpu/", ".venv")
PLACEHOLDER_CHARS = set("<>*?[]{}$…")
CPP_SUFFIXES = (".h", ".cpp", ".cu", ".cuh")
KEYWORDS = {
    "return", "co_return", "co_await", "co_yield", "else", "throw", "new", "delete", "case",
    "sizeof", "alignof", "typeid", "decltype", "do", "and", "or", "not", "goto", "if", "for",
    "while", "switch", "catch", "noexcept", "static_assert", "requires", "operator", "const",
    "constexpr", "consteval", "typename", "using", "namespace", "public", "private", "protected",
}


def tree_files():
    """The repository's files: tracked ones and untracked ones git does not ignore."""
    try:
        out = subprocess.run(
            ["git", "-C", str(ROOT), "ls-files", "--cached", "--others", "--exclude-standard"],
            check=True, capture_output=True, text=True).stdout
        files = {line for line in out.splitlines() if line and (ROOT / line).exists()}
    except (OSError, subprocess.CalledProcessError):
        files = {str(p.relative_to(ROOT)) for p in ROOT.rglob("*")
                 if p.is_file() and not str(p.relative_to(ROOT)).startswith(OUTPUT_PREFIXES)}
    folders = set()
    for f in files:
        parts = f.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            folders.add("/".join(parts[:i]))
    return files, folders


# ---- Markdown: the inline code spans of each document, with the line each one starts on.

FENCE = re.compile(r"^\s*(```+|~~~+)")
SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.S)


def code_spans(text):
    lines = text.split("\n")
    block, block_start, fence = [], 0, None

    def flush():
        joined = "\n".join(block)
        for m in SPAN.finditer(joined):
            content = m.group(2).replace("\n", " ")
            if content.startswith(" ") and content.endswith(" ") and content.strip():
                content = content[1:-1]
            yield block_start + joined.count("\n", 0, m.start()) + 1, content

    for number, line in enumerate(lines):
        opening = FENCE.match(line)
        if fence:
            if opening and opening.group(1)[0] == fence[0] and len(opening.group(1)) >= len(fence):
                fence = None
            continue
        if opening:
            yield from flush()
            block, fence = [], opening.group(1)
            continue
        if not line.strip():
            yield from flush()
            block = []
            continue
        if not block:
            block_start = number
        block.append(line)
    yield from flush()


# ---- Paths.

EXTENSION = re.compile(r"\.[A-Za-z][A-Za-z0-9]*$")
SOURCE_NAME = re.compile(r"[\w.+-]+\.(?:h|cpp|cu|cuh|py|sh|cmake)")


def path_words(span):
    """(word, kind) for each path the span cites: kind is "file", "folder" or "name" (a bare file
    name)."""
    for word in span.split():
        word = word.rsplit("=", 1)[-1]
        word = word.strip("\"'`()[],;:")
        if "/" not in word:
            if SOURCE_NAME.fullmatch(word):
                yield word, "name"
            continue
        if "://" in word or word.startswith(("/", "~")):
            continue
        if any(c in PLACEHOLDER_CHARS for c in word) or "..." in word:
            continue
        if word.startswith("./"):
            word = word[2:]
        if word.startswith(OUTPUT_PREFIXES):
            continue
        if EXTENSION.search(word):
            yield word, "file"
        elif word.endswith("/") and "/" in word[:-1]:
            yield word.rstrip("/"), "folder"


def path_exists(word, kind, doc_dir, files, folders, names):
    if kind == "name":
        return word in names
    folder_only = kind == "folder"
    for base in ("", doc_dir):
        candidate = os.path.normpath(os.path.join(base, word)) if base else os.path.normpath(word)
        if candidate.startswith(".."):
            continue
        if candidate in folders or (not folder_only and candidate in files):
            return True
    return False


# ---- The code's names.

# Comments, raw strings, strings and char literals (a `'` after a word character is a digit
# separator, as in 4'000'000, and opens nothing).
LITERAL_OR_COMMENT = re.compile(
    r"//[^\n]*|/\*.*?\*/|\bR\"([^(\s]*)\(.*?\)\1\"|\"(?:\\.|[^\"\\\n])*\""
    r"|(?<!\w)'(?:\\.|[^'\\\n])*'", re.S)


def strip_cpp(text, keep_strings=False):
    """Comments (and, unless kept, string and char literals) blanked out; line breaks kept."""
    def blank(m):
        if not m.group(0).startswith("/"):
            return m.group(0) if keep_strings else '""' + "\n" * m.group(0).count("\n")
        return "\n" * m.group(0).count("\n")
    return LITERAL_OR_COMMENT.sub(blank, text)


def brace_body(text, open_index):
    depth = 0
    for j in range(open_index, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[open_index + 1:j]
    return text[open_index + 1:]


IDENT = r"[A-Za-z_]\w*"
CLASS_DEF = re.compile(
    r"\b(class|struct|union)\s+(?:\[\[[^\]]*\]\]\s*)?(?:alignas\([^)]*\)\s*)?((?:" + IDENT +
    r"::)*" + IDENT + r")\s*(?:<[^;{}]*?>\s*)?(?:final\s*)?(:(?!:)[^;{}]*)?\{")
ENUM_DEF = re.compile(r"\benum\s+(?:class\s+|struct\s+)?(" + IDENT + r")\s*(?::\s*[\w:\s]+)?\{")
NAMESPACE = re.compile(r"\bnamespace\s+([\w:]+)\s*\{")
ALIAS = re.compile(r"\busing\s+(" + IDENT + r")\s*=|\btypedef\b[^;]*?\b(" + IDENT + r")\s*;")
TEMPLATE_PARAMS = re.compile(r"\btemplate\s*<([^;{}]*?)>\s*(?:requires|class|struct|using|[\w:]"
                             r"|$)", re.M)
TEMPLATE_PARAM = re.compile(r"(?:^|,)\s*[\w:]+\s+(?:\.\.\.\s*)?(" + IDENT + r")\s*(?:=[^,]*)?$")
MACRO = re.compile(r"^\s*#\s*define\s+(" + IDENT + r")", re.M)
# A name followed by `(` or by `;`, `=`, `{`, `[`, `,` or a line's end, after a type-like token:
# a word (not a keyword), `>`, `*`, `&`, `]`, `::` or `~` (out-of-line definitions, destructors).
DECL_AFTER = re.compile(
    r"(" + IDENT + r"|>|\*|&|\]|::|~)\s*(" + IDENT + r")\s*(\(|;|=|\{|\[|,|:(?!:)|$)", re.M)
# A function whose return type ends the line before: `std::vector<int>\nname(...)`.
DECL_NEXT_LINE = re.compile(r"(?:\w|>|\*|&)\s*\n\s*(" + IDENT + r")\s*\(")
TYPE_NAME = re.compile(r"\b(?:class|struct|union|enum|concept)\s+(?:class\s+)?(" + IDENT + r")")
ENUMERATOR = re.compile(r"(?:^|,)\s*(" + IDENT + r")\s*(?:=[^,]*)?(?=,|$)")
PY_DEF = re.compile(r"^\s*(?:def|class)\s+(" + IDENT + r")|^(" + IDENT + r")\s*=", re.M)
SH_FUNCTION = re.compile(r"^\s*(?:function\s+)?(" + IDENT + r")\s*\(\)", re.M)
GTEST = re.compile(r"\b(?:TYPED_)?TEST(?:_F|_P)?\s*\(\s*(" + IDENT + r")\s*,\s*(" + IDENT + r")")
WORD = re.compile(r"[A-Za-z_]\w*")
CMAKE_FUNCTION = re.compile(r"^\s*(?:function|macro)\s*\(\s*(" + IDENT + r")", re.M | re.I)


def declared_in(text):
    names = set()
    for m in DECL_AFTER.finditer(text):
        before, name = m.group(1), m.group(2)
        if before in KEYWORDS or name in KEYWORDS:
            continue
        names.add(name)
    names.update(m.group(1) for m in DECL_NEXT_LINE.finditer(text))
    names.update(m.group(1) for m in TYPE_NAME.finditer(text))
    names.update(m.group(1) or m.group(2) for m in ALIAS.finditer(text))
    names.update(m.group(1) for m in MACRO.finditer(text))
    return names


class Code:
    """What the sources declare: classes with their bodies and bases, enums, namespaces, aliases,
    template parameters and every declared name."""

    def __init__(self, files):
        self.classes = {}  # name -> [(declared names in the body, [base names])]
        self.namespaces, self.aliases, self.template_params = set(), set(), set()
        self.declared = set()
        self.words = {Path(f).name.split(".")[0] for f in files}  # every word of the code, stems
        self.cpp = []
        for f in sorted(files):
            path = ROOT / f
            name = path.name
            if f.endswith(CPP_SUFFIXES):
                raw = path.read_text(errors="replace")
                text = strip_cpp(raw)
                self.cpp.append(text)
                self.read_cpp(text)
                for suite, test in GTEST.findall(raw):
                    self.declared.update((suite, test))
                self.words.update(WORD.findall(strip_cpp(raw, keep_strings=True)))
                continue
            if f.endswith(".py"):
                text = path.read_text(errors="replace")
                self.declared.update(a or b for a, b in PY_DEF.findall(text))
            elif f.endswith(".sh") or name == "run" and f.startswith(".ci/"):
                text = path.read_text(errors="replace")
                self.declared.update(SH_FUNCTION.findall(text))
            elif name == "CMakeLists.txt" or f.endswith(".cmake"):
                text = path.read_text(errors="replace")
                self.declared.update(CMAKE_FUNCTION.findall(text))
            elif f.endswith(".yaml"):
                text = path.read_text(errors="replace")
            else:
                continue
            self.words.update(WORD.findall(text))
        self.all_cpp = "\n".join(self.cpp)

    def read_cpp(self, text):
        self.declared |= declared_in(text)
        for m in CLASS_DEF.finditer(text):
            body = brace_body(text, m.end() - 1)
            bases = []
            for base in (m.group(3) or ":")[1:].split(","):
                base = re.sub(r"<.*", "", base)
                words = re.findall(IDENT, base)
                words = [w for w in words if w not in ("public", "private", "protected", "virtual")]
                if words:
                    bases.append(words[-1])
            # `struct Trainer::State {` defines State (nested classes count by their own name).
            name = m.group(2).split("::")[-1]
            self.classes.setdefault(name, []).append((declared_in(body), bases))
        for m in ENUM_DEF.finditer(text):
            body = brace_body(text, m.end() - 1)
            names = {e.group(1) for e in ENUMERATOR.finditer(" ".join(body.split()))}
            self.classes.setdefault(m.group(1), []).append((names, []))
            self.declared |= names
        for m in NAMESPACE.finditer(text):
            self.namespaces.update(m.group(1).split("::"))
        for m in ALIAS.finditer(text):
            self.aliases.add(m.group(1) or m.group(2))
        for m in TEMPLATE_PARAMS.finditer(text):
            for param in m.group(1).split(","):
                p = TEMPLATE_PARAM.search("," + param.strip())
                if p:
                    self.template_params.add(p.group(1))

    def member_of(self, owner, member, seen=None):
        seen = seen if seen is not None else set()
        if owner in seen:
            return False
        seen.add(owner)
        for names, bases in self.classes.get(owner, []):
            if member in names or any(self.member_of(b, member, seen) for b in bases):
                return True
        return False

    def defined_out_of_line(self, owner, member):
        pattern = (r"\b" + re.escape(owner) + r"\s*(?:<[^<>;{}]*>)?\s*::\s*" + re.escape(member) +
                   r"\b")
        return re.search(pattern, self.all_cpp) is not None

    def kind(self, name):
        if name in self.classes:
            return "class"
        if name in self.namespaces:
            return "namespace"
        if name in self.aliases or name in self.template_params:
            return "alias"
        return None


TYPE_WORD = re.compile(r"[A-Z][a-z0-9]+(?:[A-Z][A-Za-z0-9]*)+(?:<[^<>]*>)?")
SNAKE_WORD = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)+")
QUALIFIED = re.compile(
    r"^((?:" + IDENT + r"(?:<[^<>]*>)?::)+~?" + IDENT + r")(?:<[^<>]*>)?(\(.*\))?$")
CALL = re.compile(r"^(" + IDENT + r")\(.*\)$")


def check_name(span, code):
    """None when the span is no name citation or names what the code has; else the reason."""
    m = QUALIFIED.match(span)
    if m:
        parts = [re.sub(r"<.*", "", p) for p in m.group(1).split("::")]
        for q in parts[:-1]:
            if code.kind(q) is None:
                return f"no class, enum, namespace or alias `{q}` in the code"
        owner, member = parts[-2], parts[-1].lstrip("~")
        if code.kind(owner) == "class":
            if (code.member_of(owner, member) or code.defined_out_of_line(owner, member)
                    or member == owner):
                return None
            return f"`{owner}` (nor a base of it) declares no `{member}`"
        if member in code.declared or code.kind(member):
            return None
        return f"no `{member}` is declared in the code"
    m = CALL.match(span)
    if m:
        if m.group(1) in code.declared:
            return None
        return f"no function `{m.group(1)}` is declared in the code"
    if TYPE_WORD.fullmatch(span):
        name = re.sub(r"<.*", "", span)
        if code.kind(name) or name in code.declared:
            return None
        return f"no class, enum, alias, namespace or test `{name}` in the code"
    if SNAKE_WORD.fullmatch(span):
        if span in code.words:
            return None
        return "no such word in the code, scripts, configs or file names"
    return None


def is_name_citation(span):
    return bool(QUALIFIED.match(span) or CALL.match(span) or TYPE_WORD.fullmatch(span)
                or SNAKE_WORD.fullmatch(span))


# ---- The allowlist.

def read_allowlist():
    entries = []
    allowlist = ROOT / ALLOWLIST_PATH
    if not allowlist.exists():
        return entries
    for number, line in enumerate(allowlist.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        fields = line.split(None, 2)
        if len(fields) < 3 or fields[0] not in ("path", "name"):
            sys.exit(f"{ALLOWLIST_PATH}:{number}: expected `path|name PATTERN REASON`")
        entries.append({"kind": fields[0], "pattern": fields[1], "line": number, "used": False})
    return entries


def allowed(entries, kind, token):
    hit = False
    for e in entries:
        if e["kind"] == kind and fnmatch.fnmatchcase(token, e["pattern"]):
            e["used"] = hit = True
    return hit


def documents(files):
    docs = ["README.md"] + sorted(f for f in files if f.startswith("docs/") and f.endswith(".md")
                                  and f.count("/") == 1)
    docs += sorted(f for f in files if f.endswith("/README.md"))
    return [d for d in docs if d in files]


def main(argv):
    global ROOT
    if len(argv) == 2 and argv[0] == "--root":
        ROOT = Path(argv[1]).resolve()
    elif argv:
        sys.exit("usage: doc_citations.py [--root REPOSITORY]")
    files, folders = tree_files()
    names = {os.path.basename(f) for f in files}
    code = Code(files)
    entries = read_allowlist()
    broken = 0
    for doc in documents(files):
        doc_dir = os.path.dirname(doc)
        for line, span in code_spans((ROOT / doc).read_text()):
            for word, kind in path_words(span):
                if path_exists(word, kind, doc_dir, files, folders, names):
                    continue
                shown = word + ("/" if kind == "folder" else "")
                if allowed(entries, "path", shown):
                    continue
                if kind == "name":
                    print(f"{doc}:{line}: `{shown}`: no file of this name in the tree")
                else:
                    print(f"{doc}:{line}: `{shown}`: no such {kind} (from the root or "
                          f"{doc_dir or '.'}/)")
                broken += 1
            span = span.strip()
            if not is_name_citation(span):
                continue
            reason = check_name(span, code)
            if reason and not allowed(entries, "name", span):
                print(f"{doc}:{line}: `{span}`: {reason}")
                broken += 1
    for e in entries:
        if not e["used"]:
            print(f"{ALLOWLIST_PATH}:{e['line']}: `{e['pattern']}`: matches no citation in the "
                  "docs (remove the entry)")
            broken += 1
    if broken:
        print(f"{broken} broken citation(s)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
