package diskcache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
)

// Remote is a store of entries that many hosts share: a bucket of an
// object store (package objstore). An entry is the object named as its
// file is under a cache directory (two hex digits of the key, a slash, the
// key), holding the same bytes, so it passes the same checks: an object
// damaged, truncated, written by hand or copied to another key's name is
// detected, deleted and recomputed, never served.
type Remote interface {
	// String names the store in messages and Stats (s3://BUCKET/PREFIX).
	String() string
	// Get returns the bytes of the object name, at most max+1 of them
	// (a longer object is cut there, and fails the entry's checks), or
	// an error wrapping fs.ErrNotExist when there is none.
	Get(ctx context.Context, name string, max int64) ([]byte, error)
	// Put writes b as the object name, replacing any object there.
	Put(ctx context.Context, name string, b []byte) error
	// Delete removes the object name; removing none is not an error.
	Delete(ctx context.Context, name string) error
}

// maxRemoteDoc bounds an entry read from a remote without an expected
// length (GetBytes: documents), so that a foreign object cannot make a
// reader allocate what it likes.
const maxRemoteDoc = 1 << 30

// OpenShared opens a cache whose entries are kept in remote, shared by
// every host that names it, with the directory dir in front of it (""
// for none) capped at capBytes as Open caps it. A block is looked up in
// dir, then in remote (and copied into dir when found there), and a
// computed block is written to both; so a fleet computes each block once.
// The remote is never evicted from: its size is the bucket's to manage
// (a lifecycle rule).
func OpenShared(remote Remote, dir string, capBytes int64, log *slog.Logger) (*Cache, error) {
	c := &Cache{log: log}
	if dir != "" {
		var err error
		if c, err = Open(dir, capBytes, log); err != nil {
			return nil, err
		}
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	c.remote = remote
	return c, nil
}

// remoteName is the object of the entry of k in a remote.
func remoteName(k Key) string {
	h := k.String()
	return h[:2] + "/" + h
}

// getRemote reads the entry of k from the remote into dst (exactly
// len(dst) bytes when exact) and copies it into the directory. A corrupt
// object is logged and deleted.
func (c *Cache) getRemote(k Key, dst []byte, exact bool) ([]byte, error) {
	b, err := c.lookupRemote(k, dst, exact)
	var ce *CorruptError
	switch {
	case err == nil:
		c.remoteHits.Add(1)
		if c.dir != "" {
			hdr, tail := frame(k, b)
			if err := c.putLocal(k, hdr, b, tail); err != nil {
				c.warnPut.Do(func() {
					c.log.Warn("disk cache: cannot keep blocks of the shared cache in the local directory", "err", err)
				})
			}
		}
		return b, nil
	case errors.As(err, &ce):
		c.corrupt.Add(1)
		c.remoteBad.Add(1)
		if derr := c.remote.Delete(context.Background(), remoteName(k)); derr != nil {
			c.log.Warn("disk cache: corrupt entry in the shared cache left in place (cannot delete it); the block is recomputed", "object", ce.Path, "reason", ce.Reason, "err", derr)
		} else {
			c.log.Warn("disk cache: corrupt entry deleted from the shared cache; the block is recomputed", "object", ce.Path, "reason", ce.Reason)
		}
	case !errors.Is(err, ErrNotFound):
		c.remoteErrs.Add(1)
		c.log.Warn("disk cache: shared cache unreadable; the block is recomputed", "err", err)
	}
	return nil, err
}

// lookupRemote reads and checks the entry of k in the remote, with no side
// effect: an error wrapping ErrNotFound when there is none, a
// *CorruptError when it fails its checks.
func (c *Cache) lookupRemote(k Key, dst []byte, exact bool) ([]byte, error) {
	name := remoteName(k)
	limit := int64(maxRemoteDoc)
	if exact {
		limit = int64(headerSize + len(dst) + sumSize)
	}
	where := c.remote.String() + "/" + name
	b, err := c.remote.Get(context.Background(), name, limit)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", where, ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	want := -1
	if exact {
		want = len(dst)
	}
	n, err := checkHeader(k, b[:min(len(b), headerSize)], int64(len(b)), want)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		return nil, &CorruptError{Path: where, Reason: err.Error()}
	}
	payload := b[headerSize : headerSize+int(n)]
	if sum := entrySum(b[:headerSize], payload); !bytes.Equal(b[headerSize+int(n):], sum[:]) {
		return nil, &CorruptError{Path: where, Reason: fmt.Sprintf("sha256 %x does not match key and payload (%x): edited, swapped or damaged", b[len(b)-sumSize:][:8], sum[:8])}
	}
	if exact {
		copy(dst, payload)
		return dst, nil
	}
	return payload, nil
}

// putRemote writes the entry of k, made of hdr, payload b and digest tail,
// to the remote.
func (c *Cache) putRemote(k Key, hdr, b, tail []byte) error {
	entry := make([]byte, 0, len(hdr)+len(b)+len(tail))
	entry = append(append(append(entry, hdr...), b...), tail...)
	if err := c.remote.Put(context.Background(), remoteName(k), entry); err != nil {
		c.remoteErrs.Add(1)
		return fmt.Errorf("disk cache: %s/%s: %w", c.remote, remoteName(k), err)
	}
	return nil
}
