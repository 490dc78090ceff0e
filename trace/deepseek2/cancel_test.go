package deepseek2

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/dsfs/dsfs/simd"
	"github.com/dsfs/dsfs/trace/backend"
)

// TestMatMulTiles: a product large enough to be cut into tiles between
// looks at the context equals the uncut product bit for bit, and a
// cancelled context stops it with the error reported by Download and Sync.
func TestMatMulTiles(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 1))
	const m, n, k = 100, 1500, 4000 // 48·n·k > cancelWork: cut both ways
	x := make([]float32, m*k)
	w := make([]float32, n*k)
	for i := range x {
		x[i] = rng.Float32()*2 - 1
	}
	for i := range w {
		w[i] = rng.Float32()*2 - 1
	}
	want := make([]float32, m*n)
	simd.MatMulT(want, n, x, k, w, k, m, n, k)

	c := backend.NewCPU()
	c.SetContext(context.Background())
	xb, db := c.Alloc(m*k), c.Alloc(m*n)
	c.Upload(xb, 0, x)
	wt := c.LoadWeight(backend.HostMatrix{Rows: n, Cols: k, F32: w})
	c.MatMul(backend.Whole(db, m, n), backend.Whole(xb, m, k), wt)
	got := make([]float32, m*n)
	if err := c.Download(got, db, 0); err != nil {
		t.Fatal(err)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("seed %d: value %d: %v cut into tiles, %v whole", seed, i, got[i], want[i])
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c.SetContext(ctx)
	c.MatMul(backend.Whole(db, m, n), backend.Whole(xb, m, k), wt)
	if err := c.Download(got, db, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("Download after a cancelled product: %v", err)
	}
	if err := c.Sync(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sync after a cancelled product: %v", err)
	}
	c.SetContext(nil)
	if err := c.Sync(); err != nil {
		t.Fatalf("error kept after SetContext(nil): %v", err)
	}
}
