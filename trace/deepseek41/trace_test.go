package deepseek41

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dsfs/dsfs/internal/testdata"
	"github.com/dsfs/dsfs/internal/v4tiny"
	"github.com/dsfs/dsfs/trace"
	"github.com/dsfs/dsfs/trace/backend"
	v4 "github.com/dsfs/dsfs/trace/v4"
)

// v41Golden is what these tests read of testdata/trace/v41-tiny/golden.json.
type v41Golden struct {
	Sequences []struct {
		TokenIDs []int `json:"token_ids"`
		Modes    map[string]struct {
			Layers []struct {
				StreamOut    v4tiny.Array  `json:"stream_out"`
				PreMixOut    v4tiny.Array  `json:"pre_mix_out"`
				CompressedKV *v4tiny.Array `json:"compressed_kv"`
				Indexer      *struct {
					TopK v4tiny.Array `json:"topk"`
				} `json:"indexer"`
				Candidates *struct {
					Mask v4tiny.Array `json:"mask"`
				} `json:"candidates"`
				Engram *struct {
					HashIDs v4tiny.Array `json:"hash_ids"`
					Gate    v4tiny.Array `json:"gate"`
				} `json:"engram"`
				Route struct {
					IDs v4tiny.Array `json:"ids"`
				} `json:"route"`
			} `json:"layers"`
			Final struct {
				Logits v4tiny.Array `json:"logits"`
			} `json:"final"`
		} `json:"modes"`
	} `json:"sequences"`
}

// v41Tracer traces v41-tiny's two golden sequences as two prompts.
func v41Tracer(t *testing.T, p v4.Precision, b ...backend.Backend) (*core, *v41Golden) {
	t.Helper()
	var g v41Golden
	m := v4tiny.Open41(t, testdata.TraceGolden(t, "v41-tiny", &g))
	opt := trace.Options{Precision: string(p)}
	if len(b) > 0 {
		opt.Backend = b[0]
	}
	tr, err := model{m}.Trace(v4tiny.TwoPrompts(t, g.Sequences[0].TokenIDs, g.Sequences[1].TokenIDs, m.Config.Vocab), opt)
	if err != nil {
		t.Fatal(err)
	}
	return tr.(*core), &g
}

// TestV41TracerActivations reads every activation of every layer, last
// layer first (so the tracer runs the chain once, carrying the shared
// state), and compares it with the golden of its prompt.
func TestV41TracerActivations(t *testing.T) {
	for _, p := range []v4.Precision{v4.A8, v4.FP32} {
		tr, g := v41Tracer(t, p)
		last := tr.Layers() - 1
		if _, _, err := tr.Layer(context.Background(), last); err != nil {
			t.Fatal(err)
		}
		if n := tr.Forwards(); n != int64(last+1) {
			t.Errorf("%s: %d forwards to reach layer %d", p, n, last)
		}
		for l := last; l >= 0; l-- {
			for _, a := range tr.Activations(l) {
				gl := g.Sequences[a.Prompt].Modes[string(p)].Layers[l]
				b := v4tiny.ReadActivation(t, tr, l, a)
				what := string(p) + " layer " + a.Name
				switch a.Kind {
				case "stream_out":
					v4tiny.Within(t, what, v4tiny.F32s(b), gl.StreamOut.Data)
				case "pre_mix":
					v4tiny.Within(t, what, v4tiny.F32s(b), gl.PreMixOut.Data)
				case "compressed_kv":
					v4tiny.Within(t, what, v4tiny.F32s(b), gl.CompressedKV.Data)
				case "indexer_topk":
					if !slices.Equal(v4tiny.I32s(b), v4tiny.I32s(gl.Indexer.TopK.Data)) {
						t.Errorf("%s: picks differ", what)
					}
				case "candidates":
					// Layers after the source carry its mask: the
					// source's golden record (layer 4) holds it.
					want := v4tiny.I32s(g.Sequences[a.Prompt].Modes[string(p)].Layers[4].Candidates.Mask.Data)
					for i, v := range b {
						if int32(v) != want[i] {
							t.Fatalf("%s: mask entry %d is %d, want %d", what, i, v, want[i])
						}
					}
				case "engram_ids":
					if !slices.Equal(v4tiny.I32s(b), v4tiny.I32s(gl.Engram.HashIDs.Data)) {
						t.Errorf("%s: hash ids differ", what)
					}
				case "engram_gate":
					v4tiny.Within(t, what, v4tiny.F32s(b), gl.Engram.Gate.Data)
				case "topk_ids":
					if got, want := v4tiny.I32s(b), v4tiny.I32s(gl.Route.IDs.Data); !sameRowSets(got, want, len(got)/a.Rows()) {
						t.Errorf("%s: routes differ", what)
					}
				}
			}
		}
		if n := tr.Forwards(); n > int64(2*(last+1)) {
			t.Errorf("%s: %d forwards for %d layers", p, n, last+1)
		}
		for _, a := range tr.LogitActivations() {
			v4tiny.Within(t, string(p)+" "+a.Name, v4tiny.F32s(v4tiny.ReadActivation(t, tr, -1, a)), g.Sequences[a.Prompt].Modes[string(p)].Final.Logits.Data)
		}
	}
}

func sameRowSets(a, b []int32, k int) bool {
	if len(a) != len(b) {
		return false
	}
	for r := 0; r < len(a); r += k {
		x, y := slices.Clone(a[r:r+k]), slices.Clone(b[r:r+k])
		slices.Sort(x)
		slices.Sort(y)
		if !slices.Equal(x, y) {
			return false
		}
	}
	return true
}

// TestV41TracerMemo checks that reading layer N after layer M < N runs
// only the layers in between: the shared attention state is carried.
func TestV41TracerMemo(t *testing.T) {
	tr, _ := v41Tracer(t, v4.A8)
	ctx := context.Background()
	if _, _, err := tr.Layer(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if n := tr.Forwards(); n != 3 {
		t.Fatalf("%d forwards for layers 0-2", n)
	}
	// Layer 5 reindexes within layer 4's candidates over its keys.
	if _, _, err := tr.Layer(ctx, 5); err != nil {
		t.Fatal(err)
	}
	if n := tr.Forwards(); n != 6 {
		t.Errorf("%d forwards after layer 5, want 6", n)
	}
	// Layer 3 (reuse of layer 2) is older than the recent outputs kept:
	// it reruns from its memoised state alone.
	if _, _, err := tr.Layer(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if n := tr.Forwards(); n != 7 {
		t.Errorf("%d forwards after rereading layer 3, want 7", n)
	}
}

// TestV41TraceJSON checks trace.json's roles, Engram layout and records.
func TestV41TraceJSON(t *testing.T) {
	tr, _ := v41Tracer(t, v4.A8)
	b, err := tr.TraceJSON(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Reference     string `json:"reference"`
		Configuration struct {
			Roles []v4.Role41 `json:"layer_roles"`
		} `json:"configuration"`
		LayerRoles []string `json:"layer_roles"`
		Engram     struct {
			Multipliers [][]int64 `json:"multipliers"`
			Size        int       `json:"compressed_vocab_size"`
		} `json:"engram"`
		Layers []struct {
			Engram []struct {
				RowsRead int `json:"rows_read"`
				Tokens   []struct {
					HashIDs []int32   `json:"hash_ids"`
					Gate    []float32 `json:"gate"`
				} `json:"tokens"`
			} `json:"engram"`
			Candidates []struct {
				Tokens []struct {
					Blocks []int `json:"blocks"`
				} `json:"tokens"`
			} `json:"candidates"`
		} `json:"layers"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	if len(d.Configuration.Roles) != 6 || d.Configuration.Roles[5].Role != v4.RoleReindex || !strings.Contains(d.LayerRoles[4], "candidate source") {
		t.Errorf("roles %+v / %q", d.Configuration.Roles, d.LayerRoles)
	}
	if d.Engram.Size != 408 || len(d.Engram.Multipliers) != 2 {
		t.Errorf("engram layout %+v", d.Engram)
	}
	if e := d.Layers[1].Engram; len(e) != 2 || e[0].RowsRead == 0 || len(e[0].Tokens[0].HashIDs) != 6 || len(e[0].Tokens[0].Gate) != 4 {
		t.Errorf("layer 1 Engram record %+v", e)
	}
	if c := d.Layers[4].Candidates; len(c) != 2 || len(c[0].Tokens[23].Blocks) != 3 {
		t.Errorf("layer 4 candidate record %+v", c)
	}
}

// TestCalibrate checks what the tracer records of the routed experts'
// inputs, which nvfp4/'s calibration reads, against the golden chain (of
// a8, the precision calibration runs at; the golden records routed_w2_in
// of that one).
func TestCalibrate(t *testing.T) {
	for _, p := range []v4.Precision{v4.A8} {
		tr, _ := v41Tracer(t, p)
		v4tiny.CheckCalibration(t, tr, filepath.Join(testdata.Dir(t), "trace", "v41-tiny"), string(p))
	}
}
