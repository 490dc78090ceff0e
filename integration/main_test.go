// Package integration mounts synthesized checkpoints for real (FUSE, as
// root) and reads them with separate processes: cmp, sha256sum, a child
// that mmaps a view shard.
package integration

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dsfs/dsfs/internal/tinyckpt"
	"github.com/edsrzf/mmap-go"
)

var (
	// dsfsBin is the dsfs binary built for the tests.
	dsfsBin string
	// tinySrc is a v41-tiny checkpoint shared by the read-only tests.
	tinySrc string
	// skip says why the tests cannot mount here.
	skip string
)

func TestMain(m *testing.M) {
	if path := os.Getenv("DSFS_MMAP_SHA256"); path != "" {
		os.Exit(mmapSHA256(path))
	}
	if os.Geteuid() != 0 {
		skip = "integration tests mount with mount(2) and need root"
	} else if _, err := os.Stat("/dev/fuse"); err != nil {
		skip = "no /dev/fuse"
	}
	if skip != "" {
		os.Exit(m.Run())
	}
	tinyckpt.MainWithDsfs(m, "v41-tiny", "../cmd/dsfs", &dsfsBin, &tinySrc)
}

// mmapSHA256 is the child process of TestMmapFromAnotherProcess: it maps a
// file and prints the SHA-256 of the mapped bytes.
func mmapSHA256(path string) int {
	f, err := os.Open(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer f.Close()
	m, err := mmap.Map(f, mmap.RDONLY, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer m.Unmap()
	sum := sha256.Sum256(m)
	fmt.Println(hex.EncodeToString(sum[:]))
	return 0
}

func needMount(t testing.TB) {
	t.Helper()
	if skip != "" {
		t.Skip(skip)
	}
}

// mount is a running `dsfs mount` process.
type mount struct {
	*proc
	dir string
}

// proc is a dsfs process started by a test, its output in a file.
type proc struct {
	cmd    *exec.Cmd
	log    *logFile
	done   chan struct{}
	exited error
}

func startProc(t testing.TB, cmd *exec.Cmd) *proc {
	t.Helper()
	p := &proc{cmd: cmd, log: newLogFile(t), done: make(chan struct{})}
	if cmd.Stdout == nil {
		cmd.Stdout, cmd.Stderr = p.log.f, p.log.f
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// waitReady waits until dir/.dsfs/stats.json can be read, or the process
// exits.
func (p *proc) waitReady(t testing.TB, dir string) {
	t.Helper()
	p.waitReadyAs(t, dir, nil)
}

// waitReadyAs is waitReady for a mount that only another user may look
// into: as is the command prefix that runs as that user (from nobody),
// nil for this process's user.
func (p *proc) waitReadyAs(t testing.TB, dir string, as []string) {
	t.Helper()
	stats := filepath.Join(dir, ".dsfs", "stats.json")
	ready := func() bool {
		if as == nil {
			_, err := os.Stat(stats)
			return err == nil
		}
		return exec.Command(as[0], append(as[1:], "test", "-e", stats)...).Run() == nil
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if ready() {
			return
		}
		select {
		case <-p.done:
			t.Fatalf("dsfs exited before the mount was ready: %v\n%s", p.exited, p.log)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("mount not ready after 30 s\n%s", p.log)
		}
	}
}

// waitExit waits up to d for the process to exit.
func (p *proc) waitExit(t *testing.T, d time.Duration, what string) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(d):
		t.Fatalf("dsfs did not exit within %v %s\n%s", d, what, p.log)
	}
}

// logFile is a child's stdout and stderr in a file: the child writes it
// directly, so whatever it logged before answering a request is there when
// the answer arrives (a pipe would be copied by a goroutine, later).
type logFile struct{ f *os.File }

func newLogFile(t testing.TB) *logFile {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return &logFile{f}
}

func (l *logFile) String() string {
	b, _ := os.ReadFile(l.f.Name())
	return string(b)
}

// linesWith returns the lines of the log that contain s.
func (l *logFile) linesWith(s string) []string {
	var lines []string
	for _, line := range strings.Split(l.String(), "\n") {
		if strings.Contains(line, s) {
			lines = append(lines, line)
		}
	}
	return lines
}

// startMount mounts src with `dsfs mount` and waits until .dsfs/stats.json
// can be read and dsfs has logged that it mounted; the mount is undone
// when the test ends.
func startMount(t testing.TB, src string, args ...string) *mount {
	t.Helper()
	needMount(t)
	m := &mount{dir: t.TempDir()}
	m.proc = startProc(t, exec.Command(dsfsBin, append(append([]string{"mount"}, args...), src, m.dir)...))
	t.Cleanup(func() { m.stop(t) })
	m.waitReady(t, m.dir)
	// The mount answers before dsfs logs what the views cannot serve and
	// then "mounted": wait for that line, so a test sees the whole log.
	for deadline := time.Now().Add(30 * time.Second); len(m.log.linesWith("msg=mounted")) == 0; {
		if time.Now().After(deadline) {
			t.Fatalf("no \"mounted\" line 30 s after the mount answered\n%s", m.log)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return m
}

// stop unmounts with SIGTERM, as a service manager would, and checks that
// the process exits cleanly.
func (m *mount) stop(t testing.TB) {
	select {
	case <-m.done:
		return
	default:
	}
	m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.done:
		if m.exited != nil {
			t.Errorf("dsfs mount exited with %v after SIGTERM\n%s", m.exited, m.log)
		}
	case <-time.After(30 * time.Second):
		m.cmd.Process.Kill()
		syscall.Unmount(m.dir, syscall.MNT_DETACH)
		t.Errorf("dsfs mount did not exit after SIGTERM\n%s", m.log)
	}
}

func (m *mount) path(parts ...string) string {
	return filepath.Join(append([]string{m.dir}, parts...)...)
}

// run runs a command and returns its combined output, failing the test on
// a non-zero exit.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// export writes a view with `dsfs export` and returns its directory.
func export(t *testing.T, view, src string) string {
	t.Helper()
	out := t.TempDir()
	run(t, dsfsBin, "export", view, src, out)
	return out
}

// files lists the regular files below dir, relative.
func files(t *testing.T, dir string) []string {
	t.Helper()
	var names []string
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			rel, _ := filepath.Rel(dir, p)
			names = append(names, rel)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return names
}
