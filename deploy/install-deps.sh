#!/usr/bin/env bash
# Install what mkscope builds and runs with, from Debian packages.
# Idempotent: packages already present are not fetched again.  CUDA, NCCL and
# CUPTI come from the machine's CUDA install (/usr/local/cuda), not from here.
set -euo pipefail

pkgs=(
  build-essential cmake pkg-config git
  clang llvm                      # BPF target for monitors
  libbpf-dev libelf-dev zlib1g-dev
  libnanomsg-dev libucx-dev
  libprotobuf-c-dev protobuf-c-compiler
  libcmocka-dev
  libsqlite3-dev                  # collector store
  libjansson-dev                  # JSON output and ground-truth files
  libmicrohttpd-dev               # Prometheus metrics endpoint
  libsodium-dev                   # message authentication
  procps psmisc                   # pgrep/pkill for the demo's clean-up checks
  jq                              # integration tests read the CLI's JSON answers
  patch                           # the MPK hook sites onto a Mirage checkout (runtimes/mpk)
)

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#pkgs[@]} packages present"
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing ${missing[*]}; run as root (or install them) and retry" >&2
  exit 1
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
