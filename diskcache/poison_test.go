package diskcache

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fixCRC overwrites the last four bytes of an entry with the CRC-32C of
// the rest: what a writer that edits an entry and repairs a plain checksum
// does (and what the first entry format could not tell from a good entry).
func fixCRC(b []byte) []byte {
	n := len(b) - 4
	binary.LittleEndian.PutUint32(b[n:], crc32.Checksum(b[:n], crc32.MakeTable(crc32.Castagnoli)))
	return b
}

// TestPoisonedEntries has one writer of a shared directory plant entries
// that belong to other keys or carry other bytes: none is served, each is
// logged once, removed, and the recomputed block is served afterwards.
func TestPoisonedEntries(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 4))
	const n = 4096
	tests := []struct {
		name   string
		poison func(c *Cache, victim Key) []byte // the content planted at victim's path
		reason string
	}{
		{"another key's entry copied over", func(c *Cache, victim Key) []byte {
			other := key("other")
			if err := c.Put(other, payload(rng, n)); err != nil {
				t.Fatal(err)
			}
			b, _ := os.ReadFile(c.path(other))
			return b
		}, "holds the entry of key"},
		{"another key's entry with the key field rewritten", func(c *Cache, victim Key) []byte {
			other := key("other")
			if err := c.Put(other, payload(rng, n)); err != nil {
				t.Fatal(err)
			}
			b, _ := os.ReadFile(c.path(other))
			copy(b[len(magic):], victim[:])
			return fixCRC(b)
		}, "sha256"},
		{"edited payload with its CRC-32C recomputed", func(c *Cache, victim Key) []byte {
			b, _ := os.ReadFile(c.path(victim))
			b[headerSize+rng.IntN(n)] ^= 0x40
			return fixCRC(b)
		}, "sha256"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, log := open(t, t.TempDir(), 0)
			k := key("victim")
			want := payload(rng, n)
			if err := c.Put(k, want); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(c.path(k), tt.poison(c, k), 0o644); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, n)
			if c.Get(k, got) {
				t.Fatalf("seed %d: a poisoned entry was served", seed)
			}
			if lines := strings.Count(log.String(), "corrupt entry"); lines != 1 || !strings.Contains(log.String(), tt.reason) {
				t.Fatalf("seed %d: want one line giving %q, log:\n%s", seed, tt.reason, log)
			}
			if _, err := os.Stat(c.path(k)); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("poisoned entry left in place: %v", err)
			}
			if err := c.Put(k, want); err != nil {
				t.Fatal(err)
			}
			if !c.Get(k, got) || !bytes.Equal(got, want) {
				t.Fatal("recomputed entry not served")
			}
		})
	}
}

// TestOldFormatIsMiss: an entry of the first format (CRC-32C trailer) is a
// plain miss, neither a problem nor served, and is replaced by the next Put.
func TestOldFormatIsMiss(t *testing.T) {
	c, log := open(t, t.TempDir(), 0)
	k := key("old")
	want := []byte("payload")
	b := append([]byte("DSFSDC01"), k[:]...)
	b = binary.LittleEndian.AppendUint64(b, uint64(len(want)))
	b = fixCRC(append(append(b, want...), 0, 0, 0, 0))
	os.MkdirAll(filepath.Dir(c.path(k)), 0o755)
	if err := os.WriteFile(c.path(k), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if c.Get(k, make([]byte, len(want))) {
		t.Fatal("an old-format entry was served")
	}
	if _, err := c.Lookup(k); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Lookup of an old-format entry: %v, want a miss", err)
	}
	if st := c.Stats(); st.Corrupt != 0 || st.Misses != 1 || log.Len() != 0 {
		t.Fatalf("old format counted as a problem: %+v, log %q", st, log)
	}
	if err := c.Put(k, want); err != nil {
		t.Fatal(err)
	}
	if got, ok := c.GetBytes(k); !ok || !bytes.Equal(got, want) {
		t.Fatal("entry not served after it was rewritten")
	}
}

// TestNonRegularEntries puts things that are not regular files at an
// entry's path. A read returns at once (a FIFO with no writer would block
// an ordinary open forever), logs one problem naming the kind, and removes
// the thing when that is a mere unlink.
func TestNonRegularEntries(t *testing.T) {
	tests := []struct {
		name    string
		make    func(p string) error
		kind    string
		removed bool
	}{
		{"fifo", func(p string) error { return syscall.Mkfifo(p, 0o644) }, "named pipe", true},
		{"empty directory", func(p string) error { return os.Mkdir(p, 0o755) }, "directory", true},
		{"directory with a file", func(p string) error {
			if err := os.Mkdir(p, 0o755); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(p, "keep"), []byte("not ours"), 0o644)
		}, "directory", false},
		{"symlink to a good entry", func(p string) error {
			// A valid entry of this very key elsewhere: still refused, a
			// link can point anywhere.
			c, _ := open(t, t.TempDir(), 0)
			if err := c.Put(key("victim"), make([]byte, 16)); err != nil {
				return err
			}
			return os.Symlink(c.path(key("victim")), p)
		}, "symbolic link", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, log := open(t, t.TempDir(), 0)
			k := key("victim")
			p := c.path(k)
			os.MkdirAll(filepath.Dir(p), 0o755)
			if err := tt.make(p); err != nil {
				t.Fatal(err)
			}
			done := make(chan bool, 1)
			start := time.Now()
			go func() { done <- c.Get(k, make([]byte, 16)) }()
			select {
			case hit := <-done:
				if hit {
					t.Fatal("served")
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Get blocked on a non-regular entry")
			}
			t.Logf("Get returned in %v", time.Since(start))
			if strings.Count(log.String(), "corrupt entry") != 1 || !strings.Contains(log.String(), tt.kind) {
				t.Fatalf("want one line naming a %s, log:\n%s", tt.kind, log)
			}
			_, err := os.Lstat(p)
			if gone := errors.Is(err, os.ErrNotExist); gone != tt.removed {
				t.Fatalf("removed: %v, want %v", gone, tt.removed)
			}
			if st := c.Stats(); st.Corrupt != 1 || st.Misses != 1 {
				t.Fatalf("stats %+v", st)
			}
			if tt.removed { // the recomputed block takes its place
				if err := c.Put(k, make([]byte, 16)); err != nil || !c.Get(k, make([]byte, 16)) {
					t.Fatalf("entry not stored after the problem was removed: %v", err)
				}
			}
		})
	}
}
