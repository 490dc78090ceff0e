#!/usr/bin/env bash
# bench/mount-release.sh [WORKDIR]
#
# Mounts the released layouts of DeepSeek-V4.1-Flash and V4-Flash
# (dsfs synth --preset v41-full-sparse, v4-full-sparse: real headers, data
# as holes) PASSES times each (default 5) and prints, per layout, the
# median time until .dsfs/stats.json appears, the CPU time dsfs used by
# then and its peak RSS (VmHWM), against the targets (< 2 s, < 300 MB).
#
# BASE=REV also builds dsfs at git revision REV and mounts it in the same
# run, alternating with the tree's build, and prints its medians and the
# ratios (tree / REV), so that a busy machine slows both alike.
# VIEWS=LIST mounts only those views (dsfs mount --views LIST).
# Needs root and /dev/fuse. Exit status 1 when a median of the tree's
# build misses a target.
set -euo pipefail
work=$(realpath -m "${1:-/tmp/dsfs-mount-release}")
passes=${PASSES:-5}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$work"
cd "$root"
go build -o "$work/dsfs" ./cmd/dsfs
builds=(tree)
if [[ -n ${BASE:-} ]]; then
	rm -rf "$work/base-src"
	mkdir -p "$work/base-src"
	git archive "$BASE" | tar -x -C "$work/base-src"
	(cd "$work/base-src" && go build -o "$work/dsfs-base" ./cmd/dsfs)
	builds+=(base)
fi
args=()
if [[ -n ${VIEWS:-} ]]; then
	args+=(--views "$VIEWS")
fi
median() { printf '%s\n' "$@" | sort -n | sed -n "$((($# + 1) / 2))p"; }
fail=0
for preset in v41-full-sparse v4-full-sparse; do
	rm -rf "${work:?}/$preset"
	"$work/dsfs" synth --preset "$preset" "$work/$preset" >/dev/null
	declare -A times=() cpus=() hwms=()
	for _ in $(seq "$passes"); do
		for b in "${builds[@]}"; do
			bin=$work/dsfs
			[[ $b == base ]] && bin=$work/dsfs-base
			mnt=$(mktemp -d "$work/mnt.XXXXXX")
			start=$(date +%s%N)
			"$bin" mount "${args[@]}" "$work/$preset" "$mnt" 2>/dev/null &
			pid=$!
			until [[ -e $mnt/.dsfs/stats.json ]]; do
				kill -0 "$pid" 2>/dev/null || { echo "mount-release.sh: dsfs exited" >&2; exit 2; }
				sleep 0.01
			done
			end=$(date +%s%N)
			times[$b]+=" $(((end - start) / 1000000))"
			cpus[$b]+=" $(($(awk '{print $14 + $15}' "/proc/$pid/stat") * 10))"
			hwms[$b]+=" $(awk '/VmHWM/ {print int($2 / 1024)}' "/proc/$pid/status")"
			kill -TERM "$pid"
			wait "$pid" || true
			rmdir "$mnt"
		done
	done
	declare -A t=() c=() h=()
	for b in "${builds[@]}"; do
		# shellcheck disable=SC2086 # the lists are words on purpose
		t[$b]=$(median ${times[$b]}) c[$b]=$(median ${cpus[$b]}) h[$b]=$(median ${hwms[$b]})
	done
	verdict=ok
	if ((t[tree] >= 2000 || h[tree] >= 300)); then verdict=MISS fail=1; fi
	printf '%-16s ready %5d ms (CPU %5d ms), peak RSS %4d MB  [target < 2000 ms, < 300 MB] %s  (load %s)\n' \
		"$preset" "${t[tree]}" "${c[tree]}" "${h[tree]}" "$verdict" "$(cut -d' ' -f1 /proc/loadavg)"
	if [[ -n ${BASE:-} ]]; then
		printf '%-16s ready %5d ms (CPU %5d ms), peak RSS %4d MB  at %s; tree/base: ready %.2f, CPU %.2f, RSS %.2f\n' \
			"" "${t[base]}" "${c[base]}" "${h[base]}" "$BASE" \
			"$(echo "${t[tree]} / ${t[base]}" | bc -l)" "$(echo "${c[tree]} / ${c[base]}" | bc -l)" "$(echo "${h[tree]} / ${h[base]}" | bc -l)"
	fi
	unset times cpus hwms t c h
done
exit $fail
