package vfs

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/dsfs/dsfs/vfile"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// Options configure a mount.
type Options struct {
	// AllowOther lets other users read the mount (needs user_allow_other
	// in /etc/fuse.conf when not root).
	AllowOther bool
	// Status returns extra fields for .dsfs/stats.json (source, views,
	// problems); it is called on every open of that file.
	Status func() map[string]any
	Log    *slog.Logger
	// Debug logs every FUSE request.
	Debug bool
	// SourceBytes is the size of the source checkpoint, which statfs (df)
	// reports as the file system's size.
	SourceBytes int64
	// Source is the device /proc/mounts shows (the checkpoint directory);
	// empty: "dsfs".
	Source string
	// Flags are the mount flags asked for by -o (nosuid, nodev, noexec and
	// their opposites).
	Flags []string
	// MountPoint is the claimed mount point; nil: Serve claims dir itself.
	MountPoint *MountPoint
	// NonEmpty lets Serve claim a mount point that holds files (hidden
	// while mounted), as -o nonempty does for libfuse.
	NonEmpty bool
}

// Mount is a live dsfs mount.
type Mount struct {
	Dir         string
	server      *fuse.Server
	open        vfile.Opener
	log         *slog.Logger
	start       time.Time
	ctr         counters
	status      func() map[string]any
	passthrough bool
	ino         map[*vfile.Node]uint64 // every node's inode number
	sourceBytes int64
	errs        repeatLog // read errors, logged once per file and cause with a count
	// served is closed once go-fuse's start-up is over (see docNode.Getattr).
	served chan struct{}
	// callers ties each request's wait for computed bytes to its caller's
	// process and to life.
	callers *callers
	// life ends when the mount stops computing: open files' read-ahead
	// lives within it.
	life   context.Context
	cancel context.CancelFunc
}

// Serve mounts root at dir, reading each open file through a Reader from
// open, and returns once the kernel has the mount. Call Wait to serve until
// unmounted.
func Serve(dir string, root *vfile.Node, open vfile.Opener, opt Options) (*Mount, error) {
	if opt.Log == nil {
		opt.Log = slog.Default()
	}
	mp := opt.MountPoint
	if mp == nil {
		var err error
		if mp, err = ClaimMountPoint(dir, opt.NonEmpty, opt.Log); err != nil {
			return nil, err
		}
	}
	defer mp.Release()
	dir = mp.Dir
	m := &Mount{Dir: dir, open: open, log: opt.Log, start: time.Now(), status: opt.Status,
		passthrough: os.Geteuid() == 0, sourceBytes: opt.SourceBytes, served: make(chan struct{}), callers: newCallers()}
	m.life, m.cancel = context.WithCancel(context.Background())
	top := vfile.Dir("", append(append([]*vfile.Node(nil), root.Children...), m.statusDir(root.Attr))...)
	top.Attr = root.Attr
	m.ino = inodes(top)
	rootNode := &dirNode{m: m, n: top}
	entry := immutable
	neg := time.Second
	fsOpts := &fs.Options{
		EntryTimeout:    &entry,
		NegativeTimeout: &neg,
		// AttrTimeout stays nil: each node sets its own, so documents can
		// show their size once computed.
		MountOptions: MountOptions(opt.AllowOther, opt.Debug),
		// Modes are the sources' (a 0000 one included), for the kernel's
		// default_permissions checks.
		NullPermissions: true,
		RootStableAttr:  &fs.StableAttr{Ino: rootIno},
	}
	if opt.Source != "" {
		fsOpts.MountOptions.FsName = opt.Source
	}
	fsOpts.MountOptions.Options = append(fsOpts.MountOptions.Options, opt.Flags...)
	if err := CheckDevice(); err != nil {
		return nil, fmt.Errorf("mounting %s: %w", dir, err)
	}
	if os.Geteuid() != 0 {
		if _, err := exec.LookPath("fusermount3"); err != nil {
			return nil, fmt.Errorf("mounting %s as a normal user needs fusermount3 (apt-get install fuse3), or run as root", dir)
		}
	}
	var err error
	m.server, err = fs.Mount(dir, rootNode, fsOpts)
	if err != nil {
		// As root go-fuse tries mount(2), then fusermount3, and returns
		// only the latter's exit status: say what to do instead.
		return nil, fmt.Errorf("mounting %s: %s", dir, mountFailure(dir, opt.AllowOther, strings.TrimSpace(err.Error())))
	}
	close(m.served)
	if err := RaiseReadAhead(dir); err != nil {
		m.log.Info("kernel read-ahead stays at its default, so reads come as 128 KiB requests", "err", err)
	}
	return m, nil
}

// MountOptions are the FUSE options of a dsfs mount: read-only, 1 MiB
// requests, 64 background requests, direct mount(2) as root (fusermount3
// otherwise), and direct I/O files that can still be mmap'd.
func MountOptions(allowOther, debug bool) fuse.MountOptions {
	return fuse.MountOptions{
		FsName:        "dsfs",
		Name:          "dsfs",
		Options:       []string{"ro", "default_permissions"},
		AllowOther:    allowOther,
		MaxBackground: 64,
		MaxWrite:      1 << 20,
		DirectMount:   os.Geteuid() == 0,
		DisableXAttrs: true,
		// Splice cannot carry a 1 MiB read plus its header through a
		// default-sized pipe; go-fuse would try and log it on every read.
		DisableSplice:     true,
		ExtraCapabilities: fuse.CAP_DIRECT_IO_ALLOW_MMAP,
		Debug:             debug,
	}
}

// RaiseReadAhead lets the kernel send 1 MiB reads to the mount at dir:
// go-fuse can only lower the read-ahead the kernel offers, so the mount's
// bdi setting is raised after mounting, which needs root. The device comes
// from /proc/self/mountinfo, not from a stat of dir: a process that asks
// its own mount could not be killed while the request is in flight.
func RaiseReadAhead(dir string) error {
	_, e, err := mountedAt(dir)
	if err != nil {
		return err
	}
	return os.WriteFile("/sys/class/bdi/"+e.dev+"/read_ahead_kb", []byte("1024"), 0)
}

// Wait serves requests until the file system is unmounted.
func (m *Mount) Wait() { m.server.Wait() }

// Unmount unmounts the file system; Wait then returns.
func (m *Mount) Unmount() error { return m.server.Unmount() }

// Detach unmounts the file system lazily, as libfuse does on a signal: the
// mount leaves the tree at once, files still open on it keep being served,
// and Wait returns when the last of them is closed.
func (m *Mount) Detach() error { return detach(m.Dir) }

// Cancel stops computing, now and for good: every computation a reader
// waits for (a trace forward, a quantised block, a document) is given up,
// and so is read-ahead; a read that needs bytes not computed yet fails
// with EINTR, as does the open of a document not generated yet. Bytes of
// the source and bytes already computed are still served. A signal calls
// it with Detach, so that no computation keeps the process alive after
// its readers, however long it would run.
func (m *Mount) Cancel() {
	m.callers.stop()
	m.cancel()
}

// statusDir is .dsfs/: the live status of the mount, readable by whoever
// may list the checkpoint directory, whose attributes are dir.
func (m *Mount) statusDir(dir vfile.Attr) *vfile.Node {
	stats := vfile.NewDynamicDoc(func(ctx context.Context) ([]byte, error) {
		doc := map[string]any{
			"uptime_seconds": time.Since(m.start).Seconds(),
			"reads":          m.ctr.reads.Load(),
			"bytes_served":   m.ctr.bytes.Load(),
			"read_errors":    m.ctr.errors.Load(),
			"opens":          m.ctr.opens.Load(),
			"passthrough":    m.ctr.passthrough.Load(),
			"largest_read":   m.ctr.largestRead.Load(),
		}
		if m.status != nil {
			for k, v := range m.status() {
				doc[k] = v
			}
		}
		return vfile.JSON(doc)
	})
	file := dir
	file.Perm &^= 0o111
	status := vfile.Dir(".dsfs", &vfile.Node{Name: "stats.json", Doc: stats, Attr: file})
	status.Attr = dir
	return status
}
