package iq2xxs

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"slices"
	"testing"

	"github.com/dsfs/dsfs/internal/testdata"
)

// ggmlTables is iq2_xxs_tables.json.gz: ggml's state after
// iq2xs_init_impl(GGML_TYPE_IQ2_XXS).
type ggmlTables struct {
	KGrid          []uint16 `json:"kgrid_2bit_256"`
	GridHex        []string `json:"iq2xxs_grid_u64_hex"`
	Signs          []uint8  `json:"ksigns_iq2xs"`
	MapSize        int      `json:"kmap_size"`
	Map            string   `json:"map_i32_le_b64"`
	Neighbours     string   `json:"neighbours_u16_le_b64"`
	MapSHA256      string   `json:"map_sha256"`
	NeighboursSHA  string   `json:"neighbours_sha256"`
	OnGrid         int      `json:"n_on_grid"`
	OffGrid        int      `json:"n_off_grid"`
	NeighbourCount int      `json:"neighbour_entries"`
	NeighboursLen  int      `json:"neighbours_len_u16"`
}

func TestTables(t *testing.T) {
	var want ggmlTables
	testdata.GzipJSON(t, "ggml/iq2_xxs_tables.json.gz", &want)

	if !slices.Equal(gridCodes[:], want.KGrid) {
		t.Errorf("kgrid_2bit_256 differs")
	}
	if len(want.GridHex) != len(gridWords) {
		t.Fatalf("iq2xxs_grid has %d entries, want %d", len(want.GridHex), len(gridWords))
	}
	for k, h := range want.GridHex {
		if got := fmt.Sprintf("%016x", gridWords[k]); got != h {
			t.Errorf("iq2xxs_grid[%d] = %s, want %s", k, got, h)
		}
	}
	if !slices.Equal(signBytes[:], want.Signs) {
		t.Errorf("ksigns_iq2xs differs")
	}
	if want.MapSize != mapSize {
		t.Errorf("kmap_size = %d, want %d", mapSize, want.MapSize)
	}

	tab := tables()
	mapBytes := make([]byte, 4*len(tab.codeMap))
	onGrid := 0
	for u, v := range tab.codeMap {
		binary.LittleEndian.PutUint32(mapBytes[4*u:], uint32(v))
		if v >= 0 {
			onGrid++
		}
	}
	nbBytes := make([]byte, 2*len(tab.neighbours))
	for i, v := range tab.neighbours {
		binary.LittleEndian.PutUint16(nbBytes[2*i:], v)
	}
	for _, c := range []struct {
		name         string
		got, want    []byte
		sum, wantSum string
	}{
		{"map", mapBytes, testdata.Base64(t, want.Map), sha(mapBytes), want.MapSHA256},
		{"neighbours", nbBytes, testdata.Base64(t, want.Neighbours), sha(nbBytes), want.NeighboursSHA},
	} {
		if c.sum != c.wantSum {
			t.Errorf("%s sha256 = %s, want %s", c.name, c.sum, c.wantSum)
		}
		if len(c.got) != len(c.want) {
			t.Errorf("%s is %d bytes, want %d", c.name, len(c.got), len(c.want))
			continue
		}
		if i := firstDiff(c.got, c.want); i >= 0 {
			t.Errorf("%s differs first at byte %d", c.name, i)
		}
	}
	if onGrid != want.OnGrid || len(tab.codeMap)-onGrid != want.OffGrid {
		t.Errorf("%d codes on grid, %d off, want %d and %d", onGrid, len(tab.codeMap)-onGrid, want.OnGrid, want.OffGrid)
	}
	if len(tab.neighbours) != want.NeighboursLen || len(tab.neighbours)-(len(tab.codeMap)-onGrid) != want.NeighbourCount {
		t.Errorf("%d neighbour array entries, want %d (%d neighbours)", len(tab.neighbours), want.NeighboursLen, want.NeighbourCount)
	}
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func BenchmarkBuildTables(b *testing.B) {
	for b.Loop() {
		buildTables()
	}
}
