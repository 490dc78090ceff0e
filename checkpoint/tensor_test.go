package checkpoint

import (
	"strings"
	"testing"

	"github.com/dsfs/dsfs/safetensors"
)

func TestTensorReadAt(t *testing.T) {
	dir := t.TempDir()
	l := writeShard(t, dir, "model.safetensors",
		spec("a", safetensors.U8, 10), spec("b", safetensors.U8, 6))
	cat := mustOpen(t, dir)
	defer cat.Close()
	b := cat.Tensor("b")
	if b == nil {
		t.Fatal("tensor b not in the catalog")
	}
	dataOff := b.Offset - l.DataStart() // b's place in the data section
	tests := []struct {
		off     int64
		n       int
		wantErr string
	}{
		{off: 0, n: 6},
		{off: 2, n: 3},
		{off: 6, n: 0},
		{off: 4, n: 3, wantErr: "bytes [4, 7) are outside its 6"},
		{off: -1, n: 1, wantErr: "bytes [-1, 0) are outside its 6"},
		{off: 7, n: 0, wantErr: "bytes [7, 7) are outside its 6"},
	}
	for _, tt := range tests {
		p := make([]byte, tt.n)
		n, err := b.ReadAt(p, tt.off)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "tensor b") {
				t.Errorf("ReadAt(%d bytes at %d) = %v, want an error naming tensor b and %q", tt.n, tt.off, err, tt.wantErr)
			}
			continue
		}
		if err != nil || n != tt.n {
			t.Errorf("ReadAt(%d bytes at %d) = %d, %v", tt.n, tt.off, n, err)
			continue
		}
		for i := range p {
			if want := dataByte(dataOff + tt.off + int64(i)); p[i] != want {
				t.Fatalf("ReadAt(%d bytes at %d): byte %d is %d, want %d", tt.n, tt.off, i, p[i], want)
			}
		}
	}
}
