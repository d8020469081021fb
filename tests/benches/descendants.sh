#!/usr/bin/env bash
# What a job's idle descendants cost root's scored, as BENCHMARKS.md's
# attack table reports it: a job whose one rank starts SLEEPS idle
# `sleep`s (`sh -c 'for i in $(seq N); do sleep 1000 & done; exec sleep 1000'`)
# beside another job spinning on the same host, at SLICE slices; against
# the same two jobs without sleeps, in the same run. For each: scored's
# descriptors, its CPU share over MEASURE seconds, the switch latency
# median `status` reports, and the median and maximum of root's
# `sc_console -c status` (the whole run of the client).
#
#   tests/benches/descendants.sh [BIN_DIR [BASE_BIN_DIR]]
#
# BIN_DIR holds scored, scrun, sc_console and scored-testprog (default
# target/release; build them with `cargo build --release --bins
# --workspace`); BASE_BIN_DIR, another build measured the same way in the
# same run, in alternation. Run as root, where scored holds jobs in
# cgroups. Environment: SLEEPS (3000), MEASURE (10 s), SLICE (50ms),
# ROUNDS (2: with and without sleeps alternate). Each run starts SLEEPS
# processes: keep it short on a shared machine.
set -euo pipefail

bin=$(realpath "${1:-target/release}")
base=${2:+$(realpath "$2")}
sleeps=${SLEEPS:-3000}
measure=${MEASURE:-10}
slice=${SLICE:-50ms}
rounds=${ROUNDS:-2}
hz=$(getconf CLK_TCK)
work=$(mktemp -d /tmp/scored-descendants.XXXXXX)
daemon=
jobs=()

cleanup() {
    for pid in "${jobs[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    if [ -n "$daemon" ]; then
        kill -TERM "$daemon" 2>/dev/null || true
        wait "$daemon" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

cpu_ticks() { awk '{ sub(/.*\) /, ""); print $12 + $13 }' "/proc/$1/stat"; }

median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# One run of build `b` with `n` sleeps; prints one line of figures.
run() {
    local b=$1 n=$2 dir="$work/run-$RANDOM"
    mkdir -p "$dir"
    echo "h0 cpus=0" > "$dir/hosts"
    SCORED_LOG=scored=info "$b/scored" --socket "$dir/s.sock" --state-dir "$dir/state" \
        --hosts "$dir/hosts" --timeslice "$slice" > "$dir/log" 2>&1 &
    daemon=$!
    until [ -S "$dir/s.sock" ]; do sleep 0.05; done
    local cgroup
    cgroup=$(sed -n 's/.*jobs are held in cgroups path=\([^ ]*\).*/\1/p' "$dir/log")
    [ -n "$cgroup" ] || { echo "this scored holds no jobs in cgroups (not root?)" >&2; exit 1; }
    export SCORED_SOCKET="$dir/s.sock"
    "$b/scrun" sh -c "for i in \$(seq $n); do sleep 1000 & done; exec sleep 1000" > /dev/null 2>&1 &
    jobs=($!)
    until [[ $("$b/sc_console" -c "job 1" 2>/dev/null) == *"state: running"* ]]; do sleep 0.1; done
    "$b/scrun" "$b/scored-testprog" spin 0 > /dev/null 2>&1 &
    jobs+=($!)
    # Every sleep started (the shell, the spinner and the sleeps).
    local want=$((n + 2)) have=0
    until [ "$have" -ge "$want" ]; do
        sleep 0.5
        # (Its sleeps wait in job-1/rest once it is switched by its rank.)
        have=$(cat "$cgroup"/job-{1,2}/cgroup.procs "$cgroup"/job-1/rest/cgroup.procs 2>/dev/null | wc -l) || true
    done
    sleep 2
    local before start now status=()
    before=$(cpu_ticks "$daemon")
    start=$(date +%s.%N)
    now=$start
    while awk -v n="$now" -v s="$start" -v m="$measure" 'BEGIN { exit !(n - s < m) }'; do
        local t0 t1
        t0=$(date +%s%N)
        "$b/sc_console" -c status > /dev/null
        t1=$(date +%s%N)
        status+=($(( (t1 - t0) / 1000 )))
        sleep 0.2
        now=$(date +%s.%N)
    done
    local after fds switch
    after=$(cpu_ticks "$daemon")
    fds=$(ls "/proc/$daemon/fd" | wc -l)
    switch=$("$b/sc_console" --json -c status | python3 -c 'import json,sys; print(round(1000 * json.load(sys.stdin)["switch latency"]["median"], 2))')
    local cpu status_med status_max
    cpu=$(awk -v a="$after" -v b="$before" -v hz="$hz" -v t0="$start" -v t1="$now" 'BEGIN { printf "%.1f", 100 * (a - b) / hz / (t1 - t0) }')
    status_med=$(printf '%s\n' "${status[@]}" | median)
    status_max=$(printf '%s\n' "${status[@]}" | sort -n | tail -1)
    printf '%s, %5d processes: descriptors %d; daemon CPU %s %%; switch median %s ms; status %.1f ms median, %.1f ms max\n' \
        "$b" "$have" "$fds" "$cpu" "$switch" "$(echo "$status_med / 1000" | bc -l)" "$(echo "$status_max / 1000" | bc -l)"
    for pid in "${jobs[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${jobs[@]}"; do wait "$pid" 2>/dev/null || true; done
    jobs=()
    kill -TERM "$daemon"
    wait "$daemon" 2>/dev/null || true
    daemon=
}

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg); slices $slice; $measure s measured a run"
for round in $(seq "$rounds"); do
    for b in "$bin" ${base:+"$base"}; do
        if [ $((round % 2)) -eq 1 ]; then run "$b" 0; run "$b" "$sleeps"; else run "$b" "$sleeps"; run "$b" 0; fi
    done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
