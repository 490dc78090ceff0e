package synth

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dsfs/dsfs/safetensors"
)

// e4m3Value decodes an E4M3 (fn) byte; 0x7F and 0xFF are NaN.
func e4m3Value(b byte) float64 {
	if b&0x7f == 0x7f {
		return math.NaN()
	}
	e, m := int(b>>3&15), float64(b&7)
	v := math.Ldexp(m, -9) // subnormal
	if e > 0 {
		v = math.Ldexp(1+m/8, e-7)
	}
	if b&0x80 != 0 {
		v = -v
	}
	return v
}

func bf16Value(u uint16) float64 { return float64(math.Float32frombits(uint32(u) << 16)) }

func TestE4M3RoundTrip(t *testing.T) {
	for b := range 256 {
		if b&0x7f == 0x7f {
			continue
		}
		if got := e4m3(e4m3Value(byte(b))); got != byte(b) {
			t.Errorf("e4m3(%v) = %#02x, want %#02x", e4m3Value(byte(b)), got, b)
		}
	}
	for _, tc := range []struct {
		x    float64
		want byte
	}{
		{448, 0x7e}, {449, 0x7e}, {1e9, 0x7e}, {-1e9, 0xfe}, {math.Inf(1), 0x7e},
		{1.0 / 1024, 0x00}, // half the smallest subnormal: ties to even (0)
		{3.0 / 1024, 0x02}, // 1.5 subnormal steps: ties to even (2)
		{1.0 / 64, 0x08},
		{1.0625, 0x38}, // between 1 and 1.125: ties to even (1)
		{1.1875, 0x3a}, // between 1.125 and 1.25: ties to even (1.25)
		{math.Copysign(0, -1), 0x80},
	} {
		if got := e4m3(tc.x); got != tc.want {
			t.Errorf("e4m3(%v) = %#02x, want %#02x", tc.x, got, tc.want)
		}
	}
}

func TestE4M3Nearest(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 0))
	for range 20000 {
		x := math.Ldexp(rng.Float64()+0.5, rng.IntN(24)-14)
		if rng.IntN(2) == 0 {
			x = -x
		}
		b := e4m3(x)
		if b&0x7f == 0x7f {
			t.Fatalf("seed %d: e4m3(%v) is NaN", seed, x)
		}
		if math.Abs(x) > 448 {
			if e4m3Value(b) != math.Copysign(448, x) {
				t.Fatalf("seed %d: e4m3(%v) = %#02x, want saturation", seed, x, b)
			}
			continue
		}
		d := math.Abs(x - e4m3Value(b))
		for c := range 256 {
			v := e4m3Value(byte(c))
			if math.IsNaN(v) {
				continue
			}
			dc := math.Abs(x - v)
			if dc < d || dc == d && c != int(b) && b&1 == 1 && v != e4m3Value(b) {
				t.Fatalf("seed %d: e4m3(%v) = %#02x (%v), but %#02x (%v) is nearer or even", seed, x, b, e4m3Value(b), c, v)
			}
		}
	}
}

func TestE2M1(t *testing.T) {
	for _, tc := range []struct {
		x    float64
		neg  bool
		want byte
	}{
		{0, false, 0}, {0.1, true, 8}, {0.25, false, 0}, {0.3, false, 1}, {0.75, false, 2},
		{1.25, false, 2}, {1.75, false, 4}, {2.5, false, 4}, {3.5, false, 6}, {5, false, 6},
		{5.5, true, 15}, {100, false, 7}, {-1, false, 2},
	} {
		if got := e2m1(tc.x, tc.neg); got != tc.want {
			t.Errorf("e2m1(%v, %v) = %d, want %d", tc.x, tc.neg, got, tc.want)
		}
	}
}

func TestBF16(t *testing.T) {
	for _, tc := range []struct {
		x    float64
		want uint16
	}{{1, 0x3f80}, {-2, 0xc000}, {1 + 1.0/256, 0x3f80}, {1 + 3.0/256, 0x3f82}, {0.02, 0x3ca4}} {
		if got := bf16(tc.x); got != tc.want {
			t.Errorf("bf16(%v) = %#04x, want %#04x", tc.x, got, tc.want)
		}
	}
}

// nonzeroRange returns the smallest and largest scale byte other than 0.
func nonzeroRange(s []byte) (lo, hi int) {
	lo, hi = 256, -1
	for _, b := range s {
		if b != 0 {
			lo, hi = min(lo, int(b)), max(hi, int(b))
		}
	}
	return lo, hi
}

func TestTinyExpertValues(t *testing.T) {
	c := openCheckpoint(t, writeTiny(t))
	var zeroScale0, zeroScaled, outliers, tensors int
	groups := map[string][]byte{} // expert w1+w3 scales
	for _, name := range c.names() {
		base, ok := strings.CutSuffix(name, ".weight")
		if !ok || !strings.Contains(name, ".ffn.experts.") {
			continue
		}
		tensors++
		w, s := c.read(t, name), c.read(t, base+".scale")
		if len(w) != 16*len(s) {
			t.Fatalf("%s: %d code bytes for %d scales", name, len(w), len(s))
		}
		lo, hi := nonzeroRange(s)
		if hi-lo < 8 {
			t.Errorf("%s: scale exponents span %d octaves, want at least 8", name, hi-lo)
		}
		if slices.Contains(s, 255) {
			t.Errorf("%s: NaN scale", name)
		}
		sorted := slices.Sorted(slices.Values(s))
		median := int(sorted[len(sorted)/2])
		var hist [16]int
		for b, e := range s {
			blk := w[16*b : 16*b+16]
			zero := !slices.ContainsFunc(blk, func(x byte) bool { return x != 0 })
			switch {
			case e == 0 && !zero:
				t.Errorf("%s: block %d has scale byte 0 and nonzero codes", name, b)
			case e == 0:
				zeroScale0++
			case zero:
				zeroScaled++
			case int(e) >= median+6:
				outliers++
			}
			for _, x := range blk {
				hist[x&15]++
				hist[x>>4]++
			}
		}
		if hist[8] == 0 {
			t.Errorf("%s: no negative-zero codes", name)
		}
		small := hist[0] + hist[1] + hist[8] + hist[9]
		large := hist[6] + hist[7] + hist[14] + hist[15]
		if small < 2*large {
			t.Errorf("%s: codes not bell-shaped: %d of magnitude <= 0.5, %d of magnitude >= 4", name, small, large)
		}
		if g, ok := strings.CutSuffix(base, ".w1"); ok {
			groups[g] = append(groups[g], s...)
		} else if g, ok := strings.CutSuffix(base, ".w3"); ok {
			groups[g] = append(groups[g], s...)
		}
	}
	// 6 layers and 3 DSpark stages of 8 experts.
	if tensors != 9*8*3 {
		t.Fatalf("%d expert weights, want %d", tensors, 9*8*3)
	}
	if zeroScale0 == 0 || zeroScaled == 0 || outliers == 0 {
		t.Errorf("zero blocks with scale 0: %d, zero blocks with a scale: %d, outlier blocks: %d; want some of each",
			zeroScale0, zeroScaled, outliers)
	}
	// The nonzero scales of w1 and w3 fit the 18 octaves of one NVFP4
	// global scale, so the nvfp4/ view is lossless on this preset.
	for g, s := range groups {
		if lo, hi := nonzeroRange(s); hi-lo > 17 {
			t.Errorf("%s: w1+w3 scales span %d..%d, more than 18 octaves", g, lo, hi)
		}
	}
}

// stats returns the mean and standard deviation of xs.
func stats(xs []float64) (mean, sd float64) {
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	for _, x := range xs {
		sd += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(sd / float64(len(xs)))
}

func decode(t *testing.T, tt safetensors.Tensor, b []byte) []float64 {
	var out []float64
	switch tt.DType {
	case safetensors.BF16:
		for i := 0; i < len(b); i += 2 {
			out = append(out, bf16Value(binary.LittleEndian.Uint16(b[i:])))
		}
	case safetensors.F32:
		for i := 0; i < len(b); i += 4 {
			out = append(out, float64(math.Float32frombits(binary.LittleEndian.Uint32(b[i:]))))
		}
	case safetensors.F8E4M3:
		for _, x := range b {
			out = append(out, e4m3Value(x))
		}
	default:
		t.Fatalf("%s: no decoder for %s", tt.Name, tt.DType)
	}
	return out
}

func TestTinyOtherValues(t *testing.T) {
	c := openCheckpoint(t, writeTiny(t))
	within := func(name, what string, v, lo, hi float64) {
		t.Helper()
		if v < lo || v > hi {
			t.Errorf("%s: %s %.4g outside [%g, %g]", name, what, v, lo, hi)
		}
	}
	for _, name := range c.names() {
		tt, _ := c.tensor(t, name)
		b := c.read(t, name)
		switch {
		case tt.DType == safetensors.F8E4M3:
			v := decode(t, tt, b)
			if i := slices.IndexFunc(v, math.IsNaN); i >= 0 {
				t.Errorf("%s: NaN byte %#02x at %d", name, b[i], i)
			}
			_, sd := stats(v)
			if strings.Contains(name, "engram.embed") {
				within(name, "standard deviation", sd, 0.85, 1.15)
			} else {
				within(name, "standard deviation", sd, 80, 120)
			}
		case tt.DType == safetensors.F8E8M0 && strings.Contains(name, "engram.embed"):
			blocks := int(tt.Shape[1])
			var rowLo, rowHi int = 256, -1
			for r := 0; r < len(b); r += blocks {
				lo, hi := nonzeroRange(b[r : r+blocks])
				if hi-lo > 2 {
					t.Fatalf("%s: row %d spans %d..%d", name, r/blocks, lo, hi)
				}
				rowLo, rowHi = min(rowLo, lo), max(rowHi, hi)
			}
			within(name, "octaves spanned", float64(rowHi-rowLo), 4, 8)
		case tt.DType == safetensors.F8E8M0 && !strings.Contains(name, ".experts."):
			lo, hi := nonzeroRange(b)
			if lo < 127-8 || hi > 127-4 || slices.Contains(b, 0) {
				t.Errorf("%s: FP8 block scales span 2^%d..2^%d, want within 2^-8..2^-4", name, lo-127, hi-127)
			}
		case tt.DType == safetensors.BF16 || tt.DType == safetensors.F32:
			v := decode(t, tt, b)
			if i := slices.IndexFunc(v, func(x float64) bool { return math.IsNaN(x) || math.IsInf(x, 0) }); i >= 0 {
				t.Fatalf("%s: %v at %d", name, v[i], i)
			}
			mean, sd := stats(v)
			switch {
			case strings.HasSuffix(name, "norm.weight") || strings.HasSuffix(name, "norm1.weight") || strings.HasSuffix(name, "norm2.weight"):
				within(name, "mean", mean, 0.95, 1.05)
			case strings.HasSuffix(name, "gate.bias"):
				if slices.ContainsFunc(v, func(x float64) bool { return math.Abs(x) > 0.1 }) {
					t.Errorf("%s: router bias beyond 0.1: %v", name, v)
				}
			case name == "embed.weight" || name == "head.weight" || strings.HasSuffix(name, "gate.weight"):
				within(name, "mean", mean, -0.002, 0.002)
				within(name, "standard deviation", sd, 0.018, 0.022)
			}
		}
	}
}

// TestHashRowsDistinct checks that each token's row of a hash layer's
// tid2eid table names ActiveExperts distinct experts, in both id types,
// as a router's top-k does: a repeated expert would run twice for one
// token.
func TestHashRowsDistinct(t *testing.T) {
	for _, dt := range []safetensors.DType{safetensors.I64, safetensors.I32} {
		s := V4TinySpec()
		s.HashIDType = dt
		dir := t.TempDir()
		if err := WriteSpec(s, dir); err != nil {
			t.Fatal(err)
		}
		c := openCheckpoint(t, dir)
		for l := range s.HashLayers {
			name := fmt.Sprintf("layers.%d.ffn.gate.tid2eid", l)
			b := c.read(t, name)
			size, k := dt.Bits()/8, s.ActiveExperts
			if len(b) != s.Vocab*k*size {
				t.Fatalf("%s %s: %d bytes", name, dt, len(b))
			}
			used := map[uint64]bool{}
			for r := 0; r < s.Vocab; r++ {
				var row []uint64
				for j := range k {
					var e uint64
					if size == 8 {
						e = binary.LittleEndian.Uint64(b[(r*k+j)*8:])
					} else {
						e = uint64(binary.LittleEndian.Uint32(b[(r*k+j)*4:]))
					}
					if e >= uint64(s.Experts) || slices.Contains(row, e) {
						t.Fatalf("%s %s: token %d routes to %v then %d", name, dt, r, row, e)
					}
					row = append(row, e)
					used[e] = true
				}
			}
			if len(used) != s.Experts {
				t.Errorf("%s %s: %d of %d experts used", name, dt, len(used), s.Experts)
			}
		}
	}
}
