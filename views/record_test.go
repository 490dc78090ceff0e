package views

import (
	"slices"
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
		{name: "no codec", recs: []tensorRecord{{Out: tensorfile.Out{Name: "x", Data: vfile.Bytes{1}}}}, wantErr: true},
		{name: "literal", recs: []tensorRecord{{Out: tensorfile.Out{Name: "x", Data: vfile.Bytes{1}, Codec: tensorfile.Literal}, Offset: 8}}, wantCodec: "literal"},
		{name: "empty is literal", recs: []tensorRecord{{Out: tensorfile.Out{Name: "x", Data: vfile.Bytes{}, Codec: "q2"}}}, wantCodec: "literal"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tds, err := tensors(fileRecords{kept: tt.recs})
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if err == nil && (tds[0].Codec != tt.wantCodec || tds[0].ByteRange[0] != tt.recs[0].Offset) {
				t.Fatalf("%+v", tds[0])
			}
		})
	}
}

// TestRecordsOf: a laid-out file's records are made as they are yielded,
// each tensor's data right after the one before; a kept record is yielded
// as kept; a file of no view has none.
func TestRecordsOf(t *testing.T) {
	s := newSet(nil, Options{}, nil, nil)
	a := &tensorfile.Out{Name: "a", Data: vfile.Bytes{1, 2, 3}, Codec: tensorfile.Literal}
	b := &tensorfile.Out{Name: "b", Data: vfile.Bytes{4, 5}, Codec: tensorfile.Literal}
	laid, kept, other := vfile.NewFile(), vfile.NewFile(), vfile.NewFile()
	s.laidOut[laid] = laidOut{outs: []*tensorfile.Out{a, b}, dataStart: 16}
	s.records[kept] = []tensorRecord{{Out: *b, Offset: 40}}
	for _, tt := range []struct {
		f       *vfile.File
		names   string
		offsets []int64
	}{
		{laid, "ab", []int64{16, 19}},
		{kept, "b", []int64{40}},
	} {
		recs, ok := s.recordsOf(tt.f)
		if !ok || recs.len() != len(tt.offsets) {
			t.Fatalf("%s: %d records, ok %v", tt.names, recs.len(), ok)
		}
		var names string
		var offsets []int64
		for r := range recs.all() {
			names += r.Name
			offsets = append(offsets, r.Offset)
		}
		if names != tt.names || !slices.Equal(offsets, tt.offsets) {
			t.Errorf("records %q at %v, want %q at %v", names, offsets, tt.names, tt.offsets)
		}
		for range recs.all() {
			break // a loop that stops early ends the iteration
		}
	}
	if _, ok := s.recordsOf(other); ok {
		t.Error("a file of no view has records")
	}
}
