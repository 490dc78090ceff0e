package integration

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestQ2PoisonedCacheDir fills a --cache-dir with `dsfs export`, then, as
// another writer of the shared directory might, swaps one entry for
// another key's, edits a payload byte, and puts a FIFO and a directory at
// two entries' paths. A mount on the directory serves q2/ byte for byte as
// an export without a cache, logs each bad entry once, and stops on
// SIGTERM (a FIFO never blocks a reader or the exit).
func TestQ2PoisonedCacheDir(t *testing.T) {
	needMount(t)
	cacheDir := t.TempDir()
	want := t.TempDir()
	run(t, dsfsBin, "export", "--cache-dir", cacheDir, "q2", tinySrc, want)

	// Entries by size, so that a swapped one has the right length and only
	// its key and digest give it away.
	bySize := map[int64][]string{}
	entries, _ := filepath.Glob(filepath.Join(cacheDir, "[0-9a-f][0-9a-f]", "*"))
	for _, p := range entries {
		if fi, err := os.Stat(p); err == nil && len(filepath.Base(p)) == 64 {
			bySize[fi.Size()] = append(bySize[fi.Size()], p)
		}
	}
	var same []string
	for _, ps := range bySize {
		if len(ps) > len(same) {
			same = ps
		}
	}
	if len(same) < 5 {
		t.Fatalf("want 5 cache entries of one size, have %d of %d entries", len(same), len(entries))
	}
	swapped, edited, fifo, dir := same[1], same[2], same[3], same[4]
	b, err := os.ReadFile(same[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(swapped, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err = os.ReadFile(edited); err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x01
	if err := os.WriteFile(edited, b, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{fifo, dir} {
		os.Remove(p)
	}
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}

	m := startMount(t, tinySrc, "--cache-dir", cacheDir)
	for _, f := range files(t, want) {
		run(t, "cmp", m.path("q2", f), filepath.Join(want, f))
	}
	st, raw := readStats(t, m)
	if st.DiskCache.Corrupt != 4 || st.ReadErrors != 0 {
		t.Fatalf("want 4 corrupt entries and no read error:\n%s", raw)
	}
	log := m.log.String()
	for _, p := range []string{swapped, edited, fifo, dir} {
		if n := strings.Count(log, filepath.Base(p)); n != 1 {
			t.Errorf("entry %s named in %d log lines, want 1", filepath.Base(p), n)
		}
	}
	for what, s := range map[string]string{"swap": "holds the entry of key", "edit": "sha256", "fifo": "named pipe", "dir": "directory, not a regular file"} {
		if !strings.Contains(log, s) {
			t.Errorf("no log line for the %s (%q):\n%s", what, s, log)
		}
	}
	m.stop(t)
	for _, p := range []string{swapped, edited, fifo, dir} {
		if fi, err := os.Lstat(p); err != nil || !fi.Mode().IsRegular() {
			t.Errorf("%s not replaced by a recomputed entry: %v", p, err)
		}
	}
}
