package codecs

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/dsfs/dsfs/safetensors"
)

func TestDecodeFloat(t *testing.T) {
	want := []float32{1, -2.5, 0.375}
	bf16 := make([]byte, 2*len(want))
	f16 := make([]byte, 2*len(want))
	f32 := make([]byte, 4*len(want))
	for i, v := range want {
		binary.LittleEndian.PutUint16(bf16[2*i:], uint16(math.Float32bits(v)>>16))
		binary.LittleEndian.PutUint16(f16[2*i:], Float32ToF16(v))
		binary.LittleEndian.PutUint32(f32[4*i:], math.Float32bits(v))
	}
	for _, tc := range []struct {
		dt  safetensors.DType
		src []byte
		ok  bool
	}{
		{safetensors.BF16, bf16, true},
		{safetensors.F16, f16, true},
		{safetensors.F32, f32, true},
		{safetensors.F8E4M3, f32[:len(want)], false},
	} {
		got := make([]float32, len(want))
		if ok := DecodeFloat(got, tc.src, tc.dt); ok != tc.ok {
			t.Errorf("%s: DecodeFloat reports %v, want %v", tc.dt, ok, tc.ok)
			continue
		}
		for i := range want {
			if tc.ok && got[i] != want[i] || !tc.ok && got[i] != 0 {
				t.Errorf("%s: value %d = %v (ok %v), want %v", tc.dt, i, got[i], tc.ok, want[i])
			}
		}
	}
}

// TestDequantFP8Rows checks rows 1 and 2 of a 4x4 E4M3 matrix in 2x2
// blocks: each value times the E8M0 scale of its block, the scale rows
// starting at block row 0.
func TestDequantFP8Rows(t *testing.T) {
	b := []byte{0x38, 0x40, 0x38, 0xb8, 0x44, 0x38, 0x40, 0x38} // 1 2 1 -1 / 3 1 2 1
	sb := []byte{127, 128, 126, 129}                            // 1 2 / 0.5 4
	scale := make([]float32, 4)
	if !DecodeScales(scale, sb, safetensors.F8E8M0) {
		t.Fatal("DecodeScales refuses E8M0")
	}
	if DecodeScales(scale, sb, safetensors.BF16) {
		t.Error("DecodeScales accepts BF16 scales")
	}
	out := make([]float32, 8)
	DequantFP8Rows(out, b, scale, 1, 3, 4, 2, 2, 2)
	want := []float32{1, 2, 2, -2, 1.5, 0.5, 8, 4}
	for i := range want {
		if out[i] != want[i] {
			t.Errorf("out[%d] = %v, want %v (all %v)", i, out[i], want[i], out)
			break
		}
	}
}
