package inventory

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dsfs/dsfs/internal/tinyckpt"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/safetensors"
	"github.com/dsfs/dsfs/synth"
)

// tinyDir holds a v41-tiny checkpoint written once for the package's tests;
// tests that change it copy it first.
var tinyDir string

func TestMain(m *testing.M) { tinyckpt.Main(m, "v41-tiny", &tinyDir) }

// copyDir copies the checkpoint in src (inference/ included) into a new
// temporary directory.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	return dst
}

func open(t *testing.T, dir string) *checkpoint.Catalog {
	t.Helper()
	cat, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	return cat
}

// plant puts bad values into a copy of v41-tiny: a NaN block scale of an
// expert, an infinity in the BF16 embedding, a NaN E4M3 code in an
// attention weight and a NaN in an F32 tensor.
func plant(t *testing.T) string {
	t.Helper()
	dir := copyDir(t, tinyDir)
	for _, p := range []struct {
		name string
		edit func([]byte)
	}{
		{"layers.2.ffn.experts.3.w2.scale", func(b []byte) { b[5] = 255 }},
		{"embed.weight", func(b []byte) { binary.LittleEndian.PutUint16(b[14:], 0x7f80) }}, // element 7: +Inf
		{"layers.1.attn.wq_a.weight", func(b []byte) { b[100] = 0xff }},
		{"layers.0.hc_attn_fn", func(b []byte) { binary.LittleEndian.PutUint32(b[8:], math.Float32bits(float32(math.NaN()))) }},
	} {
		if err := synth.PatchTensor(dir, p.name, p.edit); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestRecordsMatchReference checks every record of a planted v41-tiny
// against values computed from the raw bytes by ref_test.go.
func TestRecordsMatchReference(t *testing.T) {
	dir := plant(t)
	cat := open(t, dir)
	recs, err := New(cat, Options{}).Records(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != len(cat.Tensors) {
		t.Fatalf("%d records for %d tensors", len(recs), len(cat.Tensors))
	}
	raw := newRawData(dir)
	for i, r := range recs {
		tn := cat.Tensors[i]
		if r.Name != tn.Name {
			t.Fatalf("record %d is %s, want %s (name order)", i, r.Name, tn.Name)
		}
		data := raw.tensor(t, tn.Shard.Name, tn.Name)
		if r.SHA256 != refSHA(data) {
			t.Errorf("%s: sha256 %s, want %s", r.Name, r.SHA256, refSHA(data))
		}
		if r.NBytes != int64(len(data)) || !r.NBytesOK || r.ByteRange[1]-r.ByteRange[0] != r.NBytes {
			t.Errorf("%s: nbytes %d ok %v range %v, want %d", r.Name, r.NBytes, r.NBytesOK, r.ByteRange, len(data))
		}
		var scale []byte
		if tn.Scale != nil {
			scale = raw.tensor(t, tn.Scale.Shard.Name, tn.Scale.Name)
		}
		want := refValues(tn, data, scale)
		if !reflect.DeepEqual(r.Values, want) {
			got, _ := json.Marshal(r.Values)
			exp, _ := json.Marshal(want)
			t.Errorf("%s: values\n got %s\nwant %s", r.Name, got, exp)
		}
	}
}

// TestPlantedProblems checks that each planted fault is listed under the
// tensor's name, in the seed's summary and in the problems.
func TestPlantedProblems(t *testing.T) {
	cat := open(t, plant(t))
	m, err := New(cat, Options{}).Manifest(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	wantKinds := [][2]string{
		{"embed.weight", "nonfinite"},
		{"layers.0.hc_attn_fn", "nonfinite"},
		{"layers.1.attn.wq_a.weight", "nonfinite"},
		{"layers.1.attn.wq_a.weight", "nan"},
		{"layers.2.ffn.experts.3.w2.scale", "nan"},
		{"layers.2.ffn.experts.3.w2.weight", "nonfinite"},
	}
	if !reflect.DeepEqual(m.Summary.Problems, wantKinds) {
		t.Errorf("summary problems %v, want %v", m.Summary.Problems, wantKinds)
	}
	var got []string
	for _, p := range m.Problems {
		got = append(got, p.Tensor+": "+p.Reason)
	}
	for _, want := range []string{
		"embed.weight: 1 of 524288 values are not finite",
		"layers.0.hc_attn_fn: 1 of 49152 values are not finite",
		"layers.1.attn.wq_a.weight: 1 E4M3 codes are NaN (0x7F or 0xFF)",
		"layers.1.attn.wq_a.weight: 1 decoded values are not finite (NaN scales or codes, or overflow)",
		"layers.2.ffn.experts.3.w2.scale: 1 of 4096 scales are NaN (E8M0 byte 255)",
		"layers.2.ffn.experts.3.w2.weight: 32 decoded values are not finite (NaN scales or codes, or overflow)",
	} {
		if !slices.Contains(got, want) {
			t.Errorf("problems lack %q; have:\n%s", want, strings.Join(got, "\n"))
		}
	}
	if len(got) != 6 {
		t.Errorf("%d problems, want 6:\n%s", len(got), strings.Join(got, "\n"))
	}
	if s := m.Summary; s.DecodedAllExactBF16 == nil || *s.DecodedAllExactBF16 {
		t.Errorf("decoded_all_exact_bf16 = %v with NaN decodes, want false", s.DecodedAllExactBF16)
	}
}

// writeBad writes a checkpoint of one hand-made shard: an MXFP4 weight and
// an FP8 weight whose scales do not fit, an FP8 weight with no scale, and
// a good MXFP4 pair.
func writeBad(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	ones := func(n int, b byte) []byte { return bytes.Repeat([]byte{b}, n) }
	err := synth.WriteShard(filepath.Join(dir, "model.safetensors"), nil, []synth.Tensor{
		{Name: "a.w1.weight", DType: safetensors.I8, Shape: []int64{64, 32}, Data: ones(64*32, 0x21)},
		{Name: "a.w1.scale", DType: safetensors.F8E8M0, Shape: []int64{64, 3}, Data: ones(64*3, 127)},
		{Name: "b.weight", DType: safetensors.F8E4M3, Shape: []int64{64, 64}, Data: ones(64*64, 0x38)},
		{Name: "b.scale", DType: safetensors.F8E8M0, Shape: []int64{5, 5}, Data: ones(25, 127)},
		{Name: "c.weight", DType: safetensors.F8E4M3, Shape: []int64{32, 32}, Data: ones(32*32, 0x38)},
		{Name: "d.w1.weight", DType: safetensors.I8, Shape: []int64{64, 32}, Data: ones(64*32, 0x21)},
		{Name: "d.w1.scale", DType: safetensors.F8E8M0, Shape: []int64{64, 2}, Data: ones(64*2, 127)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, checkpoint.ConfigName), []byte(`{"model_type": "test"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestScalesThatDoNotFit(t *testing.T) {
	cat := open(t, writeBad(t))
	m, err := New(cat, Options{}).Manifest(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]Record{}
	for _, r := range m.Tensors {
		byName[r.Name] = r
	}
	for _, name := range []string{"a.w1.weight", "b.weight"} {
		r := byName[name]
		if r.Scale == "" || r.Values == nil || r.Values.Pair == nil || r.Values.Pair.ShapeOK {
			t.Errorf("%s: scale %q values %+v, want its unfit scale and shape_ok false", name, r.Scale, r.Values)
		}
		if r.SHA256 == "" || r.Official != strings.ToLower(r.DType) {
			t.Errorf("%s: sha256 %q official %q, want hashed and the dtype", name, r.SHA256, r.Official)
		}
	}
	if r := byName["d.w1.weight"]; r.Official != "mxfp4" || r.Values.Pair == nil || !r.Values.Pair.ShapeOK ||
		r.Values.Pair.CodeHist[1] != 64*32 || r.Values.Pair.CodeHist[2] != 64*32 {
		t.Errorf("d.w1.weight: %+v, want a checked mxfp4 pair of codes 1 and 2", r.Values.Pair)
	}
	wantKinds := [][2]string{{"a.w1.weight", "scale shape"}, {"b.weight", "scale shape"}}
	if !reflect.DeepEqual(m.Summary.Problems, wantKinds) {
		t.Errorf("summary problems %v, want %v", m.Summary.Problems, wantKinds)
	}
	want := map[string]bool{ // tensor -> whether seen
		"a.w1.scale": false, "a.w1.weight": false, "b.scale": false, "b.weight": false, "c.weight": false,
	}
	for _, p := range m.Problems {
		if _, ok := want[p.Tensor]; !ok {
			t.Errorf("unexpected problem %s", p)
		}
		want[p.Tensor] = true
	}
	for name, seen := range want {
		if !seen {
			t.Errorf("no problem names %s; problems: %v", name, m.Problems)
		}
	}
}

func TestNBytesMismatch(t *testing.T) {
	tn := &checkpoint.Tensor{Name: "x.weight", Shard: &checkpoint.Shard{Name: "s.safetensors"}, DType: safetensors.BF16,
		Shape: []int64{3, 4}, Offset: 100, Size: 20, Layer: -1, Expert: -1, MTP: -1}
	cat := &checkpoint.Catalog{Tensors: []*checkpoint.Tensor{tn}}
	r := header(cat, tn, 2)
	if r.NBytesOK {
		t.Fatalf("nbytes_ok for 20 bytes of BF16 [3 4]")
	}
	ps := Problems([]Record{r})
	if len(ps) != 1 || ps[0].Tensor != "x.weight" || !strings.Contains(ps[0].Reason, "20 bytes") {
		t.Errorf("problems %v, want one naming x.weight and its 20 bytes", ps)
	}
	if s := Summarize([]Record{r}); !reflect.DeepEqual(s.Problems, [][2]string{{"x.weight", "nbytes"}}) {
		t.Errorf("summary problems %v", s.Problems)
	}
}

func TestNoHashReadsNothing(t *testing.T) {
	cat := open(t, tinyDir)
	inv := New(cat, Options{NoHash: true})
	m, err := inv.Manifest(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if p := inv.Progress().Snapshot(); p.HashedBytes != 0 || p.TotalBytes != 0 {
		t.Errorf("progress %+v, want nothing read", p)
	}
	if m.Hashed || m.NTensors != len(cat.Tensors) {
		t.Errorf("hashed %v, %d tensors", m.Hashed, m.NTensors)
	}
	for _, r := range m.Tensors {
		if r.SHA256 != "" || r.Values != nil {
			t.Fatalf("%s: sha256 %q values %v with NoHash", r.Name, r.SHA256, r.Values)
		}
	}
	if s := m.Summary; s.DecodedAllExactBF16 != nil || s.DecodedAbsMax != nil {
		t.Errorf("value fields set in a headers-only summary: %+v", s)
	}
}

func TestShardRecords(t *testing.T) {
	cat := open(t, tinyDir)
	inv := New(cat, Options{})
	sh := cat.Shards[1]
	m, err := inv.Manifest(context.Background(), sh.Name)
	if err != nil {
		t.Fatal(err)
	}
	if m.NTensors != len(sh.Tensors) || len(m.Shards) != 1 || m.Shards[0].Name != sh.Name {
		t.Fatalf("%d tensors in %v, want the %d of %s", m.NTensors, m.Shards, len(sh.Tensors), sh.Name)
	}
	var own int64
	for _, tn := range sh.Tensors {
		own += tn.Size
	}
	// A scale in another shard would be read as well, but only the shard's
	// own tensors are hashed.
	if p := inv.Progress().Snapshot(); p.HashedBytes != own {
		t.Errorf("hashed %d bytes for a shard of %d", p.HashedBytes, own)
	}
	for _, r := range m.Tensors {
		if r.File != sh.Name || r.SHA256 == "" {
			t.Errorf("%s: file %s sha %q", r.Name, r.File, r.SHA256)
		}
	}
	if _, err := inv.Manifest(context.Background(), "no-such.safetensors"); err == nil {
		t.Error("no error for an unknown shard")
	}
}

func TestCache(t *testing.T) {
	dir := copyDir(t, tinyDir)
	tinyckpt.Settle(t, dir)
	cacheDir := t.TempDir()
	c, err := OpenCache(cacheDir)
	if err != nil {
		t.Fatal(err)
	}
	records := func(cat *checkpoint.Catalog) ([]Record, ProgressSnapshot) {
		t.Helper()
		inv := New(cat, Options{Cache: c})
		recs, err := inv.Records(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return recs, inv.Progress().Snapshot()
	}
	cat := open(t, dir)
	first, p := records(cat)
	if p.CachedTensors != 0 || p.Tensors != int64(len(first)) {
		t.Fatalf("first run: %+v", p)
	}
	files, _ := filepath.Glob(filepath.Join(cacheDir, "*.json"))
	if len(files) != len(cat.Shards) {
		t.Fatalf("%d cache files for %d shards", len(files), len(cat.Shards))
	}

	// A remount reads nothing and gives the same records.
	second, p := records(open(t, dir))
	if p.HashedBytes != 0 || p.CachedTensors != int64(len(first)) {
		t.Errorf("second run read %d bytes, %d cached", p.HashedBytes, p.CachedTensors)
	}
	if !reflect.DeepEqual(first, second) {
		t.Error("records from the cache differ")
	}

	// A corrupt entry is ignored and rewritten; a changed shard is read
	// again.
	if err := os.WriteFile(files[0], []byte(`{"schema": "dsfs-inventory-cache/1", garbage`), 0o644); err != nil {
		t.Fatal(err)
	}
	sh := cat.Shards[2]
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(sh.Path, later, later); err != nil {
		t.Fatal(err)
	}
	tinyckpt.Settle(t, dir)
	third, p := records(open(t, dir))
	if !reflect.DeepEqual(first, third) {
		t.Error("records after a corrupt cache file differ")
	}
	if p.HashedBytes == 0 || p.CachedTensors == 0 {
		t.Errorf("third run: %+v, want some tensors read and some cached", p)
	}
	if _, p = records(open(t, dir)); p.HashedBytes != 0 {
		t.Errorf("fourth run read %d bytes: the rewritten entries were not used", p.HashedBytes)
	}
}

func TestUnreadable(t *testing.T) {
	dir := copyDir(t, tinyDir)
	cat := open(t, dir)
	sh := cat.Shards[0]
	if err := os.Truncate(sh.Path, sh.Size/2); err != nil {
		t.Fatal(err)
	}
	m, err := New(cat, Options{}).Manifest(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	bad := 0
	for _, r := range m.Tensors {
		if r.File != sh.Name {
			continue
		}
		if r.Error == "" || r.SHA256 != "" || !strings.Contains(r.Error, "changed") {
			t.Errorf("%s: error %q sha %q, want an error that the file changed", r.Name, r.Error, r.SHA256)
		}
		bad++
	}
	n := 0
	for _, p := range m.Problems {
		if strings.HasPrefix(p.Reason, "unreadable") {
			n++
		}
	}
	if n != bad || bad == 0 {
		t.Errorf("%d unreadable problems for %d unreadable tensors", n, bad)
	}
}

func TestCancel(t *testing.T) {
	cat := open(t, tinyDir)
	inv := New(cat, Options{Workers: 1})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := inv.Records(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
	if p := inv.Progress().Snapshot(); p.Running || p.TotalBytes != 0 {
		t.Errorf("after cancelling: %+v, want idle with nothing outstanding", p)
	}
	recs, err := inv.Records(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.SHA256 == "" {
			t.Fatalf("%s not hashed after the retry", r.Name)
		}
	}
}

func TestManifestJSON(t *testing.T) {
	cat := open(t, plant(t))
	m, err := New(cat, Options{TP: 4}).Manifest(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.JSON()
	if err != nil {
		t.Fatal(err)
	}
	if !json.Valid(b) {
		t.Fatal("manifest.json is not valid JSON")
	}
	if n := bytes.Count(b, []byte("\n")); n != len(m.Tensors)+2 {
		t.Errorf("%d lines, want one per tensor and two more", n)
	}
	back, err := ReadManifest(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, m) {
		t.Error("manifest changed in a JSON round trip")
	}
	var generic map[string]any
	json.Unmarshal(b, &generic)
	for _, key := range []string{"schema", "root", "summary", "problems", "tensors", "generated_utc", "seconds"} {
		if _, ok := generic[key]; !ok {
			t.Errorf("no %q in manifest.json", key)
		}
	}
	rec := generic["tensors"].([]any)[0].(map[string]any)
	for _, key := range []string{"name", "file", "dtype", "shape", "byte_range", "nbytes", "nbytes_ok", "sha256", "role", "official"} {
		if _, ok := rec[key]; !ok {
			t.Errorf("no %q in a record", key)
		}
	}
}

func TestOverview(t *testing.T) {
	cat := open(t, tinyDir)
	o := NewOverview(cat)
	var bytes int64
	for _, tn := range cat.Tensors {
		bytes += tn.Size
	}
	if o.Tensors != len(cat.Tensors) || o.Bytes != bytes || o.Shards != 14 {
		t.Errorf("overview %d tensors %d bytes %d shards", o.Tensors, o.Bytes, o.Shards)
	}
	sum := func(m map[string]Tally) (n int, b int64) {
		for _, t := range m {
			n += t.Count
			b += t.Bytes
		}
		return
	}
	for name, m := range map[string]map[string]Tally{"format": o.ByFormat, "role": o.ByRole, "dtype": o.ByDType, "shard": o.ByShard} {
		if n, b := sum(m); n != o.Tensors || b != o.Bytes {
			t.Errorf("by %s adds up to %d tensors %d bytes", name, n, b)
		}
	}
	m := o.Model
	if m.Layers != 6 || m.MoELayers != 6 || !reflect.DeepEqual(m.ExpertsPerLayer, []int{8, 8}) ||
		!reflect.DeepEqual(m.MTP, []int{0, 1, 2}) || !reflect.DeepEqual(m.MTPExpertsPerBlock, []int{8, 8, 8}) ||
		!reflect.DeepEqual(m.EngramLayers, []int{1, 3}) {
		t.Errorf("model facts %+v", m)
	}
	// The vision path: 11 tower tensors, the aligner's 4, image_start/newline/end.
	if v := m.Vision; v.Tower != 11 || v.Projector != 4 || v.ImageTokens != 3 || v.Tensors != 18 || v.Bytes <= 0 {
		t.Errorf("vision facts %+v", v)
	}
	md := string(o.Markdown())
	for _, want := range []string{"| mxfp4 | 216 |", "## Problems", "None found", "vision path | 18 tensors"} {
		if !strings.Contains(md, want) {
			t.Errorf("README lacks %q", want)
		}
	}
}

// TestMarkdownProblemsGrouped: the README lists a fault repeated per
// tensor once, with its count and first tensors; summary.json keeps each.
func TestMarkdownProblemsGrouped(t *testing.T) {
	o := &Overview{Problems: []checkpoint.Problem{{File: "model.safetensors.index.json", Reason: "missing"}}}
	for i := range 1000 {
		o.Problems = append(o.Problems, checkpoint.Problem{File: "a.safetensors", Tensor: fmt.Sprintf("t%04d", i), Reason: "listed in the index but not in the shard"})
	}
	md := string(o.Markdown())
	_, problems, _ := strings.Cut(md, "## Problems\n\n")
	want := "- model.safetensors.index.json: missing\n" +
		"- a.safetensors: listed in the index but not in the shard (1000 tensors: t0000, t0001, t0002, t0003, t0004, ...)\n"
	if problems != want {
		t.Errorf("problems section\n%s\nwant\n%s", problems, want)
	}
}
