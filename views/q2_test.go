package views

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/dsfs/dsfs/blockcache"
	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/codecs"
	"github.com/dsfs/dsfs/codecs/iq2xxs"
	"github.com/dsfs/dsfs/codecs/q2k"
	"github.com/dsfs/dsfs/diskcache"
	"github.com/dsfs/dsfs/q2"
	"github.com/dsfs/dsfs/safetensors"
	"github.com/dsfs/dsfs/synth"
	"github.com/dsfs/dsfs/vfile"
	"golang.org/x/sync/errgroup"
)

// q2Set builds the q2/ view alone of the checkpoint in dir.
func q2Set(t *testing.T, dir string, opt Options) (*Set, *blockcache.Cache) {
	t.Helper()
	cat, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	opt.Views = []string{"q2"}
	s, err := Build(cat, opt)
	if err != nil {
		t.Fatal(err)
	}
	cache := blockcache.New(64<<20, 2)
	t.Cleanup(func() { cache.Close(); s.Close(); cat.Close() })
	return s, cache
}

// directQuantise quantises a whole MXFP4 expert matrix the plain way: one
// decode, one call of the ggml port.
func directQuantise(t *testing.T, tt *checkpoint.Tensor) []byte {
	t.Helper()
	in := 2 * tt.Shape[1]
	x := make([]float32, tt.Shape[0]*in)
	codecs.DecodeMXFP4(x, sourceBytes(t, tt), sourceBytes(t, tt.Scale))
	if tt.Proj == "w2" {
		out := make([]byte, q2k.RowBytes(len(x)))
		q2k.QuantizeRef(out, x)
		return out
	}
	out := make([]byte, iq2xxs.RowBytes(len(x)))
	iq2xxs.Quantize(out, x, nil)
	return out
}

func readDoc[T any](t *testing.T, n *vfile.Node) T {
	t.Helper()
	var v T
	if n == nil {
		t.Fatal("document missing")
	}
	b, err := n.Doc.Bytes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestQ2View checks every tensor of v41-tiny against the rules of
// FORMATS.md "q2/" and the plan against the catalog.
func TestQ2View(t *testing.T) {
	s, cache := q2Set(t, tinyDir, Options{})
	view := s.Root.Child("q2")
	files := viewTensors(t, view, cache)
	for name, p := range files {
		if !strings.HasPrefix(name, "quant-") || p.h.Metadata["dsfs.view"] != "q2" || p.h.Metadata["format"] != "pt" {
			t.Errorf("%s: name or metadata %v", name, p.h.Metadata)
		}
		if view.Child(name+".manifest.json") == nil {
			t.Errorf("%s has no digests (.manifest.json)", name)
		}
	}
	var quantised, dropped, external, native int
	checked := make(map[string]bool) // one quantised tensor per projection is recomputed the plain way
	for _, tt := range s.Cat.Tensors {
		b, out, ok := find(files, tt.Name)
		isScaleOfExpert := tt.ScaleOf != nil && tt.ScaleOf.Role == checkpoint.RoleRoutedExpert
		switch {
		case tt.Role == checkpoint.RoleRoutedExpert && !isScaleOfExpert:
			quantised++
			in := 2 * tt.Shape[1]
			rb := int64(iq2xxs.RowBytes(int(in)))
			if tt.Proj == "w2" {
				rb = int64(q2k.RowBytes(int(in)))
			}
			if !ok || out.DType != safetensors.U8 || fmt.Sprint(out.Shape) != fmt.Sprint([]int64{tt.Shape[0], rb}) {
				t.Fatalf("%s: got %v %v, want U8 [%d %d]", tt.Name, out.DType, out.Shape, tt.Shape[0], rb)
			}
			if !checked[tt.Proj] {
				checked[tt.Proj] = true
				if !bytes.Equal(b, directQuantise(t, tt)) {
					t.Fatalf("%s: view bytes differ from a direct quantisation", tt.Name)
				}
			}
		case isScaleOfExpert:
			dropped++
			if ok {
				t.Errorf("%s: the scale of a quantised expert is served", tt.Name)
			}
		case tt.Role == checkpoint.RoleEngram:
			external++
			if ok {
				t.Errorf("%s: an Engram table is copied", tt.Name)
			}
		default:
			native++
			if !ok || out.DType != tt.DType || fmt.Sprint(out.Shape) != fmt.Sprint(tt.Shape) || !bytes.Equal(b, sourceBytes(t, tt)) {
				t.Errorf("%s (%s): not copied unchanged", tt.Name, tt.Role)
			}
		}
	}
	if quantised == 0 || dropped != quantised || external == 0 || len(checked) != 3 {
		t.Fatalf("v41-tiny: %d quantised, %d dropped, %d external, projections checked %v", quantised, dropped, external, checked)
	}

	plan := readDoc[q2.PlanDoc](t, view.Child("plan.json"))
	tot := plan.Totals
	if tot.SourceTensors != len(s.Cat.Tensors) || tot.QuantisedTensors != quantised || tot.DroppedTensors != dropped ||
		tot.ExternalTensors != external || tot.NativeTensors != native || tot.SkippedTensors != 0 ||
		tot.OutputTensors != quantised+native || len(plan.Skipped) != 0 || len(plan.Dropped) != dropped || len(plan.External) != external {
		t.Fatalf("plan totals %+v; catalog: %d quantised, %d dropped, %d external, %d native", tot, quantised, dropped, external, native)
	}
	for _, sh := range plan.Shards {
		p := files[sh.OutputShard]
		if p.h == nil || int64(len(p.data)) != sh.FileBytes {
			t.Fatalf("plan shard %s: %d bytes, file has %d", sh.OutputShard, sh.FileBytes, len(p.data))
		}
		for _, pt := range sh.Tensors {
			tt := s.Cat.Tensor(pt.Name)
			ht, _ := p.h.Find(pt.Name)
			if tt == nil || pt.SourceRange != [2]int64{tt.Offset, tt.Offset + tt.Size} || pt.SourceShard != tt.Shard.Name ||
				pt.OutputOffset != p.h.DataStart+ht.Begin || pt.OutputBytes != ht.Len() {
				t.Fatalf("plan entry %+v disagrees with the catalog or the file", pt)
			}
		}
	}

	m := readDoc[q2.DigestsDoc](t, view.Child("manifest.json"))
	if m.Totals.Totals != tot || m.Totals.ShardsProduced != len(plan.Shards) || m.DroppedExpertScales != dropped ||
		m.Totals.OutputBytesFromShardDigests != tot.OutputBytes || m.Totals.BytesByRole[q2.RoleQuantised].Bytes != tot.QuantisedBytes {
		t.Fatalf("manifest.json totals %+v disagree with the plan %+v", m.Totals, tot)
	}
	for _, e := range m.ExternalNative {
		tt := s.Cat.Tensor(e.Name)
		if e.SHA256 != sha256Hex(sourceBytes(t, tt)) {
			t.Fatalf("external %s: digest %s", e.Name, e.SHA256)
		}
	}
	for _, sh := range plan.Shards {
		sm := readDoc[q2.ShardDigests](t, view.Child(sh.OutputShard+".manifest.json"))
		p := files[sh.OutputShard]
		for _, mt := range sm.Tensors {
			b, _, _ := p.tensor(mt.Name)
			if mt.OutputSHA256 != sha256Hex(b) || mt.SourceSHA256 != sha256Hex(sourceBytes(t, s.Cat.Tensor(mt.Name))) {
				t.Fatalf("%s: %s: digests do not match the bytes", sh.OutputShard, mt.Name)
			}
		}
	}

	readme := string(readAll(t, view.Child("README.md"), cache))
	for _, want := range []string{
		fmt.Sprintf("| gate/up `w1`, `w3` | IQ2_XXS | 2.0625 | %d |", 2*quantised/3),
		fmt.Sprintf("| down `w2` | Q2_K | 2.625 | %d |", quantised/3),
		fmt.Sprintf("**%s** routed weights", withCommas(tot.QuantisedLogicalWeights)),
		q2.Quantiser, "## Limits", "## Reproducibility", "not imatrix-based",
		// No Hugging Face cache path and no --revision: the config names the
		// model, and the source is a local checkpoint of no known revision.
		"# DeepseekV41ForCausalLM checkpoint " + filepath.Base(tinyDir) + " mixed-Q2 routed experts\n",
		"Quantised derivative of a local checkpoint (`" + filepath.Base(tinyDir) + "`), served by dsfs",
		fmt.Sprintf("The %d MTP expert tensors (the DSpark draft stages' experts", 3*8*6),
		"are copied native, MXFP4 codes with their scales",
	} {
		if !strings.Contains(readme, want) {
			t.Errorf("README.md lacks %q", want)
		}
	}
	if strings.Contains(readme, "unknown") {
		t.Errorf("README.md says unknown:\n%s", readme)
	}
}

func sha256Hex(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// TestQ2SkippedAndEmptyShards: routed experts whose input dimension is not
// a multiple of 256 stay native and are listed under skipped; a source
// shard holding only Engram tables has no output shard.
func TestQ2SkippedAndEmptyShards(t *testing.T) {
	spec := synth.TinySpec()
	spec.MoEInter = 288 // w2 reads 288 inputs: not a whole number of 256-blocks
	spec.MTPLayers = 0
	spec.MaxShardBytes = 1 << 20 // each Engram table gets a shard of its own
	dir := t.TempDir()
	if err := synth.WriteSpec(spec, dir); err != nil {
		t.Fatal(err)
	}
	s, cache := q2Set(t, dir, Options{})
	view := s.Root.Child("q2")
	plan := readDoc[q2.PlanDoc](t, view.Child("plan.json"))
	skipped := make(map[string]string)
	for _, sk := range plan.Skipped {
		skipped[sk.Name] = sk.Reason
	}
	files := viewTensors(t, view, cache)
	var w2 int
	for _, tt := range s.Cat.Tensors {
		if tt.Role != checkpoint.RoleRoutedExpert || tt.Proj != "w2" {
			continue
		}
		b, out, ok := find(files, tt.Name)
		if !ok || out.DType != tt.DType || !bytes.Equal(b, sourceBytes(t, tt)) {
			t.Fatalf("%s: not native", tt.Name)
		}
		if tt.ScaleOf == nil {
			w2++
			if !strings.Contains(skipped[tt.Name], "input dimension 288 is not a multiple of 256") {
				t.Fatalf("%s: skipped reason %q", tt.Name, skipped[tt.Name])
			}
		}
	}
	if w2 == 0 || len(skipped) != w2 || plan.Totals.SkippedTensors != w2 {
		t.Fatalf("%d w2 matrices, %d skipped, totals %+v", w2, len(skipped), plan.Totals)
	}
	engramOnly := 0
	for _, sh := range s.Cat.Shards {
		only := true
		for _, tt := range sh.Tensors {
			only = only && tt.Role == checkpoint.RoleEngram
		}
		if only {
			engramOnly++
		}
	}
	if engramOnly == 0 || len(plan.Shards) != len(s.Cat.Shards)-engramOnly {
		t.Fatalf("%d source shards, %d of them Engram only, %d output shards", len(s.Cat.Shards), engramOnly, len(plan.Shards))
	}
	if !strings.Contains(string(readAll(t, view.Child("README.md"), cache)), fmt.Sprintf("%d main-layer routed expert matrices stay native", w2)) {
		t.Error("README.md does not mention the skipped matrices")
	}
}

// TestQ2DiskCache reads q2/ twice through two plans sharing a disk cache:
// the second computes nothing and serves the same bytes, the shards'
// digests included; a corrupt entry is recomputed, never served.
func TestQ2DiskCache(t *testing.T) {
	dir := t.TempDir()
	open := func() (*Set, *blockcache.Cache, *diskcache.Cache) {
		dc, err := diskcache.Open(dir, 0, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		s, cache := q2Set(t, tinyDir, Options{DiskCache: dc})
		return s, cache, dc
	}
	const shard = "quant-00004-of-00014.safetensors"
	s1, c1, _ := open()
	first := readAll(t, s1.Root.Child("q2").Child(shard), c1)
	st1 := s1.Stats()["q2"].(q2.Stats)
	if st1.Quantised == 0 || st1.FromDiskCache != 0 {
		t.Fatalf("first read: %+v", st1)
	}
	// The shard's digests need every block of the shard again: the disk
	// has them.
	man1 := readAll(t, s1.Root.Child("q2").Child(shard+".manifest.json"), c1)
	if st := s1.Stats()["q2"].(q2.Stats); st.Quantised != st1.Quantised || st.FromDiskCache != st1.Quantised {
		t.Fatalf("digests after the shard: %+v", st)
	}

	s2, c2, dc2 := open()
	second := readAll(t, s2.Root.Child("q2").Child(shard), c2)
	man2 := readAll(t, s2.Root.Child("q2").Child(shard+".manifest.json"), c2)
	st2 := s2.Stats()["q2"].(q2.Stats)
	if !bytes.Equal(first, second) || !bytes.Equal(man1, man2) {
		t.Fatal("bytes served from the disk cache differ")
	}
	if st2.Quantised != 0 || st2.FromDiskCache == 0 || dc2.Stats().Hits == 0 {
		t.Fatalf("second read recomputed: %+v, disk %+v", st2, dc2.Stats())
	}

	// Damage every entry: the third read recomputes them all.
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || !fi.Mode().IsRegular() || fi.Name() == diskcache.Marker {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		b[len(b)/2] ^= 0x40
		return os.WriteFile(p, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	s3, c3, dc3 := open()
	third := readAll(t, s3.Root.Child("q2").Child(shard), c3)
	st3 := s3.Stats()["q2"].(q2.Stats)
	if !bytes.Equal(first, third) || st3.FromDiskCache != 0 || st3.Quantised != st1.Quantised || dc3.Stats().Corrupt == 0 {
		t.Fatalf("after damage: equal %v, %+v, disk %+v", bytes.Equal(first, third), st3, dc3.Stats())
	}
}

// TestQ2OddScales: NaN scales (255) and scales whose decode overflows
// float32 are served without failing the read, the same bytes each time.
func TestQ2OddScales(t *testing.T) {
	dir := t.TempDir()
	if err := synth.Write("v41-tiny", dir); err != nil {
		t.Fatal(err)
	}
	const name = "layers.1.ffn.experts.2.w1"
	if err := synth.PatchTensor(dir, name+".scale", func(b []byte) { b[0], b[1], b[17] = 255, 254, 0 }); err != nil {
		t.Fatal(err)
	}
	var got [][]byte
	for range 2 {
		s, _ := q2Set(t, dir, Options{})
		tt := findQ2Tensor(t, s, name+".weight")
		b := make([]byte, tt.Blocks.Size(0))
		if err := tt.Blocks.Compute(context.Background(), 0, b); err != nil {
			t.Fatal(err)
		}
		got = append(got, b)
	}
	if !bytes.Equal(got[0], got[1]) {
		t.Fatal("odd scales give different bytes on two computations")
	}
}

// TestQ2Cancel: a computation whose reader has gone stops with its error.
func TestQ2Cancel(t *testing.T) {
	s, _ := q2Set(t, tinyDir, Options{})
	tt := findQ2Tensor(t, s, "layers.1.ffn.experts.0.w1.weight")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := tt.Blocks.Compute(ctx, 0, make([]byte, tt.Blocks.Size(0)))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Compute after cancel: %v", err)
	}
}

// TestQ2DocumentsDeterministic: two plans of one source write the same
// documents, byte for byte (none holds a clock).
func TestQ2DocumentsDeterministic(t *testing.T) {
	var docs [2][]string
	for i := range docs {
		s, cache := q2Set(t, tinyDir, Options{Revision: "r1"})
		for _, name := range []string{"plan.json", "README.md", "model.safetensors.index.json"} {
			docs[i] = append(docs[i], string(readAll(t, s.Root.Child("q2").Child(name), cache)))
		}
	}
	for j := range docs[0] {
		if docs[0][j] != docs[1][j] {
			t.Fatalf("document %d differs between two plans", j)
		}
	}
	if !strings.Contains(docs[0][0], `"source_revision": "r1"`) {
		t.Fatal("plan.json does not record the revision given")
	}
}

func findQ2Tensor(t *testing.T, s *Set, name string) *q2.Tensor {
	t.Helper()
	q, err := q2.New(s.Cat, q2Options(s.Opt))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range q.Quantised() {
		if tt.Name == name {
			return tt
		}
	}
	t.Fatalf("%s is not quantised", name)
	return nil
}

// withCommas writes n with thousands separators, as README.md does.
func withCommas(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// TestQ2QuantiseBounded: however many blocks are computed at once, no more
// chunks are quantised at a time than there are cores, and the bytes are
// those of a lone computation.
func TestQ2QuantiseBounded(t *testing.T) {
	s, _ := q2Set(t, tinyDir, Options{})
	tt := findQ2Tensor(t, s, "layers.1.ffn.experts.0.w1.weight")
	rows := tt.Shape[0]
	w, sc, err := tt.ReadSource(0, rows)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, rows*tt.RowBytes())
	if err := tt.Quantise(context.Background(), w, sc, want); err != nil {
		t.Fatal(err)
	}

	var running, most atomic.Int64
	typ := *tt.Type
	typ.Quantise = func(dst []byte, src []float32) {
		n := running.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		// Yield so that any other chunk allowed to run enters meanwhile.
		for range 200 {
			runtime.Gosched()
		}
		tt.Type.Quantise(dst, src)
		running.Add(-1)
	}
	counted := *tt
	counted.Type = &typ
	procs := runtime.GOMAXPROCS(0)
	got := make([][]byte, 2*procs+2)
	var eg errgroup.Group
	for i := range got {
		got[i] = make([]byte, len(want))
		eg.Go(func() error { return counted.Quantise(context.Background(), w, sc, got[i]) })
	}
	if err := eg.Wait(); err != nil {
		t.Fatal(err)
	}
	if m := most.Load(); m > int64(procs) {
		t.Errorf("%d chunks quantised at once on %d cores", m, procs)
	}
	for i, g := range got {
		if !bytes.Equal(g, want) {
			t.Fatalf("computation %d gave different bytes", i)
		}
	}
}
