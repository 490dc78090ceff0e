package diskcache

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// readKept reads a file KeptFile handed out, and closes it.
func readKept(t *testing.T, f *os.File) []byte {
	t.Helper()
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestKeptFileRoundTrip(t *testing.T) {
	seed := rand.Uint64()
	rng := rand.New(rand.NewPCG(seed, 0))
	dir := t.TempDir()
	c, _ := open(t, dir, 0)
	want := payload(rng, 9<<20+rng.IntN(1000)) // more than one copy buffer
	k := key("file")
	if f, found := c.KeptFile(k, int64(len(want))); f != nil || found {
		t.Fatalf("seed %d: KeptFile before KeepFile = %v, %v", seed, f, found)
	}
	if err := c.KeepFile(context.Background(), k, int64(len(want)), bytes.NewReader(want)); err != nil {
		t.Fatal(err)
	}
	if checked, found := c.HasKeptFile(k, int64(len(want))); !checked || !found {
		t.Fatalf("seed %d: HasKeptFile after KeepFile = %v, %v", seed, checked, found)
	}
	f, found := c.KeptFile(k, int64(len(want)))
	if f == nil || !found {
		t.Fatalf("seed %d: KeptFile after KeepFile = nil, %v", seed, found)
	}
	if got := readKept(t, f); !bytes.Equal(got, want) {
		t.Fatalf("seed %d: kept file differs", seed)
	}
	if f, _ := c.KeptFile(k, int64(len(want))+1); f != nil {
		f.Close()
		t.Error("a kept file was handed out for another length")
	}
	if fi, err := os.Stat(c.keptPath(k)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("kept file: %v, mode %v; want 0600: it holds bytes of sources others may not read", err, fi.Mode())
	}
	st := c.Stats()
	if st.KeptWritten != 1 || st.KeptOpens != 1 || st.Bytes < int64(len(want)) {
		t.Errorf("stats %+v: want one file written, one open, its bytes counted", st)
	}

	// Another process finds the file but hands it out only once checked.
	c2, _ := open(t, dir, 0)
	if f, found := c2.KeptFile(k, int64(len(want))); f != nil || !found {
		t.Fatalf("another cache: KeptFile before VerifyFile = %v, %v; want nil, found", f, found)
	}
	if checked, found := c2.HasKeptFile(k, int64(len(want))); checked || !found {
		t.Fatalf("another cache: HasKeptFile before VerifyFile = %v, %v; want unchecked, found", checked, found)
	}
	if checked, found := c2.HasKeptFile(key("other"), 10); checked || found {
		t.Fatalf("HasKeptFile of no file = %v, %v", checked, found)
	}
	if err := c2.VerifyFile(context.Background(), k, int64(len(want))); err != nil {
		t.Fatal(err)
	}
	f, _ = c2.KeptFile(k, int64(len(want)))
	if f == nil {
		t.Fatal("a verified file was not handed out")
	}
	if got := readKept(t, f); !bytes.Equal(got, want) {
		t.Fatalf("seed %d: verified kept file differs", seed)
	}
	if err := c2.VerifyFile(context.Background(), key("other"), 10); !errors.Is(err, ErrNotFound) {
		t.Errorf("VerifyFile of no file = %v, want ErrNotFound", err)
	}
}

// TestKeptFileDamage: a kept file that no longer matches its record, or
// has none, is never handed out: a check finds it, logs it and removes
// it; one changed after this process checked it is checked again first.
func TestKeptFileDamage(t *testing.T) {
	want := bytes.Repeat([]byte("dsfs kept "), 1000)
	n := int64(len(want))
	cases := []struct {
		name   string
		damage func(t *testing.T, file, record string)
		reason string
		// record says only the record was damaged: the process that
		// wrote the file still hands it out, its bytes being right.
		record bool
	}{
		{"byte flipped", func(t *testing.T, file, _ string) {
			b, _ := os.ReadFile(file)
			b[len(b)/2] ^= 1
			writeFile(t, file, b)
		}, "does not match its record", false},
		{"truncated", func(t *testing.T, file, _ string) {
			if err := os.Truncate(file, n-1); err != nil {
				t.Fatal(err)
			}
		}, "where 10000 are expected", false},
		{"no record", func(t *testing.T, _, record string) {
			if err := os.Remove(record); err != nil {
				t.Fatal(err)
			}
		}, "no record", true},
		{"another's record", func(t *testing.T, _, record string) {
			c, _ := open(t, filepath.Dir(filepath.Dir(record)), 0)
			other := append([]byte(nil), want...)
			other[0] ^= 1
			if err := c.KeepFile(context.Background(), key("other"), n, bytes.NewReader(other)); err != nil {
				t.Fatal(err)
			}
			b, _ := os.ReadFile(c.path(recordKey(key("other"))))
			writeFile(t, record, b)
		}, "its record cannot be read", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			c, _ := open(t, dir, 0)
			k := key("file")
			if err := c.KeepFile(context.Background(), k, n, bytes.NewReader(want)); err != nil {
				t.Fatal(err)
			}
			file, record := c.keptPath(k), c.path(recordKey(k))
			tc.damage(t, file, record)
			// In the process that wrote it: a change to the file is seen.
			if f, _ := c.KeptFile(k, n); (f != nil) != tc.record {
				t.Fatalf("KeptFile in the writing process = %v, want a file: %v", f, tc.record)
			} else if f != nil {
				f.Close()
			}
			c2, log := open(t, dir, 0)
			err := c2.VerifyFile(context.Background(), k, n)
			var ce *CorruptError
			if !errors.As(err, &ce) || !strings.Contains(err.Error(), tc.reason) {
				t.Fatalf("VerifyFile = %v, want a corrupt file: %s", err, tc.reason)
			}
			if _, err := os.Stat(file); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the damaged file was left: %v", err)
			}
			if !strings.Contains(log.String(), "corrupt entry removed") {
				t.Errorf("log %q: want the removal", log)
			}
			if f, _ := c2.KeptFile(k, n); f != nil {
				f.Close()
				t.Error("a damaged file was handed out")
			}
		})
	}
}

func writeFile(t *testing.T, p string, b []byte) {
	t.Helper()
	// A rewrite in place, as an editor or bit rot leaves it: same inode.
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
}

// TestKeptFilesAreEvicted: kept files count towards the cap and go least
// recently used first, with the entries.
func TestKeptFilesAreEvicted(t *testing.T) {
	dir := t.TempDir()
	c, _ := open(t, dir, 3<<20)
	b := make([]byte, 1<<20)
	old := time.Now().Add(-time.Hour)
	for i, name := range []string{"a", "b", "c"} {
		if err := c.KeepFile(context.Background(), key(name), int64(len(b)), bytes.NewReader(b)); err != nil {
			t.Fatal(err)
		}
		when := old.Add(time.Duration(i) * time.Minute)
		os.Chtimes(c.keptPath(key(name)), when, when)
	}
	if _, err := os.Stat(c.keptPath(key("a"))); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the least recently used kept file is still there over the cap: %v", err)
	}
	for _, name := range []string{"b", "c"} {
		if _, err := os.Stat(c.keptPath(key(name))); err != nil {
			t.Errorf("kept file %s evicted before the oldest: %v", name, err)
		}
	}
	if st := c.Stats(); st.Evicted == 0 || st.Bytes > 3<<20 {
		t.Errorf("stats %+v: want an eviction and the directory within its cap", st)
	}
}

func TestKeepFileStopsWithItsContext(t *testing.T) {
	dir := t.TempDir()
	c, _ := open(t, dir, 0)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := c.KeepFile(ctx, key("file"), 10<<20, bytes.NewReader(make([]byte, 10<<20)))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("KeepFile with an ended context = %v", err)
	}
	leftovers, _ := filepath.Glob(filepath.Join(dir, "*", "*"))
	if len(leftovers) != 0 {
		t.Errorf("an interrupted KeepFile left %v", leftovers)
	}
	if err := c.KeepFile(context.Background(), key("file"), 10, strings.NewReader("short")); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("KeepFile of a short reader = %v, want io.ErrUnexpectedEOF", err)
	}
}
