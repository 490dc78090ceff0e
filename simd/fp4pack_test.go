package simd

import (
	"bytes"
	"math/rand/v2"
	"sort"
	"testing"
	"time"
)

func TestStepsCode(t *testing.T) {
	s := NewSteps([7]byte{0, 3, 3, 10, 0x40, 0x7e, 0x7f})
	for _, c := range []struct{ b, code byte }{
		{0x00, 0}, {0x80, 0}, // zero of either sign exceeds nothing
		{0x01, 1}, {0x81, 9}, // a tiny negative keeps its sign
		{0x03, 1}, {0x04, 3}, {0x0a, 3}, {0x0b, 4},
		{0x40, 4}, {0x41, 5}, {0xc1, 13},
		{0x7e, 5}, {0x7f, 6}, {0xff, 14}, // 0x7F exceeds every threshold but 0x7F
	} {
		if got := s.Code(c.b); got != c.code {
			t.Errorf("Code(%#02x) = %d, want %d", c.b, got, c.code)
		}
	}
}

// randomSteps returns n Steps with sorted random thresholds, some at the
// ends 0 and 0x7F.
func randomSteps(rng *rand.Rand, n int) []Steps {
	steps := make([]Steps, n)
	for i := range steps {
		var above [7]byte
		for k := range above {
			switch r := rng.IntN(8); r {
			case 0:
				above[k] = 0
			case 1:
				above[k] = 0x7f
			default:
				above[k] = byte(rng.IntN(0x80))
			}
		}
		sort.Slice(above[:], func(a, b int) bool { return above[a] < above[b] })
		steps[i] = NewSteps(above)
	}
	return steps
}

// randomBlocks returns n blocks of random bytes, each with its magnitudes
// below a random limit so that block maxima vary.
func randomBlocks(rng *rand.Rand, n int) []byte {
	src := make([]byte, Block*n)
	for i := range n {
		limit := 1 + rng.IntN(0x80)
		for j := range Block {
			src[Block*i+j] = byte(rng.IntN(limit)) | byte(rng.IntN(2))<<7
		}
	}
	return src
}

func TestMaxLow7s(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 1))
	for _, n := range []int{0, 1, 7, 8, 9, 64, 1000 + rng.IntN(100)} {
		src := randomBlocks(rng, n)
		got := make([]byte, n)
		MaxLow7s(got, src)
		for i := range n {
			if want := MaxLow7((*[Block]byte)(src[Block*i:])); got[i] != want {
				t.Fatalf("seed %d, %d blocks: block %d (% x): %#02x, want %#02x", seed, n, i, src[Block*i:Block*(i+1)], got[i], want)
			}
		}
	}
}

func TestPackSteps(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 2))
	steps := randomSteps(rng, 19)
	for _, n := range []int{0, 1, 2, 3, 256, 2048 + rng.IntN(100)} {
		src := randomBlocks(rng, n)
		if n >= 256 { // every byte under every Steps
			for i := range 256 {
				src[Block*i+i%Block] = byte(i)
			}
		}
		sel := make([]byte, n)
		for i := range sel {
			sel[i] = byte(rng.IntN(len(steps)))
		}
		got := make([]byte, Block/2*n)
		PackSteps(got, src, steps, sel)
		for i := range n {
			var lut [256]byte
			for b := range lut {
				lut[b] = steps[sel[i]].Code(byte(b))
			}
			var want [Block / 2]byte
			PackNibbles(&want, (*[Block]byte)(src[Block*i:]), &lut)
			if !bytes.Equal(got[Block/2*i:Block/2*(i+1)], want[:]) {
				t.Fatalf("seed %d, %d blocks: block %d (% x) with Steps %d:\n got % x\nwant % x",
					seed, n, i, src[Block*i:Block*(i+1)], sel[i], got[Block/2*i:Block/2*(i+1)], want)
			}
		}
	}
}

// TestRescaleE8M0 meets every pair of block maximum and scale byte, under
// random shift tables that reach both ends of [-127, 127], in runs whose
// lengths leave the kernel a tail, and checks each block against the rules
// as RescaleE8M0 states them.
func TestRescaleE8M0(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 3))
	for range 4 {
		var c [128]int8
		for m := range c {
			switch rng.IntN(8) {
			case 0:
				c[m] = 127
			case 1:
				c[m] = -127
			default:
				c[m] = int8(rng.IntN(255) - 127)
			}
		}
		shifts := NewShifts(c)
		for m := range c {
			if got := shifts.Shift(byte(m) | 0x80); got != c[m] {
				t.Fatalf("seed %d: Shift(%#02x) = %d, want %d", seed, m|0x80, got, c[m])
			}
		}
		bias := byte(rng.IntN(256))
		n := 256*256 - rng.IntN(32) // every top byte, the high bit too, with every scale
		top, s := make([]byte, n), make([]byte, n)
		for i := range n {
			top[i], s[i] = byte(i>>8), byte(i)
		}
		tt, sel := make([]byte, n), make([]byte, n)
		RescaleE8M0(tt, sel, top, s, &shifts, bias)
		for i := range n {
			m := top[i] & 0x7f
			wantT, wantSel := byte(255), byte(0)
			switch {
			case m == 0x7f || s[i] == 255:
			case m == 0:
				wantT = 1
			default:
				v := int(s[i]) + int(c[m])
				wantT = byte(max(1, min(254, v)))
				wantSel = s[i] - wantT + bias
			}
			if tt[i] != wantT || sel[i] != wantSel {
				t.Fatalf("seed %d: top %#02x, s %d, shift %d, bias %d: t %d sel %d, want t %d sel %d",
					seed, top[i], s[i], c[m], bias, tt[i], sel[i], wantT, wantSel)
			}
		}
	}
}

// TestBlockKernelsFallback runs the tests above on the portable loops.
func TestBlockKernelsFallback(t *testing.T) {
	if !vectorSteps {
		t.Skip("no vector kernels: the tests above ran the portable loops")
	}
	vectorSteps = false
	defer func() { vectorSteps = true }()
	t.Run("MaxLow7s", TestMaxLow7s)
	t.Run("PackSteps", TestPackSteps)
	t.Run("RescaleE8M0", TestRescaleE8M0)
}

func TestBlockKernelsPanic(t *testing.T) {
	steps := make([]Steps, 2)
	for name, f := range map[string]func(){
		"threshold":    func() { NewSteps([7]byte{0x80}) },
		"short src":    func() { MaxLow7s(make([]byte, 2), make([]byte, 63)) },
		"short dst":    func() { PackSteps(make([]byte, 15), make([]byte, 32), steps, []byte{0}) },
		"bad selector": func() { PackSteps(make([]byte, 16), make([]byte, 32), steps, []byte{2}) },
		"bad selector in a run": func() {
			sel := make([]byte, 64)
			sel[37] = 2 // the second of a pair, where the kernel looks too
			PackSteps(make([]byte, 16*64), make([]byte, 32*64), steps, sel)
		},
		"bad selector first in a pair": func() {
			sel := make([]byte, 64)
			sel[36] = 0xff
			PackSteps(make([]byte, 16*64), make([]byte, 32*64), steps, sel)
		},
		"src not block": func() { PackSteps(make([]byte, 16), make([]byte, 33), steps, []byte{0}) },
		"shift -128":    func() { NewShifts([128]int8{5: -128}) },
		"short scales": func() {
			RescaleE8M0(make([]byte, 2), make([]byte, 2), make([]byte, 2), make([]byte, 1), &Shifts{}, 0)
		},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}

func BenchmarkMaxLow7s(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	src := randomBlocks(rng, 1<<15)
	dst := make([]byte, 1<<15)
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		MaxLow7s(dst, src)
	}
}

func BenchmarkPackSteps(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	steps := randomSteps(rng, 19)
	src := randomBlocks(rng, 1<<15)
	sel := make([]byte, 1<<15)
	for i := range sel {
		sel[i] = byte(rng.IntN(len(steps)))
	}
	dst := make([]byte, Block/2*len(sel))
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		PackSteps(dst, src, steps, sel)
	}
}

// BenchmarkRescaleE8M0 counts the bytes of the 32-blocks whose scales it
// finds, as the benchmarks above do.
func BenchmarkRescaleE8M0(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	var c [128]int8
	for m := range c {
		c[m] = int8(rng.IntN(19) - 11)
	}
	shifts := NewShifts(c)
	n := 1 << 15
	top, s, t, sel := make([]byte, n), make([]byte, n), make([]byte, n), make([]byte, n)
	for i := range n {
		top[i], s[i] = byte(rng.IntN(0x80)), byte(rng.IntN(256))
	}
	b.SetBytes(int64(Block * n))
	for b.Loop() {
		RescaleE8M0(t, sel, top, s, &shifts, 7)
	}
}
