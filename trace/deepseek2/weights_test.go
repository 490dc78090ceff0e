package deepseek2

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/codecs"
	"github.com/dsfs/dsfs/safetensors"
	"github.com/dsfs/dsfs/synth"
)

// TestReadFP8 decodes FP8 matrices with F32 128×128 and E8M0 32×32 block
// scales whose shapes do not divide evenly, large enough to be decoded on
// several goroutines, and checks every value against w · scale.
func TestReadFP8(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 8))
	const rows, cols = 1500, 1430 // over 2M values: decoded in two parts
	const fr, fc = (rows + 127) / 128, (cols + 127) / 128
	w := make([]byte, rows*cols)
	for i := range w {
		w[i] = byte(rng.IntN(256))
		if w[i]&0x7f == 0x7f { // not NaN
			w[i] = 0x3f
		}
	}
	f32 := make([]byte, 4*fr*fc)
	for i := range fr * fc {
		binary.LittleEndian.PutUint32(f32[4*i:], math.Float32bits(float32(rng.NormFloat64())))
	}
	const sr, sc = (rows + 31) / 32, (cols + 31) / 32
	e8 := make([]byte, sr*sc)
	for i := range e8 {
		e8[i] = byte(100 + rng.IntN(50))
	}
	dir := t.TempDir()
	err := synth.WriteShard(filepath.Join(dir, "model.safetensors"), nil, []synth.Tensor{
		{Name: "a.weight", DType: safetensors.F8E4M3, Shape: []int64{rows, cols}, Data: w},
		{Name: "a.weight_scale_inv", DType: safetensors.F32, Shape: []int64{fr, fc}, Data: f32},
		{Name: "b.weight", DType: safetensors.F8E4M3, Shape: []int64{rows, cols}, Data: w},
		{Name: "b.scale", DType: safetensors.F8E8M0, Shape: []int64{sr, sc}, Data: e8},
	})
	if err != nil {
		t.Fatal(err)
	}
	cat, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	for _, c := range []struct {
		name  string
		block int
		scale func(i int) float32
	}{
		{"a.weight", 128, func(i int) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(f32[4*i:])) }},
		{"b.weight", 32, func(i int) float32 { return codecs.E8M0ToFloat32(e8[i]) }},
	} {
		ts := cat.Tensor(c.name)
		if err := decodable(ts); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		m, release, err := readMatrix(ts)
		if err != nil {
			t.Fatal(err)
		}
		sCols := (cols + c.block - 1) / c.block
		for r := range rows {
			for col := range cols {
				want := codecs.E4M3ToFloat32(w[r*cols+col]) * c.scale(r/c.block*sCols+col/c.block)
				if got := m.F32[r*cols+col]; got != want {
					t.Fatalf("seed %d: %s[%d,%d] = %g, want %g", seed, c.name, r, col, got, want)
				}
			}
		}
		release()
	}
}
