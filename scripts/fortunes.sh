#!/usr/bin/env bash
# Lists the plain-text fortune files of Debian's `fortunes` package (about 2.6 MB of English):
# regular files only, without the .dat indexes and the .u8 symlinks.
set -euo pipefail
find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' | sort
