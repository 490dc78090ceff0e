package views

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"math"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dsfs/dsfs/internal/tinyckpt"
	"github.com/dsfs/dsfs/vfile"

	"github.com/dsfs/dsfs/blockcache"
	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/codecs"
	"github.com/dsfs/dsfs/safetensors"
)

// tinyDir holds a v41-tiny checkpoint written once for the package's tests.
var tinyDir string

// noHash keeps manifest/ from reading tensor data.
var noHash = map[string]string{"no-hash": "true"}

func TestMain(m *testing.M) { tinyckpt.Main(m, "v41-tiny", &tinyDir) }

// tinySet builds every view of a v41-tiny checkpoint written once per test
// binary.
func tinySet(t *testing.T) (*Set, *blockcache.Cache) {
	t.Helper()
	cat, err := checkpoint.Open(tinyDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(cat.Problems) > 0 {
		t.Fatalf("v41-tiny has problems: %v", cat.Problems)
	}
	s, err := Build(cat, Options{})
	if err != nil {
		t.Fatal(err)
	}
	cache := blockcache.New(64<<20, 2)
	t.Cleanup(func() { cache.Close(); s.Close(); cat.Close() })
	return s, cache
}

func readAll(t testing.TB, n *vfile.Node, cache vfile.Cache) []byte {
	t.Helper()
	if n.Doc != nil {
		b, err := n.Doc.Bytes(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	b, err := io.ReadAll(io.NewSectionReader(vfile.NewReader(n.File, cache), 0, n.File.Size()))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// parsed is a virtual safetensors file read whole and parsed.
type parsed struct {
	h    *safetensors.Header
	data []byte
}

func (p parsed) tensor(name string) ([]byte, safetensors.Tensor, bool) {
	tt, ok := p.h.Find(name)
	if !ok {
		return nil, tt, false
	}
	return p.data[p.h.DataStart+tt.Begin : p.h.DataStart+tt.End], tt, true
}

// viewTensors reads every safetensors file of a view and checks that the
// index names each tensor's file.
func viewTensors(t *testing.T, view *vfile.Node, cache vfile.Cache) map[string]parsed {
	t.Helper()
	files := make(map[string]parsed)
	var index struct {
		Metadata struct {
			TotalSize int64 `json:"total_size"`
		} `json:"metadata"`
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(readAll(t, view.Child("model.safetensors.index.json"), cache), &index); err != nil {
		t.Fatal(err)
	}
	var total int64
	seen := 0
	for _, c := range view.Children {
		if !strings.HasSuffix(c.Name, ".safetensors") {
			continue
		}
		b := readAll(t, c, cache)
		h, err := safetensors.ReadHeader(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			t.Fatalf("%s/%s: %v", view.Name, c.Name, err)
		}
		files[c.Name] = parsed{h, b}
		for _, tt := range h.Tensors {
			if index.WeightMap[tt.Name] != c.Name {
				t.Errorf("%s: index puts %s in %q", c.Name, tt.Name, index.WeightMap[tt.Name])
			}
			total += tt.Len()
			seen++
		}
	}
	if seen != len(index.WeightMap) || total != index.Metadata.TotalSize {
		t.Errorf("%s: files hold %d tensors / %d bytes, index says %d / %d", view.Name, seen, total, len(index.WeightMap), index.Metadata.TotalSize)
	}
	return files
}

func find(files map[string]parsed, name string) ([]byte, safetensors.Tensor, bool) {
	for _, p := range files {
		if b, tt, ok := p.tensor(name); ok {
			return b, tt, true
		}
	}
	return nil, safetensors.Tensor{}, false
}

func sourceBytes(t *testing.T, tt *checkpoint.Tensor) []byte {
	t.Helper()
	b := make([]byte, tt.Size)
	if _, err := tt.Shard.ReadAt(b, tt.Offset); err != nil {
		t.Fatal(err)
	}
	return b
}

// nvfp4Expert reports whether nvfp4/ transcodes t (FORMATS.md): a routed
// or MTP expert matrix in MXFP4 with its scale.
func nvfp4Expert(t *checkpoint.Tensor) bool {
	return t.Role == checkpoint.RoleRoutedExpert && t.Format == checkpoint.FormatMXFP4 && t.Scale != nil
}

// base strips a tensor name's last component (".weight", ".scale").
func base(name string) string { return strings.TrimSuffix(name, path.Ext(name)) }

func TestNVFP4View(t *testing.T) {
	s, cache := tinySet(t)
	view := s.Root.Child("nvfp4")
	files := viewTensors(t, view, cache)
	experts := 0
	for _, src := range s.Cat.Tensors {
		switch {
		case nvfp4Expert(src):
			experts++
			b := base(src.Name)
			w, wt, ok := find(files, b+".weight")
			if !ok || wt.DType != safetensors.U8 || !bytes.Equal(w, sourceBytes(t, src)) {
				t.Fatalf("%s.weight: missing, not U8 or not the source bytes", b)
			}
			ws, wst, _ := find(files, b+".weight_scale")
			g2, g2t, _ := find(files, b+".weight_scale_2")
			if wst.DType != safetensors.F8E4M3 || len(g2t.Shape) != 0 || g2t.DType != safetensors.F32 {
				t.Fatalf("%s: weight_scale %v %v, weight_scale_2 %v %v", b, wst.DType, wst.Shape, g2t.DType, g2t.Shape)
			}
			sc := sourceBytes(t, src.Scale)
			want := make([]byte, 2*len(sc))
			g := codecs.GlobalExponent(sc)
			if partner := s.Cat.Tensor(strings.Replace(src.Name, ".w1.", ".w3.", 1)); src.Proj == "w1" && partner != nil {
				g = codecs.GlobalExponent(sc, sourceBytes(t, partner.Scale))
			} else if partner := s.Cat.Tensor(strings.Replace(src.Name, ".w3.", ".w1.", 1)); src.Proj == "w3" && partner != nil {
				g = codecs.GlobalExponent(sc, sourceBytes(t, partner.Scale))
			}
			codecs.NVFP4WeightScale(want, sc, g)
			if !bytes.Equal(ws, want) {
				t.Fatalf("%s.weight_scale differs from the codec's output for g=%d", b, g)
			}
			var g2want [4]byte
			binary.LittleEndian.PutUint32(g2want[:], math.Float32bits(codecs.WeightScale2(g)))
			if !bytes.Equal(g2, g2want[:]) {
				t.Fatalf("%s.weight_scale_2 = %v, want 2^%d", b, g2, g)
			}
			if in, it, _ := find(files, b+".input_scale"); it.DType != safetensors.F32 || len(it.Shape) != 0 || math.Float32frombits(binary.LittleEndian.Uint32(in)) != 1 {
				t.Fatalf("%s.input_scale %v %v = %v, want F32 1.0 (no calibration)", b, it.DType, it.Shape, in)
			}
			if _, _, ok := find(files, src.Scale.Name); ok {
				t.Fatalf("%s: the source scale was not dropped", src.Scale.Name)
			}
		case src.ScaleOf != nil && nvfp4Expert(src.ScaleOf):
		default:
			got, _, ok := find(files, src.Name)
			if !ok || !bytes.Equal(got, sourceBytes(t, src)) {
				t.Fatalf("%s: not passed through unchanged", src.Name)
			}
		}
	}
	if experts == 0 {
		t.Fatal("v41-tiny has no MXFP4 experts")
	}
	// w1 and w3 of one expert share their global scale: loaders fuse them.
	w1, _, _ := find(files, "layers.1.ffn.experts.0.w1.weight_scale_2")
	w3, _, _ := find(files, "layers.1.ffn.experts.0.w3.weight_scale_2")
	if !bytes.Equal(w1, w3) {
		t.Fatalf("w1 and w3 global scales differ: %v %v", w1, w3)
	}

	var cfg struct {
		Q map[string]any `json:"quantization_config"`
	}
	if err := json.Unmarshal(readAll(t, view.Child("config.json"), cache), &cfg); err != nil || cfg.Q["expert_dtype"] != "fp4" ||
		cfg.Q["quant_algo"] != "MIXED_PRECISION" || cfg.Q["moe_quant_algo"] != "NVFP4" {
		t.Fatalf("config.json quantization_config = %v (%v)", cfg.Q, err)
	}
	var hq struct {
		Quantization struct {
			Algo    string         `json:"quant_algo"`
			KV      *string        `json:"kv_cache_quant_algo"`
			Group   int            `json:"group_size"`
			Layers  map[string]any `json:"quantized_layers"`
			Exclude []string       `json:"exclude_modules"`
		} `json:"quantization"`
	}
	if err := json.Unmarshal(readAll(t, view.Child("hf_quant_config.json"), cache), &hq); err != nil {
		t.Fatal(err)
	}
	q := hq.Quantization
	if q.Algo != "MIXED_PRECISION" || q.KV != nil || q.Group != 16 || len(q.Exclude) == 0 || q.Layers["layers.1.ffn.experts"] == nil {
		t.Fatalf("hf_quant_config.json %+v", q)
	}
	for _, m := range q.Exclude {
		if ok, _ := path.Match(m, "layers.1.ffn.experts.0.w1"); ok {
			t.Fatalf("pattern %s excludes an NVFP4 expert", m)
		}
	}
	var rep struct {
		Experts int                `json:"experts"`
		Totals  codecs.NVFP4Counts `json:"totals"`
	}
	if err := json.Unmarshal(readAll(t, view.Child("TRANSCODE.json"), cache), &rep); err != nil || rep.Experts != experts || rep.Totals.Blocks == 0 {
		t.Fatalf("TRANSCODE.json experts %d blocks %d (%v), want %d experts", rep.Experts, rep.Totals.Blocks, err, experts)
	}
}

// engramTable reports whether engram-fp4/ transcodes t (FORMATS.md): an
// E4M3 Engram table with a paired 1x32 E8M0 scale.
func engramTable(t *checkpoint.Tensor) bool {
	return t.Role == checkpoint.RoleEngram && t.DType == safetensors.F8E4M3 && len(t.Shape) == 2 &&
		t.Shape[1]%codecs.MXBlock == 0 && t.Scale != nil && t.Scale.DType == safetensors.F8E8M0 &&
		t.Block == [2]int64{1, codecs.MXBlock}
}

func TestEngramView(t *testing.T) {
	s, cache := tinySet(t)
	view := s.Root.Child("engram-fp4")
	files := viewTensors(t, view, cache)
	tables := 0
	for _, src := range s.Cat.Tensors {
		if !engramTable(src) {
			continue
		}
		tables++
		w, wt, _ := find(files, src.Name)
		sc, st, _ := find(files, src.Scale.Name)
		rows, cols := src.Shape[0], src.Shape[1]
		if wt.DType != safetensors.I8 || wt.Shape[0] != rows || wt.Shape[1] != cols/2 ||
			st.DType != safetensors.F8E8M0 || st.Shape[1] != cols/codecs.MXBlock {
			t.Fatalf("%s: %v %v / %v %v", src.Name, wt.DType, wt.Shape, st.DType, st.Shape)
		}
		wantW := make([]byte, len(w))
		wantS := make([]byte, len(sc))
		codecs.EngramFP4(wantW, wantS, sourceBytes(t, src), sourceBytes(t, src.Scale))
		if !bytes.Equal(w, wantW) || !bytes.Equal(sc, wantS) {
			t.Fatalf("%s: view differs from the codec applied to the whole table", src.Name)
		}
	}
	if tables != 2 {
		t.Fatalf("%d Engram tables, want 2", tables)
	}
	var rep struct {
		Tables []struct {
			Rows       int64   `json:"rows"`
			Blocks     int64   `json:"blocks"`
			MeanCosine float64 `json:"mean_cosine"`
		} `json:"tables"`
	}
	if err := json.Unmarshal(readAll(t, view.Child("TRANSCODE.json"), cache), &rep); err != nil || len(rep.Tables) != 2 {
		t.Fatalf("TRANSCODE.json: %v, %d tables", err, len(rep.Tables))
	}
	for _, r := range rep.Tables {
		if r.MeanCosine < 0.95 || r.MeanCosine > 1 || r.Blocks != r.Rows*8 {
			t.Fatalf("report %+v", r)
		}
	}
}

func TestSourceViewIsTheCheckpoint(t *testing.T) {
	s, _ := tinySet(t)
	view := s.Root.Child("source")
	for _, sh := range s.Cat.Shards {
		n, err := view.Lookup(sh.Name)
		if err != nil || n.File.Size() != sh.Size || n.File.Source != sh.Path {
			t.Fatalf("source/%s: %v", sh.Name, err)
		}
	}
	if _, err := Build(s.Cat, Options{Views: []string{"nope"}}); err == nil {
		t.Fatal("an unknown view name was accepted")
	}
}

func TestCombinedViewKeepsBothReports(t *testing.T) {
	s, cache := tinySet(t)
	var rep map[string]json.RawMessage
	if err := json.Unmarshal(readAll(t, s.Root.Child("nvfp4+engram-fp4").Child("TRANSCODE.json"), cache), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep["nvfp4"]) == 0 || len(rep["engram-fp4"]) == 0 || len(rep) != 2 {
		t.Fatalf("combined TRANSCODE.json has keys %v, want nvfp4 and engram-fp4", keys(rep))
	}
}

func keys(m map[string]json.RawMessage) []string {
	var k []string
	for n := range m {
		k = append(k, n)
	}
	return k
}

// TestBuildServesExactlyTheListedViews pins --views: the set holds the
// views listed and no other, and manifest/views/ describes every
// checkpoint view, served or not, and trace/ when it is served.
func TestBuildServesExactlyTheListedViews(t *testing.T) {
	checkpointViews := []string{"engram-fp4.json", "gguf.json", "nvfp4+engram-fp4.json", "nvfp4.json", "q2.json"}
	cat, err := checkpoint.Open(tinyDir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	tests := []struct {
		views     []string
		described []string // manifest/views/, when manifest is listed
	}{
		{[]string{"nvfp4"}, nil},
		{[]string{"source"}, nil},
		{[]string{"nvfp4", "q2"}, nil},
		{[]string{"engram-fp4", "manifest"}, checkpointViews},
		{[]string{"manifest", "nvfp4"}, checkpointViews},
		{[]string{"manifest"}, checkpointViews},
		{[]string{"manifest", "trace"}, append(slices.Clone(checkpointViews), "trace.json")},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.views, ","), func(t *testing.T) {
			s, err := Build(cat, Options{Views: tt.views, Values: noHash})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			var got []string
			for _, c := range s.Root.Children {
				got = append(got, c.Name)
			}
			if want := slices.Sorted(slices.Values(tt.views)); !slices.Equal(got, want) {
				t.Fatalf("--views %v serves %v", tt.views, got)
			}
			m := s.Root.Child("manifest")
			if m == nil {
				return
			}
			var described []string
			if d := m.Child("views"); d != nil {
				for _, c := range d.Children {
					described = append(described, c.Name)
				}
			}
			if !slices.Equal(described, tt.described) {
				t.Fatalf("manifest/views/ holds %v, want %v", described, tt.described)
			}
			// A view described but not served is built for its description
			// only: it appears neither in the tree nor in the stats.
			var doc viewDescription
			if err := json.Unmarshal(readAll(t, m.Child("views").Child("q2.json"), nil), &doc); err != nil {
				t.Fatal(err)
			}
			if doc.View != "q2" || !slices.ContainsFunc(doc.Files, func(f fileDescription) bool { return f.Kind == "safetensors" && len(f.Tensors) > 0 }) {
				t.Fatalf("views/q2.json describes no q2 shard: %+v", doc)
			}
			if _, ok := s.Stats()["q2"]; ok != slices.Contains(tt.views, "q2") {
				t.Fatalf("q2 stats present: %v", ok)
			}
		})
	}
	if _, err := Build(cat, Options{Views: []string{"nvfp4", "nvfp5"}}); err == nil || !strings.Contains(err.Error(), `"nvfp5"`) {
		t.Fatalf("an unknown view: %v", err)
	}
}

// copyTiny copies the v41-tiny checkpoint for a test that changes it.
func copyTiny(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(tinyDir)); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestGeneratedFilesWinOverSourceFiles: a source file named like a file a
// view generates is served in source/ only; the view serves its own, and
// one line per file names the collision.
func TestGeneratedFilesWinOverSourceFiles(t *testing.T) {
	dir := copyTiny(t)
	for _, name := range []string{"hf_quant_config.json", "TRANSCODE.json"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("not the view's\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cat, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	s, err := Build(cat, Options{Views: []string{"source", "nvfp4", "engram-fp4", "nvfp4+engram-fp4"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cache := blockcache.New(64<<20, 2)
	defer cache.Close()
	for _, p := range []string{"nvfp4/hf_quant_config.json", "nvfp4/TRANSCODE.json", "engram-fp4/TRANSCODE.json",
		"nvfp4+engram-fp4/hf_quant_config.json", "nvfp4+engram-fp4/TRANSCODE.json"} {
		n, err := s.Root.Lookup(p)
		if err != nil {
			t.Fatal(err)
		}
		if b := readAll(t, n, cache); bytes.Equal(b, []byte("not the view's\n")) {
			t.Errorf("%s serves the source's file", p)
		}
	}
	for _, name := range []string{"hf_quant_config.json", "TRANSCODE.json"} {
		n, _ := s.Root.Lookup("source/" + name)
		if n == nil || !bytes.Equal(readAll(t, n, cache), []byte("not the view's\n")) {
			t.Errorf("source/%s is not the source's file", name)
		}
	}
	want := []string{
		"TRANSCODE.json: a source file named like a generated one is served in source/ only; nvfp4/, engram-fp4/, nvfp4+engram-fp4/ serve their own",
		"hf_quant_config.json: a source file named like a generated one is served in source/ only; nvfp4/, nvfp4+engram-fp4/ serve their own",
	}
	if !slices.Equal(s.Warnings(), want) {
		t.Errorf("warnings:\n%s\nwant:\n%s", strings.Join(s.Warnings(), "\n"), strings.Join(want, "\n"))
	}
}

// TestBadShardIsNeverHidden: with a corrupt shard, every checkpoint view's
// index still places the shard's tensors in it and the shard's file fails
// every read naming the shard and the reason; source/ serves the file as it
// is, and manifest/ describes the views.
func TestBadShardIsNeverHidden(t *testing.T) {
	dir := copyTiny(t)
	cat0, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	bad := cat0.Shards[len(cat0.Shards)-1].Name
	var inBad []string
	for _, tt := range cat0.Tensors {
		if tt.Shard.Name == bad {
			inBad = append(inBad, tt.Name)
		}
	}
	cat0.Close()
	p := filepath.Join(dir, bad)
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte("#"), 9) // the header JSON no longer parses
	f.Close()
	raw, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	cat, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	s, err := Build(cat, Options{Views: []string{"source", "nvfp4", "engram-fp4", "nvfp4+engram-fp4", "q2", "manifest"}, Values: noHash})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cache := blockcache.New(64<<20, 2)
	defer cache.Close()

	src, err := s.Root.Lookup("source/" + bad)
	if err != nil || !bytes.Equal(readAll(t, src, cache), raw) {
		t.Fatalf("source/%s is not the file as it is (%v)", bad, err)
	}
	for view, file := range map[string]string{"nvfp4": bad, "engram-fp4": bad, "nvfp4+engram-fp4": bad,
		"q2": strings.Replace(bad, "model-", "quant-", 1)} {
		var index struct {
			WeightMap map[string]string `json:"weight_map"`
		}
		n, err := s.Root.Lookup(view + "/model.safetensors.index.json")
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(readAll(t, n, cache), &index); err != nil {
			t.Fatal(err)
		}
		for _, name := range inBad {
			if index.WeightMap[name] != file {
				t.Errorf("%s/: the index places %s in %q, want %s", view, name, index.WeightMap[name], file)
			}
		}
		n, err = s.Root.Lookup(view + "/" + file)
		if err != nil {
			t.Fatalf("%s/: %v", view, err)
		}
		if n.File.Size() != int64(len(raw)) {
			t.Errorf("%s/%s: %d bytes, want the source's %d", view, file, n.File.Size(), len(raw))
		}
		_, err = vfile.NewReader(n.File, cache).ReadAt(make([]byte, 8), 0)
		if err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "JSON") {
			t.Errorf("%s/%s: reading gave %v, want an error naming the shard and the reason", view, file, err)
		}
	}
	for _, view := range []string{"nvfp4", "q2"} {
		n, err := s.Root.Lookup("manifest/views/" + view + ".json")
		if err != nil {
			t.Fatal(err)
		}
		if b := readAll(t, n, cache); !bytes.Contains(b, []byte(`"kind":"unreadable"`)) {
			t.Errorf("manifest/views/%s.json does not show the bad shard", view)
		}
	}
}

// TestNVFP4GroupsSharedPerMount: nvfp4/, nvfp4+engram-fp4/ and manifest/'s
// descriptions (of served and unserved views) use one NVFP4 transcoder,
// and so one memo of the global exponents (package nvfp4's tests pin that
// a transcoder keeps one group per expert pair), so each group's scales
// are read once per mount.
func TestNVFP4GroupsSharedPerMount(t *testing.T) {
	s, _ := tinySet(t)
	u := newSet(s.Cat, Options{Views: []string{"nvfp4"}}, s.registry, s.rewritten) // as manifest/ builds an unserved view
	var first Rewriter
	for _, set := range []*Set{s, s.forView(), s.forView(), u} {
		rw, err := set.rewritten.get(set, nvfp4Rewrites)
		if err != nil {
			t.Fatal(err)
		}
		if first == nil {
			first = rw.rw
		}
		nv, err := set.nvfp4Transcoder()
		if err != nil {
			t.Fatal(err)
		}
		if rw.rw != first || nv != first {
			t.Fatal("the views keep separate NVFP4 transcoders")
		}
	}
}

// TestOptionValues checks that a declared option's value of the wrong kind
// fails the build with a line naming the flag and the value.
func TestOptionValues(t *testing.T) {
	cat, err := checkpoint.Open(tinyDir)
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	for _, tt := range []struct {
		values map[string]string
		want   string
	}{
		{map[string]string{"tp": "x"}, "--tp x: not an integer"},
		{map[string]string{"no-hash": "maybe"}, "--no-hash maybe: not true or false"},
	} {
		s, err := Build(cat, Options{Views: []string{"manifest"}, Values: tt.values})
		if err == nil {
			s.Close()
			t.Errorf("%v: built", tt.values)
		} else if !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: %v, want %q", tt.values, err, tt.want)
		}
	}
}
