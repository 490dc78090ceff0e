#!/usr/bin/env bash
# bench/gguf-load.sh [WORKDIR]
#
# What loading a gguf/ file costs: llama.cpp maps a GGUF with MAP_POPULATE,
# which reads the whole file in order, so each recipe's single file is read
# whole with cat through a real mount, against cat of the source
# checkpoint's safetensors files (page-cached: copy speed) in the same run.
# Per recipe of v4-bench (deepseek4: MXFP4, IQ2_XXS) and v3-bench
# (deepseek2, BF16 source: BF16, Q8_0, IQ2_XXS), medians of PASSES (3):
#   first   a fresh mount, no --cache-dir: everything computed
#   disk    a fresh mount on a --cache-dir a previous mount filled
#   warm    a mount with --cache-mb 2048 that has read the file once, the
#           file's page cache dropped (fadvise DONTNEED) before each read,
#           so the block cache serves
# with MB/s, the ratio to the source read and, for the first load, the
# CPU seconds the dsfs process spent (steadier than wall time on a busy
# machine). BF16 of v3-bench (a BF16 source) is the source's bytes through
# the mount: the FUSE copy floor.
# RECIPES="MXFP4 Q8_0" measures only those. Needs root, /dev/fuse and
# python3; about 5 minutes on 2 cores.
set -euo pipefail
work=$(realpath -m "${1:-/tmp/dsfs-gguf-load}")
root=$(cd "$(dirname "$0")/.." && pwd)
passes=${PASSES:-3}
mkdir -p "$work"
go build -C "$root" -o "$work/dsfs" ./cmd/dsfs
dsfs=$work/dsfs
mounts=()
declare -A pids
cleanup() {
	for m in "${mounts[@]}"; do
		grep -q " $m " /proc/mounts && "$dsfs" umount "$m" >/dev/null 2>&1 || true
	done
}
trap cleanup EXIT

[[ -e $work/v4-bench/config.json ]] || "$dsfs" synth --preset v4-bench "$work/v4-bench" >/dev/null
[[ -e $work/v3-bench/config.json ]] || "$dsfs" synth --preset v3-bench "$work/v3-bench" >/dev/null

now() { date +%s.%N; }
median() { sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }

# start SRC MNT ARGS... mounts SRC at MNT and waits until it serves.
start() {
	local src=$1 mnt=$2
	shift 2
	mkdir -p "$mnt"
	"$dsfs" mount --views gguf "$@" "$src" "$mnt" >>"$work/mount.log" 2>&1 &
	pids[$mnt]=$!
	mounts+=("$mnt")
	until [[ -f $mnt/.dsfs/stats.json ]]; do
		kill -0 "${pids[$mnt]}" 2>/dev/null || { echo "gguf-load.sh: dsfs exited; see $work/mount.log" >&2; exit 2; }
		sleep 0.05
	done
}
stop() {
	"$dsfs" umount "$1" >/dev/null
	wait "${pids[$1]}"
	rmdir "$1"
}

# timed FILE... prints the seconds cat takes to read the files.
timed() {
	local a b
	a=$(now)
	cat "$@" >/dev/null
	b=$(now)
	awk -v a="$a" -v b="$b" 'BEGIN {print b - a}'
}

# cputime PID prints the CPU seconds, user and system, PID has used.
cputime() { awk -v hz="$(getconf CLK_TCK)" '{sub(/.*\) /, ""); print ($12 + $13) / hz}' "/proc/$1/stat"; }

printf 'machine: %s cores, load at the start: %s\n' "$(nproc)" "$(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-9s %-8s %8s %8s %8s %8s %8s %8s %8s\n' checkpoint recipe MB first_s MB/s x_src cpu_s disk_s warm_s
for ck in v4-bench v3-bench; do
	src=$work/$ck
	cat "$src"/*.safetensors >/dev/null # into the page cache
	srcMB=$(du -cm --apparent-size "$src"/*.safetensors | tail -1 | cut -f1)
	srcS=$(for _ in $(seq "$passes"); do timed "$src"/*.safetensors; done | median)
	printf '%-9s %-8s %8d %8.2f %8.0f %8s\n' "$ck" source "$srcMB" "$srcS" "$(awk -v m="$srcMB" -v s="$srcS" 'BEGIN {print m / s}')" 1.00
	case $ck in
	v4-bench) recipes="MXFP4 IQ2_XXS" ;;
	*) recipes="BF16 Q8_0 IQ2_XXS" ;;
	esac
	for r in $recipes; do
		[[ -z ${RECIPES:-} || " $RECIPES " == *" $r "* ]] || continue
		rel=gguf/$r/$ck-$r.gguf
		first=() cpu=()
		for _ in $(seq "$passes"); do
			mnt=$(mktemp -d "$work/mnt.XXXXXX")
			start "$src" "$mnt"
			size=$(($(stat -c %s "$mnt/$rel") >> 20))
			c0=$(cputime "${pids[$mnt]}")
			first+=("$(timed "$mnt/$rel")")
			cpu+=("$(awk -v a="$c0" -v b="$(cputime "${pids[$mnt]}")" 'BEGIN {print b - a}')")
			stop "$mnt"
		done
		cache=$(mktemp -d "$work/cache.XXXXXX")
		mnt=$(mktemp -d "$work/mnt.XXXXXX")
		start "$src" "$mnt" --cache-dir "$cache"
		cat "$mnt/$rel" >/dev/null
		stop "$mnt"
		disk=()
		for _ in $(seq "$passes"); do
			mnt=$(mktemp -d "$work/mnt.XXXXXX")
			start "$src" "$mnt" --cache-dir "$cache"
			disk+=("$(timed "$mnt/$rel")")
			stop "$mnt"
		done
		rm -rf "$cache"
		mnt=$(mktemp -d "$work/mnt.XXXXXX")
		start "$src" "$mnt" --cache-mb 2048
		cat "$mnt/$rel" >/dev/null
		warm=()
		for _ in $(seq "$passes"); do
			dd if="$mnt/$rel" iflag=nocache count=0 status=none # drop its page cache
			warm+=("$(timed "$mnt/$rel")")
		done
		stop "$mnt"
		f=$(printf '%s\n' "${first[@]}" | median)
		c=$(printf '%s\n' "${cpu[@]}" | median)
		d=$(printf '%s\n' "${disk[@]}" | median)
		w=$(printf '%s\n' "${warm[@]}" | median)
		printf '%-9s %-8s %8d %8.2f %8.0f %8.2f %8.2f %8.2f %8.2f\n' "$ck" "$r" "$size" "$f" \
			"$(awk -v m="$size" -v s="$f" 'BEGIN {print m / s}')" "$(awk -v a="$f" -v b="$srcS" 'BEGIN {print a / b}')" "$c" "$d" "$w"
	done
done
printf 'load at the end: %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
