#!/usr/bin/env bash
# bench/q2-mount.sh [WORKDIR]
#
# q2/ shard read through a real mount: dsfs pinned to one core, then to
# two (taskset), each on a fresh mount without --cache-dir, reads 48 MiB
# of quantised experts of the first q2/ shard of v41-bench with dd and
# prints the time, the blocks quantised and the ratio. Needs root,
# /dev/fuse, python3 and at least 2 cores.
set -euo pipefail
work=$(realpath -m "${1:-/tmp/dsfs-q2-mount}")
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$work"
go build -C "$root" -o "$work/dsfs" ./cmd/dsfs
src=$work/v41-bench
[[ -e $src/model.safetensors.index.json ]] || "$work/dsfs" synth --preset v41-bench "$src" >/dev/null
declare -A secs
for cpus in 0 0,1; do
	mnt=$(mktemp -d "$work/mnt.XXXXXX")
	taskset -c "$cpus" "$work/dsfs" mount --views q2 "$src" "$mnt" >"$work/mount.log" 2>&1 &
	until [[ -f $mnt/.dsfs/stats.json ]]; do sleep 0.05; done
	f=$(ls "$mnt"/q2/quant-*.safetensors | head -1)
	# The first MiB after the header that holds a quantised expert.
	skip=$(python3 - "$f" <<'PY'
import json, struct, sys
with open(sys.argv[1], 'rb') as f:
    n = struct.unpack('<Q', f.read(8))[0]
    h = json.loads(f.read(n))
o = min(v['data_offsets'][0] for k, v in h.items() if k != '__metadata__' and v['dtype'] == 'U8' and '.experts.' in k)
print((8 + n + o) // (1 << 20) + 1)
PY
)
	start=$(date +%s.%N)
	dd if="$f" of=/dev/null bs=1M skip="$skip" count=48 status=none
	end=$(date +%s.%N)
	blocks=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['view_stats']['q2']['blocks_quantised'])" "$mnt/.dsfs/stats.json")
	secs[$cpus]=$(awk -v a="$start" -v b="$end" 'BEGIN {print b - a}')
	printf 'cores %-4s 48 MiB of quantised experts in %6.2f s (%d blocks quantised)\n' "$cpus" "${secs[$cpus]}" "$blocks"
	"$work/dsfs" umount "$mnt" >/dev/null
	rmdir "$mnt"
done
awk -v a="${secs[0]}" -v b="${secs[0,1]}" 'BEGIN {printf "2 cores / 1 core: %.2fx\n", a / b}'
