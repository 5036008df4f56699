#!/usr/bin/env bash
# The Kubernetes manifests of deploy/k8s: through the Kubernetes API schema
# (Debian's python3-kubernetes models; a structural check without them) and
# against the programs they run (tests/deploy/k8s_check.py).
source "$(dirname "$0")/lib.sh"
# Debian's python3, whose modules deploy/install-deps.sh installs.
python3() { if [ -x /usr/bin/python3 ]; then /usr/bin/python3 "$@"; else command python3 "$@"; fi; }
python3 -c 'import yaml' 2>/dev/null ||
  { echo "FAIL: python3 with yaml is missing: run deploy/install-deps.sh" >&2; exit 1; }
python3 -c 'import kubernetes.client' 2>/dev/null ||
  echo "note: python3-kubernetes is not installed: structural check only (deploy/install-deps.sh installs it)" >&2
python3 "$root/tests/deploy/k8s_check.py" "$root/deploy/k8s" "$MKS_COLLECTOR_BIN" "$MKS_AGENT_BIN" \
  "$root/deploy/local/mkscope-node-agent" "$MKS_BENCH_BIN" || fail "deploy/k8s does not check"
