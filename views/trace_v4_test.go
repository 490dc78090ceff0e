package views

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dsfs/dsfs/blockcache"
	"github.com/dsfs/dsfs/internal/testdata"
	"github.com/dsfs/dsfs/safetensors"
)

// TestTraceViewV4 lays out trace/ for the DeepSeek-V4 reference
// checkpoint with its first golden sequence as the prompt, and reads the
// last layer's output stream and the logits through Readers.
func TestTraceViewV4(t *testing.T) {
	type arr struct {
		Data []byte `json:"data"`
	}
	var g struct {
		Sequences []struct {
			TokenIDs []int `json:"token_ids"`
			Modes    map[string]struct {
				Layers []struct {
					StreamOut arr `json:"stream_out"`
				} `json:"layers"`
				Final struct {
					Logits arr `json:"logits"`
				} `json:"final"`
			} `json:"modes"`
		} `json:"sequences"`
	}
	dir := testdata.TraceGolden(t, "v4-tiny", &g)
	seq := g.Sequences[0]
	ids, _ := json.Marshal(seq.TokenIDs)
	prompts := filepath.Join(t.TempDir(), "p.json")
	os.WriteFile(prompts, []byte(`[{"id":"s0","token_ids":`+string(ids)+`}]`), 0o644)
	for _, prec := range []string{"", "fp32"} {
		s, err := traceSet(t, dir, Options{Values: map[string]string{"trace-prompts": prompts, "device": "cpu", "trace-precision": prec}})
		if err != nil {
			t.Fatal(err)
		}
		v := s.Root.Child("trace")
		for _, p := range []string{"prompts.json", "trace.json", "layers/00.json", "layers/04.safetensors", "logits.safetensors"} {
			if _, err := v.Lookup(p); err != nil {
				t.Errorf("%s: %v", p, err)
			}
		}
		if v.Child("ERROR.txt") != nil {
			t.Error("ERROR.txt for a model that runs")
		}
		mode := "a8"
		if prec != "" {
			mode = prec
		}
		cache := blockcache.New(16<<20, 2)
		for _, c := range []struct {
			file, tensor string
			want         []byte
		}{
			{"layers/04.safetensors", "s0.stream_out", seq.Modes[mode].Layers[4].StreamOut.Data},
			{"logits.safetensors", "s0.logits", seq.Modes[mode].Final.Logits.Data},
		} {
			n, _ := v.Lookup(c.file)
			b := readAll(t, n, cache)
			h, err := safetensors.ReadHeader(bytes.NewReader(b), int64(len(b)))
			if err != nil {
				t.Fatal(err)
			}
			ts, ok := h.Find(c.tensor)
			if !ok {
				t.Fatalf("%s: no %s", c.file, c.tensor)
			}
			got := b[h.DataStart+ts.Begin : h.DataStart+ts.End]
			if len(got) != len(c.want) {
				t.Fatalf("%s %s: %d bytes, want %d", mode, c.tensor, len(got), len(c.want))
			}
			var d, mx float64
			for i := 0; i < len(got); i += 4 {
				x := float64(math.Float32frombits(binary.LittleEndian.Uint32(got[i:])))
				y := float64(math.Float32frombits(binary.LittleEndian.Uint32(c.want[i:])))
				d, mx = max(d, math.Abs(x-y)), max(mx, math.Abs(y))
			}
			if d > 1e-5*mx {
				t.Errorf("%s %s: max|Δ|/max %.3g", mode, c.tensor, d/mx)
			}
		}
		cache.Close()
		doc := string(readAll(t, v.Child("trace.json"), nil))
		if !strings.Contains(doc, `"precision": "`+mode+`"`) {
			t.Errorf("trace.json does not record precision %s", mode)
		}
	}
	if _, err := traceSet(t, dir, Options{Values: map[string]string{"trace-prompts": prompts, "trace-precision": "bf16"}}); err == nil || !strings.Contains(err.Error(), "--trace-precision") {
		t.Errorf("--trace-precision bf16: %v", err)
	}
	// Without a tokenizer the default text prompts cannot run: ERROR.txt
	// says so, and nothing about the architecture.
	s, err := traceSet(t, dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	cache := blockcache.New(1<<20, 1)
	defer cache.Close()
	msg := string(readAll(t, s.Root.Child("trace").Child("ERROR.txt"), cache))
	if !strings.Contains(msg, "no tokenizer.json") || strings.Contains(msg, "hyper-connections") {
		t.Errorf("ERROR.txt: %s", msg)
	}
}
