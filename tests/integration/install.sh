#!/usr/bin/env bash
# What a new user of an installed mkscope gets: `cmake --install` of this
# build into a fresh prefix puts every program, the launchers, the monitors,
# the units (naming the prefix), the monitor headers, the man pages, the bash
# completion and the dashboards in place; every program answers --help; the
# man pages render without a warning; the completion completes commands and
# a command's options; every example of `mkscope-launch --help` runs as
# written with only the prefix's bin on PATH (the --live one until it is
# interrupted, with the CLI's top beside it), and leaves no process and no
# shared memory behind; `cpack -G DEB` packages it where cpack runs.
source "$(dirname "$0")/lib.sh"
[ -n "${MKS_BUILD_DIR:-}" ] || fail "give --build DIR"
prefix=$dir/prefix
# Only what is installed: no build-tree binaries or monitors from the environment.
unset MKS_MONITORS_DIR
cmake --install "$MKS_BUILD_DIR" --prefix "$prefix" >"$dir/install.log" 2>&1 ||
  fail "cmake --install: $(tail -5 "$dir/install.log")"

for f in bin/mkscope bin/mkscope-agent bin/mkscope-collector bin/mkscope-bench bin/mkscope-verify \
         bin/mkscope-launch bin/mkscope-node-agent bin/mkscope-srun bin/mkscope-slurm-collector \
         lib/mkscope/monitors/count.bpf.o lib/mkscope/monitors/latency.bpf.o \
         lib/mkscope/monitors/depwait.bpf.o lib/mkscope/monitors/queue.bpf.o \
         lib/mkscope/monitors/genprog.bpf.o lib/systemd/system/mkscope-collector.service \
         lib/systemd/system/mkscope-agent@.service include/mkscope/mkscope.bpf.h \
         include/mkscope/hook_abi.h include/mkscope/bpf_isa.h \
         share/bash-completion/completions/mkscope share/man/man1/mkscope.1 \
         share/man/man1/mkscope-agent.1 share/man/man1/mkscope-collector.1 \
         share/man/man1/mkscope-launch.1 share/mkscope/grafana/mkscope-dashboard.json \
         share/mkscope/prometheus/mkscope-alerts.yaml share/mkscope/k8s/collector.yaml; do
  [ -e "$prefix/$f" ] || fail "cmake --install did not install $f"
done
grep -q "ExecStart=$prefix/bin/mkscope-collector" "$prefix/lib/systemd/system/mkscope-collector.service" ||
  fail "the installed collector unit does not name $prefix/bin"
version=$("$prefix/bin/mkscope" --version | awk '{print $2}')
[ -n "$version" ] || fail "mkscope --version prints no version"
for p in "$prefix"/bin/*; do
  "$p" --help >"$dir/help.out" 2>&1 || fail "$(basename "$p") --help failed: $(head -3 "$dir/help.out")"
  grep -q "usage" "$dir/help.out" || fail "$(basename "$p") --help prints no usage"
  [ "$("$p" --version 2>&1)" = "$(basename "$p") $version" ] ||
    fail "$(basename "$p") --version says '$("$p" --version 2>&1 | head -1)', want '$(basename "$p") $version'"
done
# The installed agent finds the installed monitors.
"$prefix/bin/mkscope-agent" --help | grep "default $prefix/bin/../lib/mkscope/monitors" >/dev/null ||
  fail "the installed agent does not look for the installed monitors"

# Man pages: the sections, and no warning from man.
for m in "$prefix"/share/man/man1/*.1; do
  for s in NAME SYNOPSIS; do grep -q "^\.SH $s" "$m" || fail "$(basename "$m") has no $s"; done
  w=$(MANWIDTH=80 man --warnings -l "$m" 2>&1 >/dev/null || true)
  [ -z "$w" ] || fail "$(basename "$m"): $w"
done
grep -q '^\.SH "COMMAND: DIAGNOSE"' "$prefix/share/man/man1/mkscope.1" ||
  fail "mkscope.1 lacks the diagnose command"

# Completion, as bash calls it.
complete_words() {
  bash -c 'source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _mkscope; printf "%s\n" "${COMPREPLY[@]}"' \
    _ "$prefix/share/bash-completion/completions/mkscope" "$@"
}
[ "$(complete_words mkscope diag)" = diagnose ] || fail "completion of 'mkscope diag': $(complete_words mkscope diag)"
complete_words mkscope diagnose --min | grep -x -- --min-steps >/dev/null || fail "completion of diagnose --min lacks --min-steps"
complete_words mkscope trigger "" | grep -x add >/dev/null || fail "completion of trigger lacks add"

# Every example of mkscope-launch --help, as written, from the prefix.
export PATH="$prefix/bin:/usr/bin:/bin"
unset MKS_AGENT_BIN MKS_COLLECTOR_BIN MKS_BENCH_BIN
work=$dir/work
mkdir -p "$work"
examples=$(mkscope-launch --help | sed -n '/^EXAMPLES$/,$p' | sed -n 's/^  //p')
[ -n "$examples" ] || fail "mkscope-launch --help has no examples"
# The examples name /tmp/mks and /tmp/mks-live: make them ours for the run.
for d in /tmp/mks /tmp/mks-live; do
  [ ! -e "$d" ] || [ -O "$d" ] || fail "$d exists and is not ours"
  rm -rf "$d"
done
live_pid="" n=0
while IFS= read -r ex; do
  n=$((n + 1))
  cmd=${ex%%#*}
  if [ "$cmd" != "$ex" ] && echo "$cmd" | grep -q -- --live; then
    # "... --live ...  # then, in another shell:" runs until interrupted;
    # its SIGINT must not be ignored as a background job's is.
    ( cd "$work" && exec setsid python3 -c 'import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_DFL); os.execvp("bash", ["bash", "-c", sys.argv[1]])' "$cmd" ) \
      >"$dir/live.out" 2>&1 &
    live_pid=$!
    for _ in $(seq 100); do grep -q "until Ctrl-C" "$dir/live.out" && break; sleep 0.1; done
    sleep 2
    continue
  fi
  if [ -n "$live_pid" ]; then
    (cd "$work" && timeout 3 bash -c "$cmd") >"$dir/ex$n.out" 2>&1 || [ $? = 124 ] ||
      fail "example '$ex' failed: $(tail -3 "$dir/ex$n.out")"
    grep -q "RANK" "$dir/ex$n.out" || fail "example '$ex' showed no ranks: $(head -5 "$dir/ex$n.out")"
    kill -INT -- "-$live_pid"
    wait "$live_pid" || fail "the --live launcher ended with status $? on Ctrl-C: $(tail -3 "$dir/live.out")"
    grep -q "stopping" "$dir/live.out" || fail "the --live launcher did not say it stops"
    live_pid=""
    continue
  fi
  (cd "$work" && bash -c "$cmd") >"$dir/ex$n.out" 2>&1 || fail "example '$ex' failed: $(tail -3 "$dir/ex$n.out")"
done <<<"$examples"
[ -z "$live_pid" ] || { kill -TERM -- "-$live_pid" 2>/dev/null; fail "the --live example was never interrupted"; }
sleep 0.5
pgrep -af "$prefix/bin" && fail "processes of the examples left running"
for j in $(cat "$dir"/ex*.out "$dir/live.out" | sed -n 's/.*job \(mks[0-9]*\).*/\1/p' | sort -u); do
  ls /dev/shm | grep -q "^mks.*\.$j\(\.\|$\)" && fail "job $j left shared memory: $(ls /dev/shm | grep "$j")"
done
rm -rf /tmp/mks /tmp/mks-live
for d in $(cat "$dir"/ex*.out | grep -o '^/tmp/mkscope-launch\.[A-Za-z0-9]*$'); do rm -rf "$d"; done

if command -v cpack >/dev/null && command -v dpkg-deb >/dev/null; then
  (cd "$MKS_BUILD_DIR" && cpack -G DEB -B "$dir/pkg") >"$dir/cpack.log" 2>&1 || fail "cpack: $(tail -5 "$dir/cpack.log")"
  deb=$(ls "$dir"/pkg/*.deb)
  dpkg-deb -c "$deb" | grep "./usr/bin/mkscope-collector" >/dev/null || fail "the .deb lacks usr/bin/mkscope-collector"
  dpkg-deb -c "$deb" | grep "./usr/lib/systemd/system/mkscope-collector.service" >/dev/null || fail "the .deb lacks the unit"
  dpkg-deb -I "$deb" | grep "Depends:.*libnanomsg" >/dev/null || fail "the .deb depends on no libnanomsg"
fi
echo "ok: installed $(find "$prefix" -type f | wc -l) files; $n launcher examples ran; man, completion, .deb checked"
