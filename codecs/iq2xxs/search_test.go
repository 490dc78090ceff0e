package iq2xxs

import (
	"bytes"
	"math"
	"testing"
)

// TestVectorSearchMatchesPortable compares the vector neighbour search with
// the portable one on random groups, for every off-grid code, including
// ties (all-equal inputs), zeros and non-finite distances.
func TestVectorSearchMatchesPortable(t *testing.T) {
	if !haveVectorSearch {
		t.Skip("no vector neighbour search on this CPU")
	}
	r := newRand(t)
	tb := tables()
	var xval, waux [8]float32
	for u := range mapSize {
		if tb.codeMap[u] >= 0 {
			continue
		}
		scale := float32(r.ExpFloat64())
		switch r.IntN(8) {
		case 0: // every candidate at the same distance
			xval, waux = [8]float32{}, [8]float32{}
		case 1: // integer grid: many exact ties
			for j := range xval {
				xval[j] = float32(r.IntN(6))
				waux[j] = 1
			}
			scale = 1
		case 2: // distances overflow (ggml aborts; both take the first)
			for j := range xval {
				xval[j] = float32(1e30 * r.Float64())
				waux[j] = float32(1e10 * r.Float64())
			}
		default:
			for j := range xval {
				xval[j] = float32(math.Abs(r.NormFloat64()) * 3 * float64(scale))
				waux[j] = float32(r.Float64())
			}
		}
		got := tb.bestNeighbour(uint16(u), &xval, &waux, scale, true)
		want := tb.bestNeighbour(uint16(u), &xval, &waux, scale, false)
		if got != want {
			t.Fatalf("code %#04x, xval %v, waux %v, scale %g: vector search gives %#04x, portable %#04x", u, xval, waux, scale, got, want)
		}
	}
}

// TestVectorQuantizeMatchesPortable quantises random rows, with and without
// importance, through both searches and expects the same bytes.
func TestVectorQuantizeMatchesPortable(t *testing.T) {
	if !haveVectorSearch {
		t.Skip("no vector neighbour search on this CPU")
	}
	r := newRand(t)
	const n = 2048
	for row := range 40 {
		var x []float32
		if row%2 == 0 {
			x = mxfp4Row(r, n)
		} else {
			x = make([]float32, n)
			for i := range x {
				x[i] = float32(r.NormFloat64() * math.Exp(4*r.NormFloat64()))
			}
		}
		var imp []float32
		if row%3 == 0 {
			imp = make([]float32, n)
			for i := range imp {
				imp[i] = float32(r.ExpFloat64())
			}
		}
		got, want := make([]byte, RowBytes(n)), make([]byte, RowBytes(n))
		quantize(got, x, imp, true)
		quantize(want, x, imp, false)
		if i := firstDiff(got, want); i >= 0 {
			t.Fatalf("row %d (importance %t): byte %d is %#02x with the vector search, %#02x with the portable one", row, imp != nil, i, got[i], want[i])
		}
	}
}

// TestVectorsPortable runs the reference vectors through the portable
// search (TestVectors runs Quantize, which takes the vector search where
// the CPU has one).
func TestVectorsPortable(t *testing.T) {
	for _, c := range loadVectors(t) {
		got := make([]byte, len(c.Expect))
		quantize(got, c.Input, nil, false)
		if !bytes.Equal(got, c.Expect) {
			t.Fatalf("%s: byte %d differs from ggml's", c.Name, firstDiff(got, c.Expect))
		}
	}
}
