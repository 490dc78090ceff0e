package checkpoint

import (
	"bytes"
	"fmt"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dsfs/dsfs/internal/fuzzcheck"
)

// FuzzIndex parses arbitrary index documents: no panic, bounded memory,
// and every shard it accepts is a clean relative path inside the
// checkpoint directory.
func FuzzIndex(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		before := fuzzcheck.Allocated()
		idx, err := parseIndex(data)
		fuzzcheck.Bounded(t, before, len(data))
		if err != nil {
			return
		}
		const root = "/checkpoint"
		for i, s := range idx.shards {
			if i > 0 && idx.shards[i-1] >= s {
				t.Fatalf("shards not sorted and distinct: %q", idx.shards)
			}
			joined := filepath.Join(root, s)
			if !filepath.IsLocal(s) || path.Clean(s) != s || !strings.HasPrefix(joined, root+"/") || strings.ContainsRune(s, 0) {
				t.Fatalf("accepted shard entry %q (%s) leaves the directory or is not clean", s, joined)
			}
			if idx.count[s] == 0 {
				t.Fatalf("shard %q has no tensors", s)
			}
		}
		n := 0
		for name, s := range idx.weightMap {
			if s == "" {
				continue // a refused entry
			}
			if idx.count[s] == 0 {
				t.Fatalf("tensor %q maps to %q, not an accepted shard", name, s)
			}
			n++
		}
		total := 0
		for _, c := range idx.count {
			total += c
		}
		if total != n {
			t.Fatalf("counts add up to %d, weight map has %d", total, n)
		}
		for _, p := range idx.problems {
			if p.File != IndexName || p.Reason == "" {
				t.Fatalf("problem %+v", p)
			}
		}
	})
}

// FuzzConfig parses arbitrary config documents: no panic, bounded
// memory, and patching the expert dtype is deterministic, idempotent and
// leaves the other fields as they were.
func FuzzConfig(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		before := fuzzcheck.Allocated()
		c, errs := parseConfig(data)
		fuzzcheck.Bounded(t, before, len(data))
		if c == nil || (c.Raw == nil && len(errs) == 0) {
			t.Fatalf("config %+v with errors %v", c, errs)
		}
		if c.Raw == nil {
			return
		}
		key := []string{"quantization_config", "expert_dtype"}
		out, err := PatchConfig(data, key, "nvfp4")
		_, isObject := c.Raw["quantization_config"].(map[string]any)
		if err != nil {
			if isObject || c.Raw["quantization_config"] == nil {
				t.Fatalf("patching failed: %v", err)
			}
			return
		}
		again, err := PatchConfig(out, key, "nvfp4")
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("patching the patched config changed it (%v):\n%s\n%s", err, out, again)
		}
		c2, _ := parseConfig(out)
		if c2.Quant.ExpertDType != "nvfp4" {
			t.Fatalf("patched expert dtype %q", c2.Quant.ExpertDType)
		}
		want, got := *c, *c2
		want.Raw, got.Raw = nil, nil
		// The patch may fix a bad expert_dtype and, where the top level had
		// no quantization_config, hide text_config's.
		want.Quant, got.Quant = QuantConfig{}, QuantConfig{}
		if isObject {
			want.Quant, got.Quant = c.Quant, c2.Quant
			want.Quant.ExpertDType = "nvfp4"
		}
		if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
			t.Fatalf("patching changed the config:\n%+v\nwant\n%+v", got, want)
		}
	})
}
