package inventory

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"
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
