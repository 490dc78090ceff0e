#!/usr/bin/env bash
# bench/gpu-check.sh build [DIR]    on a machine with Go (no GPU needed)
# bench/gpu-check.sh run [DIR]      on the GPU machine (no Go needed)
#
# build compiles bench/gpucheck and the cuda package's test binary into DIR
# (default bench/out/gpucheck, ignored by git) and copies beside them the
# trace reference vectors (testdata/trace) and torch_layer.py, so
# that DIR is all the GPU machine needs: carry it there.
#
# run finds NVRTC and cuBLAS (a CUDA toolkit under /usr/local/cuda, or the
# nvidia-* wheels that PyTorch brings), then
#   1. runs the cuda package's tests with DSFS_REQUIRE_CUDA=1 (kernels built
#      with the machine's NVRTC; every operation, every reference layer and
#      the route kernel against the CPU backend);
#   2. runs gpucheck: CUDA against CPU on the reference checkpoints and on a
#      random V2-Lite-shaped layer (errors, routes), and that layer's forward
#      times on 4 x 32 and 1 x 2048 tokens; then the v4-tiny layers (V4
#      kernels and products on the GPU) against the host V4 engine;
#   2b. times a V4-Flash-shaped layer (256 experts, 4 x 32 tokens, a8) on
#      the CUDA backend and on the host, with the GPU's error against the
#      host and the tokens routed differently;
#   3. runs torch_layer.py: the same layer in PyTorch eager on the same GPU,
#      its times beside the CUDA backend's.
# Exit status: 0 every check passed, 1 a check failed, 2 a step could not run.
set -uo pipefail

cmd=${1:-}
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$(realpath -m "${2:-$root/bench/out/gpucheck}")
die() { echo "gpu-check.sh: $*" >&2; exit 2; }

build() {
	set -e
	local td=$root/testdata/trace
	[[ -d $td ]] || die "no reference vectors at $td"
	rm -rf "$dir"
	mkdir -p "$dir/mod/testdata"
	cd "$root"
	# No cgo: purego reaches the dynamic loader itself, so no C toolchain or
	# matching C library headers are needed to build.
	CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go build -o "$dir/gpucheck" ./bench/gpucheck
	CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go test -c -o "$dir/cuda.test" ./cuda
	CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go test -c -o "$dir/v4.test" ./trace/v4
	cp -r "$td" "$dir/mod/testdata/trace"
	cp bench/gpucheck/torch_layer.py bench/gpu-check.sh "$dir/"
	# The test binary finds testdata/ beside the nearest go.mod above its
	# working directory (internal/testdata).
	: >"$dir/mod/go.mod"
	du -sh "$dir"
}

# libdirs prints the directories holding NVRTC or cuBLAS libraries.
libdirs() {
	local roots=(/usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib)
	local site
	site=$(python3 -c 'import importlib.util as u; s = u.find_spec("nvidia"); print("\n".join(s.submodule_search_locations if s else []))' 2>/dev/null) || true
	[[ -n $site ]] && mapfile -t -O ${#roots[@]} roots <<<"$site"
	find "${roots[@]}" -maxdepth 3 \( -name 'libnvrtc.so*' -o -name 'libcublas.so*' \) 2>/dev/null |
		xargs -r -n1 dirname | sort -u
}

run() {
	[[ -x $dir/gpucheck && -x $dir/cuda.test && -x $dir/v4.test ]] || die "no binaries in $dir: run '$0 build' first and carry the folder"
	local extra
	extra=$(libdirs | paste -sd: -)
	export LD_LIBRARY_PATH=${extra:+$extra:}/usr/local/nvidia/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
	echo "== machine"
	nvidia-smi -L 2>&1 || true
	echo "libraries from: ${extra:-the default search path}"
	local status=0 work=/tmp/dsfs-gpucheck
	mkdir -p "$work"

	echo; echo "== 1. cuda package tests"
	(cd "$dir/mod" && DSFS_REQUIRE_CUDA=1 DSFS_REQUIRE_NVRTC=1 ../cuda.test -test.count=1 -test.v 2>&1) |
		grep -v '^=== RUN'
	local rc=${PIPESTATUS[0]}
	if ((rc != 0)); then status=1; echo "cuda tests: FAIL ($rc)"; else echo "cuda tests: ok"; fi

	echo; echo "== 2. CUDA backend against the CPU backend"
	"$dir/gpucheck" -testdata "$dir/mod/testdata" -work "$work"
	rc=$?
	if ((rc == 2)); then die "gpucheck could not run"; fi
	((rc != 0)) && status=1

	echo; echo "== 2b. V4-Flash-shaped layer: CUDA, then the host V4 engine"
	for device in cuda cpu; do
		(cd "$dir/mod" && DSFS_V4_BENCH_DEVICE=$device DSFS_V4_BENCH_EXPERTS=256 ../v4.test -test.run XXX \
			-test.bench FlashLayer -test.benchtime 1x 2>&1) | grep -E 'Benchmark|FAIL|bench_test'
		((PIPESTATUS[0] != 0)) && status=1
	done

	echo; echo "== 3. PyTorch eager on the same GPU"
	PYTHONUNBUFFERED=1 python3 "$dir/torch_layer.py" "$work" || { echo "torch_layer.py failed"; status=2; }
	echo; if ((status == 0)); then echo "gpu-check: ok"; else echo "gpu-check: FAIL"; fi
	exit $status
}

case $cmd in
build) build ;;
run) run ;;
*) die "usage: $0 build|run [DIR]" ;;
esac
