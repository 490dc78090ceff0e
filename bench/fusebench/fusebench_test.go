package main

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{9, 9, 1, 9, 1}, 9},
	} {
		if got := median(tc.in); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestPairedRatios(t *testing.T) {
	hot := func(mbps, cpu float64) read {
		return read{Bytes: 1e9, Time: time.Duration(1e9 / mbps * 1e6), ServerCPU: time.Duration(cpu * 1e6), SourceHot: 1}
	}
	cold := hot(100, 100)
	cold.SourceHot = hotEnough / 2
	for _, tc := range []struct {
		name        string
		dsfs, memfs []read
		mbps, cpu   []float64
	}{
		{"none", nil, nil, nil, nil},
		{"pass by pass, not median by median",
			[]read{hot(100, 300), hot(400, 200)}, []read{hot(200, 100), hot(400, 400)},
			[]float64{0.5, 1}, []float64{3, 0.5}},
		{"a cold read drops its pair", []read{cold, hot(100, 100)}, []read{hot(50, 50), hot(50, 50)},
			[]float64{2}, []float64{2}},
		{"an unpaired read is left out", []read{hot(100, 100), hot(1, 1)}, []read{hot(100, 100)},
			[]float64{1}, []float64{1}},
	} {
		mbps := pairedRatios(tc.dsfs, tc.memfs, read.MBps)
		cpu := pairedRatios(tc.dsfs, tc.memfs, read.cpuPerGB)
		if !approx(mbps, tc.mbps) || !approx(cpu, tc.cpu) {
			t.Errorf("%s: MB/s ratios %v, CPU ratios %v; want %v and %v", tc.name, mbps, cpu, tc.mbps, tc.cpu)
		}
	}
}

// approx reports whether a and b hold the same values within 1e-9.
func approx(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Abs(a[i]-b[i]) > 1e-9 {
			return false
		}
	}
	return true
}

func TestParseLsR(t *testing.T) {
	out := `/m:
total 0
drwxr-xr-x 0 root root 0 2026-11-30 03:45 nvfp4
-r--r--r-- 0 root root 12 2026-11-30 03:45 top file

/m/nvfp4:
total 3
-r--r--r-- 0 root root 1609861296 2026-11-30 03:45 model-00001-of-00002.safetensors
-r--r--r-- 0 root root 0 2026-11-30 03:45 TRANSCODE.json
lrwxrwxrwx 1 root root 4 2026-11-30 03:45 link -> x
`
	want := map[string]int64{
		"top file":                               12,
		"nvfp4/model-00001-of-00002.safetensors": 1609861296,
		"nvfp4/TRANSCODE.json":                   0,
	}
	if got := parseLsR(out, "/m"); !reflect.DeepEqual(got, want) {
		t.Errorf("parseLsR = %v, want %v", got, want)
	}
}

func TestParseCodecBench(t *testing.T) {
	for _, tc := range []struct {
		name, out string
		want      []float64
		err       bool
	}{
		{"cpu 1", "goos: linux\nBenchmarkEngramFP4 \t 1869\t 625502 ns/op\t1728.76 MB/s\nBenchmarkEngramFP4 \t 1926\t 624822 ns/op\t1730.64 MB/s\nPASS\n",
			[]float64{1728.76, 1730.64}, false},
		{"cpu suffix, other benchmarks", "BenchmarkEngramCosine-2 10 1 ns/op 5000 MB/s\nBenchmarkEngramFP4-2 10 1 ns/op 999.5 MB/s\n",
			[]float64{999.5}, false},
		{"no MB/s", "BenchmarkEngramFP4 10 1 ns/op\n", nil, true},
		{"nothing", "PASS\n", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "out")
			if err := os.WriteFile(p, []byte(tc.out), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := parseCodecBench(p)
			if (err != nil) != tc.err {
				t.Fatalf("err = %v, want error %v", err, tc.err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// hdr builds a header whose tensors lie back to back in the order given.
func hdr(ts ...any) header {
	h := header{Tensors: make(map[string]tensorInfo)}
	var off int64
	for i := 0; i < len(ts); i += 3 {
		n := ts[i+2].(int)
		h.Tensors[ts[i].(string)] = tensorInfo{DType: ts[i+1].(string), Shape: []int64{int64(n) / 256, 256}, Offsets: [2]int64{off, off + int64(n)}}
		off += int64(n)
	}
	return h
}

func TestPredictDataBytes(t *testing.T) {
	src := map[string]header{
		"a": hdr(
			"layers.3.ffn.experts.0.w1.weight", "I8", 1024,
			"layers.3.ffn.experts.0.w1.scale", "F8_E8M0", 64,
			"layers.3.ffn.experts.0.w2.weight", "I8", 1024, // its scale is in b
			"layers.1.engram.embed.weight", "F8_E4M3", 2048,
			"layers.1.engram.embed.scale", "F8_E8M0", 64,
			"layers.3.attn.wq.weight", "F8_E4M3", 512, // FP8, not an expert
			"layers.3.attn.wq.scale", "F8_E8M0", 16,
		),
		"b": hdr(
			"layers.3.ffn.experts.0.w2.scale", "F8_E8M0", 32,
			"mtp.0.ffn.experts.1.w3.weight", "I8", 256,
			"mtp.0.ffn.experts.1.w3.scale", "F8_E8M0", 8, // MTP: stays MXFP4
			"layers.3.ffn.experts.1.w1.weight", "I8", 256, // no scale: passes through
		),
	}
	got := predictDataBytes(src)
	srcA, srcB := int64(1024+64+1024+2048+64+512+16), int64(32+256+8+256)
	want := map[string]map[string]int64{
		"nvfp4": {
			// Each expert matrix gains weight_scale_2 and input_scale (4 bytes each).
			"a": srcA + 64 + 8 + 2*32 + 8, // w1 scale doubled in place; w2's doubled scale arrives
			"b": srcB - 32,                // w2's scale leaves; the MTP expert's stays
		},
		"engram-fp4": {"a": srcA - 1024, "b": srcB},
		"nvfp4+engram-fp4": {
			"a": srcA + 64 + 8 + 2*32 + 8 - 1024,
			"b": srcB - 32,
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("predictDataBytes = %v, want %v", got, want)
	}
}

func TestReadHeader(t *testing.T) {
	body, err := json.Marshal(map[string]any{
		"__metadata__": map[string]string{"format": "pt"},
		"x":            map[string]any{"dtype": "F32", "shape": []int{2}, "data_offsets": []int{0, 8}},
		"y":            map[string]any{"dtype": "U8", "shape": []int{3}, "data_offsets": []int{8, 11}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for len(body)%8 != 0 {
		body = append(body, ' ')
	}
	file := binary.LittleEndian.AppendUint64(nil, uint64(len(body)))
	file = append(append(file, body...), make([]byte, 11)...)
	p := filepath.Join(t.TempDir(), "s.safetensors")
	if err := os.WriteFile(p, file, 0o644); err != nil {
		t.Fatal(err)
	}
	h, err := readHeader(p)
	if err != nil {
		t.Fatal(err)
	}
	if h.Len != int64(len(body)) || len(h.Tensors) != 2 || h.dataBytes() != 11 || 8+h.Len+h.dataBytes() != int64(len(file)) {
		t.Errorf("header = %+v, data %d; want length %d, 2 tensors, 11 data bytes", h, h.dataBytes(), len(body))
	}
	if err := os.WriteFile(p, file[:20], 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readHeader(p); err == nil {
		t.Error("truncated header: no error")
	}
}

func TestProcFields(t *testing.T) {
	pid := os.Getpid()
	for _, f := range []string{"VmHWM", "RssAnon"} {
		v, err := procStatus(pid, f)
		if err != nil || v <= 0 {
			t.Errorf("procStatus(self, %s) = %d, %v; want > 0", f, v, err)
		}
	}
	if _, err := procStatus(pid, "NoSuchField"); err == nil {
		t.Error("procStatus(self, NoSuchField): no error")
	}
	if _, err := cpuTime(pid); err != nil {
		t.Errorf("cpuTime(self): %v", err)
	}
}

func TestResident(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	// Just written, so in the page cache.
	if r, err := resident(p); err != nil || r != 1 {
		t.Errorf("resident(just written) = %v, %v; want 1", r, err)
	}
}
