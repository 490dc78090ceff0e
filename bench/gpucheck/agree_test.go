package main

import (
	"math"
	"slices"
	"testing"
)

// TestTally counts only rows decided by more than minMargin, routes as
// sets and picks in order.
func TestTally(t *testing.T) {
	inf := float32(math.Inf(1))
	for _, tt := range []struct {
		name      string
		got, want []int32
		margin    []float32
		same      func(g, w []int32) bool
		agreement agreement
	}{
		{"routes as sets", []int32{2, 1, 3, 4, 9, 8}, []int32{1, 2, 3, 4, 7, 8}, []float32{1, 0.5, inf}, sameSet, agreement{2, 3}},
		{"picks in order", []int32{2, 1, 3, 4, 7, 8}, []int32{1, 2, 3, 4, 7, 8}, []float32{1, 0.5, inf}, slices.Equal[[]int32], agreement{2, 3}},
		{"near ties left out", []int32{2, 1, 5, 5}, []int32{1, 2, 3, 4}, []float32{minMargin, 0}, slices.Equal[[]int32], agreement{0, 0}},
	} {
		var a agreement
		tally(&a, tt.got, tt.want, tt.margin, 2, tt.same)
		if a != tt.agreement {
			t.Errorf("%s: %+v, want %+v", tt.name, a, tt.agreement)
		}
	}
}
