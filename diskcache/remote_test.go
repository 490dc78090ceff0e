package diskcache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"
)

// memRemote is a Remote in memory. Real buckets are tested where the
// object store is (integration/s3_test.go); this one lets a test damage
// an object or make requests fail.
type memRemote struct {
	mu      sync.Mutex
	objects map[string][]byte
	fail    error // returned by every request while set
}

func newMemRemote() *memRemote { return &memRemote{objects: make(map[string][]byte)} }

func (r *memRemote) String() string { return "mem://fleet/cache" }

func (r *memRemote) Get(_ context.Context, name string, max int64) ([]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		return nil, r.fail
	}
	b, ok := r.objects[name]
	if !ok {
		return nil, &fs.PathError{Op: "get", Path: name, Err: fs.ErrNotExist}
	}
	return bytes.Clone(b[:min(int64(len(b)), max+1)]), nil
}

func (r *memRemote) Put(_ context.Context, name string, b []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		return r.fail
	}
	r.objects[name] = bytes.Clone(b)
	return nil
}

func (r *memRemote) Delete(_ context.Context, name string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		return r.fail
	}
	delete(r.objects, name)
	return nil
}

func shared(t *testing.T, r Remote, dir string) (*Cache, *bytes.Buffer) {
	t.Helper()
	var log bytes.Buffer
	c, err := OpenShared(r, dir, 0, slog.New(slog.NewTextHandler(&log, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return c, &log
}

// TestSharedComputesOnce: two hosts, each with its own directory (or
// none) in front of one remote, compute each block once between them.
func TestSharedComputesOnce(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 2))
	for _, dirs := range [][2]bool{{true, true}, {false, false}, {true, false}} {
		t.Run(fmt.Sprint(dirs), func(t *testing.T) {
			r := newMemRemote()
			dir := func(local bool) string {
				if local {
					return t.TempDir()
				}
				return ""
			}
			a, _ := shared(t, r, dir(dirs[0]))
			b, _ := shared(t, r, dir(dirs[1]))
			computed := 0
			for i := range 8 {
				want := payload(rng, 1000+i)
				compute := func(dst []byte) error { computed++; copy(dst, want); return nil }
				k := key(fmt.Sprint("block", i))
				for _, c := range []*Cache{a, b, b} {
					got := make([]byte, len(want))
					if _, err := c.Through(k, got, compute); err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(got, want) {
						t.Fatalf("seed %d: block %d: other bytes", seed, i)
					}
				}
			}
			if computed != 8 {
				t.Errorf("computed %d blocks for 8", computed)
			}
			st := b.Stats()
			wantRemote := int64(16) // both reads of each block
			if dirs[1] {
				wantRemote = 8 // the second read of each block is the directory's
			}
			if st.RemoteHits != wantRemote || st.Remote != r.String() {
				t.Errorf("second host: %+v, want %d remote hits", st, wantRemote)
			}
		})
	}
}

// TestSharedCorrupt: an object that is not the entry of its key, as
// written by dsfs, is never served: it is deleted and the block computed
// and stored again.
func TestSharedCorrupt(t *testing.T) {
	k, other := key("block"), key("other")
	want := []byte("the right payload")
	for _, tc := range []struct {
		name   string
		damage func(r *memRemote)
		reason string
	}{
		{"bit flip", func(r *memRemote) { r.objects[remoteName(k)][headerSize+3] ^= 1 }, "does not match"},
		{"truncated", func(r *memRemote) { o := r.objects[remoteName(k)]; r.objects[remoteName(k)] = o[:len(o)-5] }, "room for"},
		{"another key's entry", func(r *memRemote) {
			c, _ := shared(t, r, "")
			c.Put(other, want)
			r.objects[remoteName(k)] = r.objects[remoteName(other)]
		}, "holds the entry of key"},
		{"overlong", func(r *memRemote) {
			r.objects[remoteName(k)] = append(r.objects[remoteName(k)], make([]byte, 1<<20)...)
		}, "room for"},
		{"not an entry", func(r *memRemote) { r.objects[remoteName(k)] = []byte(strings.Repeat("x", 200)) }, "bad magic"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newMemRemote()
			w, _ := shared(t, r, "")
			if err := w.Put(k, want); err != nil {
				t.Fatal(err)
			}
			tc.damage(r)
			c, log := shared(t, r, t.TempDir())
			got := make([]byte, len(want))
			computed := false
			hit, err := c.Through(k, got, func(dst []byte) error { computed = true; copy(dst, want); return nil })
			if err != nil || hit || !computed || !bytes.Equal(got, want) {
				t.Fatalf("Through: hit %v, computed %v, %q, %v", hit, computed, got, err)
			}
			if !strings.Contains(log.String(), tc.reason) || c.Stats().RemoteCorrupt != 1 {
				t.Errorf("log %q, stats %+v; want one corrupt object, %q", log, c.Stats(), tc.reason)
			}
			if b, err := c.lookupRemote(k, nil, false); err != nil || !bytes.Equal(b, want) {
				t.Errorf("after recomputing, the remote holds %q, %v", b, err)
			}
		})
	}
}

// TestSharedUnreachable: a remote that fails costs computations, never a
// wrong or missing block.
func TestSharedUnreachable(t *testing.T) {
	r := newMemRemote()
	r.fail = errors.New("connection refused")
	c, log := shared(t, r, t.TempDir())
	k, want := key("block"), []byte("payload")
	got := make([]byte, len(want))
	hit, err := c.Through(k, got, func(dst []byte) error { copy(dst, want); return nil })
	if err != nil || hit || !bytes.Equal(got, want) {
		t.Fatalf("Through: hit %v, %q, %v", hit, got, err)
	}
	st := c.Stats()
	if st.RemoteErrors != 2 || st.WriteErrors != 1 || !strings.Contains(log.String(), "connection refused") {
		t.Errorf("stats %+v, log %q; want the failed get and put counted and logged", st, log)
	}
}
