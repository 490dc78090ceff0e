// Package diskcache keeps computed blocks on disk across mounts, so that an
// expensive view (q2/) computes each block once. Entries are content
// addressed: the caller names an entry by a Key, the SHA-256 of everything
// its bytes depend on (the source bytes, the codec version, the output
// geometry), so an entry can never be stale, only damaged.
//
// Several processes, on one host or on several hosts sharing the directory
// over a network file system, may use one directory at the same time. An
// entry is written to a temporary file and renamed into place, so a reader
// sees a whole entry or none; two writers of one key write the same bytes.
// The directory is capped: when it grows past the cap the least recently
// used entries (by modification time, which a hit refreshes) are removed.
//
// A fleet shares one cache in a bucket (OpenShared): the same entries,
// byte for byte, as objects named as the files are, with an optional
// directory in front of it on each host. A block is computed once by the
// whole fleet; what a bucket holds is checked exactly as a file is.
//
// Trust model. Every process that can write the directory is trusted: an
// entry's bytes are not recomputed on read (that would cost what the cache
// saves), so a writer that computes a wrong payload and a matching digest
// is believed. What a reader does guarantee is that it never serves bytes
// that do not belong to the key asked for, as written by a dsfs writer:
// each entry ends with the SHA-256 of its key, length and payload, so an
// entry copied or renamed to another key's path, a swapped pair, a payload
// edited by hand or by a tool that fixed up a plain checksum, a torn or
// truncated write and bit rot are all detected, logged once, removed and
// recomputed. A FIFO, device, socket, symbolic link or directory at an
// entry's path is never opened for reading (the path is examined with
// lstat, opened with O_NONBLOCK|O_NOFOLLOW and checked again with fstat),
// so it cannot hang a reader or the process's exit; it is a problem,
// removed when that is only an unlink (a non-empty directory is left).
package diskcache

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Key names an entry: the SHA-256 of everything the entry's bytes depend on.
type Key [32]byte

// String is the key in hex, the entry's file name.
func (k Key) String() string { return hex.EncodeToString(k[:]) }

// Entry file layout: magic | key | payload length (uint64 LE) | payload |
// SHA-256 of everything before it. The key inside the file names the entry
// that landed under another name in the log; the digest binds key and
// payload, so neither can be changed without it.
const (
	magic      = "DSFSDC02"
	headerSize = len(magic) + len(Key{}) + 8
	sumSize    = sha256.Size
	// Marker is the file that marks a directory as a dsfs disk cache.
	Marker = "DSFS-DISK-CACHE"
	// staleTemp is how old a temporary file must be before a scan removes
	// it: older than any write takes, so a writer on another host is never
	// robbed of its file.
	staleTemp = time.Hour
)

// oldMagics are the magics of earlier entry formats: such an entry is a
// miss (its key is recomputed and the entry rewritten), not a problem.
var oldMagics = []string{"DSFSDC01"}

// ErrNotFound is wrapped by Lookup's error when the cache holds no entry
// for the key.
var ErrNotFound = errors.New("no entry")

// CorruptError says why an entry file cannot be served.
type CorruptError struct {
	Path   string
	Reason string
}

func (e *CorruptError) Error() string { return e.Path + ": corrupt cache entry: " + e.Reason }

// Stats are cumulative counters of one Cache plus the directory's size as
// last measured (the last scan plus what this process wrote since).
type Stats struct {
	Dir          string `json:"dir"`
	Hits         int64  `json:"hits"`
	Misses       int64  `json:"misses"`
	Corrupt      int64  `json:"corrupt"`
	Writes       int64  `json:"writes"`
	WriteErrors  int64  `json:"write_errors"`
	BytesRead    int64  `json:"bytes_read"`
	BytesWritten int64  `json:"bytes_written"`
	Evicted      int64  `json:"evicted"`
	Entries      int64  `json:"entries"`
	Bytes        int64  `json:"bytes"`
	Cap          int64  `json:"cap_bytes"` // 0: no cap
	// Remote names the shared tier (s3://BUCKET/PREFIX) when there is
	// one; RemoteHits counts the hits it served, RemoteErrors the
	// requests to it that failed and RemoteCorrupt the objects of it
	// that failed their checks (counted in Corrupt too).
	Remote        string `json:"remote,omitempty"`
	RemoteHits    int64  `json:"remote_hits,omitempty"`
	RemoteErrors  int64  `json:"remote_errors,omitempty"`
	RemoteCorrupt int64  `json:"remote_corrupt,omitempty"`
	// KeptWritten counts the whole files kept (KeepFile), KeptVerified
	// those found kept and checked (VerifyFile), KeptOpens the opens of
	// kept files handed out (KeptFile).
	KeptWritten  int64 `json:"kept_files_written,omitempty"`
	KeptVerified int64 `json:"kept_files_verified,omitempty"`
	KeptOpens    int64 `json:"kept_file_opens,omitempty"`
}

// Cache is a directory of entries. It is safe for concurrent use.
type Cache struct {
	dir string
	cap int64
	log *slog.Logger

	scanMu    sync.Mutex   // one scan at a time
	scanned   atomic.Bool  // a scan has measured the directory
	entries   atomic.Int64 // as of the last scan, plus writes since
	size      atomic.Int64
	sinceScan atomic.Int64 // bytes written since the last scan

	hits, misses, corrupt, writes, writeErrs, bytesRead, bytesWritten, evicted atomic.Int64

	warnPut sync.Once // logs the first store Through fails

	remote                            Remote // the shared tier, if any
	remoteHits, remoteErrs, remoteBad atomic.Int64

	// checked holds the status (fileStatus) of each kept file, by key, as
	// this process last checked or wrote it (files.go).
	checked                            sync.Map
	keptWrites, keptVerified, keptHits atomic.Int64
}

// Open opens (creating it if needed) the cache directory dir, capped at
// capBytes (0 or less: no cap). Corrupt entries, and the first entry
// Through cannot store, are logged on log (slog.Default when nil). Open
// reads no entries, so it is instant however large the directory; the
// first write measures it.
func Open(dir string, capBytes int64, log *slog.Logger) (*Cache, error) {
	if log == nil {
		log = slog.Default()
	}
	if capBytes < 0 {
		capBytes = 0
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, fmt.Errorf("disk cache: %w", err)
	}
	marker := filepath.Join(abs, Marker)
	if _, err := os.Stat(marker); errors.Is(err, fs.ErrNotExist) {
		if err := writeAtomic(marker, []byte("dsfs disk cache, entry format "+magic+"\n")); err != nil {
			return nil, fmt.Errorf("disk cache: %w", err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("disk cache: %w", err)
	}
	return &Cache{dir: abs, cap: capBytes, log: log}, nil
}

// IsCache reports whether dir holds a disk cache (its marker file).
func IsCache(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, Marker))
	return err == nil
}

// Dir is the cache's absolute directory.
func (c *Cache) Dir() string { return c.dir }

// path is where the entry of k lives: a directory per first key byte keeps
// directories small.
func (c *Cache) path(k Key) string {
	h := k.String()
	return filepath.Join(c.dir, h[:2], h)
}

// Get fills dst with the entry of k and reports whether it did. An entry
// whose payload is not exactly len(dst) bytes, or that fails its checks, is
// logged, removed and counted as a miss. A hit refreshes the entry's
// modification time, which eviction orders by.
func (c *Cache) Get(k Key, dst []byte) bool {
	_, err := c.get(k, dst, true)
	return c.finish(k, len(dst), err)
}

// GetBytes returns the entry of k, whatever its length (documents).
func (c *Cache) GetBytes(k Key) ([]byte, bool) {
	b, err := c.get(k, nil, false)
	return b, c.finish(k, len(b), err)
}

// finish counts a lookup and refreshes a hit.
func (c *Cache) finish(k Key, n int, err error) bool {
	if err == nil {
		c.hits.Add(1)
		c.bytesRead.Add(int64(n))
		if c.dir != "" {
			now := time.Now()
			os.Chtimes(c.path(k), now, now) // best effort: a lost touch only ages the entry
		}
		return true
	}
	c.misses.Add(1)
	return false
}

// get reads the entry of k from the directory and, when it has none,
// from the remote (getRemote). A corrupt entry is logged and dropped
// (drop), then treated as absent.
func (c *Cache) get(k Key, dst []byte, exact bool) ([]byte, error) {
	b, err := c.read(k, dst, exact)
	if err == nil {
		return b, nil
	}
	c.drop(err)
	if c.remote == nil {
		return nil, err
	}
	return c.getRemote(k, dst, exact)
}

// drop logs why an entry could not be read and removes it when it is
// corrupt.
func (c *Cache) drop(err error) {
	var ce *CorruptError
	switch {
	case errors.As(err, &ce):
		c.corrupt.Add(1)
		// Another process may have just replaced the bad file with a good
		// one; removing that costs one recomputation, never a wrong byte.
		// os.Remove unlinks a name or an empty directory, never content
		// that is not ours.
		if rerr := os.Remove(ce.Path); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			c.log.Warn("disk cache: corrupt entry left in place (cannot remove it); what it held is computed again", "path", ce.Path, "reason", ce.Reason, "err", rerr)
		} else {
			c.log.Warn("disk cache: corrupt entry removed; what it held is computed again", "path", ce.Path, "reason", ce.Reason)
		}
	case !errors.Is(err, ErrNotFound):
		c.log.Warn("disk cache: unreadable entry; what it held is computed again", "err", err)
	}
}

// Lookup returns the payload of the entry of k without side effects: an
// error wrapping ErrNotFound when there is none, a *CorruptError when it
// fails its checks. It is what a verifier uses.
func (c *Cache) Lookup(k Key) ([]byte, error) {
	b, err := c.read(k, nil, false)
	if c.remote != nil && errors.Is(err, ErrNotFound) {
		return c.lookupRemote(k, nil, false)
	}
	return b, err
}

// read reads and checks the entry of k, into dst when exact (which then
// requires the payload to be len(dst) bytes).
func (c *Cache) read(k Key, dst []byte, exact bool) ([]byte, error) {
	if c.dir == "" {
		return nil, ErrNotFound
	}
	p := c.path(k)
	f, err := OpenRegular(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	bad := func(format string, a ...any) ([]byte, error) {
		return nil, &CorruptError{Path: p, Reason: fmt.Sprintf(format, a...)}
	}
	size := fi.Size()
	var hdr [headerSize]byte
	h := hdr[:min(size, int64(headerSize))]
	if _, err := io.ReadFull(f, h); err != nil {
		return bad("reading header: %v", err)
	}
	want := -1
	if exact {
		want = len(dst)
	}
	n, err := checkHeader(k, h, size, want)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		return bad("%v", err)
	}
	if !exact {
		dst = make([]byte, n)
	}
	if _, err := io.ReadFull(f, dst); err != nil {
		return bad("reading payload: %v", err)
	}
	var tail [sumSize]byte
	if _, err := io.ReadFull(f, tail[:]); err != nil {
		return bad("reading digest: %v", err)
	}
	if sum := entrySum(hdr[:], dst); tail != sum {
		return bad("sha256 %x does not match key and payload (%x): edited, swapped or damaged", tail[:8], sum[:8])
	}
	return dst, nil
}

// checkHeader checks the header hdr (its first headerSize bytes, fewer
// when the entry is shorter) of an entry of size bytes read as the entry
// of k, whose payload must be want bytes unless want is negative, and
// returns the payload's length. An entry of an earlier format is a miss
// (an error wrapping ErrNotFound); any other fault is the reason it
// cannot be served.
func checkHeader(k Key, hdr []byte, size int64, want int) (uint64, error) {
	if len(hdr) >= len(magic) && slices.Contains(oldMagics, string(hdr[:len(magic)])) {
		return 0, fmt.Errorf("entry of an earlier format: %w", ErrNotFound)
	}
	if size < int64(headerSize+sumSize) {
		return 0, fmt.Errorf("%d bytes, shorter than an empty entry", size)
	}
	if string(hdr[:len(magic)]) != magic {
		return 0, fmt.Errorf("bad magic %q", hdr[:len(magic)])
	}
	if !bytes.Equal(hdr[len(magic):len(magic)+len(k)], k[:]) {
		return 0, fmt.Errorf("holds the entry of key %x", hdr[len(magic):len(magic)+len(k)])
	}
	n := binary.LittleEndian.Uint64(hdr[len(magic)+len(k):])
	if room := uint64(size) - uint64(headerSize+sumSize); n != room {
		return 0, fmt.Errorf("payload of %d bytes in a file with room for %d (truncated or overlong)", n, room)
	}
	if want >= 0 && n != uint64(want) {
		return 0, fmt.Errorf("payload of %d bytes where %d are expected", n, want)
	}
	return n, nil
}

// entrySum is the digest that binds an entry's header (magic, key,
// length) to its payload.
func entrySum(hdr, payload []byte) [sumSize]byte {
	h := sha256.New()
	h.Write(hdr)
	h.Write(payload)
	return [sumSize]byte(h.Sum(nil))
}

// OpenRegular opens the regular file at p for reading without ever
// blocking on it or following a link: p is examined with lstat first,
// opened with O_NONBLOCK|O_NOFOLLOW (a FIFO put there in between opens at
// once instead of waiting for a writer) and checked again with fstat.
// Anything but a regular file is a *CorruptError; a missing file wraps
// ErrNotFound. Other caches kept in a shared directory open their files
// with it too.
func OpenRegular(p string) (*os.File, error) {
	notRegular := func(m fs.FileMode) error {
		return &CorruptError{Path: p, Reason: "a " + fileKind(m) + ", not a regular file"}
	}
	fi, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", p, ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, notRegular(fi.Mode())
	}
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("%s: %w", p, ErrNotFound)
	case errors.Is(err, syscall.ELOOP):
		return nil, notRegular(fs.ModeSymlink)
	case err != nil:
		return nil, err
	}
	if fi, err = f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		if err != nil {
			return nil, err
		}
		return nil, notRegular(fi.Mode())
	}
	return f, nil
}

// fileKind names the type of a file mode for a problem line.
func fileKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeDir != 0:
		return "directory"
	case m&fs.ModeSymlink != 0:
		return "symbolic link"
	case m&fs.ModeNamedPipe != 0:
		return "named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeCharDevice != 0:
		return "character device"
	case m&fs.ModeDevice != 0:
		return "block device"
	}
	return "special file"
}

// Put stores b as the entry of k, replacing any entry there atomically, in
// the directory and in the remote (OpenShared), and evicts old entries if
// the directory has outgrown its cap. A failure of either is counted and
// returned; the caller has the bytes anyway.
func (c *Cache) Put(k Key, b []byte) error {
	hdr, tail := frame(k, b)
	var errs []error
	if c.dir != "" {
		errs = append(errs, c.putLocal(k, hdr, b, tail))
	}
	if c.remote != nil {
		errs = append(errs, c.putRemote(k, hdr, b, tail))
	}
	if err := errors.Join(errs...); err != nil {
		c.writeErrs.Add(1)
		return err
	}
	c.writes.Add(1)
	c.bytesWritten.Add(int64(len(b)))
	return nil
}

// frame is the header and the digest that frame payload b as the entry
// of k.
func frame(k Key, b []byte) (hdr, tail []byte) {
	h := make([]byte, headerSize)
	copy(h, magic)
	copy(h[len(magic):], k[:])
	binary.LittleEndian.PutUint64(h[len(magic)+len(k):], uint64(len(b)))
	sum := entrySum(h, b)
	return h, sum[:]
}

// putLocal writes the entry of k, made of hdr, payload b and digest tail,
// to the directory, and evicts old entries if the directory has outgrown
// its cap.
func (c *Cache) putLocal(k Key, hdr, b, tail []byte) error {
	p := c.path(k)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return fmt.Errorf("disk cache: %w", err)
	}
	if err := writeAtomic(p, hdr, b, tail); err != nil {
		return fmt.Errorf("disk cache: %w", err)
	}
	n := int64(len(hdr) + len(b) + len(tail))
	c.entries.Add(1)
	c.size.Add(n)
	if c.sinceScan.Add(n) >= c.scanEvery() || !c.scanned.Load() {
		c.scan()
	}
	return nil
}

// Through fills dst with the entry of k when the cache holds one, and
// otherwise with what compute writes there, which it then stores as the
// entry of k. It reports whether dst came from the cache. It is the one way
// a computed block goes through the disk (q2/'s experts, gguf/'s costly
// types), so every caller keys, reads, stores and fails alike; the key is
// the caller's, since only it knows what the bytes depend on.
//
// An error is compute's, returned as it is, and nothing is stored. A failed
// store is not an error: dst holds the bytes, and the next reader of the
// block computes them again. It is counted in Stats.WriteErrors, and only
// the first is logged, since a full or read-only disk would otherwise log
// every block.
func (c *Cache) Through(k Key, dst []byte, compute func(dst []byte) error) (hit bool, err error) {
	if c.Get(k, dst) {
		return true, nil
	}
	if err := compute(dst); err != nil {
		return false, err
	}
	if err := c.Put(k, dst); err != nil {
		c.warnPut.Do(func() {
			c.log.Warn("disk cache: cannot store computed blocks; they will be computed again (counted in write_errors)", "err", err)
		})
	}
	return false, nil
}

// scanEvery is how many bytes may be written between scans: a sixteenth of
// the cap, so the directory overshoots it by at most that much (plus what
// other processes write).
func (c *Cache) scanEvery() int64 {
	if c.cap == 0 {
		return 1 << 62 // no cap: measure once, for the stats
	}
	return max(c.cap/16, 1<<20)
}

// writeAtomic writes the concatenation of parts to a temporary file beside
// p and renames it to p. It does not sync: after a crash a torn entry fails
// its digest and is recomputed.
func writeAtomic(p string, parts ...[]byte) error {
	tmp := filepath.Join(filepath.Dir(p), fmt.Sprintf(".tmp-%s-%d-%016x", filepath.Base(p), os.Getpid(), rand.Uint64()))
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	for _, b := range parts {
		if _, err = f.Write(b); err != nil {
			break
		}
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, p)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// entryFile is an entry found by a scan.
type entryFile struct {
	path string
	size int64
	used time.Time
}

// scan measures the directory, removes stale temporary files and, when the
// directory is over its cap, removes the least recently used entries until
// it is fifteen sixteenths full. Only one scan runs at a time; a write that
// finds one running carries on.
func (c *Cache) scan() {
	if !c.scanMu.TryLock() {
		return
	}
	defer c.scanMu.Unlock()
	c.sinceScan.Store(0)
	var files []entryFile
	var total int64
	subs, err := os.ReadDir(c.dir)
	if err != nil {
		c.log.Warn("disk cache: scan failed", "dir", c.dir, "err", err)
		return
	}
	now := time.Now()
	for _, s := range subs {
		if !s.IsDir() || !isHex(s.Name(), 2) {
			continue
		}
		sub := filepath.Join(c.dir, s.Name())
		ents, err := os.ReadDir(sub)
		if err != nil {
			continue
		}
		for _, e := range ents {
			fi, err := e.Info()
			if err != nil || !fi.Mode().IsRegular() {
				continue // removed meanwhile, or not ours
			}
			p := filepath.Join(sub, e.Name())
			switch {
			case strings.HasPrefix(e.Name(), ".tmp-"):
				if now.Sub(fi.ModTime()) > staleTemp {
					os.Remove(p)
				}
			case isHex(e.Name(), 2*len(Key{})), isKeptName(e.Name()):
				files = append(files, entryFile{p, fi.Size(), fi.ModTime()})
				total += fi.Size()
			}
		}
	}
	if c.cap > 0 && total > c.cap {
		slices.SortFunc(files, func(a, b entryFile) int { return a.used.Compare(b.used) })
		low := c.cap - c.cap/16
		for len(files) > 0 && total > low {
			if err := os.Remove(files[0].path); err == nil || errors.Is(err, fs.ErrNotExist) {
				total -= files[0].size
				c.evicted.Add(1)
			}
			files = files[1:]
		}
	}
	c.entries.Store(int64(len(files)))
	c.size.Store(total)
	c.scanned.Store(true)
}

// isHex reports whether s is n lowercase hex digits.
func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !('0' <= s[i] && s[i] <= '9' || 'a' <= s[i] && s[i] <= 'f') {
			return false
		}
	}
	return true
}

// Stats returns a snapshot of the counters.
func (c *Cache) Stats() Stats {
	st := Stats{
		Dir: c.dir, Hits: c.hits.Load(), Misses: c.misses.Load(), Corrupt: c.corrupt.Load(),
		Writes: c.writes.Load(), WriteErrors: c.writeErrs.Load(), BytesRead: c.bytesRead.Load(),
		BytesWritten: c.bytesWritten.Load(), Evicted: c.evicted.Load(), Entries: c.entries.Load(),
		Bytes: c.size.Load(), Cap: c.cap,
		KeptWritten: c.keptWrites.Load(), KeptVerified: c.keptVerified.Load(), KeptOpens: c.keptHits.Load(),
	}
	if c.remote != nil {
		st.Remote = c.remote.String()
		st.RemoteHits, st.RemoteErrors, st.RemoteCorrupt = c.remoteHits.Load(), c.remoteErrs.Load(), c.remoteBad.Load()
	}
	return st
}
