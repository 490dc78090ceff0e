package views

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/dsfs/dsfs/blockcache"
	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/safetensors"
	"github.com/dsfs/dsfs/tensorfile"
	"github.com/dsfs/dsfs/vfile"
)

// renamed is a view written the way a new one is: one file with its
// builder, its option and its stats, and one registry line. It serves
// every source shard with each tensor renamed under a prefix its option
// sets, and counts the tensors it renamed.
var renamed = View{Name: "renamed", About: "every tensor under a prefix", build: buildRenamed,
	Options: []Option{{Name: "renamed-prefix", Usage: "what renamed/ puts before each tensor name", Default: "renamed."}}}

func buildRenamed(s *Set, name string) (Built, error) {
	prefix := s.option(name, "renamed-prefix")
	var count atomic.Int64
	files := make(map[string]*vfile.Node)
	for _, sh := range s.Cat.Shards {
		var outs []tensorfile.Out
		for _, t := range sh.Tensors {
			o := tensorfile.Passthrough(t)
			o.Name = prefix + o.Name
			outs = append(outs, o)
			count.Add(1)
		}
		f, err := s.tensorFile(name, outs)
		if err != nil {
			return Built{}, err
		}
		files[sh.Name] = &vfile.Node{File: f, From: s.shardSources(sh)}
	}
	return Built{Root: tree("", files), Stats: func() any { return map[string]int64{"tensors_renamed": count.Load()} }}, nil
}

// Example_newView adds the renamed view to the registry (in the package,
// its line in registry.go) and builds it beside manifest/, which describes
// it like any other view.
func Example_newView() {
	cat, err := checkpoint.Open(tinyDir)
	if err != nil {
		log.Fatal(err)
	}
	defer cat.Close()
	s, err := build(cat, Options{Views: []string{"renamed", "manifest"}, Values: map[string]string{"renamed-prefix": "v41.", "no-hash": "true"}},
		append(All(), renamed))
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	cache := blockcache.New(64<<20, 2)
	defer cache.Close()
	view := s.Root.Child("renamed")
	fmt.Printf("renamed/: %d files\n", len(view.Children))
	f := view.Children[0]
	b := make([]byte, f.File.Size())
	if _, err := vfile.NewReader(f.File, cache).ReadAt(b, 0); err != nil {
		log.Fatal(err)
	}
	h, err := safetensors.ReadHeader(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("renamed/%s holds %s, ...\n", f.Name, h.Tensors[0].Name)
	desc, err := s.Root.Lookup("manifest/views/renamed.json")
	if err != nil {
		log.Fatal(err)
	}
	var doc viewDescription
	if b, err = desc.Doc.Bytes(context.Background()); err != nil {
		log.Fatal(err)
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("manifest/views/renamed.json describes %d files\n", len(doc.Files))
	fmt.Println(s.Stats()["renamed"])
	// Output:
	// renamed/: 14 files
	// renamed/model-00001-of-00014.safetensors holds v41.aligner.w1.bias, ...
	// manifest/views/renamed.json describes 14 files
	// map[tensors_renamed:760]
}

func TestNewView(t *testing.T) {
	cat, err := checkpoint.Open(tinyDir)
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	tests := []struct {
		name   string
		values map[string]string
		prefix string
	}{
		{"default", noHash, "renamed."},
		{"option given", map[string]string{"no-hash": "true", "renamed-prefix": "x/"}, "x/"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := build(cat, Options{Views: []string{"renamed", "manifest"}, Values: tt.values},
				append(All(), renamed))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			cache := blockcache.New(64<<20, 2)
			defer cache.Close()
			view := s.Root.Child("renamed")
			for _, sh := range cat.Shards {
				b := readAll(t, view.Child(sh.Name), cache)
				h, err := safetensors.ReadHeader(bytes.NewReader(b), int64(len(b)))
				if err != nil {
					t.Fatalf("%s: %v", sh.Name, err)
				}
				if len(h.Tensors) != len(sh.Tensors) {
					t.Fatalf("%s: %d tensors, want %d", sh.Name, len(h.Tensors), len(sh.Tensors))
				}
				for _, ht := range h.Tensors {
					src := cat.Tensor(strings.TrimPrefix(ht.Name, tt.prefix))
					if !strings.HasPrefix(ht.Name, tt.prefix) || src == nil {
						t.Fatalf("%s: tensor %s is not a source tensor under %q", sh.Name, ht.Name, tt.prefix)
					}
					got := b[h.DataStart+ht.Begin : h.DataStart+ht.Begin+ht.Len()]
					if !bytes.Equal(got, sourceBytes(t, src)) {
						t.Fatalf("%s: %s differs from its source", sh.Name, ht.Name)
					}
				}
			}
			st, ok := s.Stats()["renamed"].(map[string]int64)
			if !ok || st["tensors_renamed"] != int64(len(cat.Tensors)) {
				t.Errorf("stats %v, want %d tensors renamed", s.Stats()["renamed"], len(cat.Tensors))
			}
			// manifest/ describes the new view like any other.
			var doc viewDescription
			if err := json.Unmarshal(readAll(t, s.Root.Child("manifest").Child("views").Child("renamed.json"), cache), &doc); err != nil {
				t.Fatal(err)
			}
			if len(doc.Files) != len(cat.Shards) || len(doc.Files[0].Tensors) == 0 ||
				!strings.HasPrefix(doc.Files[0].Tensors[0].Name, tt.prefix) || doc.Files[0].Tensors[0].Codec != "copy" {
				t.Errorf("manifest/views/renamed.json: %+v", doc)
			}
		})
	}
}
