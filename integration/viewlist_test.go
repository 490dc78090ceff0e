package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
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
