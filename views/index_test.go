package views

import (
	"encoding/json"
	"io"
	"testing"

	"github.com/dsfs/dsfs/blockcache"
	"github.com/dsfs/dsfs/vfile"
)

func TestIndexFile(t *testing.T) {
	wm := map[string]string{
		"b.weight":           "model-00002-of-00002.safetensors",
		"a.weight":           "model-00001-of-00002.safetensors",
		"odd \"name\"\\\x01": "model-00001-of-00002.safetensors",
		"ünïcødé <&>":        "model-00002-of-00002.safetensors",
		"bad \xff utf8":      "model-00001-of-00002.safetensors",
	}
	f := indexFile("test/index", 12345, wm)
	cache := blockcache.New(1<<20, 1)
	defer cache.Close()
	b, err := io.ReadAll(io.NewSectionReader(vfile.NewReader(f, cache), 0, f.Size()))
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Metadata struct {
			TotalSize int64 `json:"total_size"`
		} `json:"metadata"`
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	if got.Metadata.TotalSize != 12345 || len(got.WeightMap) != len(wm) {
		t.Fatalf("got %+v", got)
	}
	for k, v := range wm {
		if k == "bad \xff utf8" {
			k = "bad \ufffd utf8"
		}
		if got.WeightMap[k] != v {
			t.Fatalf("%q -> %q, want %q", k, got.WeightMap[k], v)
		}
	}
	// The size known at mount is the size of the bytes served.
	if int64(len(b)) != f.Size() {
		t.Fatalf("served %d bytes, size says %d", len(b), f.Size())
	}
}
