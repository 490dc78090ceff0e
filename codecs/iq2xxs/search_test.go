package iq2xxs

import (
	"bytes"
	"math"
	"testing"
)

// TestVectorProjectionMatchesPortable compares the vector projection with
// the portable one on groups made to round to every off-grid code, with
// exact ties (integer distances, zero metric), non-finite distances and
// random metrics.
func TestVectorProjectionMatchesPortable(t *testing.T) {
	if !haveVectorSearch {
		t.Skip("no vector projection on this CPU")
	}
	r := newRand(t)
	tb := tables()
	var sb subBlock
	for u := range mapSize {
		if tb.codeMap[u] >= 0 {
			continue
		}
		scale := float32(r.ExpFloat64())
		kind := r.IntN(4)
		if kind == 2 {
			scale = 1e30
		}
		for i := range sb.xval {
			l := float64(u >> (2 * (i % 8)) & 3)
			var off float64
			switch kind {
			case 0: // every candidate at distance 0
				sb.waux[i] = 0
			case 1: // integer distances: many exact ties
				sb.waux[i] = 1
				scale = 1
			case 2: // distances overflow (ggml aborts; both take the first)
				sb.waux[i] = float32(1e10 * r.Float64())
			default:
				sb.waux[i] = float32(r.Float64())
				off = 1.8*r.Float64() - 0.9
			}
			sb.xval[i] = float32((2*l + 1 + off) * float64(scale))
		}
		var got, want [4]uint16
		sb.projectGroups(tb, 1/scale, scale, &got, true)
		sb.projectGroups(tb, 1/scale, scale, &want, false)
		if got != want {
			t.Fatalf("code %#04x, xval %v, waux %v, scale %g: vector projection gives %#04x, portable %#04x", u, sb.xval, sb.waux, scale, got, want)
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
