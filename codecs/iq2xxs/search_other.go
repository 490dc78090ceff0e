//go:build !amd64

package iq2xxs

// haveVectorSearch says whether a vector neighbour search runs: not on this
// architecture.
const haveVectorSearch = false

func (t *searchTables) bestNeighbourVector(u uint16, xval, waux *[8]float32, scale float32) uint16 {
	panic("iq2xxs: no vector neighbour search on this architecture")
}
