package views

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/dsfs/dsfs/diskcache"
	"github.com/dsfs/dsfs/sourcefile"
	"github.com/dsfs/dsfs/vfile"
)

// KeptFiles keeps the files of a set's views whole in a disk
// cache's directory (diskcache's kept files), so that a mount can let the
// kernel read them there instead of asking dsfs (vfs.KeptFiles): a file
// read once reads at the disk's speed from then on, in this mount and the
// next ones.
//
// A file is kept once an open has read as many bytes as it holds: it is
// then read again through the block cache (what was evicted since is
// computed again) and written out, in the background, one file at a time.
// A file found kept by an earlier process is handed out only once checked
// against its record: every such file is checked in the background from
// the start, in path order (an open before its turn is served by dsfs). A
// kept file is named by the view's Identity, its path and its size, so a
// changed source, another setting or another dsfs never finds a file kept
// for the old ones.
type KeptFiles struct {
	disk  *diskcache.Cache
	cache vfile.Cache
	log   *slog.Logger
	files map[*vfile.File]keptFile
	// shards are the source shards the files' identity stamped.
	shards []*sourcefile.File

	jobs    chan *keptJob
	mu      sync.Mutex
	pending map[diskcache.Key]*keptJob // queued or running
	ran     *sync.Cond                 // broadcast as each job ends
	life    context.Context
	stop    context.CancelFunc
	done    chan struct{}
	failed  atomic.Int64
	warn    sync.Once
}

// keptFile is a file that may be kept: its key and its path in the mount.
type keptFile struct {
	key  diskcache.Key
	path string
}

type keptJob struct {
	f      *vfile.File
	verify bool // check a file found kept, rather than write it
	// rewrite writes the file when the check finds it wanting: it was
	// read whole, so it is worth keeping. Set under KeptFiles.mu, as a
	// whole read may ask it of a job already queued or running.
	rewrite bool
	// failed says the check found the file wanting and the job did not
	// write it (the worker's alone).
	failed bool
}

// keptQueue bounds the files waiting to be kept or checked; more are
// dropped, and offered again by their next whole read or open.
const keptQueue = 256

// KeepFiles returns the keeper of the set's view files in disk, which
// must have a local directory: any file of a view may be kept but a
// source file, one of literal bytes and one with an unreadable run.
// program names the running dsfs (its version) for Identity. Close stops
// it.
func (s *Set) KeepFiles(program string, disk *diskcache.Cache, cache vfile.Cache, log *slog.Logger) (*KeptFiles, error) {
	if disk == nil || disk.Dir() == "" {
		return nil, errors.New("keeping files needs a local cache directory")
	}
	if log == nil {
		log = slog.Default()
	}
	k := &KeptFiles{disk: disk, cache: cache, log: log, files: make(map[*vfile.File]keptFile),
		jobs: make(chan *keptJob, keptQueue), pending: make(map[diskcache.Key]*keptJob), done: make(chan struct{})}
	k.ran = sync.NewCond(&k.mu)
	for _, sh := range s.Cat.Shards {
		k.shards = append(k.shards, sh.File())
	}
	var identity func(view string) string // the views' Identity, read once
	for _, view := range s.Root.Children {
		if !view.IsDir() {
			continue
		}
		var id string
		var err error
		walkFiles(view, view.Name, func(path string, f *vfile.File) {
			if err != nil || !keepable(f) {
				return
			}
			if id == "" {
				if identity == nil {
					if identity, err = identities(program, s.Opt, s.Cat); err != nil {
						return
					}
				}
				id = identity(view.Name)
			}
			h := sha256.New()
			fmt.Fprintf(h, "dsfs kept file\n%s\n%s\n%d\n", id, path, f.Size())
			k.files[f] = keptFile{key: diskcache.Key(h.Sum(nil)), path: path}
		})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", view.Name, err)
		}
	}
	k.life, k.stop = context.WithCancel(context.Background())
	go k.work()
	k.checkFound()
	return k, nil
}

// checkFound queues a check of every file found kept by an earlier
// process, in path order, so that loads after a remount find them ready;
// it opens each kept file, no more.
func (k *KeptFiles) checkFound() {
	files := slices.SortedFunc(maps.Keys(k.files), func(a, b *vfile.File) int {
		return strings.Compare(k.files[a].path, k.files[b].path)
	})
	for _, f := range files {
		if k.life.Err() != nil {
			return
		}
		if checked, found := k.disk.HasKeptFile(k.files[f].key, f.Size()); found && !checked {
			k.queue(keptJob{f: f, verify: true})
		}
	}
}

// walkFiles calls fn with every file under n and its path, n's being
// path.
func walkFiles(n *vfile.Node, path string, fn func(string, *vfile.File)) {
	if n.File != nil {
		fn(path, n.File)
	}
	for _, c := range n.Children {
		walkFiles(c, path+"/"+c.Name, fn)
	}
}

// keepable reports whether f is worth keeping: a file of a view, not a
// source file (the kernel reads those in place already) nor one held in
// memory whole (literal bytes: configs, indexes), and with nothing
// unreadable.
func keepable(f *vfile.File) bool {
	if f.Origin != nil {
		return false
	}
	literal := true
	for _, s := range f.Segments() {
		switch s.(type) {
		case vfile.Bytes:
		case vfile.Unreadable:
			return false
		default:
			literal = false
		}
	}
	return !literal
}

// Open implements vfs.KeptFiles: the checked kept copy of f, or nil; a
// copy found but not checked yet is checked in the background. No copy is
// handed out once a source shard has changed since the mount opened it:
// the open is then served by dsfs, whose reads fail naming the shard, as
// every read of a changed source does, rather than the copy serving the
// checkpoint as it was.
func (k *KeptFiles) Open(f *vfile.File) *os.File {
	kf, ok := k.files[f]
	if !ok {
		return nil
	}
	for _, sh := range k.shards {
		if sh.Check() != nil {
			return nil
		}
	}
	file, found := k.disk.KeptFile(kf.key, f.Size())
	if file == nil && found {
		k.queue(keptJob{f: f, verify: true})
	}
	return file
}

// ReadWhole implements vfs.KeptFiles: f is kept unless it is already.
func (k *KeptFiles) ReadWhole(f *vfile.File) {
	kf, ok := k.files[f]
	if !ok {
		return
	}
	checked, found := k.disk.HasKeptFile(kf.key, f.Size())
	if !checked {
		k.queue(keptJob{f: f, verify: found, rewrite: true})
	}
}

// queue adds a job unless one for the same file waits or runs (which is
// then asked to rewrite the file if j is), or the queue is full.
func (k *KeptFiles) queue(j keptJob) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.queueLocked(j)
}

// queueLocked is queue with k.mu held.
func (k *KeptFiles) queueLocked(j keptJob) {
	key := k.files[j.f].key
	if p := k.pending[key]; p != nil {
		p.rewrite = p.rewrite || j.rewrite
		return
	}
	select {
	case k.jobs <- &j:
		k.pending[key] = &j
	default:
	}
}

// work runs the jobs, one at a time, until Close.
func (k *KeptFiles) work() {
	defer close(k.done)
	for {
		select {
		case <-k.life.Done():
			return
		case j := <-k.jobs:
			k.run(j)
			k.mu.Lock()
			delete(k.pending, k.files[j.f].key)
			// A whole read that asked for a rewrite after the check had
			// looked gets it now.
			if j.failed && j.rewrite {
				k.queueLocked(keptJob{f: j.f, rewrite: true})
			}
			k.ran.Broadcast()
			k.mu.Unlock()
		}
	}
}

func (k *KeptFiles) run(j *keptJob) {
	kf := k.files[j.f]
	write := !j.verify
	var err error
	if j.verify {
		// A file that fails is removed (and logged by the cache), and
		// written again if it was read whole; else its next whole read
		// keeps it again.
		err = k.disk.VerifyFile(k.life, kf.key, j.f.Size())
		var ce *diskcache.CorruptError
		if errors.As(err, &ce) || errors.Is(err, diskcache.ErrNotFound) {
			k.mu.Lock()
			write, j.failed, err = j.rewrite, !j.rewrite, nil
			k.mu.Unlock()
		}
	}
	if write {
		// Read as an open of the mount reads it, with read-ahead that
		// ends with the keeper.
		r := vfile.CacheOpener(k.cache)(k.life, j.f)
		err = k.disk.KeepFile(k.life, kf.key, j.f.Size(), readerAt{k.life, r})
	}
	if err != nil && k.life.Err() == nil {
		k.failed.Add(1)
		k.warn.Do(func() {
			k.log.Warn("cannot keep a view file; it is read through dsfs (counted in kept_files.failed)", "file", kf.path, "err", err)
		})
	}
}

// readerAt reads a vfile.Reader with a context.
type readerAt struct {
	ctx context.Context
	r   *vfile.Reader
}

func (r readerAt) ReadAt(p []byte, off int64) (int, error) { return r.r.ReadAtContext(r.ctx, p, off) }

// KeptStats are a keeper's figures for .dsfs/stats.json; the disk
// cache's (kept_files_written, kept_files_verified, kept_file_opens)
// count what was kept, checked and handed out.
type KeptStats struct {
	Files   int   `json:"files"`   // view files that may be kept
	Pending int   `json:"pending"` // waiting to be kept or checked
	Failed  int64 `json:"failed"`  // could not be kept or checked
}

// Stats returns the keeper's figures.
func (k *KeptFiles) Stats() KeptStats {
	k.mu.Lock()
	defer k.mu.Unlock()
	return KeptStats{Files: len(k.files), Pending: len(k.pending), Failed: k.failed.Load()}
}

// Close stops the keeper, ending the file it is writing or checking
// (nothing is left under a kept file's name).
func (k *KeptFiles) Close() {
	k.stop()
	<-k.done
}
