#!/usr/bin/env bash
# Install what mkscope builds and runs with, from Debian packages.
# Idempotent: packages already present are not fetched again.  CUDA, NCCL and
# CUPTI come from the machine's CUDA install (/usr/local/cuda), not from here.
#
#   --with-promtool  also unpack Prometheus' promtool (from Debian's
#                    prometheus package, 19 MB, not installed: no service, no
#                    user) into /opt/mkscope-tools, for the test that checks
#                    deploy/prometheus/mkscope-alerts.yaml with it
set -euo pipefail

with_promtool=0
for a in "$@"; do
  case "$a" in
    --with-promtool) with_promtool=1 ;;
    -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "install-deps: unknown option '$a' (--with-promtool)" >&2; exit 2 ;;
  esac
done

install_promtool() {
  local dest=/opt/mkscope-tools
  if command -v promtool >/dev/null || [ -x "$dest/usr/bin/promtool" ]; then
    echo "install-deps: promtool present"
    return
  fi
  local tmp
  tmp=$(mktemp -d)
  (cd "$tmp" && apt-get download -qq prometheus) &&
    dpkg-deb --fsys-tarfile "$tmp"/prometheus_*.deb | tar -x -C "$tmp" ./usr/bin/promtool &&
    install -D -m 755 "$tmp/usr/bin/promtool" "$dest/usr/bin/promtool"
  rm -rf "$tmp"
  echo "install-deps: promtool in $dest/usr/bin"
}

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
  curl                            # tests read /metrics and /healthz
  python3-yaml                    # tests parse the Kubernetes manifests and alert rules
  python3-kubernetes              # its API models: the schema the manifests are checked against
)

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#pkgs[@]} packages present"
  [ "$with_promtool" = 0 ] || install_promtool
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
[ "$with_promtool" = 0 ] || install_promtool
