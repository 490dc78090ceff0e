package engramfp4

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/internal/tinyckpt"
	"github.com/dsfs/dsfs/safetensors"
	"github.com/dsfs/dsfs/sourcefile"
	"github.com/dsfs/dsfs/vfile"
)

// tinyDir holds a v41-tiny checkpoint written once for the package's tests.
var tinyDir string

func TestMain(m *testing.M) { tinyckpt.Main(m, "v41-tiny", &tinyDir) }

// TestRewriteClaims: a table becomes the FORMATS.md pair (I8 codes at half
// the width, an E8M0 scale per 32 values), its scale is claimed and
// dropped, and every other tensor is left to the next rewriter.
func TestRewriteClaims(t *testing.T) {
	cat, err := checkpoint.Open(tinyDir)
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	e := New(cat)
	if len(e.tables) != 2 {
		t.Fatalf("%d tables, want v41-tiny's 2", len(e.tables))
	}
	for _, src := range cat.Tensors {
		outs, ok := e.Rewrite(src)
		switch {
		case slices.Contains(e.tables, src):
			rows, cols := src.Shape[0], src.Shape[1]
			if !ok || len(outs) != 2 ||
				outs[0].Name != src.Name || outs[0].DType != safetensors.I8 || !slices.Equal(outs[0].Shape, []int64{rows, cols / 2}) ||
				outs[1].Name != src.Scale.Name || outs[1].DType != safetensors.F8E8M0 || !slices.Equal(outs[1].Shape, []int64{rows, cols / 32}) {
				t.Fatalf("%s: %v %+v", src.Name, ok, outs)
			}
			if outs[0].Data.Len() != rows*cols/2 || outs[1].Data.Len() != rows*cols/32 {
				t.Fatalf("%s: data of %d and %d bytes", src.Name, outs[0].Data.Len(), outs[1].Data.Len())
			}
		case src.ScaleOf != nil && slices.Contains(e.tables, src.ScaleOf):
			if !ok || outs != nil {
				t.Fatalf("%s: the table's scale is not dropped: %v %+v", src.Name, ok, outs)
			}
		case ok:
			t.Fatalf("%s: claimed, but it is no Engram table", src.Name)
		}
	}
}

// TestTableTruncatedUnderTheTranscode truncates a table's shard once the
// transcode has mapped it: the codec's next read of the table faults, and
// every block computed after is an error naming the shard, the tensor and
// the change, not a crash of the process.
func TestTableTruncatedUnderTheTranscode(t *testing.T) {
	cat, err := checkpoint.Open(tinyckpt.Fresh(t, "v41-tiny"))
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	e := New(cat)
	table := e.tables[0]
	outs, _ := e.Rewrite(table)
	codes, scale := outs[0].Data.(*vfile.Blocks), outs[1].Data.(*vfile.Blocks)
	compute := func(bl *vfile.Blocks) error {
		return bl.Compute(context.Background(), 0, make([]byte, bl.Size(0)))
	}
	if err := compute(scale); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(table.Shard.Path, 0); err != nil {
		t.Fatal(err)
	}
	for _, bl := range []*vfile.Blocks{codes, scale} {
		err := compute(bl)
		if !errors.Is(err, sourcefile.ErrChanged) || !strings.Contains(err.Error(), table.Shard.Name) ||
			!strings.Contains(err.Error(), table.Name) || !strings.Contains(err.Error(), "truncated") {
			t.Errorf("%s after the truncation: %v; want ErrChanged naming the shard, the table and the change", bl.ID, err)
		}
	}
}

// BenchmarkTranscode computes every block of v41-tiny's transcoded tables
// (codes and scales), as a first read of engram-fp4/ does; bytes are the
// output's.
func BenchmarkTranscode(b *testing.B) {
	cat, err := checkpoint.Open(tinyDir)
	if err != nil {
		b.Fatal(err)
	}
	defer cat.Close()
	e := New(cat)
	var blocks []*vfile.Blocks
	var n int64
	for _, t := range e.tables {
		outs, _ := e.Rewrite(t)
		for _, o := range outs {
			bl := o.Data.(*vfile.Blocks)
			blocks = append(blocks, bl)
			n += bl.N
		}
	}
	b.SetBytes(n)
	b.ReportAllocs()
	dst := make([]byte, 0, 4<<20)
	for b.Loop() {
		for _, bl := range blocks {
			for i := int64(0); i*bl.BlockLen < bl.N; i++ {
				d := dst[:min(bl.BlockLen, bl.N-i*bl.BlockLen)]
				if err := bl.Compute(context.Background(), i, d); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
}
