package inventory

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/dsfs/dsfs/codecs"
	"github.com/dsfs/dsfs/manifest"
	"github.com/dsfs/dsfs/safetensors"
)

// cacheSchema names the layout of a cache file and the rules its checks
// were computed with; a file of another schema is ignored.
const cacheSchema = "dsfs-inventory-cache/1 codec/" + codecs.Version

// Cache keeps the digests and checks of shards on disk, one JSON file per
// shard, keyed by the shard's path, size and modification time (and those
// of any other shard whose bytes a check read: a scale stored apart from
// its weight). A file that is missing, corrupt or stale is ignored and
// rewritten; files are replaced atomically, so a crash leaves the old one
// or the new one.
type Cache struct {
	dir string
}

// OpenCache returns a cache in dir, created if missing.
func OpenCache(dir string) (*Cache, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("inventory cache: %w", err)
	}
	return &Cache{dir: dir}, nil
}

type cacheFile struct {
	Schema  string       `json:"schema"`
	File    fileStamp    `json:"file"`
	Deps    []fileStamp  `json:"deps,omitempty"`
	Tensors []cacheEntry `json:"tensors"`
}

// fileStamp identifies one version of a file.
type fileStamp struct {
	Path    string `json:"path"`
	Size    int64  `json:"size"`
	MTimeNS int64  `json:"mtime_ns"`
}

func stampOf(s *manifest.Shard) fileStamp {
	return fileStamp{Path: s.Path, Size: s.Size, MTimeNS: s.ModTime.UnixNano()}
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
func checkOf(t *manifest.Tensor, unfit bool) string {
	var b strings.Builder
	b.WriteString(string(t.DType))
	if t.Scale != nil {
		fmt.Fprintf(&b, " %s with %s %s %v at %s:%d", t.Format, t.Scale.Name, t.Scale.DType, t.Scale.Shape, t.Scale.Shard.Name, t.Scale.Offset)
		if t.Format == manifest.FormatFP8 {
			fmt.Fprintf(&b, " block %dx%d", t.Block[0], t.Block[1])
		}
	} else if unfit {
		b.WriteString(" unfit scale")
	}
	return b.String()
}

func (c *Cache) path(s *manifest.Shard) string {
	sum := sha256.Sum256([]byte(s.Path))
	return filepath.Join(c.dir, hex.EncodeToString(sum[:16])+".json")
}

// load returns the usable entries of shard s by tensor name, or nil.
// shards finds the catalog's shard of a dependency's path.
func (c *Cache) load(s *manifest.Shard, shards map[string]*manifest.Shard) map[string]cacheEntry {
	b, err := os.ReadFile(c.path(s))
	if err != nil {
		return nil
	}
	var f cacheFile
	if json.Unmarshal(b, &f) != nil || f.Schema != cacheSchema || f.File != stampOf(s) {
		return nil
	}
	for _, d := range f.Deps {
		if o := shards[d.Path]; o == nil || stampOf(o) != d {
			return nil
		}
	}
	m := make(map[string]cacheEntry, len(f.Tensors))
	for _, e := range f.Tensors {
		m[e.Name] = e
	}
	return m
}

// store writes the entries of shard s, whose checks also read the shards
// in deps.
func (c *Cache) store(s *manifest.Shard, deps []*manifest.Shard, entries []cacheEntry) error {
	f := cacheFile{Schema: cacheSchema, File: stampOf(s), Tensors: entries}
	for _, d := range deps {
		f.Deps = append(f.Deps, stampOf(d))
	}
	b, err := json.Marshal(f)
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
func (e cacheEntry) usable(t *manifest.Tensor, unfit bool) bool {
	return e.Offset == t.Offset && e.NBytes == t.Size && e.Check == checkOf(t, unfit) && len(e.SHA256) == 64
}

// quantised reports whether d is a dtype whose values need a scale.
func quantised(d safetensors.DType) bool { return d == safetensors.I8 || d == safetensors.F8E4M3 }
