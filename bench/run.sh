#!/usr/bin/env bash
# bench/run.sh [--profile] [WORKDIR]
#
# Builds dsfs, bench/memfs and bench/fusebench, synthesises v41-bench and
# v41-full-sparse into WORKDIR (default /tmp/dsfs-bench; kept between runs
# and rewritten only when synth/ changes), runs the codec benchmark and
# every FUSE measurement, and prints the table of targets. Needs root and
# /dev/fuse. PASSES=N sets the passes per measurement (default 5).
#
# --profile builds dsfs with bench/profhook (go build -overlay, the tree is
# not touched) and leaves a CPU and a heap profile of every dsfs mount in
# WORKDIR/profiles, for go tool pprof.
#
# Exit status: 0 all targets pass, 1 a target fails, 2 a measurement could
# not be made.
set -euo pipefail

profile=0
if [[ ${1:-} == --profile ]]; then
	profile=1
	shift
fi
work=$(realpath -m "${1:-/tmp/dsfs-bench}")
passes=${PASSES:-5}
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$work/bin

die() { echo "run.sh: $*" >&2; exit 2; }
[[ $(id -u) == 0 ]] || die "needs root: dsfs and memfs mount with mount(2) and raise the mounts' read_ahead_kb"
[[ -c /dev/fuse ]] || die "no /dev/fuse"
mkdir -p "$work" "$bin"

# fusebench unmounts what it mounts, even on failure; this catches what a
# killed fusebench leaves behind. Every mount point lives under $work.
cleanup() {
	local m
	for m in $(awk -v w="$work/" 'index($2, w) == 1 {print $2}' /proc/self/mounts); do
		echo "run.sh: unmounting $m, left behind" >&2
		umount -l "$m" || true
	done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

cd "$root"
echo "run.sh: building into $bin" >&2
go build -o "$bin/dsfs" ./cmd/dsfs
if ((profile)); then
	printf '{"Replace": {"%s": "%s"}}\n' "$root/cmd/dsfs/zz_profhook.go" "$root/bench/profhook/hook.go" >"$work/overlay.json"
	go build -tags dsfsprof -overlay "$work/overlay.json" -o "$bin/dsfs" ./cmd/dsfs
	rm -rf "$work/profiles"
	mkdir -p "$work/profiles"
fi
go build -o "$bin/memfs" ./bench/memfs
go build -o "$bin/fusebench" ./bench/fusebench

# synth writes PRESET into $work/PRESET unless the copy there was written
# by the same synth sources; it needs NEED_GB free when it does.
stamp=$(cat synth/*.go | sha256sum | cut -d' ' -f1)
synth() {
	local preset=$1 need_gb=$2 dir=$work/$1
	if [[ -d $dir && -f $dir.stamp && $(cat "$dir.stamp") == "$stamp" ]]; then
		return
	fi
	rm -rf "$dir" "$dir.tmp" "$dir.stamp"
	local avail
	avail=$(df --output=avail -B1G "$work" | tail -1 | tr -d ' ')
	((avail >= need_gb)) || die "$preset needs ${need_gb} GiB free in $work, df says ${avail} GiB"
	echo "run.sh: synthesising $preset" >&2
	"$bin/dsfs" synth --preset "$preset" "$dir.tmp" >&2
	mv "$dir.tmp" "$dir"
	echo "$stamp" >"$dir.stamp"
}
# v41-bench is 2.8 GiB, plus 2.7 GiB of baseline copies fusebench writes.
synth v41-bench 7
synth v41-full-sparse 1

echo "run.sh: codec benchmark (1 core)" >&2
go test -run '^$' -bench 'BenchmarkEngramFP4$' -count "$passes" -cpu 1 ./codecs | tee "$work/codec.txt" >&2

args=(-dsfs "$bin/dsfs" -memfs "$bin/memfs" -work "$work" -passes "$passes"
	-bench-src "$work/v41-bench" -sparse-src "$work/v41-full-sparse" -codec "$work/codec.txt")
if ((profile)); then
	args+=(-profile "$work/profiles")
fi
status=0
"$bin/fusebench" "${args[@]}" || status=$?

# The object-store row: v41-bench in a SeaweedFS bucket on loopback,
# nvfp4/'s first shard read once through a mount of the bucket against a
# plain GET of the source shard by the same client, in the same run.
if [[ -x ${DSFS_WEED:-$HOME/.cache/dsfs/weed} ]]; then
	echo "run.sh: object store (SeaweedFS on loopback)" >&2
	DSFS_BENCH_SRC=$work/v41-bench go test -run '^$' -bench 'BenchmarkS3FirstRead$' -benchtime 1x \
		-count "$passes" ./integration 2>/dev/null | tee "$work/s3.txt" | grep '^BenchmarkS3FirstRead' >&2 || true
	awk '/^BenchmarkS3FirstRead/ {
			for (i = 3; i < NF; i += 2) { k = $(i + 1); v[k, ++n[k]] = $i }
		}
		function median(k,   m, a, i, j, x) {
			m = n[k]
			for (i = 1; i <= m; i++) {
				x = v[k, i]
				for (j = i - 1; j >= 1 && a[j] > x; j--) a[j + 1] = a[j]
				a[j + 1] = x
			}
			return m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
		}
		END {
			if (!n["ratio"]) { print "object store: not measured (see " FILENAME ")"; exit 2 }
			r = median("ratio")
			printf "object store: nvfp4/ first read from S3 %.0f MB/s, plain GET %.0f MB/s: %.2f (target >= 0.80: %s); fetched %.2f bytes per byte read\n",
				median("mount-MB/s"), median("get-MB/s"), r, (r >= 0.8 ? "PASS" : "FAIL"), median("fetched/read")
			exit (r >= 0.8 ? 0 : 1)
		}' "$work/s3.txt" || { s=$?; ((s > status)) && status=$s; }
else
	echo "object store: not measured (no SeaweedFS binary; .ci/run builds it into ~/.cache/dsfs/weed)"
fi
if ((profile)); then
	echo "profiles of every dsfs mount: $work/profiles, e.g." \
		"go tool pprof -top $bin/dsfs $work/profiles/read-1.cpu.pprof;" \
		"heap: read-1.cpu.pprof.heap with -sample_index=inuse_space or alloc_space." \
		"The last mount-N also holds the size check's header reads."
fi
exit $status
