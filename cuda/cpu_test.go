package cuda

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestAvailable checks that the reason CUDA cannot be used is one line, and
// that NewBackend gives the same reason.
func TestAvailable(t *testing.T) {
	err := Available()
	if err == nil {
		t.Log("CUDA is available")
		return
	}
	t.Logf("CUDA unavailable: %v", err)
	if msg := err.Error(); msg == "" || strings.Contains(msg, "\n") {
		t.Errorf("reason %q is not one line", msg)
	}
	if _, berr := NewBackend(Options{}); berr == nil || berr.Error() != err.Error() {
		t.Errorf("NewBackend: %v, want %v", berr, err)
	}
}

// TestKernelNames checks that every kernel the backend launches is defined
// by the sources and every kernel defined is launched.
func TestKernelNames(t *testing.T) {
	srcs, err := sources()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range srcs {
		got = append(got, s.kernels...)
	}
	slices.Sort(got)
	if want := slices.Sorted(slices.Values(launched)); !slices.Equal(got, want) {
		t.Errorf("kernels defined %v, launched %v", got, want)
	}
}

func TestTargetFor(t *testing.T) {
	nv := &nvrtc{major: 11, minor: 8, archs: []int{35, 50, 60, 70, 75, 80, 86, 89, 90}}
	tests := []struct {
		cc   int
		want string
		fail bool
	}{
		{cc: 90, want: "sm_90"},
		{cc: 80, want: "sm_80"},
		{cc: 100, want: "compute_90"}, // newer than NVRTC: PTX for the driver to compile
		{cc: 87, want: "compute_86"},
		{cc: 30, fail: true},
	}
	for _, tc := range tests {
		tg, err := nv.targetFor(tc.cc)
		switch {
		case tc.fail && err == nil:
			t.Errorf("sm_%d: target %s, want an error", tc.cc, tg)
		case !tc.fail && (err != nil || tg.String() != tc.want):
			t.Errorf("sm_%d: target %s, %v; want %s", tc.cc, tg, err, tc.want)
		}
	}
}

func TestSizeClass(t *testing.T) {
	for _, tc := range []struct{ n, want uint64 }{
		{1, 512}, {512, 512}, {513, 1024}, {4096, 4096}, {4097, 8192}, {11534336, 16 << 20},
	} {
		if got := sizeClass(tc.n); got != tc.want {
			t.Errorf("sizeClass(%d) = %d, want %d", tc.n, got, tc.want)
		}
	}
	var a allocator
	a.put(0x1000, 512)
	a.put(0x2000, 1024)
	if a.cached != 1536 || a.take(1024) != 0x2000 || a.take(1024) != 0 || a.cached != 512 {
		t.Errorf("allocator after puts and takes: %+v", a)
	}
	if all := a.drain(); len(all) != 1 || all[0] != 0x1000 || a.cached != 0 {
		t.Errorf("drain: %v, cached %d", all, a.cached)
	}
}

// TestCache checks that entries round-trip, that keys separate sources,
// options and NVRTC versions, and that every kind of damage to an entry
// reads as a miss (so the kernel is recompiled).
func TestCache(t *testing.T) {
	c := kernelCache{dir: filepath.Join(t.TempDir(), "cuda")}
	key := cacheKey("src", []string{"-arch=sm_90"}, "12.4")
	for _, other := range []string{
		cacheKey("src2", []string{"-arch=sm_90"}, "12.4"),
		cacheKey("src", []string{"-arch=sm_80"}, "12.4"),
		cacheKey("src", []string{"-arch=sm_90"}, "12.5"),
		cacheKey("src", []string{"-arch=sm_9", "0"}, "12.4"),
	} {
		if other == key {
			t.Errorf("key collision: %s", key)
		}
	}
	if _, ok := c.get(key); ok {
		t.Fatal("hit in an empty cache")
	}
	image := []byte("\x7fELF image bytes")
	if err := c.put(key, image); err != nil {
		t.Fatal(err)
	}
	if got, ok := c.get(key); !ok || !bytes.Equal(got, image) {
		t.Fatalf("get = %q, %v", got, ok)
	}
	path := c.path(key)
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	damage := map[string]func([]byte) []byte{
		"flipped image byte": func(b []byte) []byte { b[len(b)-1] ^= 1; return b },
		"flipped checksum":   func(b []byte) []byte { b[len(cacheMagic)] ^= 1; return b },
		"truncated":          func(b []byte) []byte { return b[:len(b)-3] },
		"header only":        func(b []byte) []byte { return b[:len(cacheMagic)+10] },
		"wrong magic":        func(b []byte) []byte { b[0] = 'x'; return b },
		"empty":              func([]byte) []byte { return nil },
	}
	for name, f := range damage {
		if err := os.WriteFile(path, f(slices.Clone(good)), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, ok := c.get(key); ok {
			t.Errorf("%s: entry accepted", name)
		}
	}
	if err := c.put(key, image); err != nil { // a recompilation replaces it
		t.Fatal(err)
	}
	if got, ok := c.get(key); !ok || !bytes.Equal(got, image) {
		t.Errorf("after rewrite: get = %q, %v", got, ok)
	}
	if err := (kernelCache{}).put(key, image); err != nil {
		t.Errorf("disabled cache: put: %v", err)
	}
	if _, ok := (kernelCache{}).get(key); ok {
		t.Error("disabled cache: hit")
	}
}

func TestParsePrecision(t *testing.T) {
	for _, p := range []Precision{FP32, BF16} {
		if got, err := ParsePrecision(p.String()); err != nil || got != p {
			t.Errorf("ParsePrecision(%q) = %v, %v", p, got, err)
		}
	}
	if _, err := ParsePrecision("fp16"); err == nil {
		t.Error("ParsePrecision(fp16) accepted")
	}
}
