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

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/codecs"
	"github.com/dsfs/dsfs/internal/testdata"
	"github.com/dsfs/dsfs/tokenizer"
)

// editedCatalog is the v41-tiny catalog with tensors renamed (old -> new;
// new "" drops old) or added as copies (old -> "+" new).
func editedCatalog(t *testing.T, m *Model41, edits map[string]string) *checkpoint.Catalog {
	t.Helper()
	cat := *m.cat
	var ts []*checkpoint.Tensor
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
	slices.SortFunc(ts, func(a, b *checkpoint.Tensor) int { return strings.Compare(a.Name, b.Name) })
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
	tok := mustTokenizer(t)
	inf := mustRead(t, "inference/config.json")
	m2, err := Open41(cat, inf, tok)
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
	tok := mustTokenizer(t)
	inf := mustRead(t, "inference/config.json")
	for _, tc := range []struct {
		name      string
		inference string
		tok       *tokenizer.Tokenizer
		want      string
	}{
		{"rows", strings.Replace(string(inf), "1054", "1055", 1), tok, "primes sum to 1054 rows, engram_num_embeddings says 1055"},
		{"map size", strings.Replace(string(inf), `"engram_compressed_vocab_size": 408`, `"engram_compressed_vocab_size": 409`, 1), tok,
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

// mustTokenizer is v41-tiny's tokenizer.
func mustTokenizer(t *testing.T) *tokenizer.Tokenizer {
	t.Helper()
	tok, err := tokenizer.Parse(mustRead(t, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	return tok
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
		FP4QuantE4M3(got, 16)
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

// TestDSparkStagesListed checks that mtp.N tensors are listed as DSpark
// stages and leave the backbone's layers alone.
func TestDSparkStagesListed(t *testing.T) {
	m, _ := loadGolden41(t)
	cat := editedCatalog(t, m, map[string]string{
		"layers.0.attn_norm.weight": "+mtp.0.attn_norm.weight",
		"norm.weight":               "+mtp.2.norm.weight",
	})
	m2, err := Open41(cat, mustRead(t, "inference/config.json"), mustTokenizer(t))
	if err != nil {
		t.Fatal(err)
	}
	if got := m2.DSparkStages(); !slices.Equal(got, []string{"mtp.0", "mtp.2"}) {
		t.Errorf("DSpark stages %v", got)
	}
	if m2.Runnable() != 6 {
		t.Errorf("runnable %d, want 6", m2.Runnable())
	}
}

// TestBatchEqualsSingle41 runs the chain on both golden sequences at once
// and on each alone: attention, candidates and shared state never cross
// sequences, and the results are the same bit for bit.
func TestBatchEqualsSingle41(t *testing.T) {
	m, g := loadGolden41(t)
	cfg := m.Config
	var seqs [][]int
	var ids []int
	var single []*State41
	for _, s := range g.Sequences {
		seqs = append(seqs, s.TokenIDs)
		ids = append(ids, s.TokenIDs...)
		emb, err := m.EmbedRows(s.TokenIDs)
		if err != nil {
			t.Fatal(err)
		}
		single = append(single, cfg.InitialState41(emb, 1))
	}
	emb, err := m.EmbedRows(ids)
	if err != nil {
		t.Fatal(err)
	}
	both := cfg.InitialState41(emb, len(seqs))
	for l := range cfg.Layers {
		var want []float32
		for i, s := range seqs {
			out, err := m.Forward(context.Background(), l, single[i], [][]int{s}, A8)
			if err != nil {
				t.Fatal(err)
			}
			single[i] = out.Out
			want = append(want, out.StreamOut...)
		}
		out, err := m.Forward(context.Background(), l, both, seqs, A8)
		if err != nil {
			t.Fatal(err)
		}
		both = out.Out
		if !slices.Equal(out.StreamOut, want) {
			t.Errorf("layer %d: batched stream differs from the sequences run alone (max|Δ|/max %.3g)", l, relDiff(out.StreamOut, want))
		}
		for i := range seqs {
			if !slices.Equal(both.Shared[i].Candidates, single[i].Shared[0].Candidates) || !slices.Equal(both.Shared[i].TopK, single[i].Shared[0].TopK) {
				t.Errorf("layer %d sequence %d: batched shared state differs", l, i)
			}
		}
	}
}

// TestShortPrompts runs every layer on prompts shorter than a compressed
// group, the window and a candidate block: no compressed entries, no
// picks, and nothing out of range.
func TestShortPrompts(t *testing.T) {
	m, _ := loadGolden41(t)
	cfg := m.Config
	seqs := [][]int{{5}, {7, 300}, {9, 10, 11}}
	var ids []int
	for _, s := range seqs {
		ids = append(ids, s...)
	}
	emb, err := m.EmbedRows(ids)
	if err != nil {
		t.Fatal(err)
	}
	st := cfg.InitialState41(emb, len(seqs))
	for l := range cfg.Layers {
		out, err := m.Forward(context.Background(), l, st, seqs, FP32)
		if err != nil {
			t.Fatalf("layer %d: %v", l, err)
		}
		for _, v := range out.StreamOut {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				t.Fatalf("layer %d: non-finite output", l)
			}
		}
		if r := cfg.Roles[l].Ratio; r > 0 {
			for i, sa := range out.Seqs {
				if n := len(sa.Compressed) / cfg.HeadDim; n != len(seqs[i])/r {
					t.Errorf("layer %d sequence %d: %d compressed entries, want %d", l, i, n, len(seqs[i])/r)
				}
			}
		}
		st = out.Out
	}
	if _, err := m.Logits(context.Background(), st); err != nil {
		t.Fatal(err)
	}
}

// TestForward41Errors checks that bad calls fail with a reason.
func TestForward41Errors(t *testing.T) {
	m, g := loadGolden41(t)
	s := g.Sequences[0]
	in := goldenState41(t, m.Config, s.Modes["a8"].Layers, 0)
	bad := slices.Clone(s.TokenIDs)
	bad[3] = 768
	short := *in
	short.PreMix = in.PreMix[:4]
	for _, tc := range []struct {
		name string
		l    int
		in   *State41
		ids  []int
		p    Precision
		want string
	}{
		{"layer", 6, in, s.TokenIDs, A8, "layer 6 outside [0, 6)"},
		{"precision", 0, in, s.TokenIDs, "bf16", `precision "bf16" is not a8 or fp32`},
		{"pre_mix", 0, &short, s.TokenIDs, A8, "4 pre_mix values"},
		{"token", 0, in, bad, A8, "token id 768 outside the vocabulary [0, 768)"},
	} {
		_, err := m.Forward(context.Background(), tc.l, tc.in, [][]int{tc.ids}, tc.p)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := m.Forward(ctx, 2, goldenState41(t, m.Config, s.Modes["a8"].Layers, 2), [][]int{s.TokenIDs}, A8); err == nil || !strings.Contains(err.Error(), context.Canceled.Error()) {
		t.Errorf("cancelled forward: %v", err)
	}
}

// TestRoute41 checks V4.1's router against Gate.forward restated: logits
// over gate_temp, the bias for selection only, weights normalised by
// their sum + 1e-20 only with norm_topk_prob (whatever the scoring), and
// times the routed scale.
func TestRoute41(t *testing.T) {
	const e, d, k = 8, 4, 3
	w := make([]float32, e*d)
	bias := make([]float32, e)
	x := []float32{0.3, -1.2, 0.8, 2.0}
	for i := range w {
		w[i] = float32(math.Sin(float64(i)*1.7)) * 0.9
	}
	for i := range bias {
		bias[i] = float32(i%3) * 0.05
	}
	for _, tc := range []struct {
		score    string
		temp     float32
		normTopK bool
	}{{ScoreSqrtSoftplus, 1, true}, {ScoreSqrtSoftplus, 2.5, false}, {ScoreSoftmax, 0.5, true}, {ScoreSigmoid, 1.5, true}} {
		cfg := &Config{RoutedExperts: e, TopK: k, ScoreFunc: tc.score, RouteScale: 1.5}
		f := &forward{cfg: cfg, ctx: context.Background(), n: 1, out: &LayerOutput{}, v41: true, gateTemp: tc.temp, normTopK: tc.normTopK,
			w: &layerWeights{gate: &linear{w: w, rows: e, cols: d}, bias: bias}}
		r, err := f.route(x, nil)
		if err != nil {
			t.Fatal(err)
		}
		logits := make([]float32, e)
		for i := range e {
			var s float32
			for c := range d {
				s += x[c] * w[i*d+c]
			}
			logits[i] = s / tc.temp
		}
		scores := make([]float32, e)
		cfg.score(scores, logits)
		order := descending(func() []float32 {
			sel := make([]float32, e)
			for i := range sel {
				sel[i] = scores[i] + bias[i]
			}
			return sel
		}())
		var sum float32
		for _, id := range order[:k] {
			sum += scores[id]
		}
		for j, id := range order[:k] {
			want := scores[id]
			if tc.normTopK {
				want /= sum + 1e-20
			}
			want *= 1.5
			if r.IDs[j] != int32(id) || math.Abs(float64(r.Weights[j]-want)) > 1e-6 {
				t.Errorf("%+v: route %d is expert %d weight %g, want %d %g", tc, j, r.IDs[j], r.Weights[j], id, want)
			}
		}
	}
}
