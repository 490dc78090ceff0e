package vfs

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// FSType is the file system type of a dsfs mount in /proc/mounts: FUSE
// with the subtype dsfs.
const FSType = "fuse.dsfs"

// ErrMounted says the mount point is already a mount.
var ErrMounted = errors.New("already a mount point")

// ErrNotEmpty says the mount point holds files, which a mount would hide.
var ErrNotEmpty = errors.New("not empty")

// ErrBusy says another dsfs process is mounting on the mount point now.
var ErrBusy = errors.New("another dsfs is mounting on it now")

// MountPoint is a directory claimed for one mount. The claim is an
// exclusive flock on the directory, taken before the mount-point check and
// held until the mount is up, so two dsfs processes started together on
// one directory cannot both pass the check: the second fails at once, or
// finds the first one's mount when it gets the lock.
type MountPoint struct {
	// Dir is the absolute path of the mount point.
	Dir  string
	lock *os.File
}

// ClaimMountPoint checks that dir can be mounted on (an existing directory
// that is not a mount point and, unless nonEmpty, holds nothing) and claims
// it until Release. A dead dsfs mount at dir (its server exited: "transport
// endpoint is not connected") is detached first and logged; a dead mount of
// another file system is an error saying how to clear it.
func ClaimMountPoint(dir string, nonEmpty bool, log *slog.Logger) (*MountPoint, error) {
	if dir == "" {
		return nil, errors.New("mount point: empty path")
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if err := clearDeadMount(dir, log); err != nil {
		return nil, err
	}
	if fi, err := os.Stat(dir); err != nil {
		if pe := (*fs.PathError)(nil); errors.As(err, &pe) {
			err = pe.Err // "stat DIR: " would say dir twice
		}
		return nil, fmt.Errorf("mount point %s: %w", dir, err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("mount point %s: not a directory", dir)
	}
	p := &MountPoint{Dir: dir}
	// A user who may mount on dir but not read it cannot take the lock;
	// the check below still runs.
	if f, err := os.Open(dir); err == nil {
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				return nil, fmt.Errorf("mount point %s: %w", dir, ErrBusy)
			}
			return nil, fmt.Errorf("mount point %s: locking: %w", dir, err)
		}
		p.lock = f
	}
	if mounted, err := IsMountPoint(dir); err != nil {
		p.Release()
		return nil, err
	} else if mounted {
		p.Release()
		return nil, fmt.Errorf("mount point %s: %w (unmount it first: dsfs umount %s)", dir, ErrMounted, dir)
	}
	if !nonEmpty && p.lock != nil {
		// The mount would hide what dir holds until unmounted, as libfuse
		// refuses without -o nonempty.
		names, err := p.lock.Readdirnames(1)
		if err != nil && err != io.EOF {
			p.Release()
			return nil, fmt.Errorf("mount point %s: %w", dir, err)
		}
		if len(names) > 0 {
			p.Release()
			return nil, fmt.Errorf("mount point %s: %w (it holds %s, which the mount would hide): choose an empty directory, or pass --nonempty (-o nonempty) to mount over it", dir, ErrNotEmpty, names[0])
		}
	}
	return p, nil
}

// Release gives up the claim; the mount, if made, stays.
func (p *MountPoint) Release() {
	if p.lock != nil {
		p.lock.Close()
		p.lock = nil
	}
}

// clearDeadMount detaches a dsfs mount at dir whose server has exited.
func clearDeadMount(dir string, log *slog.Logger) error {
	// A stat may be answered from the kernel's cached attributes; opening
	// the directory always reaches the server.
	f, err := os.Open(dir)
	if err == nil {
		f.Close()
	}
	if !errors.Is(err, syscall.ENOTCONN) {
		return nil
	}
	e, ok, lerr := mountAt(dir)
	if lerr != nil {
		return lerr
	}
	if !ok || e.fsType != FSType {
		typ := "a FUSE file system"
		if ok {
			typ = e.fsType
		}
		return fmt.Errorf("mount point %s: transport endpoint is not connected: a dead %s mount whose server exited; clear it with fusermount3 -u -z %s (as root: umount -l %s)", dir, typ, dir, dir)
	}
	if err := detach(dir); err != nil {
		return fmt.Errorf("mount point %s: clearing the dead dsfs mount there: %w", dir, err)
	}
	log.Warn("cleared a dead dsfs mount (its server had exited)", "mount", dir, "source", e.source)
	return nil
}

// mountEntry is one line of /proc/self/mountinfo.
type mountEntry struct {
	dir, fsType, source string
	dev                 string // MAJOR:MINOR
}

// mounts reads /proc/self/mountinfo.
func mounts() ([]mountEntry, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var es []mountEntry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - TYPE SOURCE SUPEROPTIONS
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		e := mountEntry{dir: unescapeMountinfo(fields[4]), dev: fields[2]}
		for i := 5; i+2 < len(fields); i++ {
			if fields[i] == "-" {
				e.fsType, e.source = fields[i+1], unescapeMountinfo(fields[i+2])
				break
			}
		}
		es = append(es, e)
	}
	return es, sc.Err()
}

// mountAt returns the topmost mount at dir (later lines stack on earlier
// ones).
func mountAt(dir string) (mountEntry, bool, error) {
	es, err := mounts()
	if err != nil {
		return mountEntry{}, false, err
	}
	for i := len(es) - 1; i >= 0; i-- {
		if es[i].dir == dir {
			return es[i], true, nil
		}
	}
	return mountEntry{}, false, nil
}

// mountedAt returns dir made absolute and the topmost mount at it; it is
// an error when dir is not a mount point.
func mountedAt(dir string) (string, mountEntry, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", mountEntry{}, err
	}
	e, ok, err := mountAt(dir)
	if err != nil {
		return "", mountEntry{}, err
	} else if !ok {
		return "", mountEntry{}, fmt.Errorf("%s: not a mount point", dir)
	}
	return dir, e, nil
}

// MountOf returns the mount point of the dsfs mount path lies in (path
// itself or a directory above it), from /proc/self/mountinfo, or an error
// naming the file system path lies in instead.
func MountOf(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	es, err := mounts()
	if err != nil {
		return "", err
	}
	for d := abs; ; d = filepath.Dir(d) {
		// Later lines stack on earlier ones: the last at d is on top.
		for i := len(es) - 1; i >= 0; i-- {
			if es[i].dir != d {
				continue
			}
			if es[i].fsType != FSType {
				return "", fmt.Errorf("%s is not in a dsfs mount (it is in the %s mount at %s)", path, es[i].fsType, d)
			}
			return d, nil
		}
		if d == filepath.Dir(d) {
			return "", fmt.Errorf("%s is not in a dsfs mount", path)
		}
	}
}

// IsMountPoint reports whether dir is the mount point of a mount, from
// /proc/self/mountinfo.
func IsMountPoint(dir string) (bool, error) {
	_, ok, err := mountAt(dir)
	return ok, err
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
// as root, else through fusermount3. It refuses a directory that is not a
// dsfs mount. A lazy unmount detaches the mount at once even while files
// are open; its server exits when the last of them is closed.
func Unmount(dir string, lazy bool) error {
	dir, e, err := mountedAt(dir)
	if err != nil {
		return err
	}
	if e.fsType != FSType {
		return fmt.Errorf("%s: not a dsfs mount (it is %s from %s); use umount(8) for it", dir, e.fsType, e.source)
	}
	if lazy {
		return detach(dir)
	}
	if os.Geteuid() == 0 {
		if err := unix.Unmount(dir, 0); err != nil {
			if errors.Is(err, unix.EBUSY) {
				return fmt.Errorf("unmounting %s: files are open on it (close them, or unmount lazily: dsfs umount --lazy %s)", dir, dir)
			}
			return fmt.Errorf("unmounting %s: %w", dir, err)
		}
		return nil
	}
	return fusermount(dir, "-u")
}

// detach unmounts dir lazily (umount2 MNT_DETACH as root, fusermount3 -u
// -z otherwise): the mount leaves the tree now, and the kernel keeps the
// connection until the last open file on it is closed.
func detach(dir string) error {
	if os.Geteuid() == 0 {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("unmounting %s: %w", dir, err)
		}
		return nil
	}
	return fusermount(dir, "-u", "-z")
}

// fusermount runs fusermount3 (or fusermount) with args and dir.
func fusermount(dir string, args ...string) error {
	for _, prog := range []string{"fusermount3", "fusermount"} {
		if p, err := exec.LookPath(prog); err == nil {
			if out, err := exec.Command(p, append(args, dir)...).CombinedOutput(); err != nil {
				return fmt.Errorf("%s %s %s: %v: %s", prog, strings.Join(args, " "), dir, err, strings.TrimSpace(string(out)))
			}
			return nil
		}
	}
	return fmt.Errorf("unmounting %s: not root and no fusermount3 found (apt-get install fuse3)", dir)
}

// fuseDevice is the FUSE device every mount opens (a variable so that a
// test can point it at a missing one).
var fuseDevice = "/dev/fuse"

// CheckDevice reports an error saying what to do when there is no FUSE
// device, so that a mount can fail before it does anything else.
func CheckDevice() error {
	if _, err := os.Stat(fuseDevice); err != nil {
		return errors.New(noFuseDevice())
	}
	return nil
}

// noFuseDevice says what to do when there is no FUSE device.
func noFuseDevice() string {
	return fmt.Sprintf("there is no %s: load the fuse kernel module (modprobe fuse) and install fuse3; in a container, start it with --device /dev/fuse --cap-add SYS_ADMIN", fuseDevice)
}

// mountFailure says in words why the mount of dir failed (failed: what
// go-fuse said, as root often only "fusermount exited with code 256"),
// checking the usual causes in the order the kernel and fusermount3 meet
// them.
func mountFailure(dir string, allowOther bool, failed string) string {
	uid := os.Geteuid()
	if _, err := os.Stat(fuseDevice); err != nil {
		return noFuseDevice()
	}
	if unix.Access(fuseDevice, unix.R_OK|unix.W_OK) != nil {
		if uid == 0 {
			return fmt.Sprintf("%s cannot be opened (%s); in a container, start it with --device /dev/fuse", fuseDevice, failed)
		}
		return fmt.Sprintf("user %d may not open %s (its mode or group shut this user out)", uid, fuseDevice)
	}
	if uid == 0 {
		return fmt.Sprintf("the kernel refused the mount and so did fusermount3 (%s); in a container, start it with --device /dev/fuse --cap-add SYS_ADMIN (or --privileged)", failed)
	}
	if allowOther && !fuseConfAllows("user_allow_other") {
		return "allow_other (--allow-other) needs a line user_allow_other in /etc/fuse.conf"
	}
	var st unix.Stat_t
	if unix.Stat(dir, &st) == nil {
		if unix.Access(dir, unix.W_OK) != nil {
			return fmt.Sprintf("user %d has no write access to the mount point %s (fusermount3 requires it; mount on a directory you own)", uid, dir)
		}
		if st.Mode&unix.S_ISVTX != 0 && int(st.Uid) != uid {
			return fmt.Sprintf("the mount point %s is in a sticky directory and not owned by user %d", dir, uid)
		}
	}
	return fmt.Sprintf("fusermount3 refused the mount (%s; its own message is above)", failed)
}

// fuseConfAllows reports whether /etc/fuse.conf has the line opt.
func fuseConfAllows(opt string) bool {
	b, err := os.ReadFile("/etc/fuse.conf")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.TrimSpace(line) == opt {
			return true
		}
	}
	return false
}
