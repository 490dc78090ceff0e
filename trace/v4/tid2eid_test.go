package v4

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dsfs/dsfs/internal/testdata"
	"github.com/dsfs/dsfs/safetensors"
)

// rewriteTiny copies v4-tiny into a temporary directory, rewriting every
// shard with change applied to each tensor's spec and bytes.
func rewriteTiny(t *testing.T, change func(spec *safetensors.Spec, data []byte) []byte) string {
	t.Helper()
	src := filepath.Join(testdata.Dir(t), "trace", "v4-tiny")
	dst := t.TempDir()
	for _, f := range []string{"config.json", "inference/config.json", "model.safetensors.index.json"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dst, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	shards, _ := filepath.Glob(filepath.Join(src, "*.safetensors"))
	for _, p := range shards {
		raw, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		h, err := safetensors.ParseHeader(raw[8:8+binary.LittleEndian.Uint64(raw)], int64(len(raw)))
		if err != nil {
			t.Fatal(err)
		}
		var specs []safetensors.Spec
		data := map[string][]byte{}
		for _, ts := range h.Tensors {
			s := safetensors.Spec{Name: ts.Name, DType: ts.DType, Shape: slices.Clone(ts.Shape)}
			data[ts.Name] = change(&s, raw[h.DataStart+ts.Begin:h.DataStart+ts.End])
			specs = append(specs, s)
		}
		var meta []safetensors.Meta
		for k, v := range h.Metadata {
			meta = append(meta, safetensors.Meta{Key: k, Value: v})
		}
		lay, err := safetensors.NewLayout(meta, specs)
		if err != nil {
			t.Fatal(err)
		}
		out := make([]byte, lay.Size)
		copy(out, lay.Header)
		for _, ts := range lay.Tensors {
			copy(out[lay.DataStart()+ts.Begin:], data[ts.Name])
		}
		if err := os.WriteFile(filepath.Join(dst, filepath.Base(p)), out, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

func openDir(t *testing.T, dir string) *Model {
	t.Helper()
	cat, inf := openCatalog(t, dir)
	t.Cleanup(func() { cat.Close() })
	m, err := Open(cat, inf)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestTid2eidI64 runs the hash-routed layers of a copy of v4-tiny whose
// tid2eid is stored as I64 (as the released V4-Flash shards store it):
// the routes are the golden ones.
func TestTid2eidI64(t *testing.T) {
	dir := rewriteTiny(t, func(s *safetensors.Spec, b []byte) []byte {
		if !strings.HasSuffix(s.Name, "tid2eid") {
			return b
		}
		s.DType = safetensors.I64
		w := make([]byte, 2*len(b))
		for i := 0; i < len(b); i += 4 {
			binary.LittleEndian.PutUint64(w[2*i:], uint64(int64(int32(binary.LittleEndian.Uint32(b[i:])))))
		}
		return w
	})
	m := openDir(t, dir)
	_, g := loadGolden(t)
	s := g.Sequences[0]
	for l := range m.Config.HashLayers {
		if p := m.Problems(l); p != nil {
			t.Fatalf("layer %d: %v", l, p)
		}
		gl := s.Modes["a8"].Layers[l]
		out, err := m.Forward(context.Background(), l, gl.StreamIn.f32(t), [][]int{s.TokenIDs}, A8)
		if err != nil {
			t.Fatal(err)
		}
		if want := gl.Route.IDs.i32(t); !slices.Equal(out.Routes.IDs, want) {
			t.Errorf("layer %d: routes %v, want %v", l, out.Routes.IDs, want)
		}
	}
}

// TestTid2eidOutOfRange names the tensor and entry when tid2eid points
// past the experts.
func TestTid2eidOutOfRange(t *testing.T) {
	dir := rewriteTiny(t, func(s *safetensors.Spec, b []byte) []byte {
		if s.Name == "layers.1.ffn.gate.tid2eid" {
			b = slices.Clone(b)
			binary.LittleEndian.PutUint32(b[4*7:], 16)
		}
		return b
	})
	m := openDir(t, dir)
	_, g := loadGolden(t)
	s := g.Sequences[0]
	_, err := m.Forward(context.Background(), 1, s.Modes["a8"].Layers[1].StreamIn.f32(t), [][]int{s.TokenIDs}, A8)
	if err == nil || !strings.Contains(err.Error(), "tensor layers.1.ffn.gate.tid2eid: entry 7 is 16, outside [0, 16)") {
		t.Errorf("error %v", err)
	}
}

// TestTid2eidRepeatedExpert runs a hash layer whose tid2eid sends the
// first prompt token to one expert in two slots. model.py's
// y[idx] += expert(x[idx], w) stores with a non-accumulating index_put,
// so the token gets that expert once, with the weight of the later slot;
// every token's FFN output must be that sum, built here expert by expert
// from single-row products.
func TestTid2eidRepeatedExpert(t *testing.T) {
	_, g := loadGolden(t)
	s := g.Sequences[0]
	tok := s.TokenIDs[0]
	const name = "layers.0.ffn.gate.tid2eid"
	var k int
	dir := rewriteTiny(t, func(sp *safetensors.Spec, b []byte) []byte {
		if sp.Name != name {
			return b
		}
		k = int(sp.Shape[1])
		b = slices.Clone(b)
		row := b[4*tok*k:]
		first := binary.LittleEndian.Uint32(row)
		binary.LittleEndian.PutUint32(row[4:], first)
		return b
	})
	m := openDir(t, dir)
	for _, p := range []Precision{A8, FP32} {
		out, err := m.Forward(context.Background(), 0, s.Modes[string(p)].Layers[0].StreamIn.f32(t), [][]int{s.TokenIDs}, p)
		if err != nil {
			t.Fatal(err)
		}
		ids := out.Routes.IDs
		if ids[0] != ids[1] {
			t.Fatalf("%s: token 0 routes %v, want a repeated expert", p, ids[:k])
		}
		w, err := m.loadLayer(context.Background(), 0)
		if err != nil {
			t.Fatal(err)
		}
		f := &forward{cfg: m.Config, ctx: context.Background(), w: w, a8: p == A8, out: &LayerOutput{}}
		d := m.Config.Hidden
		for tt := range out.Tokens {
			x := out.FFNIn[tt*d : (tt+1)*d]
			want := make([]float32, d)
			for e := range m.Config.RoutedExperts {
				wt, chosen := float32(0), false
				for j := range k {
					if ids[tt*k+j] == int32(e) {
						wt, chosen = out.Routes.Weights[tt*k+j], true
					}
				}
				if !chosen {
					continue
				}
				ld := &loader{ctx: context.Background()}
				var ew [3]*linear
				for i := range ew {
					ew[i] = ld.lin(w.t.experts[e][i])
				}
				if ld.err != nil {
					t.Fatal(ld.err)
				}
				ye, err := f.expert(x, 1, ew, []float32{wt}, nil)
				if err != nil {
					t.Fatal(err)
				}
				for c, v := range ye {
					want[c] += v
				}
			}
			ys, err := f.expert(x, 1, w.shared, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			for c, v := range ys {
				want[c] += v
			}
			if got := out.FFNOut[tt*d : (tt+1)*d]; !slices.Equal(got, want) {
				t.Fatalf("%s: token %d (id %d, experts %v): FFN output differs from one contribution per expert, first values %v, want %v",
					p, tt, s.TokenIDs[tt], ids[tt*k:(tt+1)*k], got[:4], want[:4])
			}
		}
	}
}
