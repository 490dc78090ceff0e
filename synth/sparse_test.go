//go:build unix

package synth

import (
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"syscall"
	"testing"

	"github.com/dsfs/dsfs/safetensors"
)

// The published figures of DeepSeek-V4.1-Flash (FORMATS.md).
const (
	realTensors = 96_085
	realBytes   = 475.2 * (1 << 30)
	realShards  = 48
)

func TestFullSparse(t *testing.T) {
	dir := t.TempDir()
	if err := Write("v41-full-sparse", dir); err != nil {
		t.Fatal(err)
	}
	c := openCheckpoint(t, dir)
	if n := len(c.headers); n != realShards {
		t.Errorf("%d shards, want %d", n, realShards)
	}
	var tensors int
	var bytes, disk, size int64
	for name, h := range c.headers {
		tensors += len(h.Tensors)
		for _, tt := range h.Tensors {
			bytes += tt.Len()
		}
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(dir, name), &st); err != nil {
			t.Fatal(err)
		}
		disk += st.Blocks * 512
		size += st.Size
	}
	if d := math.Abs(float64(tensors)/realTensors - 1); d > 0.03 {
		t.Errorf("%d tensors, %.1f%% off the real %d", tensors, 100*d, realTensors)
	}
	if d := math.Abs(float64(bytes)/realBytes - 1); d > 0.03 {
		t.Errorf("%.1f GiB of tensors, %.1f%% off the real 475.2 GiB", float64(bytes)/(1<<30), 100*d)
	}
	// Headers only: a few hundred kB per shard, the rest holes.
	if disk > 64<<20 {
		t.Errorf("shards take %d MiB of disk for %d GiB; not sparse", disk>>20, size>>30)
	}
	if float64(size) < realBytes*0.97 {
		t.Errorf("shards are %d bytes, less than their tensors", size)
	}

	expert := regexp.MustCompile(`^layers\.(\d+)\.ffn\.experts\.(\d+)\.w[123]\.(weight|scale)$`)
	layers := map[string]bool{}
	experts := 0
	for name := range c.index.WeightMap {
		if m := expert.FindStringSubmatch(name); m != nil {
			experts++
			layers[m[1]] = true
		}
	}
	if experts != 40*384*6 || len(layers) != 40 {
		t.Errorf("%d routed expert tensors in %d layers, want 92160 in 40", experts, len(layers))
	}
	for _, tc := range []struct {
		name  string
		dtype safetensors.DType
		shape []int64
	}{
		{"layers.3.ffn.experts.0.w1.weight", safetensors.I8, []int64{2304, 2560}},
		{"layers.3.ffn.experts.0.w1.scale", safetensors.F8E8M0, []int64{2304, 160}},
		{"layers.42.ffn.experts.383.w2.weight", safetensors.I8, []int64{5120, 1152}},
		{"layers.42.ffn.experts.383.w2.scale", safetensors.F8E8M0, []int64{5120, 72}},
		{"layers.1.engram.embed.weight", safetensors.F8E4M3, []int64{384_000_000, 256}},
		{"layers.14.engram.embed.scale", safetensors.F8E8M0, []int64{384_000_000, 8}},
		{"mtp.2.ffn.experts.127.w3.weight", safetensors.I8, []int64{2304, 2560}},
		{"embed.weight", safetensors.BF16, []int64{129280, 5120}},
	} {
		tt, _ := c.tensor(t, tc.name)
		if tt.DType != tc.dtype || !slices.Equal(tt.Shape, tc.shape) {
			t.Errorf("%s: %s %v, want %s %v", tc.name, tt.DType, tt.Shape, tc.dtype, tc.shape)
		}
	}
	// The data reads as zeros.
	b := c.read(t, "layers.20.ffn.experts.100.w2.scale")
	if slices.ContainsFunc(b, func(x byte) bool { return x != 0 }) {
		t.Error("sparse data is not zero")
	}
	if _, err := os.Stat(filepath.Join(dir, "config.json")); err != nil {
		t.Error(err)
	}
}
