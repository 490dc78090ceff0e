package vfs

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/dsfs/dsfs/vfile"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
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
}

// ErrMounted says the mount point is already a mount.
var ErrMounted = errors.New("already a mount point")

// Serve mounts root at dir, reading each open file through a Reader from
// open, and returns once the kernel has the mount. Call Wait to serve until
// unmounted.
func Serve(dir string, root *vfile.Node, open vfile.Opener, opt Options) (*Mount, error) {
	dir, err := CheckMountPoint(dir)
	if err != nil {
		return nil, err
	}
	m := &Mount{Dir: dir, open: open, log: opt.Log, start: time.Now(), status: opt.Status,
		passthrough: os.Geteuid() == 0, sourceBytes: opt.SourceBytes}
	if m.log == nil {
		m.log = slog.Default()
	}
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
	if os.Geteuid() != 0 {
		if _, err := exec.LookPath("fusermount3"); err != nil {
			return nil, fmt.Errorf("mounting %s as a normal user needs fusermount3 (apt-get install fuse3), or run as root", dir)
		}
	}
	m.server, err = fs.Mount(dir, rootNode, fsOpts)
	if err != nil {
		return nil, fmt.Errorf("mounting %s: %s", dir, strings.TrimSpace(err.Error()))
	}
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
// bdi setting is raised after mounting, which needs root.
func RaiseReadAhead(dir string) error {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return err
	}
	p := fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", unix.Major(st.Dev), unix.Minor(st.Dev))
	return os.WriteFile(p, []byte("1024"), 0)
}

// Wait serves requests until the file system is unmounted.
func (m *Mount) Wait() { m.server.Wait() }

// Unmount unmounts the file system; Wait then returns.
func (m *Mount) Unmount() error { return m.server.Unmount() }

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

// CheckMountPoint returns the absolute path of dir if it can be mounted
// on: an existing directory that is not a mount point already. Callers
// check before slow work so that a busy mount point fails at once.
func CheckMountPoint(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	if fi, err := os.Stat(dir); err != nil {
		return "", fmt.Errorf("mount point: %w", err)
	} else if !fi.IsDir() {
		return "", fmt.Errorf("mount point %s: not a directory", dir)
	}
	if mounted, err := IsMountPoint(dir); err != nil {
		return "", err
	} else if mounted {
		return "", fmt.Errorf("mount point %s: %w (unmount it first: dsfs umount %s)", dir, ErrMounted, dir)
	}
	return dir, nil
}

// IsMountPoint reports whether dir is the mount point of a mount, from
// /proc/self/mountinfo.
func IsMountPoint(dir string) (bool, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && unescapeMountinfo(fields[4]) == dir {
			return true, nil
		}
	}
	return false, sc.Err()
}

// unescapeMountinfo undoes the octal escapes (\040 for a space) of
// /proc/self/mountinfo paths.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var c int
			if _, err := fmt.Sscanf(s[i+1:i+4], "%3o", &c); err == nil {
				b.WriteByte(byte(c))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Unmount unmounts the dsfs mount at dir from another process: directly
// as root, else through fusermount3.
func Unmount(dir string) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if mounted, err := IsMountPoint(dir); err != nil {
		return err
	} else if !mounted {
		return fmt.Errorf("%s: not a mount point", dir)
	}
	if os.Geteuid() == 0 {
		if err := syscall.Unmount(dir, 0); err != nil {
			return fmt.Errorf("unmounting %s: %w", dir, err)
		}
		return nil
	}
	for _, prog := range []string{"fusermount3", "fusermount"} {
		if p, err := exec.LookPath(prog); err == nil {
			if out, err := exec.Command(p, "-u", dir).CombinedOutput(); err != nil {
				return fmt.Errorf("%s -u %s: %v: %s", prog, dir, err, strings.TrimSpace(string(out)))
			}
			return nil
		}
	}
	return fmt.Errorf("unmounting %s: not root and no fusermount3 found (apt-get install fuse3)", dir)
}
