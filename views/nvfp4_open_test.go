package views

import (
	"strings"
	"testing"

	"github.com/dsfs/dsfs/blockcache"
	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/safetensors"
	"github.com/dsfs/dsfs/synth"
	"github.com/dsfs/dsfs/vfile"
)

// TestNVFP4OpenIsCheap lays out nvfp4/ over the released DeepSeek-V4.1-Flash
// layout and checks that the first MiB of every shard (the header and what a
// loader reads with it) is header and source bytes only, so opening a shard
// or listing its tensors computes nothing but the header, which is made
// from the layout alone (tensorfile.Lay); the weight_scale_2 and
// input_scale scalars, whose global exponent takes every scale of an
// expert group to compute and whose calibration the trace of every layer,
// are the last tensors of each shard. It also counts the loader contract
// on the released layout: 46,080 routed expert matrices with both
// scalars, 1,152 MTP expert matrices left MXFP4 (.weight and .scale).
func TestNVFP4OpenIsCheap(t *testing.T) {
	dir := t.TempDir()
	if err := synth.Write("v41-full-sparse", dir); err != nil {
		t.Fatal(err)
	}
	cat, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	s, err := Build(cat, Options{Views: []string{"nvfp4"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	cache := blockcache.New(64<<20, 2)
	t.Cleanup(cache.Close)
	scalars, inputs, mtpScales := 0, 0, 0
	for _, sh := range cat.Shards {
		f := s.Root.Child("nvfp4").Child(sh.Name).File
		hdr, ok := f.Segments()[0].(vfile.Small)
		if !ok || hdr.ID != "nvfp4/"+sh.Name {
			t.Fatalf("%s: no header segment", sh.Name)
		}
		start := hdr.Len()
		for _, seg := range f.Segments()[1:] {
			if start >= min(1<<20, f.Size()) {
				break
			}
			switch seg.(type) {
			case vfile.Bytes, vfile.Range:
			default:
				t.Fatalf("%s: bytes [%d, %d) are computed (%T), within the first MiB", sh.Name, start, start+seg.Len(), seg)
			}
			start += seg.Len()
		}
		hb := make([]byte, hdr.Len())
		if _, err := vfile.NewReader(f, cache).ReadAt(hb, 0); err != nil {
			t.Fatalf("%s: %v", sh.Name, err)
		}
		h, err := safetensors.ParseHeader(hb[8:], f.Size())
		if err != nil {
			t.Fatalf("%s: %v", sh.Name, err)
		}
		tail := false
		for _, tt := range h.Tensors {
			scalar := strings.HasSuffix(tt.Name, ".weight_scale_2") || strings.HasSuffix(tt.Name, ".input_scale")
			if tail && !scalar {
				t.Fatalf("%s: %s after the scalars", sh.Name, tt.Name)
			}
			switch {
			case strings.HasSuffix(tt.Name, ".weight_scale_2"):
				tail = true
				scalars++
			case strings.HasSuffix(tt.Name, ".input_scale"):
				tail = true
				inputs++
			case strings.HasPrefix(tt.Name, "mtp.") && strings.Contains(tt.Name, ".ffn.experts.") && strings.HasSuffix(tt.Name, ".scale"):
				mtpScales++
			}
		}
	}
	const routed, mtp = 40 * 384 * 3, 3 * 128 * 3
	if scalars != routed || inputs != routed || mtpScales != mtp {
		t.Errorf("%d weight_scale_2 and %d input_scale scalars, %d MTP expert scales; want %d, %d and %d", scalars, inputs, mtpScales, routed, routed, mtp)
	}
}
