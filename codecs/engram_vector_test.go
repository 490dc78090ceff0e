package codecs

import (
	"bytes"
	"testing"

	"github.com/dsfs/dsfs/simd"
)

// withEngramLoop runs f with EngramFP4 and EngramScales on their per-block
// loop over engramCode.
func withEngramLoop(f func()) {
	defer func(v bool) { engramVector = v }(engramVector)
	engramVector = false
	f()
}

// TestEngramVectorMatchesLoop checks the vector path against the per-block
// loop bit for bit on random blocks that meet every block shift d.
func TestEngramVectorMatchesLoop(t *testing.T) {
	if !simd.VectorBlocks() {
		t.Skip("no vector kernels here: EngramFP4 runs the loop")
	}
	rng, seed := newRand(t)
	n := 1<<14 + rng.IntN(64) // not a whole number of chunks or pairs
	if testing.Short() {
		n = 1<<12 + rng.IntN(64)
	}
	srcW, srcS := make([]byte, MXBlock*n), make([]byte, n)
	randomEngram(rng, srcW, srcS)
	var seen [len(engramCode)]bool
	for i, s := range srcS {
		if _, e, ok := engramScale(simd.MaxLow7((*[MXBlock]byte)(srcW[MXBlock*i:])), s); ok {
			seen[int(s)-127-e-engramMinShift] = true
		}
	}
	for i, ok := range seen {
		if !ok {
			t.Fatalf("seed %d: no block with shift d = %d", seed, i+engramMinShift)
		}
	}
	gotW, gotS := make([]byte, MXBlock/2*n), make([]byte, n)
	wantW, wantS := make([]byte, MXBlock/2*n), make([]byte, n)
	gotScales := make([]byte, n)
	got, gotC := EngramFP4(gotW, gotS, srcW, srcS), EngramScales(gotScales, srcW, srcS)
	var want EngramCounts
	withEngramLoop(func() { want = EngramFP4(wantW, wantS, srcW, srcS) })
	if got != want || gotC != want || !bytes.Equal(gotScales, wantS) {
		t.Fatalf("seed %d: counts %+v (scales %+v), want %+v", seed, got, gotC, want)
	}
	for i := range n {
		if gotS[i] != wantS[i] || !bytes.Equal(gotW[16*i:16*(i+1)], wantW[16*i:16*(i+1)]) {
			t.Fatalf("seed %d: block %d (scale %d, E4M3 % x):\n got scale %d codes % x\nwant scale %d codes % x",
				seed, i, srcS[i], srcW[32*i:32*(i+1)], gotS[i], gotW[16*i:16*(i+1)], wantS[i], wantW[16*i:16*(i+1)])
		}
	}
}

// TestEngramLoop runs the reference tests on the per-block loop, which is
// what runs where the vector kernels do not.
func TestEngramLoop(t *testing.T) {
	if !simd.VectorBlocks() {
		t.Skip("no vector kernels here: the tests ran the loop already")
	}
	for name, f := range map[string]func(*testing.T){
		"Ties":          TestEngramTies,
		"Exhaustive":    TestEngramExhaustive,
		"Random":        TestEngramRandom,
		"SpecialBlocks": TestEngramSpecialBlocks,
		"Scales":        TestEngramScalesMatchEngramFP4,
	} {
		t.Run(name, func(t *testing.T) { withEngramLoop(func() { f(t) }) })
	}
}

func TestCodeSteps(t *testing.T) {
	for _, c := range []struct {
		name  string
		code  func(b byte) byte
		above [7]byte
	}{
		{"identity on 0..7", func(b byte) byte { return min(b&0x7f, 7) }, [7]byte{0, 1, 2, 3, 4, 5, 6}},
		{"all zero", func(byte) byte { return 0 }, [7]byte{0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f}},
		{"jump to 7 at 0x40", func(b byte) byte { return 7 * (b & 0x7f / 0x40) }, [7]byte{0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f}},
		{"2 from 1, 5 from 0x7E", func(b byte) byte {
			m := b & 0x7f
			return 2*min(m, 1) + 3*(m/0x7e)
		}, [7]byte{0, 0, 0x7d, 0x7d, 0x7d, 0x7f, 0x7f}},
	} {
		var code [256]byte
		for b := range code {
			code[b] = c.code(byte(b))
		}
		if got := codeSteps(&code); got != c.above {
			t.Errorf("%s: thresholds %v, want %v", c.name, got, c.above)
		}
	}
}
