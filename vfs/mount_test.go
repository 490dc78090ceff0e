package vfs

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dsfs/dsfs/vfile"
)

func TestIsMountPoint(t *testing.T) {
	for _, tc := range []struct {
		dir  string
		want bool
	}{
		{"/proc", true},
		{"/proc/self", false},
		{t.TempDir(), false},
	} {
		if got, err := IsMountPoint(tc.dir); err != nil || got != tc.want {
			t.Errorf("IsMountPoint(%s) = %v, %v; want %v", tc.dir, got, err, tc.want)
		}
	}
}

func TestUnescapeMountinfo(t *testing.T) {
	for in, want := range map[string]string{`/a\040b`: "/a b", `/plain`: "/plain", `/x\0`: `/x\0`, `/t\011ab`: "/t\tab"} {
		if got := unescapeMountinfo(in); got != want {
			t.Errorf("unescapeMountinfo(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestClaimMountPoint: an empty directory is claimed; one that holds a
// file is refused in one line naming it, unless nonEmpty; a file is no
// mount point.
func TestClaimMountPoint(t *testing.T) {
	empty, full := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(full, "weights.bin"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(full, "weights.bin")
	for _, tc := range []struct {
		dir      string
		nonEmpty bool
		err      error
		want     string
	}{
		{empty, false, nil, ""},
		{full, true, nil, ""},
		{full, false, ErrNotEmpty, "it holds weights.bin, which the mount would hide): choose an empty directory, or pass --nonempty (-o nonempty)"},
		{file, true, nil, "not a directory"},
		{filepath.Join(empty, "nosuch"), false, os.ErrNotExist, "mount point " + filepath.Join(empty, "nosuch") + ": no such file or directory"},
	} {
		mp, err := ClaimMountPoint(tc.dir, tc.nonEmpty, slog.Default())
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s (nonEmpty %v): %v", tc.dir, tc.nonEmpty, err)
				continue
			}
			mp.Release()
			continue
		}
		if err == nil || tc.err != nil && !errors.Is(err, tc.err) || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s (nonEmpty %v): %v; want one line with %q", tc.dir, tc.nonEmpty, err, tc.want)
		}
	}
}

// TestNoFuseDevice: without a FUSE device, Serve says so and what to do,
// instead of passing on fusermount's exit status.
func TestNoFuseDevice(t *testing.T) {
	defer func(d string) { fuseDevice = d }(fuseDevice)
	fuseDevice = filepath.Join(t.TempDir(), "fuse")
	_, err := Serve(t.TempDir(), vfile.Dir(""), nil, Options{})
	want := "there is no " + fuseDevice + ": load the fuse kernel module (modprobe fuse) and install fuse3; in a container, start it with --device /dev/fuse"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Serve without %s: %v\nwant %q", fuseDevice, err, want)
	}
	if msg := mountFailure(t.TempDir(), false, "fusermount exited with code 256"); !strings.Contains(msg, want) {
		t.Errorf("mountFailure without the device: %q", msg)
	}
	// With the device, as root: the kernel's refusal (a container without
	// CAP_SYS_ADMIN) is what is left.
	fuseDevice = os.DevNull
	if os.Geteuid() == 0 {
		msg := mountFailure(t.TempDir(), false, "fusermount exited with code 256")
		if want := "the kernel refused the mount and so did fusermount3 (fusermount exited with code 256); in a container, start it with --device /dev/fuse --cap-add SYS_ADMIN"; !strings.HasPrefix(msg, want) {
			t.Errorf("mountFailure as root: %q, want %q", msg, want)
		}
	}
}

func TestMountOfOtherFileSystems(t *testing.T) {
	for _, p := range []string{"/proc/self", t.TempDir()} {
		if dir, err := MountOf(p); err == nil || !strings.Contains(err.Error(), p+" is not in a dsfs mount") {
			t.Errorf("MountOf(%s) = %q, %v", p, dir, err)
		}
	}
}
