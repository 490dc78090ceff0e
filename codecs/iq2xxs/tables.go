package iq2xxs

import "sync"

// gridCodes is ggml's kgrid_2bit_256: the 256 points of the IQ2_XXS codebook,
// coordinate j of a point packed as a level index 0..2 in bits 2j..2j+1. The
// position of a point in this list is its grid index in the encoded block.
var gridCodes = [256]uint16{
	0, 2, 5, 8, 10, 17, 20, 32, 34, 40, 42, 65, 68, 80, 88, 97,
	100, 128, 130, 138, 162, 257, 260, 272, 277, 320, 388, 408, 512, 514, 546, 642,
	1025, 1028, 1040, 1057, 1060, 1088, 1090, 1096, 1120, 1153, 1156, 1168, 1188, 1280, 1282, 1288,
	1312, 1350, 1385, 1408, 1425, 1545, 1552, 1600, 1668, 1700, 2048, 2053, 2056, 2068, 2088, 2113,
	2116, 2128, 2130, 2184, 2308, 2368, 2562, 2580, 4097, 4100, 4112, 4129, 4160, 4192, 4228, 4240,
	4245, 4352, 4360, 4384, 4432, 4442, 4480, 4644, 4677, 5120, 5128, 5152, 5157, 5193, 5248, 5400,
	5474, 5632, 5654, 6145, 6148, 6160, 6208, 6273, 6400, 6405, 6560, 6737, 8192, 8194, 8202, 8260,
	8289, 8320, 8322, 8489, 8520, 8704, 8706, 9217, 9220, 9232, 9280, 9302, 9472, 9537, 9572, 9872,
	10248, 10272, 10388, 10820, 16385, 16388, 16400, 16408, 16417, 16420, 16448, 16456, 16470, 16480, 16513, 16516,
	16528, 16640, 16672, 16737, 16768, 16773, 16897, 16912, 16968, 16982, 17000, 17408, 17416, 17440, 17536, 17561,
	17682, 17700, 17920, 18433, 18436, 18448, 18496, 18501, 18688, 18776, 18785, 18818, 19013, 19088, 20480, 20488,
	20497, 20505, 20512, 20608, 20616, 20740, 20802, 20900, 21137, 21648, 21650, 21770, 22017, 22100, 22528, 22545,
	22553, 22628, 22848, 23048, 24580, 24592, 24640, 24680, 24832, 24917, 25112, 25184, 25600, 25605, 25872, 25874,
	25988, 26690, 32768, 32770, 32778, 32833, 32898, 33028, 33048, 33088, 33297, 33793, 33796, 33808, 33813, 33856,
	33888, 34048, 34118, 34196, 34313, 34368, 34400, 34818, 35076, 35345, 36868, 36880, 36900, 36928, 37025, 37142,
	37248, 37445, 37888, 37922, 37956, 38225, 39041, 39200, 40962, 41040, 41093, 41225, 41472, 42008, 43088, 43268,
}

// levelBytes are the magnitudes the decoder gives the three levels (ggml's
// iq2xxs_grid bytes): deliberately 8, 25, 43 rather than a uniform 8, 24, 40.
var levelBytes = [3]uint8{0x08, 0x19, 0x2b}

// mapSize is ggml's kmap_size for IQ2_XXS: one entry per 16-bit level code up
// to the largest code with every level below 3 (0xAAAA), rounded up.
const mapSize = 43692

// gridWords is ggml's iq2xxs_grid: the grid points as the decoder sees them,
// coordinate j in byte j.
var gridWords = func() (g [256]uint64) {
	for k, code := range gridCodes {
		for j := range 8 {
			g[k] |= uint64(levelBytes[code>>(2*j)&3]) << (8 * j)
		}
	}
	return g
}()

// signBytes is ggml's ksigns_iq2xs: seven stored sign bits plus an eighth that
// makes the number of negative signs even.
var signBytes = func() (s [128]uint8) {
	for v := range s {
		parity := 0
		for b := v; b != 0; b >>= 1 {
			parity ^= b & 1
		}
		s[v] = uint8(v | parity<<7)
	}
	return s
}()

// searchTables are the quantiser's lookup tables, the state ggml builds in
// iq2xs_init_impl(GGML_TYPE_IQ2_XXS), with ggml's exact layout.
type searchTables struct {
	// codeMap[u] is the grid index of level code u when u is a grid point,
	// else -(offset+1), offset locating u's neighbour list in neighbours.
	codeMap [mapSize]int32
	// neighbours holds, per off-grid code in increasing code order, a count
	// followed by the grid indices at the two smallest distinct distances
	// from the code, ordered by distance and then index.
	neighbours []uint16

	// lists holds the same lists for the vector search: grid codes rather
	// than indices, each list padded with listPad codes to a multiple of
	// listWidth. listAt[u] locates off-grid code u's list there: its start
	// times 256 plus its padded length.
	lists  []uint16
	listAt [mapSize]uint32
}

const (
	// listWidth is the number of candidates the vector search compares at
	// once.
	listWidth = 8
	// listPad pads the vector search's lists: level 3 in every coordinate,
	// whose distance terms are +Inf, so it never beats a listed point.
	listPad = 0xffff
)

// tables returns the search tables, building them on first use.
var tables = sync.OnceValue(buildTables)

// buildTables computes the search tables. ggml measures, for every off-grid
// code and every grid point, the squared distance between the odd integers
// 2l+1 of their coordinates and sorts all 256 points; only the points at the
// two smallest distances survive, so finding those two distances and
// collecting their points in index order gives the same lists without the
// sort. Distances are kept in level units ((l-m)^2 per coordinate, a quarter
// of ggml's), which orders the points identically, and split into two
// four-coordinate halves whose contributions are tabulated once.
func buildTables() *searchTables {
	t := new(searchTables)
	for u := range t.codeMap {
		t.codeMap[u] = -1
	}
	for k, code := range gridCodes {
		t.codeMap[code] = int32(k)
	}

	// half[h][c][k]: distance over coordinates 4h..4h+3 between grid point k
	// and the 8-bit half code c (four levels 0..3). Each coordinate adds at
	// most 9, so a full distance fits in a byte.
	var half [2][256][256]uint8
	for h := range 2 {
		for c := range 256 {
			for k, code := range gridCodes {
				d := 0
				for j := range 4 {
					diff := int(code>>(8*h+2*j)&3) - int(c>>(2*j)&3)
					d += diff * diff
				}
				half[h][c][k] = uint8(d)
			}
		}
	}

	t.neighbours = make([]uint16, 0, 1<<19)
	t.lists = make([]uint16, 0, 1<<21)
	var dist [256]uint8
	for u := range t.codeMap {
		if t.codeMap[u] >= 0 {
			continue
		}
		lo, hi := &half[0][u&0xff], &half[1][u>>8]
		first, second := uint8(0xff), uint8(0xff)
		for k := range dist {
			d := lo[k] + hi[k]
			dist[k] = d
			switch {
			case d < first:
				first, second = d, first
			case d > first && d < second:
				second = d
			}
		}
		offset := len(t.neighbours)
		t.codeMap[u] = -int32(offset) - 1
		t.neighbours = append(t.neighbours, 0)
		for _, want := range [2]uint8{first, second} {
			for k, d := range dist {
				if d == want {
					t.neighbours = append(t.neighbours, uint16(k))
				}
			}
		}
		t.neighbours[offset] = uint16(len(t.neighbours) - offset - 1)

		start := len(t.lists)
		for _, k := range t.neighbours[offset+1:] {
			t.lists = append(t.lists, gridCodes[k])
		}
		for len(t.lists)%listWidth != 0 {
			t.lists = append(t.lists, listPad)
		}
		t.listAt[u] = uint32(start)<<8 | uint32(len(t.lists)-start)
	}
	return t
}
