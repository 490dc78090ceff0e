package q2check

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dsfs/dsfs/internal/tinyckpt"
	"github.com/dsfs/dsfs/q2"
	"github.com/dsfs/dsfs/vfile"

	"github.com/dsfs/dsfs/blockcache"
	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/diskcache"
	"github.com/dsfs/dsfs/synth"
	"github.com/dsfs/dsfs/views"
)

// tinyDir holds a v41-tiny checkpoint written once for the package's tests.
var tinyDir string

func TestMain(m *testing.M) { tinyckpt.Main(m, "v41-tiny", &tinyDir) }

func plan(t *testing.T, opt q2.Options) *q2.Plan {
	t.Helper()
	cat, err := checkpoint.Open(tinyDir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	q, err := q2.New(cat, opt)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// exportQ2 writes the q2/ view as files, as `dsfs export` does, through a
// disk cache in cacheDir when it is not empty.
func exportQ2(t *testing.T, cacheDir string) string {
	t.Helper()
	var opt views.Options
	if cacheDir != "" {
		dc, err := diskcache.Open(cacheDir, 0, quietLog())
		if err != nil {
			t.Fatal(err)
		}
		opt.DiskCache = dc
	}
	cat, err := checkpoint.Open(tinyDir)
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	opt.Views = []string{"q2"}
	s, err := views.Build(cat, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cache := blockcache.New(64<<20, 2)
	defer cache.Close()
	out := t.TempDir()
	err = s.Root.Child("q2").Walk(func(p string, n *vfile.Node) error {
		dst := filepath.Join(out, filepath.FromSlash(p))
		switch {
		case n.IsDir():
			return os.MkdirAll(dst, 0o755)
		case n.Doc != nil:
			b, err := n.Doc.Bytes(context.Background())
			if err != nil {
				return err
			}
			return os.WriteFile(dst, b, 0o644)
		}
		b, err := io.ReadAll(io.NewSectionReader(vfile.NewReader(n.File, cache), 0, n.File.Size()))
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// flip changes one byte of a file.
func flip(t *testing.T, p string, off int64) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := []byte{0}
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x5a
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func TestVerifyExport(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	out := exportQ2(t, t.TempDir()) // the cache spares the shards' digests a second quantisation
	q := plan(t, q2.Options{})
	r, err := Verify(context.Background(), q, out, 0, seed, nil)
	if err != nil {
		t.Fatal(err)
	}
	var tensors int64
	for _, sh := range q.Shards {
		tensors += int64(len(sh.Tensors))
	}
	if !r.OK() || r.Kind != "export" || r.Sampled != r.Blocks || r.Match != r.Blocks || r.Digests != tensors {
		t.Fatalf("clean export: %+v", r)
	}

	// A changed quantised byte is caught by the block and by its digest; a
	// changed native byte by its digest only, so it needs --sample 0.
	qt := q.Quantised()[5]
	var native *q2.Tensor
	shardOf := make(map[*q2.Tensor]string)
	for _, sh := range q.Shards {
		for _, t := range sh.Tensors {
			shardOf[t] = sh.Name
			if t.Type == nil && native == nil {
				native = t
			}
		}
	}
	flip(t, filepath.Join(out, shardOf[qt]), qt.Offset+qt.Size/2)
	flip(t, filepath.Join(out, shardOf[native]), native.Offset)
	r, err = Verify(context.Background(), q, out, 0, seed, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.OK() || r.Differ != 1 || r.DigestsDiffer != 2 || len(r.Failures) != 3 {
		t.Fatalf("seed %d: damaged export: %+v", seed, r)
	}
	// A sample touching only other blocks passes; one of every block fails.
	r, err = Verify(context.Background(), q, out, 3, seed, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Sampled != 3 || r.Match+r.Differ != 3 {
		t.Fatalf("seed %d: sample of 3: %+v", seed, r)
	}
}

func TestVerifyCache(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	dir := t.TempDir()
	exportQ2(t, dir)
	q := plan(t, q2.Options{})
	r, err := Verify(context.Background(), q, dir, 0, seed, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK() || r.Kind != "cache" || r.Match != r.Blocks || r.Absent != 0 {
		t.Fatalf("full cache: %+v", r)
	}
	// Remove one entry and damage another.
	qt := q.Quantised()
	var damaged string
	for i, tt := range qt[:2] {
		lo, hi := tt.BlockRows(0)
		w, sc, err := tt.ReadSource(lo, hi)
		if err != nil {
			t.Fatal(err)
		}
		k := tt.BlockKey(w, sc).String()
		p := filepath.Join(dir, k[:2], k)
		if i == 0 {
			err = os.Remove(p)
		} else {
			flip(t, p, 100)
			damaged = p
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	r, err = Verify(context.Background(), q, dir, 0, seed, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.OK() || r.Absent != 1 || r.Corrupt != 1 || r.Match != r.Blocks-2 {
		t.Fatalf("damaged cache: %+v", r)
	}
	// The verifier reports; it does not repair.
	if _, err := os.Stat(damaged); err != nil {
		t.Fatalf("verify removed the corrupt entry: %v", err)
	}
}

func TestVerifyRefusesOtherDirectories(t *testing.T) {
	q := plan(t, q2.Options{})
	if _, err := Verify(context.Background(), q, t.TempDir(), 1, 1, nil); err == nil || !strings.Contains(err.Error(), "neither") {
		t.Fatalf("Verify of an empty directory: %v", err)
	}
}

func TestAudit(t *testing.T) {
	q := plan(t, q2.Options{})
	var last, total int64
	r, err := Audit(context.Background(), q, 0, func(done, tot int64) { last, total = done, tot })
	if err != nil {
		t.Fatal(err)
	}
	if r.Tensors != len(q.Quantised()) || len(r.Projections) != 3 || last != total || total == 0 {
		t.Fatalf("audit of every tensor: %d tensors, %d projections, progress %d/%d", r.Tensors, len(r.Projections), last, total)
	}
	for _, p := range r.Projections {
		// 2-bit codes of Gaussian-like weights: ggml's own figures for
		// these types are a relative RMS error of roughly 0.3.
		if !(p.Cosine > 0.9 && p.RelRMS < 0.45 && p.MinCosine <= p.MeanCosine && p.MaxRelRMS >= p.MeanRelRMS && p.Tensors == 48) {
			t.Errorf("%s: %+v", p.Projection, p)
		}
		if want := map[string]string{"w1": "IQ2_XXS", "w2": "Q2_K", "w3": "IQ2_XXS"}[p.Projection]; p.GGMLType != want {
			t.Errorf("%s audited as %s", p.Projection, p.GGMLType)
		}
	}
	s, err := Audit(context.Background(), q, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.Tensors != 6 || s.Sample != 2 {
		t.Fatalf("sample of 2 per projection audited %d tensors", s.Tensors)
	}
	if _, err := json.Marshal(r); err != nil {
		t.Fatal(err)
	}
}

// TestRatioJSON: an undefined figure is null, so audit.json always
// encodes.
func TestRatioJSON(t *testing.T) {
	tests := []struct {
		r    Ratio
		want string
	}{{0.5, "0.5"}, {Ratio(math.NaN()), "null"}, {Ratio(math.Inf(1)), "null"}, {1, "1"}}
	for _, tt := range tests {
		b, err := json.Marshal(tt.r)
		if err != nil || !bytes.Equal(b, []byte(tt.want)) {
			t.Errorf("%v: %s %v, want %s", float64(tt.r), b, err, tt.want)
		}
	}
}

// TestAuditZeroTensor: an expert of zeros has no defined cosine; the
// audit says so instead of failing.
func TestAuditZeroTensor(t *testing.T) {
	dir := t.TempDir()
	if err := synth.Write("v41-tiny", dir); err != nil {
		t.Fatal(err)
	}
	const name = "layers.1.ffn.experts.0.w2.weight"
	if err := synth.PatchTensor(dir, name, func(b []byte) { clear(b) }); err != nil {
		t.Fatal(err)
	}
	cat, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	q, err := q2.New(cat, q2.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := Audit(context.Background(), q, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, at := range r.PerTensor {
		if at.Name == name && !math.IsNaN(float64(at.Cosine)) {
			t.Fatalf("%s: cosine %v of a zero tensor", name, at.Cosine)
		}
	}
	for _, p := range r.Projections {
		if math.IsNaN(float64(p.MeanCosine)) || math.IsNaN(float64(p.Cosine)) {
			t.Fatalf("%s: one zero tensor made the projection undefined: %+v", p.Projection, p)
		}
	}
}
