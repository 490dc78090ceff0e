package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestViewsListServedExactly: `--views nvfp4,q2` serves those two and
// nothing else (there was a time when every view after the last one listed
// came too), and `dsfs export manifest` writes views/ describing every
// checkpoint view though none of them is exported.
func TestViewsListServedExactly(t *testing.T) {
	m := startMount(t, tinySrc, "--views", "nvfp4,q2")
	ents, err := os.ReadDir(m.dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	if want := []string{".dsfs", "nvfp4", "q2"}; !slices.Equal(got, want) {
		t.Fatalf("--views nvfp4,q2 serves %v, want %v", got, want)
	}

	out := export(t, "manifest", tinySrc)
	for _, v := range []string{"nvfp4", "engram-fp4", "nvfp4+engram-fp4", "q2"} {
		var doc struct {
			View  string `json:"view"`
			Files []struct {
				Kind string `json:"kind"`
			} `json:"files"`
		}
		b, err := os.ReadFile(filepath.Join(out, "views", v+".json"))
		if err != nil || json.Unmarshal(b, &doc) != nil || doc.View != v || len(doc.Files) == 0 {
			t.Errorf("export manifest: views/%s.json: %v %.200s", v, err, b)
		}
	}
}

// TestGeneratedNameCollision: a source hf_quant_config.json does not
// replace nvfp4/'s own; source/ serves it, and one log line says so.
func TestGeneratedNameCollision(t *testing.T) {
	needMount(t)
	src := copyTiny(t)
	mine := []byte(`{"quantization": {"quant_algo": "mine"}}` + "\n")
	if err := os.WriteFile(filepath.Join(src, "hf_quant_config.json"), mine, 0o644); err != nil {
		t.Fatal(err)
	}
	m := startMount(t, src, "--views", "source,nvfp4")
	if b, err := os.ReadFile(m.path("nvfp4", "hf_quant_config.json")); err != nil || !strings.Contains(string(b), "MIXED_PRECISION") {
		t.Errorf("nvfp4/hf_quant_config.json is not the view's own: %v %s", err, b)
	}
	run(t, "cmp", m.path("source", "hf_quant_config.json"), filepath.Join(src, "hf_quant_config.json"))
	if n := strings.Count(m.log.String(), "hf_quant_config.json: a source file named like a generated one is served in source/ only; nvfp4/ serve"); n != 1 {
		t.Errorf("%d log lines name the collision, want 1:\n%s", n, m.log)
	}
}
