package views

import (
	"testing"

	"github.com/dsfs/dsfs/tensorfile"
	"github.com/dsfs/dsfs/vfile"
)

// TestTensorsReadOffRecords: manifest/ describes a file from its makers'
// records only; a file or tensor without one is an error, not a guess.
func TestTensorsReadOffRecords(t *testing.T) {
	tests := []struct {
		name      string
		recs      []tensorRecord
		wantErr   bool
		wantCodec string
	}{
		{name: "no record", recs: nil, wantErr: true},
		{name: "no codec", recs: []tensorRecord{{Out: tensorfile.Out{Name: "x", Data: vfile.Bytes{1}}}}, wantErr: true},
		{name: "literal", recs: []tensorRecord{{Out: tensorfile.Out{Name: "x", Data: vfile.Bytes{1}, Codec: tensorfile.Literal}, Offset: 8}}, wantCodec: "literal"},
		{name: "empty is literal", recs: []tensorRecord{{Out: tensorfile.Out{Name: "x", Data: vfile.Bytes{}, Codec: "q2"}}}, wantCodec: "literal"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tds, err := tensors(tt.recs)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if err == nil && (tds[0].Codec != tt.wantCodec || tds[0].ByteRange[0] != tt.recs[0].Offset) {
				t.Fatalf("%+v", tds[0])
			}
		})
	}
}
