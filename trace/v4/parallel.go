package v4

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
)

// parallelFor calls fn(i) for i in [0, n) over up to GOMAXPROCS
// goroutines, in contiguous runs. Each i is computed by one goroutine in
// its own fixed order, so results never depend on the number of cores.
func parallelFor(n int, fn func(i int)) {
	workers := min(runtime.GOMAXPROCS(0), n)
	if workers <= 1 {
		for i := range n {
			fn(i)
		}
		return
	}
	var wg sync.WaitGroup
	for w := range workers {
		lo, hi := n*w/workers, n*(w+1)/workers
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := lo; i < hi; i++ {
				fn(i)
			}
		}()
	}
	wg.Wait()
}

// parallelForCtx is parallelFor with a look at ctx before each i: once
// ctx is done the rest is skipped (what was computed is then
// meaningless) and ctx's error returned, so that a cancelled read stops
// within one i's work.
func parallelForCtx(ctx context.Context, n int, fn func(i int)) error {
	var stopped atomic.Bool
	parallelFor(n, func(i int) {
		if stopped.Load() {
			return
		}
		if ctx.Err() != nil {
			stopped.Store(true)
			return
		}
		fn(i)
	})
	return ctx.Err()
}
