package integration

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dsfs/dsfs/internal/tinyckpt"
)

// manifestRecord is the part of a manifest.json record these tests read.
type manifestRecord struct {
	Name      string   `json:"name"`
	File      string   `json:"file"`
	ByteRange [2]int64 `json:"byte_range"`
	SHA256    string   `json:"sha256"`
	TP        *struct {
		Ranks int `json:"ranks"`
	} `json:"tp"`
}

type manifestDoc struct {
	NTensors int              `json:"n_tensors"`
	Hashed   bool             `json:"hashed"`
	TP       int              `json:"tp"`
	Tensors  []manifestRecord `json:"tensors"`
	Problems []any            `json:"problems"`
}

// catJSON reads a mounted file with cat, a separate process, and decodes
// it.
func catJSON(t *testing.T, path string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(run(t, "cat", path)), v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// manifestProgress is manifest/'s entry in .dsfs/stats.json.
type manifestProgress struct {
	HashedBytes   int64 `json:"hashed_bytes"`
	Tensors       int64 `json:"tensors"`
	CachedTensors int64 `json:"cached_tensors"`
}

func statsOf(t *testing.T, m *mount) manifestProgress {
	t.Helper()
	var st struct {
		ViewStats struct {
			Manifest manifestProgress `json:"manifest"`
		} `json:"view_stats"`
	}
	catJSON(t, m.path(".dsfs", "stats.json"), &st)
	return st.ViewStats.Manifest
}

// TestManifestView reads manifest/ through the mount with cat and jq,
// checks records against the source bytes, and remounts with the same
// --cache-dir to see the digests come back without reading a byte.
func TestManifestView(t *testing.T) {
	tinyckpt.Settle(t, tinySrc)
	cacheDir := t.TempDir()
	m := startMount(t, tinySrc, "--views", "nvfp4,manifest", "--tp", "8", "--cache-dir", cacheDir)

	var summary struct {
		Tensors  int   `json:"tensors"`
		Problems []any `json:"problems"`
	}
	catJSON(t, m.path("manifest", "summary.json"), &summary)
	if summary.Tensors == 0 || len(summary.Problems) != 0 {
		t.Fatalf("summary.json: %+v", summary)
	}
	if !strings.Contains(run(t, "cat", m.path("manifest", "README.md")), "## By format") {
		t.Error("README.md has no format table")
	}

	// A document's size shows once it has been computed.
	fi, err := os.Stat(m.path("manifest", "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() != 0 {
		t.Errorf("manifest.json is %d bytes before anyone read it", fi.Size())
	}
	var doc manifestDoc
	catJSON(t, m.path("manifest", "manifest.json"), &doc)
	if fi, _ = os.Stat(m.path("manifest", "manifest.json")); fi.Size() == 0 {
		t.Error("manifest.json still 0 bytes after reading it")
	}
	if doc.NTensors != summary.Tensors || len(doc.Tensors) != doc.NTensors || !doc.Hashed || doc.TP != 8 {
		t.Fatalf("manifest.json: %d tensors of %d, hashed %v, tp %d", len(doc.Tensors), summary.Tensors, doc.Hashed, doc.TP)
	}
	files := map[string][]byte{}
	cut := 0
	for _, r := range doc.Tensors {
		b, ok := files[r.File]
		if !ok {
			if b, err = os.ReadFile(filepath.Join(tinySrc, r.File)); err != nil {
				t.Fatal(err)
			}
			files[r.File] = b
		}
		sum := sha256.Sum256(b[r.ByteRange[0]:r.ByteRange[1]])
		if r.SHA256 != hex.EncodeToString(sum[:]) {
			t.Errorf("%s: sha256 %s, the source bytes give %x", r.Name, r.SHA256, sum)
		}
		if r.TP != nil {
			cut++
			if r.TP.Ranks != 8 {
				t.Errorf("%s: cut over %d ranks with --tp 8", r.Name, r.TP.Ranks)
			}
		}
	}
	if cut == 0 {
		t.Error("no tensor has a TP cut")
	}
	if _, err := exec.LookPath("jq"); err == nil {
		out := strings.TrimSpace(run(t, "jq", "-r", `[.tensors[] | select(.official == "mxfp4")] | length`, m.path("manifest", "manifest.json")))
		if out == "0" || out == "" {
			t.Errorf("jq finds %q MXFP4 records", out)
		}
		run(t, "jq", "-e", `.view == "nvfp4" and (.files | length > 0)`, m.path("manifest", "views", "nvfp4.json"))
	}
	for _, f := range []string{"model-00003-of-00014.safetensors.json"} {
		var one manifestDoc
		catJSON(t, m.path("manifest", "shards", f), &one)
		if one.NTensors == 0 || one.Tensors[0].File+".json" != f {
			t.Errorf("shards/%s: %d tensors, first in %s", f, one.NTensors, one.Tensors[0].File)
		}
	}
	if p := statsOf(t, m); p.Tensors != int64(doc.NTensors) || p.HashedBytes == 0 {
		t.Errorf("stats.json after hashing: %+v", p)
	}
	m.stop(t)

	again := startMount(t, tinySrc, "--views", "manifest", "--tp", "8", "--cache-dir", cacheDir)
	var doc2 manifestDoc
	catJSON(t, again.path("manifest", "manifest.json"), &doc2)
	if p := statsOf(t, again); p.HashedBytes != 0 || p.CachedTensors != int64(doc.NTensors) {
		t.Errorf("remount with the cache: %+v, want every tensor cached and nothing read", p)
	}
	for i := range doc.Tensors {
		if doc.Tensors[i].SHA256 != doc2.Tensors[i].SHA256 {
			t.Fatalf("%s: sha256 differs after a remount", doc.Tensors[i].Name)
		}
	}
}
