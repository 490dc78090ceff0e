package synth

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/codecs"
	"github.com/dsfs/dsfs/safetensors"
	"github.com/dsfs/dsfs/tokenizer"
)

func TestWriteMLA(t *testing.T) {
	for _, name := range []string{"v2lite-tiny", "v3-tiny"} {
		t.Run(name, func(t *testing.T) {
			a, b := t.TempDir(), t.TempDir()
			for _, d := range []string{a, b} {
				if err := Write(name, d); err != nil {
					t.Fatal(err)
				}
			}
			ents, err := os.ReadDir(a)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range ents {
				x, _ := os.ReadFile(filepath.Join(a, e.Name()))
				y, _ := os.ReadFile(filepath.Join(b, e.Name()))
				if !bytes.Equal(x, y) {
					t.Errorf("%s differs between two writes", e.Name())
				}
			}
			cat, err := checkpoint.Open(a)
			if err != nil {
				t.Fatal(err)
			}
			defer cat.Close()
			if len(cat.Problems) > 0 || len(cat.Shards) != 2 {
				t.Fatalf("%d shards, problems %v", len(cat.Shards), cat.Problems)
			}
			tok, err := tokenizer.Load(filepath.Join(a, "tokenizer.json"))
			if err != nil {
				t.Fatal(err)
			}
			if tok.VocabSize() != 512 {
				t.Errorf("tokenizer vocabulary %d, want the model's 512", tok.VocabSize())
			}
			// A layer's tensors span both shards, as in the reference set.
			shards := map[*checkpoint.Shard]bool{}
			for _, ts := range cat.Tensors {
				if ts.Layer == 2 {
					shards[ts.Shard] = true
				}
			}
			if name == "v2lite-tiny" && len(shards) != 2 {
				t.Errorf("layer 2 lies in %d shards", len(shards))
			}
			// Linear weights are N(0, 1/fan_in); the router bias is F32.
			w := cat.Tensor("model.layers.1.mlp.experts.3.down_proj.weight")
			data := make([]byte, w.Size)
			if _, err := w.Shard.ReadAt(data, w.Offset); err != nil {
				t.Fatal(err)
			}
			v := make([]float32, len(data)/2)
			codecs.DecodeBF16(v, data)
			var ss float64
			for _, x := range v {
				ss += float64(x) * float64(x)
			}
			if sd, want := math.Sqrt(ss/float64(len(v))), 1/math.Sqrt(float64(w.Shape[1])); math.Abs(sd/want-1) > 0.1 {
				t.Errorf("%s: sd %.4f, want about %.4f", w.Name, sd, want)
			}
			bias := cat.Tensor("model.layers.1.mlp.gate.e_score_correction_bias")
			if (name == "v3-tiny") != (bias != nil) || bias != nil && bias.DType != safetensors.F32 {
				t.Errorf("correction bias %v", bias)
			}
		})
	}
}

func TestMLAValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*MLASpec)
	}{
		{"zero hidden", func(s *MLASpec) { s.Hidden = 0 }},
		{"odd rope", func(s *MLASpec) { s.QKRope = 15 }},
		{"too many dense", func(s *MLASpec) { s.DenseLayers = 5 }},
		{"top-k", func(s *MLASpec) { s.TopK = 9 }},
		{"groups", func(s *MLASpec) { s.Groups = 3 }},
		{"v3 without q lora", func(s *MLASpec) { s.V3, s.QLoRA = true, 0 }},
	} {
		s := V2LiteTinySpec()
		tc.edit(&s)
		if err := s.Validate(); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
}
