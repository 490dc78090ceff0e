#!/usr/bin/env bash
# bench/nvfp4-open.sh [WORKDIR]
#
# What opening an nvfp4/ shard costs: on a fresh mount of the released
# DeepSeek-V4.1-Flash layout (dsfs synth --preset v41-full-sparse), reads
# the first MiB of every shard (the header and what a loader listing the
# tensors reads with it) in source/, in nvfp4/ and in engram-fp4/ (a view
# served by dsfs that copies those bytes, for FUSE's own cost), and prints
# the times and nvfp4/'s ratio to source/ (target <= 2). Then it reads nvfp4/TRANSCODE.json
# and prints its time. Needs root and /dev/fuse. Exit status 1 when the
# ratio is over 2.
set -euo pipefail
work=$(realpath -m "${1:-/tmp/dsfs-nvfp4-open}")
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$work"
cd "$root"
go build -o "$work/dsfs" ./cmd/dsfs
src=$work/v41-full-sparse
[[ -e $src/model.safetensors.index.json ]] || "$work/dsfs" synth --preset v41-full-sparse "$src" >/dev/null
mnt=$(mktemp -d "$work/mnt.XXXXXX")
"$work/dsfs" mount --views source,nvfp4,engram-fp4 "$src" "$mnt" 2>"$work/mount.log" &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null; rmdir "$mnt"' EXIT
until [[ -e $mnt/.dsfs/stats.json ]]; do
	kill -0 "$pid" 2>/dev/null || { cat "$work/mount.log" >&2; exit 2; }
	sleep 0.01
done
heads() {
	local start end f
	start=$(date +%s%N)
	for f in "$mnt/$1"/model-*.safetensors; do
		dd if="$f" of=/dev/null bs=1M count=1 iflag=fullblock status=none
	done
	end=$(date +%s%N)
	echo $(((end - start) / 1000000))
}
s=$(heads source)
n=$(heads nvfp4)
e=$(heads engram-fp4)
ratio=$(awk -v n="$n" -v s="$s" 'BEGIN { printf "%.2f", n / (s > 0 ? s : 1) }')
printf 'first MiB of 48 shards: source/ %d ms, nvfp4/ %d ms (ratio %s, target <= 2), engram-fp4/ %d ms\n' "$s" "$n" "$ratio" "$e"
start=$(date +%s%N)
cat "$mnt/nvfp4/TRANSCODE.json" >/dev/null
end=$(date +%s%N)
printf 'nvfp4/TRANSCODE.json: %d ms\n' $(((end - start) / 1000000))
awk -v r="$ratio" 'BEGIN { exit !(r <= 2) }'
