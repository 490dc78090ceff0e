package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dsfs/dsfs/inventory"
	"github.com/dsfs/dsfs/safetensors"
	"github.com/dsfs/dsfs/synth"
)

// TestReleasedLayouts mounts the released layouts of DeepSeek-V4.1-Flash
// and V4-Flash (sparse: headers real, data holes) and checks what dsfs
// makes of them against LAYOUTS.md: manifest/summary.json's totals, no
// tensor of role other, the expert matrices nvfp4/ converts (V4's mtp.0
// experts are MXFP4 like the main ones and are converted too), the Engram
// tables engram-fp4/ converts (engram.wkv, an FP8 projection, stays), and
// the mount's time to ready and peak memory (< 2 s, < 300 MB).
func TestReleasedLayouts(t *testing.T) {
	needMount(t)
	for _, tc := range []struct {
		preset        string
		shards        int
		tensors       int
		bytes         int64
		nvfp4Matrices int
		engramShards  []string
		mtpPerBlock   []int
		visionTensors int
		engramLayers  []int
	}{
		{"v41-full-sparse", 48, 96_085, 510_286_023_000, 40 * 384 * 3,
			[]string{"model-00047-of-00048.safetensors", "model-00048-of-00048.safetensors"},
			[]int{128, 128, 128}, 259 + 4 + 3, []int{1, 14}},
		{"v4-full-sparse", 46, 69_187, 159_609_485_896, 43 * 256 * 3, nil, []int{256}, 0, []int{}},
	} {
		t.Run(tc.preset, func(t *testing.T) {
			src := t.TempDir()
			if err := synth.Write(tc.preset, src); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			m := startMount(t, src, "--views", "nvfp4,engram-fp4,manifest")
			ready := time.Since(start)
			hwm := vmHWM(t, m.cmd.Process.Pid)
			t.Logf("%s: ready after %v (CPU %v), peak RSS %d MB", tc.preset, ready.Round(time.Millisecond), cpuTime(t, m.cmd.Process.Pid), hwm>>20)
			if hwm > 300<<20 {
				t.Errorf("peak RSS %d MB, want under 300 MB", hwm>>20)
			}
			// The time target holds on a machine with a core to spare;
			// bench/mount-release.sh measures it on a quiet one.
			if load := loadPerCPU(t); ready > 2*time.Second && load < 1 {
				t.Errorf("ready after %v at a load of %.1f per CPU, want under 2 s", ready, load)
			}

			var o inventory.Overview
			catJSON(t, m.path("manifest", "summary.json"), &o)
			if o.Shards != tc.shards || o.Tensors != tc.tensors || o.Bytes != tc.bytes || len(o.Problems) != 0 {
				t.Errorf("summary: %d shards, %d tensors, %d bytes, problems %v; want %d, %d, %d, none",
					o.Shards, o.Tensors, o.Bytes, o.Problems, tc.shards, tc.tensors, tc.bytes)
			}
			if n := o.ByRole["other"].Count; n != 0 {
				t.Errorf("%d tensors of role other", n)
			}
			if fmt.Sprint(o.Model.MTPExpertsPerBlock) != fmt.Sprint(tc.mtpPerBlock) || o.Model.Vision.Tensors != tc.visionTensors ||
				fmt.Sprint(o.Model.EngramLayers) != fmt.Sprint(tc.engramLayers) {
				t.Errorf("model facts %+v", o.Model)
			}

			// nvfp4/: a weight_scale_2 and an input_scale per converted
			// (routed) expert matrix; the MTP experts keep their MXFP4 .scale.
			var ix struct {
				WeightMap map[string]string `json:"weight_map"`
			}
			catJSON(t, m.path("nvfp4", "model.safetensors.index.json"), &ix)
			converted, inputScales, mtpKept := 0, 0, 0
			for name := range ix.WeightMap {
				switch {
				case strings.HasSuffix(name, ".weight_scale_2"):
					converted++
				case strings.HasSuffix(name, ".input_scale"):
					inputScales++
				case strings.HasPrefix(name, "mtp.") && strings.Contains(name, ".ffn.experts.") && strings.HasSuffix(name, ".scale"):
					mtpKept++
				}
			}
			mtpMatrices := 0
			for _, n := range tc.mtpPerBlock {
				mtpMatrices += 3 * n
			}
			if converted != tc.nvfp4Matrices || inputScales != converted || mtpKept != mtpMatrices {
				t.Errorf("nvfp4/ converts %d expert matrices (%d input scales), keeps %d MTP matrices MXFP4; want %d, %d",
					converted, inputScales, mtpKept, tc.nvfp4Matrices, mtpMatrices)
			}

			// engram-fp4/: the tables become packed E2M1, wkv stays FP8.
			tables := 0
			for _, shard := range tc.engramShards {
				h := header(t, m.path("engram-fp4", shard))
				for _, tt := range h.Tensors {
					switch {
					case strings.HasSuffix(tt.Name, "engram.embed.weight"):
						if tt.DType == safetensors.I8 && tt.Shape[1] == 128 {
							tables++
						} else {
							t.Errorf("%s: %s %v, want I8 [rows, 128]", tt.Name, tt.DType, tt.Shape)
						}
					case strings.HasSuffix(tt.Name, "engram.wkv.weight") && tt.DType != safetensors.F8E4M3:
						t.Errorf("%s: %s, want F8_E4M3 as in the source", tt.Name, tt.DType)
					}
				}
			}
			if tables != len(tc.engramShards) {
				t.Errorf("engram-fp4/ converts %d tables, want %d", tables, len(tc.engramShards))
			}
		})
	}
}

// header reads the safetensors header of a file through the mount.
func header(t *testing.T, path string) *safetensors.Header {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	h, err := safetensors.ReadHeader(f, st.Size())
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return h
}

// vmHWM is the peak resident memory of a process, in bytes.
func vmHWM(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

// cpuTime is the user and system CPU time a process has used.
func cpuTime(t *testing.T, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// Fields after the command name in parentheses; utime and stime are
	// the 14th and 15th, in clock ticks (100 a second on Linux).
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+s) * 10 * time.Millisecond
}

// loadPerCPU is the one-minute load average per CPU.
func loadPerCPU(t *testing.T) float64 {
	t.Helper()
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		t.Fatal(err)
	}
	l, err := strconv.ParseFloat(strings.Fields(string(b))[0], 64)
	if err != nil {
		t.Fatal(err)
	}
	return l / float64(runtime.NumCPU())
}

// TestHashLayerIDTypes mounts v4-tiny with its tid2eid tables as released
// (I64) and as I32: the catalog calls them router tensors without a
// problem, and trace/ runs the hash-routed layer 0 on either.
func TestHashLayerIDTypes(t *testing.T) {
	needMount(t)
	prompts := filepath.Join(t.TempDir(), "prompts.json")
	if err := os.WriteFile(prompts, []byte(`[{"id": "p", "label": "p", "token_ids": [0, 5, 17, 300, 2, 9, 1000, 4]}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, dt := range []safetensors.DType{safetensors.I64, safetensors.I32} {
		t.Run(string(dt), func(t *testing.T) {
			s := synth.V4TinySpec()
			s.HashIDType = dt
			src := t.TempDir()
			if err := synth.WriteSpec(s, src); err != nil {
				t.Fatal(err)
			}
			m := startMount(t, src, "--views", "manifest,trace", "--trace-prompts", prompts)
			var o inventory.Overview
			catJSON(t, m.path("manifest", "summary.json"), &o)
			if len(o.Problems) != 0 || o.ByDType[string(dt)].Count != 2 || o.ByRole["other"].Count != 0 {
				t.Errorf("summary: problems %v, %d %s tensors, %d of role other", o.Problems, o.ByDType[string(dt)].Count, dt, o.ByRole["other"].Count)
			}
			var layer struct {
				HashRouted bool `json:"hash_routed"`
			}
			catJSON(t, m.path("trace", "layers", "00.json"), &layer)
			if !layer.HashRouted {
				t.Error("trace/layers/00.json: layer 0 not hash-routed")
			}
		})
	}
}
