package inventory

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/codecs"
	"github.com/dsfs/dsfs/diskcache"
	"github.com/dsfs/dsfs/safetensors"
	"github.com/dsfs/dsfs/sourcefile"
)

// cacheSchema names the layout of a cache file and the rules its checks
// were computed with; a file of another schema is ignored.
const cacheSchema = "dsfs-inventory-cache/3 codec/" + codecs.Version

// maxCacheFile bounds a cache file read back: far above the records of
// the largest shard (about 300 bytes per tensor), far below what would
// hurt the process.
const maxCacheFile = 256 << 20

// Cache keeps the digests and checks of shards on disk, one JSON file per
// shard, keyed by the shard's path and stamp (device, inode, size,
// modification and status-change times: sourcefile.Stamp), and by those
// of any other shard whose bytes a check read (a scale stored apart from
// its weight). A shard rewritten in place with its modification time put
// back, as rsync -a and cp -p leave a changed file, has a new status-change
// time, so its records are not reused. Records made from a racy stamp (the
// shard changed within sourcefile.RacyWindow before it was opened, when a
// second write could have left the stamp as it was) are not reused either:
// the shard is hashed again, and the records of that later scan are the
// ones kept. A file that is missing, corrupt or stale is ignored and
// rewritten; files are replaced atomically, so a crash leaves the old one
// or the new one. The rule is FORMATS.md's "Caches of derived facts".
//
// The directory may be shared (it lives in a --cache-dir), and its writers
// are trusted as the disk cache's are (package diskcache): each file is
// an envelope holding the SHA-256 of its shard's path and its body, so a
// digest edited in place, or a file copied from another shard's name, is
// logged once, removed and recomputed rather than served. A file that is
// not a regular file is never opened blocking. Hosts sharing the
// directory each hash their own copy of a shard once, since device and
// inode differ from host to host.
type Cache struct {
	dir string
	log *slog.Logger
}

// OpenCache returns a cache in dir, created if missing. Problems with its
// files are logged on slog.Default().
func OpenCache(dir string) (*Cache, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("inventory cache: %w", err)
	}
	return &Cache{dir: dir, log: slog.Default()}, nil
}

// cacheEnvelope is a cache file as stored: Body (a cacheFile) bound to its
// shard's path by SHA256 (see bodySum).
type cacheEnvelope struct {
	Schema string          `json:"schema"`
	SHA256 string          `json:"sha256"`
	Body   json.RawMessage `json:"body"`
}

// bodySum is the digest of a cache file's body for the shard at path.
func bodySum(path string, body []byte) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00", cacheSchema, path)
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}

// cacheFile is the body of a cache file: the records of one version of a
// shard.
type cacheFile struct {
	File    fileStamp    `json:"file"`
	Deps    []fileStamp  `json:"deps,omitempty"`
	Tensors []cacheEntry `json:"tensors"`
}

// fileStamp identifies one version of a file, and says when the stamp
// was taken (when the shard was opened: every byte hashed is of that
// version).
type fileStamp struct {
	Path string `json:"path"`
	sourcefile.Stamp
	TakenNS int64 `json:"taken_ns"`
}

func stampOf(s *checkpoint.Shard) fileStamp {
	st, taken := s.Stamp()
	return fileStamp{Path: s.Path, Stamp: st, TakenNS: taken.UnixNano()}
}

// fresh reports whether records made under stamp f describe the shard s
// opened now: the same path and version, and a stamp that proved it.
func (f fileStamp) fresh(s *checkpoint.Shard) bool {
	now, _ := s.Stamp()
	return f.Path == s.Path && f.Stamp == now && f.Stamp.Proven(time.Unix(0, f.TakenNS))
}

type cacheEntry struct {
	Name   string  `json:"name"`
	Offset int64   `json:"offset"`
	NBytes int64   `json:"nbytes"`
	Check  string  `json:"check"`
	SHA256 string  `json:"sha256"`
	Values *Values `json:"values,omitempty"`
}

// checkOf says what a scan of t reads and checks, so that an entry made
// under another pairing (an index that moved a scale) is not reused.
func checkOf(t *checkpoint.Tensor, unfit bool) string {
	var b strings.Builder
	b.WriteString(string(t.DType))
	if t.Scale != nil {
		fmt.Fprintf(&b, " %s with %s %s %v at %s:%d", t.Format, t.Scale.Name, t.Scale.DType, t.Scale.Shape, t.Scale.Shard.Name, t.Scale.Offset)
		if t.Format == checkpoint.FormatFP8 {
			fmt.Fprintf(&b, " block %dx%d", t.Block[0], t.Block[1])
		}
	} else if unfit {
		b.WriteString(" unfit scale")
	}
	return b.String()
}

func (c *Cache) path(s *checkpoint.Shard) string {
	sum := sha256.Sum256([]byte(s.Path))
	return filepath.Join(c.dir, hex.EncodeToString(sum[:16])+".json")
}

// load returns the usable entries of shard s by tensor name, or nil.
// shards finds the catalog's shard of a dependency's path. A file of an
// older schema, for another version of the shard or from a racy stamp is
// a plain miss; one
// that fails its digest or is not a regular file is logged and removed.
func (c *Cache) load(s *checkpoint.Shard, shards map[string]*checkpoint.Shard) map[string]cacheEntry {
	p := c.path(s)
	b, err := readCacheFile(p)
	if err != nil {
		if !errors.Is(err, diskcache.ErrNotFound) {
			c.drop(p, s, err.Error())
		}
		return nil
	}
	var env cacheEnvelope
	if json.Unmarshal(b, &env) != nil || env.Schema != cacheSchema {
		return nil // another version's file (or a torn one): rewritten after the scan
	}
	if env.SHA256 != bodySum(s.Path, env.Body) {
		c.drop(p, s, "sha256 does not match the shard's path and the records (edited, copied or damaged)")
		return nil
	}
	var f cacheFile
	if json.Unmarshal(env.Body, &f) != nil || !f.File.fresh(s) {
		return nil
	}
	for _, d := range f.Deps {
		if o := shards[d.Path]; o == nil || !d.fresh(o) {
			return nil
		}
	}
	m := make(map[string]cacheEntry, len(f.Tensors))
	for _, e := range f.Tensors {
		m[e.Name] = e
	}
	return m
}

// drop logs a cache file that cannot be trusted and removes it (an unlink,
// or an empty directory's removal: never anything else).
func (c *Cache) drop(p string, s *checkpoint.Shard, reason string) {
	c.log.Warn("manifest digest cache: bad file removed; the shard is hashed again", "shard", s.Name, "path", p, "reason", reason)
	os.Remove(p)
}

// readCacheFile reads the regular file at p, at most maxCacheFile bytes,
// without blocking on a FIFO or a device put there.
func readCacheFile(p string) ([]byte, error) {
	f, err := diskcache.OpenRegular(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxCacheFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxCacheFile {
		return nil, fmt.Errorf("%s: over %d bytes", p, maxCacheFile)
	}
	return b, nil
}

// store writes the entries of shard s, whose checks also read the shards
// in deps.
func (c *Cache) store(s *checkpoint.Shard, deps []*checkpoint.Shard, entries []cacheEntry) error {
	f := cacheFile{File: stampOf(s), Tensors: entries}
	for _, d := range deps {
		f.Deps = append(f.Deps, stampOf(d))
	}
	body, err := json.Marshal(f)
	if err != nil {
		return err
	}
	b, err := json.Marshal(cacheEnvelope{Schema: cacheSchema, SHA256: bodySum(s.Path, body), Body: body})
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(c.dir, ".tmp-*")
	if err != nil {
		return fmt.Errorf("inventory cache: %w", err)
	}
	_, err = tmp.Write(b)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), c.path(s))
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("inventory cache: %s: %w", s.Name, err)
	}
	return nil
}

// usable reports whether entry e still describes tensor t.
func (e cacheEntry) usable(t *checkpoint.Tensor, unfit bool) bool {
	return e.Offset == t.Offset && e.NBytes == t.Size && e.Check == checkOf(t, unfit) && len(e.SHA256) == 64
}

// quantised reports whether d is a dtype whose values need a scale.
func quantised(d safetensors.DType) bool { return d == safetensors.I8 || d == safetensors.F8E4M3 }
