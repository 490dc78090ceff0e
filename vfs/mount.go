package vfs

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dsfs/dsfs/vfile"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/hanwen/go-fuse/v2/splice"
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
	// NoPassthrough keeps the kernel from reading source files directly
	// (FUSE passthrough, which needs root and Linux 6.9 or later): every
	// read of them comes to dsfs.
	NoPassthrough bool
	// NoSplice has source bytes read into memory and copied to the kernel
	// instead of spliced from the source file.
	NoSplice bool
	// NonEmpty lets Serve claim a mount point that holds files (hidden
	// while mounted), as -o nonempty does for libfuse.
	NonEmpty bool
	// Kept, when set, keeps view files (any file not served from one
	// source file) whole in local files, which the kernel then reads in
	// dsfs's place (FUSE passthrough, as for source files; not with
	// NoPassthrough).
	Kept KeptFiles
}

// KeptFiles keeps view files whole in local files (the disk cache's kept
// files). A file is offered for keeping once an open of it has served as
// many bytes as it holds; an open of it finds the local file once kept.
type KeptFiles interface {
	// Open returns a local file holding f's bytes, checked, or nil when
	// there is none (yet).
	Open(f *vfile.File) *os.File
	// ReadWhole says an open of f has served as many bytes as f holds.
	ReadWhole(f *vfile.File)
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
	// passthroughOff says why the kernel does not read source files
	// directly; "" when it does.
	passthroughOff string
	// splice is set when replies carry source bytes by splice.
	splice bool
	// kept holds view files whole for passthrough; nil: none.
	kept KeptFiles
	// keptProbe says whether the kernel takes kept files as passthrough
	// backing files: keptUnknown until the first is tried.
	keptProbe   atomic.Int32
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
		sourceBytes: opt.SourceBytes, served: make(chan struct{}), callers: newCallers(),
		splice: !opt.NoSplice && splice.Resizable(), kept: opt.Kept}
	switch {
	case opt.NoPassthrough:
		m.passthroughOff = "turned off (--passthrough=false)"
	case os.Geteuid() != 0:
		m.passthroughOff = "not root: FUSE passthrough needs CAP_SYS_ADMIN"
	default:
		m.passthrough = true
	}
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
	if m.passthrough {
		if why := m.probePassthrough(top); why != "" {
			m.passthrough, m.passthroughOff = false, why
		}
	}
	if m.passthroughOff != "" && firstSource(top) != nil {
		m.log.Info("source files are read through dsfs, not passed through to the kernel", "reason", m.passthroughOff)
	}
	if m.passthroughOff != "" && m.kept != nil {
		m.log.Warn("view files are not kept (--cache-files): the kernel cannot read them in dsfs's place", "reason", m.passthroughOff)
	}
	if err := RaiseReadAhead(dir); err != nil {
		m.log.Info("kernel read-ahead stays at its default, so reads come as 128 KiB requests", "err", err)
	}
	return m, nil
}

// probePassthrough asks the kernel to take a descriptor of the first source
// file in the tree as a passthrough backing file, and gives it back: it
// returns why passthrough cannot be used, or "" when it can (or when there
// is no source file to try). go-fuse would turn passthrough off for the
// mount at the first refusal without saying so.
func (m *Mount) probePassthrough(top *vfile.Node) string {
	if m.server.KernelSettings().Flags64()&fuse.CAP_PASSTHROUGH == 0 {
		return "the kernel does not offer FUSE passthrough (Linux 6.9 or later)"
	}
	f := firstSource(top)
	if f == nil {
		return ""
	}
	fd, err := f.Origin.Reopen()
	if err != nil {
		return "" // a changed source fails its own open, with its own line
	}
	defer syscall.Close(fd)
	id, errno := m.server.RegisterBackingFd(&fuse.BackingMap{Fd: int32(fd)})
	if errno != 0 {
		return fmt.Sprintf("the kernel refused %s as a passthrough backing file: %v", f.Source, errno)
	}
	m.server.UnregisterBackingFd(id)
	return ""
}

// States of Mount.keptProbe.
const (
	keptUnknown = iota
	keptAccepted
	keptRefused
)

// keptFile returns the kept copy of f when there is one the kernel takes
// as a passthrough backing file. The first is tried before it is handed to
// go-fuse, which would turn passthrough off for the whole mount, source
// files too, at the first refusal (a cache directory on a file system the
// kernel cannot stack on); after a refusal kept files are not used.
func (m *Mount) keptFile(f *vfile.File) *os.File {
	if m.keptProbe.Load() == keptRefused {
		return nil
	}
	kf := m.kept.Open(f)
	if kf == nil {
		return nil
	}
	if m.keptProbe.Load() == keptUnknown {
		id, errno := m.server.RegisterBackingFd(&fuse.BackingMap{Fd: int32(kf.Fd())})
		if errno != 0 {
			if m.keptProbe.Swap(keptRefused) != keptRefused {
				m.log.Warn("the kernel refused a kept file as a passthrough backing file; view files are read through dsfs", "file", kf.Name(), "err", errno)
			}
			kf.Close()
			return nil
		}
		m.server.UnregisterBackingFd(id)
		m.keptProbe.Store(keptAccepted)
	}
	return kf
}

// firstSource is the first file of the tree served unchanged from a source
// file, or nil.
func firstSource(n *vfile.Node) *vfile.File {
	if n.File != nil && n.File.Origin != nil {
		return n.File
	}
	for _, c := range n.Children {
		if f := firstSource(c); f != nil {
			return f
		}
	}
	return nil
}

// MountOptions are the FUSE options of a dsfs mount: read-only, requests
// of MaxRequest bytes, 64 background requests, direct mount(2) as root
// (fusermount3 otherwise), and direct I/O files that can still be mmap'd.
// Splicing stays on: dsfs's replies of source bytes are pipes (reply.go),
// and every other reply is a vector, which go-fuse never tries to splice.
func MountOptions(allowOther, debug bool) fuse.MountOptions {
	return fuse.MountOptions{
		FsName:            "dsfs",
		Name:              "dsfs",
		Options:           []string{"ro", "default_permissions"},
		AllowOther:        allowOther,
		MaxBackground:     64,
		MaxWrite:          MaxRequest(),
		DirectMount:       os.Geteuid() == 0,
		DisableXAttrs:     true,
		ExtraCapabilities: fuse.CAP_DIRECT_IO_ALLOW_MMAP,
		Debug:             debug,
	}
}

// ReadAheadKB is the read-ahead dsfs sets on its mounts, in KiB: the
// kernel's read-ahead of a file read sequentially goes out as FUSE
// requests of at most MaxRequest bytes, readAheadRequests of them at once,
// so that dsfs answers one while the kernel copies another.
func ReadAheadKB() int { return readAheadRequests * MaxRequest() >> 10 }

// readAheadRequests is how many requests of read-ahead the kernel keeps in
// flight for a sequential reader.
const readAheadRequests = 4

// RaiseReadAhead sets the read-ahead of the mount at dir to ReadAheadKB:
// go-fuse can only lower the read-ahead the kernel offers (128 KiB), so
// the mount's bdi setting is raised after mounting, which needs root. The
// device comes from /proc/self/mountinfo, not from a stat of dir: a
// process that asks its own mount could not be killed while the request
// is in flight.
func RaiseReadAhead(dir string) error {
	_, e, err := mountedAt(dir)
	if err != nil {
		return err
	}
	return os.WriteFile("/sys/class/bdi/"+e.dev+"/read_ahead_kb", []byte(strconv.Itoa(ReadAheadKB())), 0)
}

// Wait serves requests until the file system is unmounted. It then closes
// the pipes go-fuse's pool keeps for spliced replies that no reply holds,
// so that an unmounted file system leaves no descriptor behind.
func (m *Mount) Wait() {
	m.server.Wait()
	closeFreePipes()
}

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
			"reads_spliced":  m.ctr.splicedReplies.Load(),
			"reads_copied":   m.ctr.copiedReplies.Load(),
		}
		if m.passthroughOff != "" {
			doc["passthrough_off"] = m.passthroughOff
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
