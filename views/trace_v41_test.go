package views

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dsfs/dsfs/blockcache"
	"github.com/dsfs/dsfs/internal/testdata"
)

// TestTraceViewV41 lays out trace/ for the DeepSeek-V4.1 reference
// checkpoint with the default text prompts (its tokenizer encodes them),
// and without its tokenizer.json, whose Engram token map the Engram
// layers need: ERROR.txt then says so in one line, and the layers before
// the first Engram layer are still served.
func TestTraceViewV41(t *testing.T) {
	src := filepath.Join(testdata.Dir(t), "trace", "v41-tiny")
	s, err := traceSet(t, src, Options{Values: map[string]string{"device": "cpu"}})
	if err != nil {
		t.Fatal(err)
	}
	v := s.Root.Child("trace")
	if v.Child("ERROR.txt") != nil {
		t.Fatal("ERROR.txt for a V4.1 model that runs")
	}
	for _, p := range []string{"prompts.json", "trace.json", "layers/05.json", "layers/05.safetensors", "logits.safetensors"} {
		n, err := v.Lookup(p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if n.File != nil && n.File.Size() == 0 {
			t.Errorf("%s: size 0 at mount", p)
		}
	}

	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "inference"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"config.json", "inference/config.json", "model.safetensors.index.json",
		"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	prompts := filepath.Join(t.TempDir(), "p.json")
	os.WriteFile(prompts, []byte(`[{"id":"a","token_ids":[0,5,9,300,7]}]`), 0o644)
	s, err = traceSet(t, dir, Options{Values: map[string]string{"trace-prompts": prompts, "device": "cpu"}})
	if err != nil {
		t.Fatal(err)
	}
	v = s.Root.Child("trace")
	cache := blockcache.New(1<<20, 1)
	defer cache.Close()
	msg := string(readAll(t, v.Child("ERROR.txt"), cache))
	for _, want := range []string{"layer 1: Engram: tokenizer.json: missing", "layers 1-5 are not served"} {
		if !strings.Contains(msg, want) {
			t.Errorf("ERROR.txt lacks %q:\n%s", want, msg)
		}
	}
	if _, err := v.Lookup("layers/00.safetensors"); err != nil {
		t.Errorf("layer 0: %v", err)
	}
	if _, err := v.Lookup("layers/01.json"); err == nil {
		t.Error("layer 1 served without its token map")
	}
	if v.Child("logits.safetensors") != nil {
		t.Error("logits without every layer")
	}
}
