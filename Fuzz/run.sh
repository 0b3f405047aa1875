#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzzer + address sanitizers) and runs each over its seed corpus.
#
#   Fuzz/run.sh                         every target, 20 000 executions each (the test suite's short run)
#   Fuzz/run.sh -runs=10000000          every target, ten million executions each
#   Fuzz/run.sh -max_total_time=600 FuzzServerConnection
#   CONFIGURATION=release Fuzz/run.sh -runs=10000000   optimized, many times faster (a longer build)
#
# New inputs go to a scratch corpus, not Corpus/; a crash leaves crash-* in Fuzz/ and fails the run.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
targets=()
options=()
for argument in "$@"; do
    case "$argument" in
        -*) options+=("$argument") ;;
        *) targets+=("$argument") ;;
    esac
done
[ ${#options[@]} -eq 0 ] && options=(-runs=20000)
[ ${#targets[@]} -eq 0 ] && targets=(FuzzFrameDecoder FuzzEnvelope FuzzServerConnection FuzzClockPacket)
configuration=${CONFIGURATION:-debug}
swift build -q -c "$configuration" --sanitize=fuzzer --sanitize=address
bin=$(swift build -c "$configuration" --sanitize=fuzzer --sanitize=address --show-bin-path)
for target in "${targets[@]}"; do
    scratch=$(mktemp -d)
    echo "== $target ${options[*]}"
    # Swift's own crash handler would take the signal before libFuzzer saves the input.
    status=0
    SWIFT_BACKTRACE=enable=no "$bin/$target" "${options[@]}" -print_final_stats=1 "$scratch" "Corpus/$target" >"$scratch.log" 2>&1 || status=$?
    grep -E '^(#[0-9]+ +DONE|stat::number_of_executed_units|stat::average_exec_per_sec|==[0-9]+==|SUMMARY|.*ERROR|.*Fatal error|.*crash-)' "$scratch.log" || true
    [ "$status" -ne 0 ] && tail -40 "$scratch.log" >&2
    rm -rf "$scratch" "$scratch.log"
    if [ "$status" -ne 0 ]; then
        echo "$target FAILED (exit $status); the input is in $here (crash-*)" >&2
        exit 1
    fi
done
