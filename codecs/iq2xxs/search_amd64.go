package iq2xxs

import "golang.org/x/sys/cpu"

// haveVectorSearch says whether the AVX2 neighbour search runs.
var haveVectorSearch = cpu.X86.HasAVX2

// bestNeighbourAVX2 is bestNeighbour's search over the n candidate codes
// (n a positive multiple of listWidth): it returns the position of the first
// candidate with the smallest distance below the largest float32, 0 if none
// is. The terms waux*(scale*q - xval)^2 are computed as the portable search
// computes them, and each candidate's eight are added in coordinate order,
// eight candidates at a time.
//
//go:noescape
func bestNeighbourAVX2(xval, waux *[8]float32, scale float32, codes *uint16, n int) int

// bestNeighbourVector is bestNeighbour's vector search.
func (t *searchTables) bestNeighbourVector(u uint16, xval, waux *[8]float32, scale float32) uint16 {
	e := t.listAt[u]
	list := t.lists[e>>8 : e>>8+e&0xff]
	return list[bestNeighbourAVX2(xval, waux, scale, &list[0], len(list))]
}
