#!/usr/bin/env bash
# Makes the project's Python test environment, .venv-test/, with what the `python` tests need from
# PyPI (TensorBoard, whose own reader checks `train`'s event files); a no-op when it is already
# there. Run by scripts/test.sh; needs Debian's python3-venv (scripts/setup.sh installs it).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.venv-test
packages=(tensorboard)
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import tensorboard" 2>/dev/null; then
  exit 0
fi
echo "setup_python: installing ${packages[*]} into $venv"
python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input "${packages[@]}" \
  >/tmp/strata-pip.log 2>&1 || { tail -20 /tmp/strata-pip.log; exit 1; }
