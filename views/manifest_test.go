package views

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/dsfs/dsfs/blockcache"
	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/codecs"
	"github.com/dsfs/dsfs/inventory"
	"github.com/dsfs/dsfs/safetensors"
	"github.com/dsfs/dsfs/vfile"
)

// manifestSet builds the transcoding views and manifest/ of v41-tiny.
func manifestSet(t *testing.T) (*Set, *blockcache.Cache) {
	t.Helper()
	cat, err := checkpoint.Open(tinyDir)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Build(cat, Options{Views: []string{"nvfp4", "engram-fp4", "nvfp4+engram-fp4", "manifest"}, Values: map[string]string{"tp": "4"}})
	if err != nil {
		t.Fatal(err)
	}
	cache := blockcache.New(64<<20, 2)
	t.Cleanup(func() { cache.Close(); s.Close(); cat.Close() })
	return s, cache
}

func TestManifestFiles(t *testing.T) {
	s, cache := manifestSet(t)
	m := s.Root.Child("manifest")
	var names []string
	m.Walk(func(p string, n *vfile.Node) error {
		if !n.IsDir() {
			names = append(names, p)
		}
		return nil
	})
	want := []string{"README.md", "bytes.png", "manifest.json"}
	for _, sh := range s.Cat.Shards {
		want = append(want, "shards/"+sh.Name+".json")
	}
	want = append(want, "summary.json", "views/engram-fp4.json", "views/gguf.json", "views/nvfp4+engram-fp4.json", "views/nvfp4.json", "views/q2.json")
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Fatalf("manifest/ holds %v, want %v", names, want)
	}

	var sum inventory.Overview
	if err := json.Unmarshal(readAll(t, m.Child("summary.json"), cache), &sum); err != nil {
		t.Fatal(err)
	}
	if sum.Tensors != len(s.Cat.Tensors) || sum.Shards != len(s.Cat.Shards) {
		t.Errorf("summary.json: %d tensors in %d shards", sum.Tensors, sum.Shards)
	}
	if !bytes.Contains(readAll(t, m.Child("README.md"), cache), []byte("## By format")) {
		t.Error("README.md has no format table")
	}

	full, err := inventory.ReadManifest(bytes.NewReader(readAll(t, m.Child("manifest.json"), cache)))
	if err != nil {
		t.Fatal(err)
	}
	if full.NTensors != len(s.Cat.Tensors) || full.TP != 4 || !full.Hashed {
		t.Errorf("manifest.json: %d tensors, tp %d, hashed %v", full.NTensors, full.TP, full.Hashed)
	}
	st, ok := s.Stats()["manifest"].(inventory.ProgressSnapshot)
	if !ok || st.Tensors != int64(len(s.Cat.Tensors)) || st.HashedBytes == 0 {
		t.Errorf("stats of manifest/: %#v", s.Stats()["manifest"])
	}

	sh := s.Cat.Shards[2]
	one, err := inventory.ReadManifest(bytes.NewReader(readAll(t, m.Child("shards").Child(sh.Name+".json"), cache)))
	if err != nil {
		t.Fatal(err)
	}
	if one.NTensors != len(sh.Tensors) {
		t.Errorf("shards/%s.json: %d tensors, want %d", sh.Name, one.NTensors, len(sh.Tensors))
	}
	for _, r := range one.Tensors {
		if r.File != sh.Name || r.SHA256 == "" {
			t.Errorf("shards/%s.json: %s in %s, sha %q", sh.Name, r.Name, r.File, r.SHA256)
		}
	}
}

// TestManifestProvenance checks views/VIEW.json against the view it
// describes: every tensor of every shard, copies whose source bytes are the
// bytes served, and the NVFP4 global exponents and block counts of
// TRANSCODE.json.
func TestManifestProvenance(t *testing.T) {
	s, cache := manifestSet(t)
	for _, view := range []string{"nvfp4", "engram-fp4", "nvfp4+engram-fp4"} {
		var doc viewDescription
		if err := json.Unmarshal(readAll(t, s.Root.Child("manifest").Child("views").Child(view+".json"), cache), &doc); err != nil {
			t.Fatal(err)
		}
		if doc.View != view || doc.Codec != codecs.Version {
			t.Errorf("%s: view %q codec %q", view, doc.View, doc.Codec)
		}
		type transcoded struct {
			G int
			codecs.NVFP4Counts
		}
		report := map[string]transcoded{}
		// nvfp4+engram-fp4/TRANSCODE.json is the Engram report (both
		// rewriters name their report so), so the figures come from nvfp4/.
		if tr := s.Root.Child("nvfp4").Child("TRANSCODE.json"); strings.HasPrefix(view, "nvfp4") {
			var r struct {
				Tensors []struct {
					Tensor string `json:"tensor"`
					G      int    `json:"g"`
					codecs.NVFP4Counts
				} `json:"tensors"`
			}
			if err := json.Unmarshal(readAll(t, tr, cache), &r); err != nil {
				t.Fatal(err)
			}
			for _, row := range r.Tensors {
				report[row.Tensor] = transcoded{row.G, row.NVFP4Counts}
			}
		}
		codecsSeen := map[string]int{}
		for _, f := range doc.Files {
			n, err := s.Root.Child(view).Lookup(f.File)
			if err != nil {
				t.Fatalf("%s: %s: %v", view, f.File, err)
			}
			if f.Kind != "safetensors" {
				continue
			}
			data := readAll(t, n, cache)
			h, err := safetensors.ReadHeader(bytes.NewReader(data), int64(len(data)))
			if err != nil {
				t.Fatal(err)
			}
			if len(f.Tensors) != len(h.Tensors) {
				t.Errorf("%s/%s: %d tensors described, the file has %d", view, f.File, len(f.Tensors), len(h.Tensors))
			}
			for _, td := range f.Tensors {
				codecsSeen[td.Codec]++
				out := data[td.ByteRange[0]:td.ByteRange[1]]
				switch td.Codec {
				case "copy":
					if len(td.Sources) != 1 {
						t.Fatalf("%s/%s: copy with sources %v", view, td.Name, td.Sources)
					}
					src := td.Sources[0]
					tn := s.Cat.Tensor(src.Tensor)
					in := make([]byte, src.ByteRange[1]-src.ByteRange[0])
					if _, err := tn.Shard.ReadAt(in, src.ByteRange[0]); err != nil && err != io.EOF {
						t.Fatal(err)
					}
					if !bytes.Equal(in, out) {
						t.Errorf("%s/%s: served bytes differ from its source %s", view, td.Name, src.Tensor)
					}
				case "nvfp4_weight_scale":
					b := strings.TrimSuffix(td.Name, ".weight_scale")
					want, ok := report[b]
					if !ok || td.ScaleFacts == nil || td.GlobalExponent != want.G || td.Blocks != want.NVFP4Counts {
						t.Errorf("%s/%s: %+v, TRANSCODE.json says %+v", view, td.Name, td.ScaleFacts, want)
					}
					if td.Sources[0].Tensor != b+".scale" {
						t.Errorf("%s/%s: first source %s", view, td.Name, td.Sources[0].Tensor)
					}
				case "nvfp4_input_scale":
					if len(out) != 4 || td.CodecVersion != codecs.Version {
						t.Errorf("%s/%s: input_scale of %d bytes, version %q", view, td.Name, len(out), td.CodecVersion)
					}
				case "nvfp4_weight_scale_2", "engram_fp4":
					if len(td.Sources) == 0 || td.CodecVersion != codecs.Version {
						t.Errorf("%s/%s: %s with sources %v version %q", view, td.Name, td.Codec, td.Sources, td.CodecVersion)
					}
				default:
					t.Errorf("%s/%s: codec %q", view, td.Name, td.Codec)
				}
			}
		}
		if codecsSeen["copy"] == 0 || (strings.HasPrefix(view, "nvfp4") && codecsSeen["nvfp4_weight_scale"] != len(report)) ||
			(strings.Contains(view, "engram") && codecsSeen["engram_fp4"] != 4) {
			t.Errorf("%s: codecs %v, %d experts in TRANSCODE.json", view, codecsSeen, len(report))
		}
	}
}
