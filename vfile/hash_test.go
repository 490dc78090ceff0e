package vfile

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"testing"
)

// failingReader fails every read.
type failingReader struct{ err error }

func (f failingReader) ReadAt([]byte, int64) (int, error) { return 0, f.err }

func TestSHA256(t *testing.T) {
	data := bytes.Repeat([]byte("dsfs"), 3<<20) // 12 MiB: several reads
	sum := func(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	bad := errors.New("source changed")
	tests := []struct {
		name string
		ctx  context.Context
		r    interface {
			ReadAt([]byte, int64) (int, error)
		}
		off, n  int64
		want    string
		wantErr error
	}{
		{"whole", context.Background(), bytes.NewReader(data), 0, int64(len(data)), sum(data), nil},
		{"range", context.Background(), bytes.NewReader(data), 5, 9 << 20, sum(data[5 : 5+9<<20]), nil},
		{"empty", context.Background(), bytes.NewReader(data), 0, 0, sum(nil), nil},
		{"source ends early", context.Background(), bytes.NewReader(data), int64(len(data)) - 3, 10, sum(data[len(data)-3:]), nil},
		{"read error", context.Background(), failingReader{bad}, 0, 10, "", bad},
		{"canceled", canceled, bytes.NewReader(data), 0, 10, "", context.Canceled},
	}
	for _, tt := range tests {
		got, err := SHA256(tt.ctx, tt.r, tt.off, tt.n)
		if got != tt.want || !errors.Is(err, tt.wantErr) {
			t.Errorf("%s: SHA256 = %q, %v; want %q, %v", tt.name, got, err, tt.want, tt.wantErr)
		}
	}
}
