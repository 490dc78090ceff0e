package v4

import (
	"context"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dsfs/dsfs/codecs"
	"github.com/dsfs/dsfs/internal/testdata"
	"github.com/dsfs/dsfs/manifest"
)

// editedCatalog is the v41-tiny catalog with tensors renamed (old -> new;
// new "" drops old) or added as copies (old -> "+" new).
func editedCatalog(t *testing.T, m *Model41, edits map[string]string) *manifest.Catalog {
	t.Helper()
	cat := *m.cat
	var ts []*manifest.Tensor
	for _, x := range m.cat.Tensors {
		nw, ok := edits[x.Name]
		switch {
		case !ok:
			ts = append(ts, x)
		case strings.HasPrefix(nw, "+"):
			c := *x
			c.Name = nw[1:]
			ts = append(ts, x, &c)
		case nw != "":
			c := *x
			c.Name = nw
			ts = append(ts, &c)
		}
	}
	slices.SortFunc(ts, func(a, b *manifest.Tensor) int { return strings.Compare(a.Name, b.Name) })
	cat.Tensors = ts
	return &cat
}

// TestOpen41Roles checks each layer's tensors against its role: a
// tensor a role does not have, one it lacks, and an Engram table of the
// wrong size are reported on that layer alone.
func TestOpen41Roles(t *testing.T) {
	m, _ := loadGolden41(t)
	cat := editedCatalog(t, m, map[string]string{
		"layers.2.attn.compressor.wkv.weight": "+layers.3.attn.compressor.wkv.weight",
		"layers.4.attn.indexer.wk.weight":     "",
	})
	tj := mustRead(t, "tokenizer.json")
	inf := mustRead(t, "inference/config.json")
	m2, err := Open41(cat, inf, tj)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int]string{
		3: "tensor layers.3.attn.compressor.wkv.weight: not part of a reuse layer",
		4: "tensor layers.4.attn.indexer.wk.weight: missing",
	}
	for l := range m2.Config.Layers {
		p := strings.Join(m2.Problems(l), "; ")
		if w, ok := want[l]; ok != (p != "") || ok && !strings.Contains(p, w) {
			t.Errorf("layer %d problems %q, want %q", l, p, w)
		}
	}
	if m2.Runnable() != 3 {
		t.Errorf("runnable %d, want 3", m2.Runnable())
	}
}

// TestOpen41EngramChecks refuses Engram layers whose tables disagree with
// the configuration, or whose token map cannot be built.
func TestOpen41EngramChecks(t *testing.T) {
	m, _ := loadGolden41(t)
	tj := mustRead(t, "tokenizer.json")
	inf := mustRead(t, "inference/config.json")
	for _, tc := range []struct {
		name      string
		inference string
		tok       []byte
		want      string
	}{
		{"rows", strings.Replace(string(inf), "1054", "1055", 1), tj, "primes sum to 1054 rows, engram_num_embeddings says 1055"},
		{"map size", strings.Replace(string(inf), `"engram_compressed_vocab_size": 408`, `"engram_compressed_vocab_size": 409`, 1), tj,
			"the Engram token map has 408 compressed ids, engram_compressed_vocab_size says 409"},
		{"no tokenizer", string(inf), nil, "tokenizer.json: missing"},
	} {
		m2, err := Open41(m.cat, []byte(tc.inference), tc.tok)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		for _, l := range m2.Config.EngramLayers {
			if p := strings.Join(m2.Problems(l), "; "); !strings.Contains(p, tc.want) {
				t.Errorf("%s: layer %d problems %q, want %q", tc.name, l, p, tc.want)
			}
		}
		if p := m2.Problems(0); p != nil {
			t.Errorf("%s: layer 0 problems %v", tc.name, p)
		}
	}
}

// TestEngramRowsOnDemand checks that an Engram layer reads only the rows
// its tokens hash to, never the table.
func TestEngramRowsOnDemand(t *testing.T) {
	m, g := loadGolden41(t)
	s := g.Sequences[0]
	st := goldenState41(t, m.Config, s.Modes["a8"].Layers, 1)
	out, err := m.Forward(context.Background(), 1, st, [][]int{s.TokenIDs}, A8)
	if err != nil {
		t.Fatal(err)
	}
	distinct := map[int32]bool{}
	for _, r := range out.Engram.HashIDs {
		distinct[r] = true
	}
	if out.Engram.RowsRead != len(distinct) || len(distinct) >= 864 {
		t.Errorf("%d rows read for %d distinct hash ids", out.Engram.RowsRead, len(distinct))
	}
	e := m.layers[1].engram
	_, _, layerBytes := m.LayerTensors(1)
	limit := layerBytes - e.table.Size - e.scale.Size + int64(out.Engram.RowsRead*(e.headDim+e.headDim/e.scaleBy))
	if out.WeightBytes > limit {
		t.Errorf("weight bytes %d exceed the layer's other tensors and the %d rows looked up (%d): the table was read whole", out.WeightBytes, out.Engram.RowsRead, limit)
	}
}

func mustRead(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testdata.Dir(t), "trace", "v41-tiny", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestFP4QuantE4M3 checks V4.1's compressed-KV quantiser against a brute
// force: the scale is the E4M3 value nearest amax/6 and each element the
// nearest E2M1 multiple of it, ties to the even code.
func TestFP4QuantE4M3(t *testing.T) {
	seed := rand.Uint64()
	rng := rand.New(rand.NewPCG(seed, 1))
	var e4m3 []float64
	for b := range 0x7f {
		e4m3 = append(e4m3, float64(codecs.E4M3ToFloat32(byte(b))))
	}
	e2m1 := []float64{0, 0.5, 1, 1.5, 2, 3, 4, 6}
	nearest := func(v float64, grid []float64, evenTies bool) float64 {
		best, bi := math.Inf(1), 0
		for i, g := range grid {
			d := math.Abs(math.Abs(v) - g)
			if d < best || d == best && evenTies && i%2 == 0 {
				best, bi = d, i
			}
		}
		return math.Copysign(grid[bi], v)
	}
	for range 2000 {
		x := make([]float32, 16)
		scale := math.Ldexp(1, rng.IntN(30)-20)
		for i := range x {
			x[i] = float32(rng.NormFloat64() * scale)
		}
		got := slices.Clone(x)
		fp4QuantE4M3(got, 16)
		amax := float32(6 * math.Ldexp(1, -9))
		for _, v := range x {
			amax = max(amax, float32(math.Abs(float64(v))))
		}
		s := float32(nearest(float64(amax/6), e4m3, true))
		for i, v := range x {
			q := min(max(v/s, -6), 6)
			want := float32(nearest(float64(q), e2m1, true)) * s
			if got[i] != want {
				t.Fatalf("seed %d: %g in a block of amax %g: got %g, want %g", seed, v, amax, got[i], want)
			}
		}
	}
}
