package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/dsfs/dsfs/safetensors"
)

// TestTraceV41Golden mounts the DeepSeek-V4.1 reference checkpoint with
// its two golden sequences as token-id prompts, in both precisions, and
// compares the mounted layer files and logits.safetensors with
// DeepSeek's V4.1 model.py: every float tensor within 1e-5 of its
// largest magnitude; routes, indexer picks, candidate masks and Engram
// hash ids identical. Reading the last layer first runs the six layers
// once, carrying the CSA2 shared state from layer to layer.
func TestTraceV41Golden(t *testing.T) {
	dir, seqs, pfile := v4GoldenPrompts(t, "v41-tiny")
	const d, hc = 64, 4
	for _, mode := range []string{"a8", "fp32"} {
		t.Run(mode, func(t *testing.T) {
			m := startMount(t, dir, "--views", "trace", "--device", "cpu", "--trace-prompts", pfile, "--trace-precision", mode)
			if _, err := os.Stat(m.path("trace", "ERROR.txt")); !os.IsNotExist(err) {
				t.Fatalf("trace/ERROR.txt: %v", err)
			}
			for step, l := range []int{5, 0, 1, 2, 3, 4} {
				got := readSafetensors(t, m.path("trace", "layers", fmt.Sprintf("%02d.safetensors", l)))
				if step == 0 {
					if n := layerForwards(t, m); n != 6 {
						t.Fatalf("reading layer 5 ran %d layer forwards, want 6\n%s", n, m.log)
					}
				}
				for i, s := range seqs {
					gl := s.Modes[mode].Layers[l]
					f := v4LayerFile{t: t, l: l, seq: i, got: got}
					where := fmt.Sprintf("layer %d seq%d", l, i)
					T := int64(len(s.TokenIDs))
					for _, kind := range []string{"attn_out", "ffn_out"} {
						compareV4(t, where+" "+kind, (&goldenArray{Data: f.tensor(kind, safetensors.F32, T, d)}).f32(), f.golden(gl[kind], kind).f32())
					}
					compareV4(t, where+" stream_out", (&goldenArray{Data: f.tensor("stream_out", safetensors.F32, T, hc, d)}).f32(), f.golden(gl["stream_out"], "stream_out").f32())
					compareV4(t, where+" pre_mix", (&goldenArray{Data: f.tensor("pre_mix", safetensors.F32, T, hc)}).f32(), f.golden(gl["pre_mix_out"], "pre_mix_out").f32())
					if raw, ok := gl["compressed_kv"]; ok {
						want := f.golden(raw, "compressed_kv")
						compareV4(t, where+" compressed_kv", (&goldenArray{Data: f.tensor("compressed_kv", safetensors.F32, int64(want.Shape[0]), d)}).f32(), want.f32())
					}
					if raw, ok := gl["indexer"]; ok {
						var ix struct {
							TopK goldenArray `json:"topk"`
						}
						if err := json.Unmarshal(raw, &ix); err != nil {
							t.Fatal(err)
						}
						b := f.tensor("indexer_topk", safetensors.I32, T, int64(ix.TopK.Shape[1]))
						if !slices.Equal(int32s(b), int32s(ix.TopK.Data)) {
							t.Errorf("%s: indexer picks differ", where)
						}
					}
					if l >= 4 {
						// The candidate source (layer 4) publishes the mask;
						// layer 5 restricts its picks to it.
						var c struct {
							Mask goldenArray `json:"mask"`
						}
						if err := json.Unmarshal(s.Modes[mode].Layers[4]["candidates"], &c); err != nil {
							t.Fatal(err)
						}
						b := f.tensor("candidates", safetensors.U8, T, T)
						for j, v := range int32s(c.Mask.Data) {
							if int32(b[j]) != v {
								t.Fatalf("%s: candidate %d is %d, want %d", where, j, b[j], v)
							}
						}
					}
					if raw, ok := gl["engram"]; ok {
						var e struct {
							HashIDs goldenArray `json:"hash_ids"`
							Gate    goldenArray `json:"gate"`
						}
						if err := json.Unmarshal(raw, &e); err != nil {
							t.Fatal(err)
						}
						if b := f.tensor("engram_ids", safetensors.I32, T, 6); !slices.Equal(int32s(b), int32s(e.HashIDs.Data)) {
							t.Errorf("%s: Engram hash ids differ", where)
						}
						compareV4(t, where+" engram_gate", (&goldenArray{Data: f.tensor("engram_gate", safetensors.F32, T, hc)}).f32(), e.Gate.f32())
					}
					f.routes(where, T, gl["route"])
				}
			}
			compareV4Logits(t, m, seqs, mode, 768)
			// trace.json lists the roles and the Engram layout; jq-free:
			// grep reads it as any tool would.
			out, err := exec.Command("grep", "-c", `"role": "reindex"`, m.path("trace", "trace.json")).CombinedOutput()
			if err != nil || strings.TrimSpace(string(out)) == "0" {
				t.Errorf("trace.json has no reindex role (%v): %s", err, out)
			}
			b, err := os.ReadFile(m.path("trace", "layers", "01.json"))
			if err != nil {
				t.Fatal(err)
			}
			var rec struct {
				Precision string `json:"precision"`
				Engram    []struct {
					RowsRead int `json:"rows_read"`
				} `json:"engram"`
			}
			if err := json.Unmarshal(b, &rec); err != nil || rec.Precision != mode || len(rec.Engram) != 2 || rec.Engram[0].RowsRead == 0 {
				t.Fatalf("layers/01.json (%v): %.400s", err, b)
			}
		})
	}
}
