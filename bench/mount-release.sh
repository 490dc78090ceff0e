#!/usr/bin/env bash
# bench/mount-release.sh [WORKDIR]
#
# Mounts the released layouts of DeepSeek-V4.1-Flash and V4-Flash
# (dsfs synth --preset v41-full-sparse, v4-full-sparse: real headers, data
# as holes) PASSES times each (default 5) and prints, per layout, the
# median time until .dsfs/stats.json appears, the CPU time dsfs used by
# then and its peak RSS (VmHWM), against the targets (< 2 s, < 300 MB).
# Needs root and /dev/fuse. Exit status 1 when a median misses a target.
set -euo pipefail
work=$(realpath -m "${1:-/tmp/dsfs-mount-release}")
passes=${PASSES:-5}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$work"
cd "$root"
go build -o "$work/dsfs" ./cmd/dsfs
fail=0
for preset in v41-full-sparse v4-full-sparse; do
	rm -rf "${work:?}/$preset"
	"$work/dsfs" synth --preset "$preset" "$work/$preset" >/dev/null
	times=() cpus=() hwms=()
	for _ in $(seq "$passes"); do
		mnt=$(mktemp -d "$work/mnt.XXXXXX")
		start=$(date +%s%N)
		"$work/dsfs" mount "$work/$preset" "$mnt" 2>/dev/null &
		pid=$!
		until [[ -e $mnt/.dsfs/stats.json ]]; do
			kill -0 "$pid" 2>/dev/null || { echo "mount-release.sh: dsfs exited" >&2; exit 2; }
			sleep 0.01
		done
		end=$(date +%s%N)
		times+=($(((end - start) / 1000000)))
		cpus+=($(($(awk '{print $14 + $15}' "/proc/$pid/stat") * 10)))
		hwms+=($(awk '/VmHWM/ {print int($2 / 1024)}' "/proc/$pid/status"))
		kill -TERM "$pid"
		wait "$pid" || true
		rmdir "$mnt"
	done
	median() { printf '%s\n' "$@" | sort -n | sed -n "$((($# + 1) / 2))p"; }
	t=$(median "${times[@]}") c=$(median "${cpus[@]}") h=$(median "${hwms[@]}")
	verdict=ok
	if ((t >= 2000 || h >= 300)); then verdict=MISS fail=1; fi
	printf '%-16s ready %5d ms (CPU %5d ms), peak RSS %4d MB  [target < 2000 ms, < 300 MB] %s  (load %s)\n' \
		"$preset" "$t" "$c" "$h" "$verdict" "$(cut -d' ' -f1 /proc/loadavg)"
done
exit $fail
