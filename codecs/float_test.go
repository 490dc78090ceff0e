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
