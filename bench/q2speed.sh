#!/usr/bin/env bash
# bench/q2speed.sh [--shard]
#
# Single-thread rates of the q2/ quantisers, each measured against its own
# portable Go path in the same run (the two alternate on the same rows in
# every iteration, so the ratio holds on a loaded machine), and against the
# single-thread rates recorded for ggml's generic reference build with the
# reference vectors (testdata/ggml/README.md, "Throughput of the C
# reference": IQ2_XXS unit imatrix 3.3-3.4 M weights/s, Q2_K ref 19.3-19.6
# M weights/s). ggml's C source cannot be vendored, so the ggml ratio is
# against those recorded figures, not a build run here. Prints the median
# of COUNT runs (default 5).
#
# --shard also reads a q2/ shard of one V4.1-Flash-shaped expert (35 M
# weights) through the view's reader and block cache on 1 core and on
# every core (go test -cpu), and prints both rates and their ratio.
set -euo pipefail
cd "$(dirname "$0")/.."
count=${COUNT:-5}

# median FILE METRIC: the median of the values before METRIC on the lines
# of FILE.
median() {
	awk -v m="$2" '{for (i = 2; i <= NF; i++) if ($i == m) print $(i-1)}' "$1" |
		sort -g | awk '{v[NR] = $1} END {if (NR == 0) exit 1; print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'
}

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

run() { # NAME PACKAGE BENCHMARK
	go test -run '^$' -bench "^$3\$" -count "$count" -cpu 1 "$2" | tee "$out/$1" | grep -E '^(Benchmark|ok|FAIL)' >&2
}
run iq2xxs ./codecs/iq2xxs BenchmarkQuantizeVsPortable
run q2k ./codecs/q2k BenchmarkQuantizeRefVsPortable

printf '\n%-22s %14s %14s %12s %12s\n' quantiser "weights/s" "portable w/s" "x portable" "x ggml (rec)"
for q in iq2xxs:"IQ2_XXS (unit)" q2k:"Q2_K (ref)"; do
	f=$out/${q%%:*}
	printf '%-22s %14.0f %14.0f %12.2f %12.2f\n' "${q#*:}" \
		"$(median "$f" weights/s)" "$(median "$f" portable-weights/s)" \
		"$(median "$f" x-portable)" "$(median "$f" x-ggml-recorded)"
done
echo "(medians of $count runs, one thread; ggml: rates recorded with the reference vectors)"

if [[ ${1:-} == --shard ]]; then
	procs=$(nproc)
	go test -run '^$' -bench '^BenchmarkQ2ShardRead$' -benchtime 1x -count "$count" -cpu "1,$procs" ./q2 |
		tee "$out/shard" | grep -E '^(Benchmark|ok|FAIL)' >&2
	one=$(grep -E '^BenchmarkQ2ShardRead(-1)?\s' "$out/shard" > "$out/shard1" || true; median "$out/shard1" Mweights/s)
	all=$(grep -E "^BenchmarkQ2ShardRead-$procs\s" "$out/shard" > "$out/shardN" || true; median "$out/shardN" Mweights/s)
	printf '\nq2/ shard read: %.2f M weights/s on 1 core, %.2f on %d (%.2fx)\n' "$one" "$all" "$procs" "$(awk -v a="$all" -v b="$one" 'BEGIN {print a / b}')"
fi
