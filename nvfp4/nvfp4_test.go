package nvfp4

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/codecs"
	"github.com/dsfs/dsfs/internal/tinyckpt"
	"github.com/dsfs/dsfs/sourcefile"
	"github.com/dsfs/dsfs/vfile"
)

// tinyDir holds a v41-tiny checkpoint written once for the package's tests.
var tinyDir string

func TestMain(m *testing.M) { tinyckpt.Main(m, "v41-tiny", &tinyDir) }

// tiny returns the transcoder of the v41-tiny checkpoint.
func tiny(t *testing.T) *Transcoder {
	t.Helper()
	cat, err := checkpoint.Open(tinyDir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	n := New(cat, Options{MTP: true})
	if len(n.experts) == 0 {
		t.Fatal("v41-tiny has no MXFP4 experts")
	}
	return n
}

// read returns the bytes of a source tensor.
func read(t *testing.T, tt *checkpoint.Tensor) []byte {
	t.Helper()
	b := make([]byte, tt.Size)
	if _, err := tt.ReadAt(b, 0); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestGroups: w1 and w3 of one expert are one group, w2 is its own, and a
// transcoder keeps one group of each, so its scales are read once for g.
func TestGroups(t *testing.T) {
	n := tiny(t)
	pairs := 0
	for _, e := range n.experts {
		g := n.group(e)
		if n.group(e) != g {
			t.Fatalf("%s: a second group", e.Name)
		}
		var partner *checkpoint.Tensor
		if other, ok := map[string]string{"w1": "w3", "w3": "w1"}[e.Proj]; ok {
			partner = n.cat.Tensor(strings.TrimSuffix(base(e.Name), e.Proj) + other + ".weight")
		}
		switch {
		case partner != nil:
			pairs++
			if n.group(partner) != g || len(g.scales) != 2 {
				t.Fatalf("%s: not grouped with %s", e.Name, partner.Name)
			}
		case len(g.scales) != 1 || g.scales[0] != e.Scale:
			t.Fatalf("%s: grouped with %d scales", e.Name, len(g.scales))
		}
	}
	if pairs == 0 {
		t.Fatal("no w1/w3 pair")
	}
}

// TestCountsReadOnlyWhatTheyNeed checks the block counts, which read the
// codes of clamped blocks only, against counting over whole weights.
func TestCountsReadOnlyWhatTheyNeed(t *testing.T) {
	n := tiny(t)
	sparse, whole := 0, 0
	for _, w := range n.experts {
		g, err := n.group(w).g()
		if err != nil {
			t.Fatal(err)
		}
		sc := read(t, w.Scale)
		got, err := counts(w, sc, g)
		if err != nil {
			t.Fatal(err)
		}
		want := codecs.CountNVFP4(read(t, w), sc, g)
		if got != want {
			t.Fatalf("%s: counts %+v, want %+v", w.Name, got, want)
		}
		if want.Clamped > int64(len(sc)/64) {
			whole++
		} else if want.Clamped > 0 {
			sparse++
		}
	}
	t.Logf("%d experts read block by block, %d whole", sparse, whole)
	if sparse == 0 {
		t.Fatal("no expert exercised reading clamped blocks one by one")
	}
}

// TestScalesTruncatedUnderTheTranscode truncates an expert's shard once a
// weight_scale block has been computed from a mapping of it: the block
// computed again, and the block of a group whose exponent was not yet
// known, are errors naming the shard, the scale tensor and the change,
// not a crash of the process.
func TestScalesTruncatedUnderTheTranscode(t *testing.T) {
	cat, err := checkpoint.Open(tinyckpt.Fresh(t, "v41-tiny"))
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	n := New(cat, Options{})
	first := n.experts[0]
	var other *checkpoint.Tensor
	for _, e := range n.experts[1:] {
		if e.Shard == first.Shard && n.group(e) != n.group(first) {
			other = e
			break
		}
	}
	if other == nil {
		t.Fatal("v41-tiny has no second expert group in the first expert's shard")
	}
	scaleOf := func(e *checkpoint.Tensor) *vfile.Blocks {
		outs, ok := n.Rewrite(e)
		if !ok || len(outs) < 2 {
			t.Fatalf("%s: not rewritten", e.Name)
		}
		return outs[1].Data.(*vfile.Blocks)
	}
	compute := func(bl *vfile.Blocks) error {
		return bl.Compute(context.Background(), 0, make([]byte, bl.Size(0)))
	}
	if err := compute(scaleOf(first)); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(first.Shard.Path, 0); err != nil {
		t.Fatal(err)
	}
	for _, e := range []*checkpoint.Tensor{first, other} {
		err := compute(scaleOf(e))
		if !errors.Is(err, sourcefile.ErrChanged) || !strings.Contains(err.Error(), first.Shard.Name) ||
			!strings.Contains(err.Error(), e.Scale.Name) || !strings.Contains(err.Error(), "truncated") {
			t.Errorf("%s after the truncation: %v; want ErrChanged naming the shard, the scale and the change", e.Name, err)
		}
	}
}
