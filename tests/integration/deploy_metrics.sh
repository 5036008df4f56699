#!/usr/bin/env bash
# The Grafana dashboard and the Prometheus alert rules in deploy/ against a
# live collector: 2 CPU megakernel ranks with their agents and a trigger that
# fires, so that every metric family has samples; then every expression of
# deploy/grafana/mkscope-dashboard.json and deploy/prometheus/mkscope-alerts.yaml
# must name served metrics with labels they carry (tests/deploy/metrics_refs.py),
# /healthz answers ok, and `promtool check rules` passes where promtool is
# installed (deploy/install-deps.sh --with-promtool; skipped with a message
# otherwise).
source "$(dirname "$0")/lib.sh"
# Debian's python3, whose modules deploy/install-deps.sh installs.
python3() { if [ -x /usr/bin/python3 ]; then /usr/bin/python3 "$@"; else command python3 "$@"; fi; }
python3 -c 'import yaml' 2>/dev/null ||
  { echo "FAIL: python3 with yaml is missing: run deploy/install-deps.sh" >&2; exit 1; }

job="dm$$"
start "$dir/collector.log" "$MKS_COLLECTOR_BIN" --ingest "ipc://$dir/ingest" \
  --survey "ipc://$dir/survey" --cli "ipc://$dir/cli" --metrics 127.0.0.1:0 --db "$dir/store.db" \
  --ucx-port off
port=""
for _ in $(seq 50); do
  port=$(sed -n 's|.*metrics on http://127.0.0.1:\([0-9]*\)/metrics.*|\1|p' "$dir/collector.log")
  [ -n "$port" ] && break
  sleep 0.1
done
[ -n "$port" ] || fail "collector did not say where it serves metrics"
cli trigger add 'p99(step) > 1us' >/dev/null
for r in 0 1; do
  start "$dir/agent-$r.log" "$MKS_AGENT_BIN" --job "$job" --rank "$r" \
    --collector "ipc://$dir/ingest" --survey "ipc://$dir/survey" --epoch-ms 50 --exit-with-app
done
bench_argv "$job" --ranks 2 --steps 600 --step-interval-us 3000 -q
start "$dir/bench.log" "${bench_cmd[@]}"
bench_pid=$started

get() { curl -fsS --max-time 5 "http://127.0.0.1:$port$1"; }
# Until the trigger has fired and remote waits were counted.
for _ in $(seq 150); do
  get /metrics >"$dir/metrics.txt" || true
  grep -q '^mkscope_escalations_total{.*} [1-9]' "$dir/metrics.txt" &&
    grep -q '^mkscope_remote_wait_seconds_count{.*} [1-9]' "$dir/metrics.txt" && break
  sleep 0.2
done
grep -q '^mkscope_escalations_total{.*} [1-9]' "$dir/metrics.txt" || fail "the trigger never escalated"
python3 "$root/tests/deploy/metrics_refs.py" "$dir/metrics.txt" \
  "$root/deploy/grafana/mkscope-dashboard.json" "$root/deploy/prometheus/mkscope-alerts.yaml" ||
  fail "the dashboard or the alert rules use metrics the collector does not serve"
# The check itself refuses a metric the collector does not serve and a
# label its metric lacks.
sed 's/mkscope_tasks_total/mkscope_task_total/' "$root/deploy/grafana/mkscope-dashboard.json" \
  >"$dir/bad1.json"
sed 's/sum by (class) (rate(mkscope_tasks_total/sum by (kind) (rate(mkscope_tasks_total/' \
  "$root/deploy/grafana/mkscope-dashboard.json" >"$dir/bad2.json"
for b in bad1 bad2; do
  ! python3 "$root/tests/deploy/metrics_refs.py" "$dir/metrics.txt" "$dir/$b.json" \
    "$root/deploy/prometheus/mkscope-alerts.yaml" >"$dir/$b.out" 2>&1 ||
    fail "metrics_refs.py accepted $b.json"
done
grep -q "mkscope_task_total is not served" "$dir/bad1.out" || fail "bad1: $(cat "$dir/bad1.out")"
grep -q "label 'kind'" "$dir/bad2.out" || fail "bad2: $(cat "$dir/bad2.out")"
[ "$(get /healthz)" = ok ] || fail "/healthz does not answer ok"

promtool=${MKS_PROMTOOL:-$(command -v promtool || true)}
[ -n "$promtool" ] || [ ! -x /opt/mkscope-tools/usr/bin/promtool ] || promtool=/opt/mkscope-tools/usr/bin/promtool
if [ -n "$promtool" ]; then
  "$promtool" check rules "$root/deploy/prometheus/mkscope-alerts.yaml" ||
    fail "promtool check rules failed"
  echo "promtool: rules checked"
else
  echo "note: promtool not installed (deploy/install-deps.sh --with-promtool): alert rules not" \
       "checked by promtool" >&2
fi
kill -TERM -- "-$bench_pid" 2>/dev/null || true
echo "ok: dashboard and alert rules match the live collector's metrics"
