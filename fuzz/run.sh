#!/usr/bin/env bash
# Builds the fuzz targets and runs each one for a bounded time.
#
# usage: fuzz/run.sh [SECONDS] [TARGET...]
#   SECONDS  how long each target runs (default: $FUZZ_SECONDS, else 60)
#   TARGET   the targets to run (default: all of them, one after another)
#
# It needs rustup's nightly toolchain, and installs cargo-fuzz when it is
# missing. Each target starts from its seeds (fuzz/seeds/TARGET/) and from
# what earlier runs learned (fuzz/corpus/TARGET/, git-ignored). Targets are
# built with optimizations and with debug assertions and overflow checks on,
# so an overflow is a crash rather than a wrapped number.
#
# When a target crashes (a panic, a sanitizer report, a timeout or running
# out of memory), libFuzzer stops it and leaves the input in
# fuzz/artifacts/TARGET/; this script copies it to fuzz/regressions/TARGET/,
# where `cargo test -p scored --test fuzz_regressions` (or `-p scrun`, or
# `-p scored-replay` for swf)
# replays it, and exits with status 1 after running the other targets.
# Reproduce one with: cargo +nightly fuzz run TARGET fuzz/regressions/TARGET/FILE
#
# The last lines are a table: runs, executions per second, coverage
# (libFuzzer's `cov`: edges reached; `ft`: features) and corpus size.
set -euo pipefail

fuzz_dir=$(cd "$(dirname "$0")" && pwd)
all_targets=(hosts console scrun_options protocol submit swf pmi)

seconds=${FUZZ_SECONDS:-60}
if [[ $# -gt 0 && $1 =~ ^[0-9]+$ ]]; then
    seconds=$1
    shift
fi
if ! [[ $seconds =~ ^[0-9]+$ ]] || [[ $seconds -eq 0 ]]; then
    echo "run.sh: invalid time '$seconds': expected a whole number of seconds above 0" >&2
    exit 2
fi
targets=("$@")
if [[ ${#targets[@]} -eq 0 ]]; then
    targets=("${all_targets[@]}")
fi
for target in "${targets[@]}"; do
    if [[ ! " ${all_targets[*]} " =~ " $target " ]]; then
        echo "run.sh: unknown target '$target': the targets are ${all_targets[*]}" >&2
        exit 2
    fi
done

if ! rustup toolchain list | grep -q '^nightly'; then
    echo "run.sh: cargo-fuzz needs the nightly toolchain: rustup toolchain install nightly" >&2
    exit 2
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "run.sh: installing cargo-fuzz" >&2
    cargo install cargo-fuzz --locked
fi

# The fuzz crate is its own workspace with its own target directory
# (fuzz/target); a CARGO_TARGET_DIR meant for the main workspace would mix
# sanitizer builds into it.
unset CARGO_TARGET_DIR
cd "$fuzz_dir"
build_flags=(--release --debug-assertions)
logs=target/logs
mkdir -p "$logs"
echo "== building the fuzz targets (log: fuzz/$logs/build.log)"
if ! cargo +nightly fuzz build "${build_flags[@]}" >"$logs/build.log" 2>&1; then
    tail -n 40 "$logs/build.log" >&2
    echo "run.sh: building the fuzz targets failed" >&2
    exit 2
fi

failed=()
summary=()
for target in "${targets[@]}"; do
    corpus="corpus/$target"
    artifacts="artifacts/$target"
    mkdir -p "$corpus" "$artifacts"
    # Leftovers of an earlier run are not this run's crashes.
    rm -f "$artifacts"/*
    log="$logs/$target.log"
    echo "== $target: fuzzing for ${seconds}s (log: fuzz/$log)"
    status=0
    cargo +nightly fuzz run "${build_flags[@]}" "$target" "$corpus" "seeds/$target" -- \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 >"$log" 2>&1 || status=$?

    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
    last=$(grep -E '^#[0-9]+.* cov: ' "$log" | tail -n 1 || true)
    cov=$(grep -oE 'cov: [0-9]+' <<<"$last" | cut -d' ' -f2 || true)
    ft=$(grep -oE 'ft: [0-9]+' <<<"$last" | cut -d' ' -f2 || true)
    corp=$(grep -oE 'corp: [0-9]+' <<<"$last" | cut -d' ' -f2 || true)

    crashes=("$artifacts"/*)
    if [[ $status -ne 0 || -e ${crashes[0]} ]]; then
        result=CRASH
        failed+=("$target")
        mkdir -p "regressions/$target"
        for crash in "${crashes[@]}"; do
            [[ -e $crash ]] || continue
            cp "$crash" "regressions/$target/"
            echo "   saved fuzz/regressions/$target/$(basename "$crash")"
        done
        if [[ ! -e ${crashes[0]} ]]; then
            echo "   exit status $status and no crashing input; see fuzz/$log"
        fi
        grep -E -m 5 "panicked at|ERROR: |SUMMARY: " "$log" | sed 's/^/   /' || true
    else
        result=ok
    fi
    summary+=("$(printf '%-14s %-6s %12s %10s %7s %7s %7s' \
        "$target" "$result" "${runs:-?}" "${speed:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}")")
done

echo
printf '%-14s %-6s %12s %10s %7s %7s %7s\n' target result runs exec/s cov ft corpus
printf '%s\n' "${summary[@]}"
if [[ ${#failed[@]} -gt 0 ]]; then
    echo "run.sh: crashes in ${failed[*]}; the inputs are in fuzz/regressions/" >&2
    exit 1
fi
