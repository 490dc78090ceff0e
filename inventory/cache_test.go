package inventory

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"os"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dsfs/dsfs/internal/tinyckpt"
)

// TestCachePoisoned plants cache files a careless or hostile writer of a
// shared cache dir could leave: the records served are the true ones, the
// bad file is named in one log line and the shard is hashed again.
func TestCachePoisoned(t *testing.T) {
	dir := copyDir(t, tinyDir)
	tests := []struct {
		name   string
		plant  func(c *Cache, p, other string) error // p: the shard's cache file; other: another shard's
		reason string
	}{
		{"edited sha256", func(_ *Cache, p, _ string) error {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			i := bytes.Index(b, []byte(`"tensors"`))
			j := i + bytes.Index(b[i:], []byte(`"sha256":"`)) + len(`"sha256":"`)
			copy(b[j:], strings.Repeat("0", 64))
			return os.WriteFile(p, b, 0o644)
		}, "sha256 does not match"},
		{"another shard's file copied over", func(_ *Cache, p, other string) error {
			b, err := os.ReadFile(other)
			if err != nil {
				return err
			}
			return os.WriteFile(p, b, 0o644)
		}, "sha256 does not match"},
		{"fifo", func(_ *Cache, p, _ string) error {
			os.Remove(p)
			return syscall.Mkfifo(p, 0o644)
		}, "named pipe"},
		{"directory", func(_ *Cache, p, _ string) error {
			os.Remove(p)
			return os.Mkdir(p, 0o755)
		}, "directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := OpenCache(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			var log bytes.Buffer
			c.log = slog.New(slog.NewTextHandler(&log, nil))
			cat := open(t, dir)
			want, err := New(cat, Options{Cache: c}).Records(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			victim := cat.Shards[0]
			if err := tt.plant(c, c.path(victim), c.path(cat.Shards[1])); err != nil {
				t.Fatal(err)
			}
			type result struct {
				recs []Record
				p    ProgressSnapshot
				err  error
			}
			done := make(chan result, 1)
			go func() {
				inv := New(open(t, dir), Options{Cache: c})
				recs, err := inv.Records(context.Background())
				done <- result{recs, inv.Progress().Snapshot(), err}
			}()
			var r result
			select {
			case r = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("reading the cache blocked")
			}
			if r.err != nil {
				t.Fatal(r.err)
			}
			if !reflect.DeepEqual(r.recs, want) {
				t.Fatal("records differ from the shard's true records")
			}
			if r.p.HashedBytes == 0 {
				t.Fatal("the shard was not hashed again")
			}
			if n := strings.Count(log.String(), "bad file removed"); n != 1 || !strings.Contains(log.String(), tt.reason) || !strings.Contains(log.String(), victim.Name) {
				t.Fatalf("want one line naming %s and %q, log:\n%s", victim.Name, tt.reason, log.String())
			}
			if fi, err := os.Lstat(c.path(victim)); err != nil || !fi.Mode().IsRegular() {
				t.Fatalf("cache file not rewritten: %v", err)
			}
		})
	}
}

// TestCacheStaleDigests holds closed the stale digests manifest/ served
// when a shard's bytes changed and its size and modification time did not:
// rsync -a and cp -p leave a changed file so, and the cache was keyed by
// (path, size, mtime) alone.
func TestCacheStaleDigests(t *testing.T) {
	tests := []struct {
		name   string
		change func(t *testing.T, path string, off int64, b []byte)
	}{
		{"rewritten in place, mtime put back", func(t *testing.T, path string, off int64, b []byte) {
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt(b, off); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
		}},
		{"replaced by a copy keeping its mtime (cp -p)", func(t *testing.T, path string, off int64, b []byte) {
			whole, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			copy(whole[off:], b)
			tmp := path + ".tmp"
			if err := os.WriteFile(tmp, whole, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, path); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := copyDir(t, tinyDir)
			tinyckpt.Settle(t, dir)
			c, err := OpenCache(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			cat := open(t, dir)
			before, err := New(cat, Options{Cache: c}).Records(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			victim := cat.Tensors[len(cat.Tensors)/2]
			fi, err := os.Stat(victim.Shard.Path)
			if err != nil {
				t.Fatal(err)
			}
			b := make([]byte, victim.Size)
			for i := range b {
				b[i] = byte(i*7 + 1)
			}
			tt.change(t, victim.Shard.Path, victim.Offset, b)
			if err := os.Chtimes(victim.Shard.Path, fi.ModTime(), fi.ModTime()); err != nil {
				t.Fatal(err)
			}
			if now, err := os.Stat(victim.Shard.Path); err != nil || now.Size() != fi.Size() || !now.ModTime().Equal(fi.ModTime()) {
				t.Fatalf("the change moved the size or mtime (%v)", err)
			}
			tinyckpt.Settle(t, dir)

			after, err := New(open(t, dir), Options{Cache: c}).Records(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			want := sha256.Sum256(b)
			for i, r := range after {
				if r.Name != victim.Name {
					continue
				}
				if r.SHA256 != hex.EncodeToString(want[:]) {
					t.Fatalf("%s: sha256 %s after the change (before: %s), the bytes give %x", r.Name, r.SHA256, before[i].SHA256, want)
				}
				return
			}
			t.Fatalf("no record of %s", victim.Name)
		})
	}
}

// TestCacheRacyStamp checks that records made from a shard changed within
// sourcefile.RacyWindow before it was opened are made again from the
// bytes, since a second write in the same clock tick would have left the
// stamp as it was; once settled, the records of a later scan are reused.
func TestCacheRacyStamp(t *testing.T) {
	dir := copyDir(t, tinyDir)
	c, err := OpenCache(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	scan := func() ProgressSnapshot {
		t.Helper()
		inv := New(open(t, dir), Options{Cache: c})
		if _, err := inv.Records(context.Background()); err != nil {
			t.Fatal(err)
		}
		return inv.Progress().Snapshot()
	}
	cat := open(t, dir)
	racy := 0
	for _, sh := range cat.Shards {
		if st, taken := sh.Stamp(); !st.Proven(taken) {
			racy++
		}
	}
	if racy == 0 {
		t.Skip("the copy took longer than the racy window: no shard is racy")
	}
	scan()
	if p := scan(); p.HashedBytes == 0 {
		t.Fatalf("%d shards were racy at the first scan, and the second read nothing: %+v", racy, p)
	}
	tinyckpt.Settle(t, dir)
	scan() // records from proven stamps
	if p := scan(); p.HashedBytes != 0 {
		t.Fatalf("after the source settled, a scan read %d bytes", p.HashedBytes)
	}
}
