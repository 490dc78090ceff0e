package v4

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/dsfs/dsfs/internal/testdata"
	"github.com/dsfs/dsfs/tokenizer"
)

type goldenLayer41 struct {
	goldenLayer
	PreMixIn *array `json:"pre_mix_in"`
	Engram   *struct {
		HashIDs   *array `json:"hash_ids"`
		WKVOut    *array `json:"wkv_out"`
		Gate      *array `json:"gate"`
		StreamOut *array `json:"stream_out"`
	} `json:"engram"`
	CompressedLatent *array `json:"compressed_latent"`
	Candidates       *struct {
		BlockScores *array `json:"block_scores"`
		K           int    `json:"k"`
		Mask        *array `json:"mask"`
	} `json:"candidates"`
	PreMixOut *array `json:"pre_mix_out"`
}

type goldenMode41 struct {
	Embed  *array           `json:"embed"`
	Layers []*goldenLayer41 `json:"layers"`
	Final  struct {
		Hidden *array `json:"hidden"`
		Norm   *array `json:"norm"`
		Logits *array `json:"logits"`
	} `json:"final"`
}

type golden41 struct {
	Derived struct {
		RopeInvFreq struct {
			SWA        *array `json:"sliding_window_layers"`
			Compressed *array `json:"compressed_layers"`
		} `json:"rope_inv_freq"`
		Layers []struct {
			Role41
			// null where the layer reads nothing
			KVOf   *int `json:"reads_compressed_kv_of"`
			TopKOf *int `json:"reads_topk_of"`
		} `json:"layers"`
		Engram struct {
			LayerIDs            []int       `json:"layer_ids"`
			Primes              [][][]int64 `json:"primes"`
			Offsets             [][]int64   `json:"offsets"`
			Multipliers         [][]int64   `json:"multipliers"`
			NumEmbeddings       []int       `json:"num_embeddings"`
			CompressedVocabSize int         `json:"compressed_vocab_size"`
			CompressedPadID     int         `json:"compressed_pad_id"`
			Map                 []int32     `json:"compressed_token_map"`
		} `json:"engram"`
	} `json:"derived"`
	Sequences []struct {
		Length   int                      `json:"length"`
		TokenIDs []int                    `json:"token_ids"`
		Modes    map[string]*goldenMode41 `json:"modes"`
	} `json:"sequences"`
}

var golden41Cache struct {
	m *Model41
	g *golden41
}

// loadGolden41 opens testdata/trace/v41-tiny once per test binary.
func loadGolden41(t *testing.T) (*Model41, *golden41) {
	t.Helper()
	if golden41Cache.m != nil {
		return golden41Cache.m, golden41Cache.g
	}
	g := new(golden41)
	m := open41Dir(t, testdata.TraceGolden(t, "v41-tiny", g))
	golden41Cache.m, golden41Cache.g = m, g
	return m, g
}

// open41Dir opens the V4.1 checkpoint in dir (with its inference config
// and tokenizer), failing on any problem with its layers or head.
func open41Dir(t *testing.T, dir string) *Model41 {
	t.Helper()
	cat, inf := openCatalog(t, dir)
	tok, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := Open41(cat, inf, tok)
	if err != nil {
		t.Fatal(err)
	}
	mustRun(t, m.Config.Layers, m.Problems, m.HeadProblems())
	return m
}

func boolsI32(b []bool) []int32 {
	out := make([]int32, len(b))
	for i, v := range b {
		if v {
			out[i] = 1
		}
	}
	return out
}

// checkLayer41 compares one V4.1 layer's output with its golden record.
func checkLayer41(c *comparer, out *LayerOutput41, g *goldenLayer41) {
	c.t.Helper()
	if g.Engram != nil {
		if out.Engram == nil {
			c.t.Fatalf("%s: no Engram output", c.where)
		}
		c.exact("engram.hash_ids", out.Engram.HashIDs, g.Engram.HashIDs)
		c.close("engram.wkv_out", out.Engram.WKV, g.Engram.WKVOut)
		c.close("engram.gate", out.Engram.Gate, g.Engram.Gate)
		c.close("engram.stream_out", out.Engram.Stream, g.Engram.StreamOut)
	} else if out.Engram != nil {
		c.t.Errorf("%s: an Engram update in a layer without Engram", c.where)
	}
	c.hc("hc_attn", out.HCAttn, g.HCAttn)
	c.close("attn_in", out.AttnIn, g.AttnIn)
	c.close("qr", out.QR, g.QR)
	c.close("window_kv", out.WindowKV, g.WindowKV)
	sa := out.Seqs[0]
	c.exact("attn_topk_idxs", sa.TopK, g.AttnTopK)
	if g.CompressedKV != nil {
		c.close("compressed_kv", sa.Compressed, g.CompressedKV)
	} else if sa.Compressed != nil {
		c.t.Errorf("%s: compressed KV in a sliding-window layer", c.where)
	}
	if g.CompressedLatent != nil {
		c.close("compressed_latent", sa.Latent, g.CompressedLatent)
	} else if sa.Latent != nil {
		c.t.Errorf("%s: a compressor ran in a layer that is no kv source", c.where)
	}
	if g.Indexer != nil {
		c.close("indexer.index_k", sa.IndexKeys, g.Indexer.IndexK)
		if sa.IndexK != g.Indexer.K {
			c.t.Errorf("%s indexer k %d, want %d", c.where, sa.IndexK, g.Indexer.K)
		}
		c.exact("indexer.topk", sa.IndexTopK, g.Indexer.TopK)
		c.closeInf("indexer.scores", sa.IndexScores, g.Indexer.Scores)
	} else if sa.IndexTopK != nil {
		c.t.Errorf("%s: an indexer ran in a layer that is no index source", c.where)
	}
	if g.Candidates != nil {
		c.exact("candidates.mask", boolsI32(sa.Candidates), g.Candidates.Mask)
		c.closeInf("candidates.block_scores", sa.BlockScores, g.Candidates.BlockScores)
	} else if sa.Candidates != nil {
		c.t.Errorf("%s: candidates chosen outside the candidate source", c.where)
	}
	c.close("attn_out", out.AttnOut, g.AttnOut)
	c.close("stream_mid", out.StreamMid, g.StreamMid)
	c.hc("hc_ffn", out.HCFFN, g.HCFFN)
	c.close("ffn_in", out.FFNIn, g.FFNIn)
	c.routes(out.Routes, &g.goldenLayer)
	c.close("route.scores", out.Routes.Scores, g.Route.Scores)
	c.close("ffn_out", out.FFNOut, g.FFNOut)
	c.close("stream_out", out.StreamOut, g.StreamOut)
	c.close("pre_mix_out", out.PreMixOut, g.PreMixOut)
}

// goldenState41 is the state entering layer l as the golden records it:
// the stream and pre_mix, and the shared attention state taken from the
// records of the layers that published it.
func goldenState41(t *testing.T, cfg *Config41, layers []*goldenLayer41, l int) *State41 {
	gl := layers[l]
	s := &State41{Stream: gl.StreamIn.f32(t), PreMix: gl.PreMixIn.f32(t), Shared: make([]Shared41, 1)}
	sh := &s.Shared[0]
	for j := range l {
		r := cfg.Roles[j]
		g := layers[j]
		if r.KVSource {
			sh.CompressKV = g.CompressedKV.f32(t)
		}
		if r.OwnsIndexK {
			sh.IndexK = g.Indexer.IndexK.f32(t)
		}
		if r.IndexSource {
			sh.TopK, sh.K = g.Indexer.TopK.i32(t), g.Indexer.K
		}
		if r.CandidateSource {
			for _, v := range g.Candidates.Mask.i32(t) {
				sh.Candidates = append(sh.Candidates, v != 0)
			}
		}
	}
	return s
}

// TestGolden41Layers runs every V4.1 layer isolated on the golden state
// entering it, per sequence and precision.
func TestGolden41Layers(t *testing.T) {
	m, g := loadGolden41(t)
	for si, s := range g.Sequences {
		for _, p := range modes {
			gm := s.Modes[string(p)]
			for l := range gm.Layers {
				t.Run(fmt.Sprintf("seq%d/%s/layer%d", si, p, l), func(t *testing.T) {
					in := goldenState41(t, m.Config, gm.Layers, l)
					out, err := m.Forward(context.Background(), l, in, [][]int{s.TokenIDs}, p)
					if err != nil {
						t.Fatal(err)
					}
					c := &comparer{t: t, where: fmt.Sprintf("seq %d %s layer %d", si, p, l)}
					checkLayer41(c, out, gm.Layers[l])
					t.Logf("worst max|Δ|/max %.3g", c.worst)
				})
			}
		}
	}
}

// TestGolden41Chain runs the whole V4.1 model from the embedding to the
// logits, carrying the state from layer to layer.
func TestGolden41Chain(t *testing.T) {
	m, g := loadGolden41(t)
	cfg := m.Config
	for si, s := range g.Sequences {
		for _, p := range modes {
			t.Run(fmt.Sprintf("seq%d/%s", si, p), func(t *testing.T) {
				gm := s.Modes[string(p)]
				c := &comparer{t: t}
				emb, err := m.EmbedRows(s.TokenIDs)
				if err != nil {
					t.Fatal(err)
				}
				c.where = "embed"
				c.close("embed", emb, gm.Embed)
				st := cfg.InitialState41(emb, 1)
				for l, gl := range gm.Layers {
					c.where = fmt.Sprintf("chained layer %d", l)
					c.close("stream_in", st.Stream, gl.StreamIn)
					c.close("pre_mix_in", st.PreMix, gl.PreMixIn)
					out, err := m.Forward(context.Background(), l, st, [][]int{s.TokenIDs}, p)
					if err != nil {
						t.Fatal(err)
					}
					c.worst = 0
					checkLayer41(c, out, gl)
					t.Logf("layer %d: worst max|Δ|/max %.3g", l, c.worst)
					st = out.Out
				}
				fin, err := m.Logits(context.Background(), st)
				if err != nil {
					t.Fatal(err)
				}
				c.where, c.worst = "final", 0
				c.close("hidden", fin.Hidden, gm.Final.Hidden)
				c.close("norm", fin.Norm, gm.Final.Norm)
				c.close("logits", fin.Logits, gm.Final.Logits)
				t.Logf("final: worst max|Δ|/max %.3g", c.worst)
			})
		}
	}
}

// TestDerived41 checks the layer roles and rotary frequencies against
// what model.py derived.
func TestDerived41(t *testing.T) {
	m, g := loadGolden41(t)
	cfg := m.Config
	if len(g.Derived.Layers) != cfg.Layers {
		t.Fatalf("%d derived layers, want %d", len(g.Derived.Layers), cfg.Layers)
	}
	for l, d := range g.Derived.Layers {
		want := d.Role41
		want.ReadsCompressedKVOf, want.ReadsTopKOf = -1, -1
		if d.KVOf != nil {
			want.ReadsCompressedKVOf = *d.KVOf
		}
		if d.TopKOf != nil {
			want.ReadsTopKOf = *d.TopKOf
		}
		if got := cfg.Roles[l]; got != want {
			t.Errorf("layer %d: role %+v, want %+v", l, got, want)
		}
		wf := g.Derived.RopeInvFreq.SWA
		if cfg.Ratio(l) > 0 {
			wf = g.Derived.RopeInvFreq.Compressed
		}
		if r := relDiff(cfg.InvFreq(l), wf.f32(t)); r > 1e-7 {
			t.Errorf("layer %d: rotary frequencies differ by %.3g", l, r)
		}
	}
}
