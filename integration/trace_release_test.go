package integration

import (
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/dsfs/dsfs/codecs"
	"github.com/dsfs/dsfs/safetensors"
	"github.com/dsfs/dsfs/synth"
)

// TestTraceReleasedV41 mounts trace/ of the released DeepSeek-V4.1-Flash
// layout (v41-full-sparse, with its synthetic 129,280-id tokenizer.json)
// with the default prompts and checks, by stat alone, that every layer is
// served with its exact size at mount: no ERROR.txt (Engram's token map
// builds), layers/00..39 .json and .safetensors and logits.safetensors,
// each .safetensors the size of the activations LAYOUTS.md's config gives
// it. It reads no layer data: that would run forwards over 475 GiB of
// zeros. It logs the time to ready and peak memory, held to < 300 MB.
func TestTraceReleasedV41(t *testing.T) {
	needMount(t)
	src := t.TempDir()
	if err := synth.Write("v41-full-sparse", src); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	m := startMount(t, src, "--views", "trace", "--device", "cpu")
	ready := time.Since(start)
	hwm := vmHWM(t, m.cmd.Process.Pid)
	t.Logf("ready after %v (CPU %v, load %.1f per CPU), peak RSS %d MB", ready.Round(time.Millisecond), cpuTime(t, m.cmd.Process.Pid), loadPerCPU(t), hwm>>20)
	if hwm > 300<<20 {
		t.Errorf("peak RSS %d MB, want under 300 MB", hwm>>20)
	}
	if load := loadPerCPU(t); ready > 2*time.Second && load < 1 {
		t.Errorf("ready after %v at a load of %.1f per CPU, want under 2 s", ready, load)
	}
	if b, err := os.ReadFile(m.path("trace", "ERROR.txt")); err == nil {
		t.Fatalf("trace/ERROR.txt: %s", b)
	}

	var prompts []struct {
		ID       string `json:"id"`
		TokenIDs []int  `json:"token_ids"`
	}
	catJSON(t, m.path("trace", "prompts.json"), &prompts)
	if len(prompts) == 0 {
		t.Fatal("prompts.json lists no prompts")
	}

	// The released config (LAYOUTS.md §2): hidden 5120, hc 4, 6 experts a
	// token, head_dim 512, index_topk 512, compress ratio 2 on layers
	// 2-19 and 1 on 20-39, index sources, candidate source 20, Engram on
	// 1 and 14 with 3 orders x 8 heads.
	const hidden, hc, topk, headDim, indexTopK, vocab = 5120, 4, 6, 512, 512, 129280
	indexSources := []int{2, 8, 14, 20, 24, 28, 32, 36}
	layer := func(l int) []safetensors.Spec {
		ratio := int64(0)
		switch {
		case l >= 20:
			ratio = 1
		case l >= 2:
			ratio = 2
		}
		var out []safetensors.Spec
		for _, p := range prompts {
			T := int64(len(p.TokenIDs))
			add := func(kind string, dt safetensors.DType, shape ...int64) {
				out = append(out, safetensors.Spec{Name: p.ID + "." + kind, DType: dt, Shape: shape})
			}
			add("stream_out", safetensors.F32, T, hc, hidden)
			add("attn_out", safetensors.F32, T, hidden)
			add("ffn_out", safetensors.F32, T, hidden)
			add("pre_mix", safetensors.F32, T, hc)
			if ratio > 0 && T/ratio > 0 {
				add("compressed_kv", safetensors.F32, T/ratio, headDim)
				if slices.Contains(indexSources, l) {
					add("indexer_topk", safetensors.I32, T, min(indexTopK, T/ratio))
				}
				if l >= 20 {
					add("candidates", safetensors.U8, T, T/ratio)
				}
			}
			if l == 1 || l == 14 {
				add("engram_ids", safetensors.I32, T, 3*8)
				add("engram_gate", safetensors.F32, T, hc)
			}
			add("topk_ids", safetensors.I32, T, topk)
			add("topk_weights", safetensors.F32, T, topk)
		}
		return out
	}
	var logits []safetensors.Spec
	for _, p := range prompts {
		logits = append(logits, safetensors.Spec{Name: p.ID + ".logits", DType: safetensors.F32, Shape: []int64{int64(len(p.TokenIDs)), vocab}})
	}
	meta := []safetensors.Meta{{Key: "format", Value: "pt"}, {Key: "dsfs.view", Value: "trace"}, {Key: "dsfs.codec", Value: codecs.Version}}
	size := func(specs []safetensors.Spec) int64 {
		l, err := safetensors.NewLayout(meta, specs)
		if err != nil {
			t.Fatal(err)
		}
		return l.Size
	}

	want := map[string]int64{"logits.safetensors": size(logits)}
	for l := range 40 {
		want[fmt.Sprintf("layers/%02d.safetensors", l)] = size(layer(l))
		want[fmt.Sprintf("layers/%02d.json", l)] = 0     // computed when opened
		want[fmt.Sprintf("layers/%02d.load.png", l)] = 0 // drawn when opened: every layer routes
	}
	for _, p := range prompts {
		want["routes/"+p.ID+".png"] = 0
	}
	if names := files(t, m.path("trace")); len(names) != 3+3*40+len(prompts) {
		t.Errorf("trace/ holds %d files, want layers/00..39 .json, .safetensors and .load.png, routes/ID.png per prompt, logits.safetensors, prompts.json, trace.json: %v", len(names), names)
	}
	for name, n := range want {
		st, err := os.Stat(m.path("trace", name))
		if err != nil {
			t.Errorf("%v", err)
		} else if st.Size() != n {
			t.Errorf("trace/%s: %d bytes, want %d", name, st.Size(), n)
		}
	}
	// Stat-only: nothing ran, so memory stays where mounting left it.
	if after := vmHWM(t, m.cmd.Process.Pid); after > 300<<20 {
		t.Errorf("peak RSS %d MB after the stats, want under 300 MB", after>>20)
	}
}
