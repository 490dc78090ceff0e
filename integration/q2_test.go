package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/safetensors"
)

// q2Stats is what the q2 tests read from .dsfs/stats.json.
type q2Stats struct {
	ViewStats struct {
		Q2 struct {
			Blocks    int64 `json:"blocks"`
			Quantised int64 `json:"blocks_quantised"`
			FromDisk  int64 `json:"blocks_from_disk_cache"`
		} `json:"q2"`
	} `json:"view_stats"`
	DiskCache struct {
		Hits    int64 `json:"hits"`
		Writes  int64 `json:"writes"`
		Corrupt int64 `json:"corrupt"`
	} `json:"disk_cache"`
	ReadErrors int64 `json:"read_errors"`
}

func readStats(t *testing.T, m *mount) (q2Stats, string) {
	t.Helper()
	b, err := os.ReadFile(m.path(".dsfs", "stats.json"))
	var s q2Stats
	if err != nil || json.Unmarshal(b, &s) != nil {
		t.Fatalf("stats.json: %v %s", err, b)
	}
	return s, string(b)
}

// TestQ2 mounts v41-tiny with a disk cache, checks q2/ against `dsfs
// export q2`, the safetensors rules of FORMATS.md "q2/", the index, and the
// plan and manifests against the catalog; then a second mount on the same
// cache directory serves every byte without quantising anything.
func TestQ2(t *testing.T) {
	cacheDir := t.TempDir()
	m := startMount(t, tinySrc, "--cache-dir", cacheDir)
	out := export(t, "q2", tinySrc) // no cache: an independent computation

	want := files(t, out)
	got := files(t, m.path("q2"))
	sort.Strings(want)
	sort.Strings(got)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("mounted q2/ has %v, export %v", got, want)
	}
	for _, f := range want {
		run(t, "cmp", m.path("q2", f), filepath.Join(out, f))
	}
	st, raw := readStats(t, m)
	if st.ViewStats.Q2.Quantised == 0 || st.DiskCache.Writes == 0 || st.ReadErrors != 0 {
		t.Fatalf("first mount computed nothing or failed:\n%s", raw)
	}

	cat, err := checkpoint.Open(tinySrc)
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	checkQ2Tensors(t, cat, m.path("q2"))
	checkQ2Documents(t, cat, m.path("q2"))

	// Every block and every digest, recomputed from the source: through the
	// mount as an exported directory, and against the cache directory.
	for _, dir := range []string{m.path("q2"), cacheDir} {
		res := run(t, dsfsBin, "verify", "q2", tinySrc, "--against", dir, "--sample", "0")
		if !strings.Contains(res, " 0 differ, 0 absent, 0 corrupt") {
			t.Fatalf("verify against %s: %s", dir, res)
		}
	}

	m.stop(t)
	m2 := startMount(t, tinySrc, "--cache-dir", cacheDir)
	for _, f := range want {
		run(t, "cmp", m2.path("q2", f), filepath.Join(out, f))
	}
	st2, raw2 := readStats(t, m2)
	if st2.ViewStats.Q2.Quantised != 0 || st2.ViewStats.Q2.FromDisk == 0 || st2.DiskCache.Hits == 0 ||
		st2.DiskCache.Corrupt != 0 || st2.DiskCache.Writes != 0 {
		t.Fatalf("second mount on the same --cache-dir recomputed:\n%s", raw2)
	}
}

// checkQ2Tensors reads every q2/ shard as safetensors and holds each
// catalog tensor to the rules: main-layer routed experts become U8 ggml
// rows, their scales and the Engram tables are gone, everything else (MTP
// experts included) is the source's bytes with the source's dtype.
func checkQ2Tensors(t *testing.T, cat *checkpoint.Catalog, dir string) {
	t.Helper()
	var index struct {
		Metadata  map[string]int64  `json:"metadata"`
		WeightMap map[string]string `json:"weight_map"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "model.safetensors.index.json"))
	if err != nil || json.Unmarshal(b, &index) != nil {
		t.Fatalf("index: %v %s", err, b)
	}
	type place struct {
		file string
		h    *safetensors.Header
		tt   safetensors.Tensor
	}
	where := make(map[string]place)
	var total int64
	shards, _ := filepath.Glob(filepath.Join(dir, "quant-*.safetensors"))
	if len(shards) == 0 {
		t.Fatal("no quant-*.safetensors")
	}
	for _, p := range shards {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		fi, _ := f.Stat()
		h, err := safetensors.ReadHeader(f, fi.Size())
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if h.Metadata["format"] != "pt" || h.Metadata["dsfs.view"] != "q2" || h.DataStart%8 != 0 {
			t.Fatalf("%s: metadata %v, data at %d", p, h.Metadata, h.DataStart)
		}
		for _, tt := range h.Tensors {
			where[tt.Name] = place{p, h, tt}
			total += tt.Len()
			if index.WeightMap[tt.Name] != filepath.Base(p) {
				t.Errorf("index puts %s in %q, it is in %s", tt.Name, index.WeightMap[tt.Name], filepath.Base(p))
			}
		}
	}
	if len(where) != len(index.WeightMap) || total != index.Metadata["total_size"] {
		t.Fatalf("shards hold %d tensors, %d bytes; index %d, %d", len(where), total, len(index.WeightMap), index.Metadata["total_size"])
	}
	read := func(p place) []byte {
		f, err := os.Open(p.file)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		b := make([]byte, p.tt.Len())
		if _, err := f.ReadAt(b, p.h.DataStart+p.tt.Begin); err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, ct := range cat.Tensors {
		p, ok := where[ct.Name]
		expertScale := ct.ScaleOf != nil && ct.ScaleOf.Role == checkpoint.RoleRoutedExpert
		switch {
		case ct.Role == checkpoint.RoleRoutedExpert && !expertScale:
			blocks := 2 * ct.Shape[1] / 256
			per := map[string]int64{"w1": 66, "w3": 66, "w2": 84}[ct.Proj]
			if !ok || p.tt.DType != safetensors.U8 || fmt.Sprint(p.tt.Shape) != fmt.Sprint([]int64{ct.Shape[0], blocks * per}) {
				t.Errorf("%s: want U8 [%d %d], got %+v", ct.Name, ct.Shape[0], blocks*per, p.tt)
			}
		case expertScale || ct.Role == checkpoint.RoleEngram:
			if ok {
				t.Errorf("%s (%s) is copied; it should be dropped or external", ct.Name, ct.Role)
			}
		default:
			src := make([]byte, ct.Size)
			if _, err := ct.Shard.ReadAt(src, ct.Offset); err != nil {
				t.Fatal(err)
			}
			if !ok || p.tt.DType != ct.DType || !bytes.Equal(read(p), src) {
				t.Errorf("%s (%s): not copied unchanged", ct.Name, ct.Role)
			}
		}
	}
}

// checkQ2Documents holds plan.json and manifest.json to the catalog.
func checkQ2Documents(t *testing.T, cat *checkpoint.Catalog, dir string) {
	t.Helper()
	var quantised, dropped, external int
	var quantBytes, weights, externalBytes int64
	for _, ct := range cat.Tensors {
		expertScale := ct.ScaleOf != nil && ct.ScaleOf.Role == checkpoint.RoleRoutedExpert
		switch {
		case ct.Role == checkpoint.RoleRoutedExpert && !expertScale:
			quantised++
			in := 2 * ct.Shape[1]
			weights += ct.Shape[0] * in
			quantBytes += ct.Shape[0] * in / 256 * map[string]int64{"w1": 66, "w3": 66, "w2": 84}[ct.Proj]
		case expertScale:
			dropped++
		case ct.Role == checkpoint.RoleEngram:
			external++
			externalBytes += ct.Size
		}
	}
	type totals struct {
		SourceTensors    int   `json:"source_tensors"`
		QuantisedTensors int   `json:"quantised_tensors"`
		QuantisedBytes   int64 `json:"quantised_bytes"`
		Weights          int64 `json:"quantised_logical_weights"`
		ExternalTensors  int   `json:"external_tensors"`
		ExternalBytes    int64 `json:"external_bytes"`
		DroppedTensors   int   `json:"dropped_tensors"`
		Shards           int   `json:"shards"`
	}
	var plan struct {
		Totals  totals            `json:"totals"`
		Shards  []json.RawMessage `json:"shards"`
		Dropped []json.RawMessage `json:"dropped"`
		Skipped []json.RawMessage `json:"skipped"`
	}
	var man struct {
		Totals struct {
			totals
			Produced    int                              `json:"shards_produced"`
			FromManifst int64                            `json:"output_bytes_from_manifests"`
			ByType      map[string]struct{ Bytes int64 } `json:"quantised_bytes_by_type"`
		} `json:"totals"`
		External []struct {
			SHA256 string `json:"sha256"`
		} `json:"external_native"`
		Dropped int `json:"dropped_expert_scales"`
	}
	for name, v := range map[string]any{"plan.json": &plan, "manifest.json": &man} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || json.Unmarshal(b, v) != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	want := totals{len(cat.Tensors), quantised, quantBytes, weights, external, externalBytes, dropped, len(plan.Shards)}
	if plan.Totals != want || man.Totals.totals != want || len(plan.Dropped) != dropped || len(plan.Skipped) != 0 {
		t.Fatalf("plan totals %+v, manifest totals %+v, want %+v from the catalog", plan.Totals, man.Totals.totals, want)
	}
	if man.Totals.Produced != len(plan.Shards) || man.Dropped != dropped || len(man.External) != external ||
		man.Totals.ByType["IQ2_XXS"].Bytes+man.Totals.ByType["Q2_K"].Bytes != quantBytes {
		t.Fatalf("manifest.json: %+v", man)
	}
	for _, e := range man.External {
		if len(e.SHA256) != 64 {
			t.Fatalf("external tensor without a digest: %+v", man.External)
		}
	}
	readme, err := os.ReadFile(filepath.Join(dir, "README.md"))
	if err != nil || !bytes.Contains(readme, []byte(fmt.Sprintf("| down `w2` | Q2_K | 2.625 | %d |", quantised/3))) {
		t.Fatalf("README.md does not give the checkpoint's figures: %v\n%s", err, readme)
	}
}

// TestQ2Audit runs `dsfs audit q2` and reads its audit.json.
func TestQ2Audit(t *testing.T) {
	needMount(t)
	f := filepath.Join(t.TempDir(), "audit.json")
	res := run(t, dsfsBin, "audit", "q2", tinySrc, "--sample", "2", "--json", f)
	var a struct {
		Tensors     int `json:"tensors_audited"`
		Projections []struct {
			Projection string  `json:"projection"`
			Cosine     float64 `json:"cosine"`
		} `json:"projections"`
	}
	b, err := os.ReadFile(f)
	if err != nil || json.Unmarshal(b, &a) != nil {
		t.Fatalf("audit.json: %v\n%s", err, b)
	}
	if a.Tensors != 6 || len(a.Projections) != 3 {
		t.Fatalf("audit: %s\n%s", res, b)
	}
	for _, p := range a.Projections {
		if p.Cosine < 0.9 {
			t.Fatalf("%s: cosine %v\n%s", p.Projection, p.Cosine, res)
		}
	}
}
