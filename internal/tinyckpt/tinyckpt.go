// Package tinyckpt gives a test binary one synthetic checkpoint, written
// before its tests run and removed after, and where the tests run dsfs as
// a separate process, the dsfs command built beside it.
package tinyckpt

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/dsfs/dsfs/sourcefile"
	"github.com/dsfs/dsfs/synth"
)

// Main writes the synth preset into a temporary directory, stores its path
// in *dir, runs the tests and exits with their status. Call it from
// TestMain; tests that change the checkpoint copy it first.
func Main(m *testing.M, preset string, dir *string) {
	d, err := os.MkdirTemp("", "dsfs-test-"+preset+"-")
	if err == nil {
		err = synth.Write(preset, d)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "writing %s: %v\n", preset, err)
		os.Exit(1)
	}
	*dir = d
	code := m.Run()
	os.RemoveAll(d)
	os.Exit(code)
}

// Fresh writes the synth preset into a directory of the test's own,
// removed after it, and returns its path: for a test that damages the
// checkpoint it reads, which the shared one of Main must not be.
func Fresh(tb testing.TB, preset string) string {
	tb.Helper()
	dir := tb.TempDir()
	if err := synth.Write(preset, dir); err != nil {
		tb.Fatalf("writing %s: %v", preset, err)
	}
	return dir
}

// MainWithDsfs is Main for tests that run the dsfs command: it also builds
// the command from pkg (a package as `go build` takes it, relative to the
// test's directory) and stores the binary's path in *bin. The binary and
// the checkpoint share one temporary directory, so a test that opens them
// to another user opens that directory's children only.
func MainWithDsfs(m *testing.M, preset, pkg string, bin, dir *string) {
	tmp, err := os.MkdirTemp("", "dsfs-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := func() int {
		defer os.RemoveAll(tmp)
		*bin = filepath.Join(tmp, "dsfs")
		if out, err := exec.Command("go", "build", "-o", *bin, pkg).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "building dsfs: %v\n%s", err, out)
			return 1
		}
		*dir = filepath.Join(tmp, preset)
		if err := synth.Write(preset, *dir); err != nil {
			fmt.Fprintf(os.Stderr, "writing %s: %v\n", preset, err)
			return 1
		}
		return m.Run()
	}()
	os.Exit(code)
}

// Settle waits until every regular file under dir is old enough that a
// stamp taken now proves its version (sourcefile.Stamp.Proven): facts
// derived from a file written less than sourcefile.RacyWindow ago are
// derived again at the next mount, by design, so a test of a cache that
// outlives a mount settles its source first. The wait is on the
// filesystem's clock, which testing/synctest cannot advance; it is at most
// the window.
func Settle(tb testing.TB, dir string) {
	tb.Helper()
	var last int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		last = max(last, sourcefile.StampOf(fi).CTimeNS)
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	time.Sleep(time.Until(time.Unix(0, last).Add(sourcefile.RacyWindow)))
}
