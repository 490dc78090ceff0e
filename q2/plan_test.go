package q2

import (
	"bytes"
	"testing"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/synth"
	"github.com/dsfs/dsfs/vfile"
)

func TestQ2ShardNames(t *testing.T) {
	tests := []struct {
		sources, want []string
	}{
		{[]string{"model-00001-of-00048.safetensors", "model-00048-of-00048.safetensors"},
			[]string{"quant-00001-of-00048.safetensors", "quant-00048-of-00048.safetensors"}},
		{[]string{"model.safetensors"}, []string{"quant-model.safetensors"}},
		{[]string{"sub/model-00002-of-00003.safetensors"}, []string{"sub/quant-00002-of-00003.safetensors"}},
		{[]string{"a-00001-of-00002.safetensors", "b-00001-of-00002.safetensors"},
			[]string{"quant-a-00001-of-00002.safetensors", "quant-b-00001-of-00002.safetensors"}},
	}
	for _, tt := range tests {
		cat := &checkpoint.Catalog{}
		for i, n := range tt.sources {
			if i%2 == 0 { // bad shards are named alike
				cat.Shards = append(cat.Shards, &checkpoint.Shard{Name: n})
			} else {
				cat.BadShards = append(cat.BadShards, checkpoint.BadShard{Name: n})
			}
		}
		names := ShardNames(cat)
		for i, n := range tt.sources {
			if names[n] != tt.want[i] {
				t.Errorf("%s: named %s, want %s", n, names[n], tt.want[i])
			}
		}
	}
}

func TestSourceRevision(t *testing.T) {
	snap := "/root/.cache/huggingface/hub/models--deepseek-ai--DeepSeek-V4.1-Flash/snapshots/0123abcd"
	tests := []struct {
		dir, flag, repo, rev string
	}{
		{snap, "", "deepseek-ai/DeepSeek-V4.1-Flash", "0123abcd"},
		{snap, "v2", "deepseek-ai/DeepSeek-V4.1-Flash", "v2"},
		{"/data/ckpt", "", "unknown", "unknown"},
		{"/data/ckpt", "main", "unknown", "main"},
	}
	for _, tt := range tests {
		repo, rev := sourceRevision(tt.dir, tt.flag)
		if repo != tt.repo || rev != tt.rev {
			t.Errorf("sourceRevision(%q, %q) = %q, %q; want %q, %q", tt.dir, tt.flag, repo, rev, tt.repo, tt.rev)
		}
	}
}

// TestSourceProse holds README.md's words for what q2/ derives from: a
// local checkpoint by its directory's name, never "`unknown` revision
// `unknown`".
func TestSourceProse(t *testing.T) {
	snap := "/root/.cache/huggingface/hub/models--deepseek-ai--DeepSeek-V4.1-Flash/snapshots/0123abcd"
	for _, tt := range []struct{ dir, flag, want string }{
		{snap, "", "`deepseek-ai/DeepSeek-V4.1-Flash` revision `0123abcd`"},
		{"/data/ckpt", "", "a local checkpoint (`ckpt`)"},
		{"/data/ckpt", "main", "a local checkpoint (`ckpt`) at revision `main`"},
	} {
		q := &Plan{cat: &checkpoint.Catalog{Dir: tt.dir}}
		q.Repo, q.Revision = sourceRevision(tt.dir, tt.flag)
		if got := q.source(); got != tt.want {
			t.Errorf("%s --revision %q: %q, want %q", tt.dir, tt.flag, got, tt.want)
		}
	}
}

func TestHumanFigures(t *testing.T) {
	tests := []struct {
		n            int64
		gb, thousand string
	}{
		{0, "0.00", "0"},
		{999, "0.00", "999"},
		{1_234_567_890, "1.23", "1,234,567,890"},
		{475_200_000_000_000, "475,200.00", "475,200,000,000,000"},
	}
	for _, tt := range tests {
		if g, c := humanGB(tt.n), commas(tt.n); g != tt.gb || c != tt.thousand {
			t.Errorf("%d: humanGB %s commas %s, want %s %s", tt.n, g, c, tt.gb, tt.thousand)
		}
	}
}

// TestWritePlanSameBytes: the streamed plan.json is, byte for byte, the
// document encoding/json makes of the whole plan, as plan.json was written
// before it was streamed: for V4.1 and V4 layouts, and for one with
// skipped experts and shards that hold only Engram tables.
func TestWritePlanSameBytes(t *testing.T) {
	skipping := synth.TinySpec()
	skipping.MoEInter = 288 // w2 reads 288 inputs: not a whole number of 256-blocks
	skipping.MaxShardBytes = 1 << 20
	for _, tc := range []struct {
		name string
		spec synth.Spec
	}{
		{"v41-tiny", synth.TinySpec()},
		{"v4-tiny", synth.V4TinySpec()},
		{"skipped", skipping},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := synth.WriteSpec(tc.spec, dir); err != nil {
				t.Fatal(err)
			}
			cat, err := checkpoint.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer cat.Close()
			q, err := New(cat, Options{})
			if err != nil {
				t.Fatal(err)
			}
			p := q.planDoc()
			want, err := vfile.JSON(p)
			if err != nil {
				t.Fatal(err)
			}
			var got bytes.Buffer
			if err := q.WritePlan(&got); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got.Bytes(), want) {
				t.Fatalf("WritePlan wrote %d bytes, encoding/json %d: they differ", got.Len(), len(want))
			}
			if len(p.Shards) == 0 || p.Totals.QuantisedTensors == 0 || (tc.name == "skipped") != (len(p.Skipped) > 0) {
				t.Fatalf("the plan has %d shards, %d quantised and %d skipped tensors: not the case the test means",
					len(p.Shards), p.Totals.QuantisedTensors, len(p.Skipped))
			}
		})
	}
}
