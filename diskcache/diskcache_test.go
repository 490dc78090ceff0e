package diskcache

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func key(s string) Key { return sha256.Sum256([]byte(s)) }

func open(t *testing.T, dir string, capBytes int64) (*Cache, *bytes.Buffer) {
	t.Helper()
	var log bytes.Buffer
	c, err := Open(dir, capBytes, slog.New(slog.NewTextHandler(&log, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return c, &log
}

func payload(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

func TestRoundTrip(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 1))
	c, _ := open(t, t.TempDir(), 0)
	for _, n := range []int{0, 1, 4095, 1 << 20} {
		k := key(fmt.Sprint("entry", n))
		want := payload(rng, n)
		if c.Get(k, make([]byte, n)) {
			t.Fatalf("n=%d: hit before Put", n)
		}
		if err := c.Put(k, want); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, n)
		if !c.Get(k, got) || !bytes.Equal(got, want) {
			t.Fatalf("seed %d: n=%d: Get after Put returned other bytes", seed, n)
		}
		if b, ok := c.GetBytes(k); !ok || !bytes.Equal(b, want) {
			t.Fatalf("seed %d: n=%d: GetBytes after Put returned other bytes", seed, n)
		}
	}
	st := c.Stats()
	if st.Hits != 8 || st.Misses != 4 || st.Writes != 4 || st.Corrupt != 0 || st.Entries != 4 {
		t.Fatalf("stats %+v", st)
	}
	if !IsCache(c.Dir()) || IsCache(t.TempDir()) {
		t.Fatal("IsCache does not tell a cache directory")
	}
}

// TestDamagedEntries damages an entry in every way a disk or a crash can
// and requires each to be detected, logged, removed and never served.
func TestDamagedEntries(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 2))
	const n = 5000
	tests := []struct {
		name   string
		damage func(p string, b []byte) []byte // returns the new file content
		reason string
	}{
		{"flipped payload bit", func(_ string, b []byte) []byte {
			i := headerSize + rng.IntN(n)
			b[i] ^= 1 << rng.IntN(8)
			return b
		}, "sha256"},
		{"flipped digest bit", func(_ string, b []byte) []byte { b[len(b)-1] ^= 0x10; return b }, "sha256"},
		{"truncated payload", func(_ string, b []byte) []byte { return b[:headerSize+rng.IntN(n)] }, "truncated"},
		{"truncated header", func(_ string, b []byte) []byte { return b[:rng.IntN(headerSize)] }, "shorter"},
		{"empty file", func(_ string, b []byte) []byte { return nil }, "shorter"},
		{"appended garbage", func(_ string, b []byte) []byte { return append(b, 1, 2, 3) }, "overlong"},
		{"bad magic", func(_ string, b []byte) []byte { b[0] = 'X'; return b }, "magic"},
		{"another key's entry", func(p string, b []byte) []byte { b[len(magic)] ^= 0xff; return b }, "key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, log := open(t, t.TempDir(), 0)
			k := key(tt.name)
			want := payload(rng, n)
			if err := c.Put(k, want); err != nil {
				t.Fatal(err)
			}
			p := c.path(k)
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, tt.damage(p, b), 0o644); err != nil {
				t.Fatal(err)
			}
			var ce *CorruptError
			if _, err := c.Lookup(k); !errors.As(err, &ce) || !strings.Contains(ce.Reason, tt.reason) {
				t.Fatalf("seed %d: Lookup: %v, want a corrupt entry (%s)", seed, err, tt.reason)
			}
			if c.Get(k, make([]byte, n)) {
				t.Fatalf("seed %d: a damaged entry was served", seed)
			}
			if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("damaged entry left in place: %v", err)
			}
			if !strings.Contains(log.String(), "corrupt entry") {
				t.Fatalf("nothing logged: %q", log)
			}
			if st := c.Stats(); st.Corrupt != 1 || st.Hits != 0 || st.Misses != 1 {
				t.Fatalf("stats %+v", st)
			}
			// The recomputed block is stored and served again.
			if err := c.Put(k, want); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, n)
			if !c.Get(k, got) || !bytes.Equal(got, want) {
				t.Fatal("entry not served after it was rewritten")
			}
		})
	}
}

// TestWrongLength is an entry whose payload differs in length from the
// block asked for: Get refuses it.
func TestWrongLength(t *testing.T) {
	c, _ := open(t, t.TempDir(), 0)
	k := key("len")
	if err := c.Put(k, make([]byte, 100)); err != nil {
		t.Fatal(err)
	}
	if c.Get(k, make([]byte, 99)) {
		t.Fatal("served a 100-byte entry as 99 bytes")
	}
}

func TestLookupMissing(t *testing.T) {
	c, _ := open(t, t.TempDir(), 0)
	if _, err := c.Lookup(key("none")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Lookup of a missing entry: %v", err)
	}
}

// TestConcurrentWriters has two Cache values on one directory (two mounts,
// or two hosts on a shared file system) write and read the same keys at
// once: every read sees a whole entry or none.
func TestConcurrentWriters(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	dir := t.TempDir()
	a, logA := open(t, dir, 0)
	b, logB := open(t, dir, 0)
	const keys, n = 8, 64 << 10
	want := make([][]byte, keys)
	rng := rand.New(rand.NewPCG(seed, 3))
	for i := range want {
		want[i] = payload(rng, n)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for w := range 8 {
		c := []*Cache{a, b}[w%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, uint64(w)))
			got := make([]byte, n)
			for range 200 {
				i := r.IntN(keys)
				k := key(fmt.Sprint(i))
				if r.IntN(2) == 0 {
					if err := c.Put(k, want[i]); err != nil {
						errs <- err
						return
					}
				} else if c.Get(k, got) && !bytes.Equal(got, want[i]) {
					errs <- fmt.Errorf("seed %d: key %d served other bytes", seed, i)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, c := range []*Cache{a, b} {
		if st := c.Stats(); st.Corrupt != 0 || st.WriteErrors != 0 {
			t.Fatalf("seed %d: stats %+v\n%s%s", seed, st, logA, logB)
		}
	}
	// No temporary file is left behind.
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && strings.HasPrefix(fi.Name(), ".tmp-") {
			return fmt.Errorf("temporary file left: %s", p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestEviction fills a capped cache and checks that the least recently
// used entries go first and a recently read one stays.
func TestEviction(t *testing.T) {
	const n = 100 << 10
	entry := int64(headerSize + n + sumSize)
	c, _ := open(t, t.TempDir(), 20*entry)
	old := time.Now().Add(-time.Hour)
	for i := range 16 {
		if err := c.Put(key(fmt.Sprint(i)), make([]byte, n)); err != nil {
			t.Fatal(err)
		}
		// Entry i was last used i minutes after the hour began.
		at := old.Add(time.Duration(i) * time.Minute)
		os.Chtimes(c.path(key(fmt.Sprint(i))), at, at)
	}
	if !c.Get(key("0"), make([]byte, n)) { // entry 0 is now the newest
		t.Fatal("entry 0 missing")
	}
	for i := 16; i < 24; i++ {
		if err := c.Put(key(fmt.Sprint(i)), make([]byte, n)); err != nil {
			t.Fatal(err)
		}
	}
	st := c.Stats()
	if st.Bytes > 20*entry || st.Evicted == 0 {
		t.Fatalf("over the cap after eviction: %+v", st)
	}
	present := func(i int) bool {
		_, err := os.Stat(c.path(key(fmt.Sprint(i))))
		return err == nil
	}
	if !present(0) || present(1) || !present(23) {
		t.Fatalf("eviction order: entry 0 (read last) present %v, 1 (oldest) %v, 23 (newest) %v",
			present(0), present(1), present(23))
	}
	var total int64
	filepath.Walk(c.Dir(), func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() && fi.Name() != Marker {
			total += fi.Size()
		}
		return nil
	})
	if total != st.Bytes {
		t.Fatalf("directory holds %d bytes, stats say %d", total, st.Bytes)
	}
}

// TestStaleTemporaryFiles: a scan removes a writer's leftovers once they
// are old, and leaves a fresh one (a writer may be busy with it).
func TestStaleTemporaryFiles(t *testing.T) {
	c, _ := open(t, t.TempDir(), 0)
	sub := filepath.Join(c.Dir(), "ab")
	os.MkdirAll(sub, 0o755)
	stale, fresh := filepath.Join(sub, ".tmp-stale"), filepath.Join(sub, ".tmp-fresh")
	for _, p := range []string{stale, fresh} {
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-2 * staleTemp)
	os.Chtimes(stale, old, old)
	if err := c.Put(key("x"), []byte("y")); err != nil { // the first write scans
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("stale temporary file kept")
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Fatal("fresh temporary file removed")
	}
}

// TestWriteFailure: a failed write (here the entry's directory is taken
// by a file, which stops root too) is an error and a count, not a crash;
// the cache goes on answering misses.
func TestWriteFailure(t *testing.T) {
	c, _ := open(t, t.TempDir(), 0)
	k := key("x")
	if err := os.WriteFile(filepath.Dir(c.path(k)), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := c.Put(k, []byte("y")); err == nil {
		t.Fatal("Put succeeded where its directory cannot be made")
	}
	if c.Get(k, make([]byte, 1)) {
		t.Fatal("hit after a failed write")
	}
	if st := c.Stats(); st.WriteErrors != 1 || st.Misses != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestThrough: a miss computes and stores, a hit computes nothing, a
// failed computation stores nothing, and a failed store still serves the
// computed bytes, counted and logged once however often it fails.
func TestThrough(t *testing.T) {
	want := []byte("computed")
	for _, tt := range []struct {
		name        string
		stored      bool  // an entry of the key is there before
		computeErr  error // what compute returns
		unwritable  bool  // the entry's directory cannot be made
		wantHit     bool
		wantCompute bool
		wantStored  bool // an entry of the key is there after
	}{
		{name: "miss", wantCompute: true, wantStored: true},
		{name: "hit", stored: true, wantHit: true, wantStored: true},
		{name: "compute fails", computeErr: errors.New("no"), wantCompute: true},
		{name: "store fails", unwritable: true, wantCompute: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, log := open(t, t.TempDir(), 0)
			k := key(tt.name)
			if tt.stored {
				if err := c.Put(k, want); err != nil {
					t.Fatal(err)
				}
			}
			if tt.unwritable {
				if err := os.WriteFile(filepath.Dir(c.path(k)), nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			for range 2 { // a second failed store is counted, not logged
				computed := false
				dst := make([]byte, len(want))
				hit, err := c.Through(k, dst, func(dst []byte) error {
					computed = true
					copy(dst, want)
					return tt.computeErr
				})
				if hit != tt.wantHit || computed != tt.wantCompute || !errors.Is(err, tt.computeErr) {
					t.Fatalf("hit %v, computed %v, err %v; want %v, %v, %v", hit, computed, err, tt.wantHit, tt.wantCompute, tt.computeErr)
				}
				if err == nil && !bytes.Equal(dst, want) {
					t.Fatalf("dst %q, want %q", dst, want)
				}
				if tt.wantStored {
					break // the second call would be a hit
				}
			}
			if _, err := c.Lookup(k); (err == nil) != tt.wantStored {
				t.Errorf("entry after Through: %v, want stored %v", err, tt.wantStored)
			}
			logged := strings.Count(log.String(), "cannot store")
			if st := c.Stats(); tt.unwritable && (st.WriteErrors != 2 || logged != 1) {
				t.Errorf("%d write errors, %d logged; want 2, 1:\n%s", st.WriteErrors, logged, log)
			} else if !tt.unwritable && (st.WriteErrors != 0 || logged != 0) {
				t.Errorf("%d write errors, %d logged; want none", st.WriteErrors, logged)
			}
		})
	}
}

func BenchmarkGet(b *testing.B) {
	c, err := Open(b.TempDir(), 0, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		b.Fatal(err)
	}
	k := key("bench")
	buf := make([]byte, 1<<20)
	if err := c.Put(k, buf); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		if !c.Get(k, buf) {
			b.Fatal("miss")
		}
	}
}
