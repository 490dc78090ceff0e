package main

import (
	"os"
	"path/filepath"
	"slices"

	"github.com/dsfs/dsfs/checkpoint"
)

// agreement counts the rows (tokens) of one kind of decision, routes or
// picks, that the host engine made by a margin over minMargin, and those
// among them the CUDA backend made the same.
type agreement struct{ agree, decided int }

// ok reports whether the backend made every clear decision as the host.
func (a agreement) ok() bool { return a.agree == a.decided }

// tally adds to a the rows of want, k values each, whose margin exceeds
// minMargin, and counts those where same holds for got's row.
func tally[T any](a *agreement, got, want []T, margin []float32, k int, same func(g, w []T) bool) {
	for tok, m := range margin {
		if m <= minMargin {
			continue
		}
		a.decided++
		if same(got[tok*k:(tok+1)*k], want[tok*k:(tok+1)*k]) {
			a.agree++
		}
	}
}

// sameSet reports whether two rows of expert ids hold the same experts,
// in any order.
func sameSet(g, w []int32) bool {
	return slices.Equal(slices.Sorted(slices.Values(g)), slices.Sorted(slices.Values(w)))
}

// readCheckpoint opens the catalog of the reference checkpoint at dir and
// reads the named files of it.
func readCheckpoint(dir string, names ...string) (*checkpoint.Catalog, [][]byte, error) {
	cat, err := checkpoint.Open(dir)
	if err != nil {
		return nil, nil, err
	}
	files := make([][]byte, len(names))
	for i, name := range names {
		if files[i], err = os.ReadFile(filepath.Join(dir, name)); err != nil {
			return nil, nil, err
		}
	}
	return cat, files, nil
}
