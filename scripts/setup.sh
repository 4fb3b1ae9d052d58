#!/usr/bin/env bash
# Installs Strata's dependencies (Debian 12 packages) when any is missing; a no-op otherwise.
# Used by both README commands and by CI. Extra package names may be passed as arguments.
# python3-venv lets scripts/setup_python.sh make the Python test environment (opt-in: test.sh);
# python3-matplotlib and python3-yaml are for the `plot` tool (tools/plot.py, Debian's python3).
# The CPU GEMMs load oneDNN (libdnnl2) or else the OpenMP build of OpenBLAS at run time
# (model/kernels/cpu/blas.h). zlib1g-dev and libzstd-dev: `tokenize` reads .gz and .zst inputs
# (data/compressed_stream.h). libssl-dev: OpenSSL's libcrypto computes SHA-256 (data/sha256.h).
# libxxhash-dev: XXH3-64, the checkpoints' byte checksum (train/checkpoint/checkpoint_format.h)
# and the token shards' chunk checksums (data/shard_checksums.h).
# nlohmann-json3-dev: the JSON parser behind data/json_value.h.
# libhiredis-dev and redis-server: elastic DiLoCo's rendezvous store (parallel/elastic/redis_store.h)
# and its tests; libgloo-dev: Gloo, the collectives between elastic DiLoCo's worker jobs.
# libzmq3-dev and cppzmq-dev: ZeroMQ and its C++ header, the requests between SWARM's peers
# (parallel/swarm/swarm_transport.h).
# ccache: the compiler cache of every build (scripts/compiler_cache.sh).
# iproute2 and iptables: scripts/wan.sh (an emulated WAN between namespaces: ip, tc; iptables for
# its delay line on kernels without tc netem).
set -euo pipefail
packages=(build-essential cmake ninja-build pkg-config libyaml-cpp-dev libhdf5-dev
          libsentencepiece-dev zlib1g-dev libzstd-dev libssl-dev libxxhash-dev nlohmann-json3-dev
          libopenmpi-dev openmpi-bin libopenblas0-openmp libdnnl2 libgtest-dev fortunes python3-venv
          python3-matplotlib python3-yaml libhiredis-dev redis-server libgloo-dev libzmq3-dev cppzmq-dev
          iproute2 iptables ccache
          "$@")
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$package")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" \
    >/tmp/strata-apt.log || { tail -20 /tmp/strata-apt.log; exit 1; }
fi
