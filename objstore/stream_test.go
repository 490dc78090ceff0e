package objstore

import "testing"

// TestStreamOfARead checks which stream a read continues: the one that
// ended where it starts first, else the latest that ended in its chunk or
// the chunk before it, else none.
func TestStreamOfARead(t *testing.T) {
	const mib = 1 << 20
	o := &Object{streams: []*stream{
		{end: 16 * mib, used: 1},  // ended at the start of chunk 2
		{end: 20 * mib, used: 2},  // inside chunk 2, read later
		{end: 100 * mib, used: 3}, // inside chunk 12
	}}
	for _, tt := range []struct {
		off  int64
		want int // index in o.streams, -1 for none
	}{
		{16 * mib, 0},    // where stream 0 ended, though 1 was read later
		{20 * mib, 1},    // where stream 1 ended
		{18 * mib, 1},    // in chunk 2: both continue it, 1 was read later
		{24*mib + 5, 1},  // in chunk 3, the one after 2
		{32 * mib, -1},   // chunk 4: too far
		{16*mib - 1, -1}, // chunk 1: behind them
		{100 * mib, 2},   // where stream 2 ended
		{96 * mib, 2},    // the first byte of chunk 12
		{96*mib - 1, -1}, // the last byte of chunk 11
		{112*mib - 1, 2}, // the last byte of chunk 13
		{112 * mib, -1},  // chunk 14
		{0, -1},          // the start of the object
	} {
		got := o.stream(tt.off)
		want := (*stream)(nil)
		if tt.want >= 0 {
			want = o.streams[tt.want]
		}
		if got != want {
			t.Errorf("read at %d continues %+v, want %+v", tt.off, got, want)
		}
	}
}

// TestNewStreamReplacesTheLeastRecent fills an Object's streams and
// checks that the next one takes the place of the one read least
// recently.
func TestNewStreamReplacesTheLeastRecent(t *testing.T) {
	o := &Object{}
	for i := range maxStreams {
		s := o.newStream()
		s.end, s.used = int64(i+1)*ChunkSize*4, uint64(10-i)
	}
	if len(o.streams) != maxStreams {
		t.Fatalf("%d streams after %d new ones", len(o.streams), maxStreams)
	}
	oldest := o.streams[maxStreams-1]
	if s := o.newStream(); s != oldest || *s != (stream{}) || len(o.streams) != maxStreams {
		t.Errorf("a new stream past %d is %+v (%d streams); want the least recently read one, cleared", maxStreams, s, len(o.streams))
	}
}
