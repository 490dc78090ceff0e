package integration

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/dsfs/dsfs/synth"
)

// mountEntry is the topmost line of /proc/self/mountinfo at a directory.
type mountEntry struct {
	fsType, source, options string
	count                   int // mounts stacked at the directory
}

func mountAt(t *testing.T, dir string) mountEntry {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var e mountEntry
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 || strings.ReplaceAll(fields[4], `\040`, " ") != dir {
			continue
		}
		e.count++
		for i := 6; i+3 < len(fields); i++ {
			if fields[i] == "-" {
				e.fsType, e.source, e.options = fields[i+1], fields[i+2], fields[5]+","+fields[i+3]
			}
		}
	}
	return e
}

// unmountAtEnd detaches whatever a failed test leaves at dir.
func unmountAtEnd(t *testing.T, dir string) {
	t.Cleanup(func() {
		for mountAt(t, dir).count > 0 {
			if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
				t.Errorf("cleaning up %s: %v", dir, err)
				return
			}
		}
	})
}

// TestSignalWithOpenFile: SIGINT, SIGTERM or SIGHUP while a file is open
// detaches the mount at once; the open file keeps reading, and dsfs exits
// when it is closed.
func TestSignalWithOpenFile(t *testing.T) {
	needMount(t)
	want, err := os.ReadFile(filepath.Join(tinySrc, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) {
			dir := t.TempDir()
			unmountAtEnd(t, dir)
			p := startProc(t, exec.Command(dsfsBin, "mount", tinySrc, dir))
			p.waitReady(t, dir)
			f, err := os.Open(filepath.Join(dir, "source", "config.json"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			p.cmd.Process.Signal(sig)
			deadline := time.Now().Add(2 * time.Second)
			for mountAt(t, dir).count > 0 {
				if time.Now().After(deadline) {
					t.Fatalf("still mounted 2 s after %v with a file open\n%s", sig, p.log)
				}
				time.Sleep(20 * time.Millisecond)
			}
			got, err := io.ReadAll(f)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("the open file after the detach: %d bytes, %v; want the source's %d", len(got), err, len(want))
			}
			select {
			case <-p.done:
				t.Fatalf("dsfs exited while a file was still open: %v\n%s", p.exited, p.log)
			default:
			}
			f.Close()
			p.waitExit(t, 10*time.Second, "after the last open file was closed")
			if p.exited != nil {
				t.Fatalf("dsfs exited with %v\n%s", p.exited, p.log)
			}
		})
	}
}

// TestSecondSignalExits: a second signal while a file holds the detached
// mount ends dsfs at once; the mount is gone already.
func TestSecondSignalExits(t *testing.T) {
	needMount(t)
	dir := t.TempDir()
	unmountAtEnd(t, dir)
	p := startProc(t, exec.Command(dsfsBin, "mount", tinySrc, dir))
	p.waitReady(t, dir)
	f, err := os.Open(filepath.Join(dir, "nvfp4", "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p.cmd.Process.Signal(syscall.SIGTERM)
	deadline := time.Now().Add(2 * time.Second)
	for !strings.Contains(p.log.String(), "unmounting") {
		if time.Now().After(deadline) {
			t.Fatalf("no unmount 2 s after SIGTERM\n%s", p.log)
		}
		time.Sleep(10 * time.Millisecond)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	p.waitExit(t, 2*time.Second, "after a second SIGTERM")
	if e := mountAt(t, dir); e.count != 0 {
		t.Fatal("still mounted after two signals")
	}
	if _, err := io.ReadAll(f); err == nil {
		t.Fatal("a file of the mount still reads after its server exited")
	}
}

// TestTerminalClosed: closing the terminal dsfs mount runs in (SIGHUP from
// the kernel) unmounts it: no dead mount stays behind.
func TestTerminalClosed(t *testing.T) {
	needMount(t)
	dir := t.TempDir()
	unmountAtEnd(t, dir)
	cmd := exec.Command(dsfsBin, "mount", tinySrc, dir)
	tty, err := pty.Start(cmd) // dsfs leads a new session with the pty as its terminal
	if err != nil {
		t.Fatal(err)
	}
	// Nothing reads the terminal: a Read pending on it would hold off the
	// close(2) of tty.Close, and the hang-up with it. dsfs writes far less
	// than the terminal buffers before it is ready.
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		select {
		case <-done:
		default:
			cmd.Process.Kill()
		}
	})
	p := &proc{cmd: cmd, log: newLogFile(t), done: make(chan struct{})}
	go func() { p.exited = <-done; close(p.done) }()
	p.waitReady(t, dir)
	tty.Close()
	p.waitExit(t, 5*time.Second, "after its terminal was closed")
	if e := mountAt(t, dir); e.count > 0 {
		t.Fatalf("still mounted (%s) after the terminal closed", e.fsType)
	}
	if _, err := os.ReadDir(dir); err != nil {
		t.Fatalf("mount point after the terminal closed: %v", err)
	}
}

// TestSignalDuringStartup: SIGTERM while a large checkpoint is still being
// opened ends dsfs within 2 s, with nothing mounted.
func TestSignalDuringStartup(t *testing.T) {
	needMount(t)
	src := filepath.Join(t.TempDir(), "full")
	if err := synth.Write("v41-full-sparse", src); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	unmountAtEnd(t, dir)
	p := startProc(t, exec.Command(dsfsBin, "mount", src, dir))
	time.Sleep(500 * time.Millisecond)
	if strings.Contains(p.log.String(), "mounted") {
		t.Skip("the checkpoint opened in under 0.5 s; no start-up to interrupt")
	}
	sent := time.Now()
	p.cmd.Process.Signal(syscall.SIGTERM)
	p.waitExit(t, 2*time.Second, "after SIGTERM during start-up")
	t.Logf("exited %v after SIGTERM", time.Since(sent).Round(time.Millisecond))
	if e := mountAt(t, dir); e.count > 0 {
		t.Fatalf("a mount (%s) is left after SIGTERM during start-up\n%s", e.fsType, p.log)
	}
	if log := p.log.String(); !strings.Contains(log, "stopped during start-up") {
		t.Fatalf("log does not say the start-up was stopped:\n%s", log)
	}
}

// TestUmountRefusesOtherFileSystems: dsfs umount of a tmpfs fails and
// leaves it and its files alone.
func TestUmountRefusesOtherFileSystems(t *testing.T) {
	needMount(t)
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("cannot mount a tmpfs: %v", err)
	}
	unmountAtEnd(t, dir)
	keep := filepath.Join(dir, "keep")
	if err := os.WriteFile(keep, []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(dsfsBin, "umount", dir).CombinedOutput()
	if err == nil || !bytes.Contains(out, []byte("not a dsfs mount")) {
		t.Fatalf("dsfs umount of a tmpfs: %v\n%s", err, out)
	}
	if b, err := os.ReadFile(keep); err != nil || string(b) != "kept" {
		t.Fatalf("tmpfs file after the refused umount: %q, %v", b, err)
	}
}

// TestUmountBusyAndLazy: dsfs umount of a mount with a file open says so;
// --lazy detaches it, and the server exits once the file is closed.
func TestUmountBusyAndLazy(t *testing.T) {
	m := startMount(t, tinySrc)
	unmountAtEnd(t, m.dir)
	f, err := os.Open(m.path("nvfp4", "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out, err := exec.Command(dsfsBin, "umount", m.dir).CombinedOutput()
	if err == nil || !bytes.Contains(out, []byte("files are open on it")) {
		t.Fatalf("dsfs umount with a file open: %v\n%s", err, out)
	}
	run(t, dsfsBin, "umount", "--lazy", m.dir)
	if e := mountAt(t, m.dir); e.count != 0 {
		t.Fatal("still mounted after dsfs umount --lazy")
	}
	if _, err := io.ReadAll(f); err != nil {
		t.Fatalf("reading the open file after the lazy unmount: %v", err)
	}
	f.Close()
	select {
	case <-m.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("dsfs still serving 10 s after the last file was closed\n%s", m.log)
	}
}

// TestRacingMounts: of two dsfs mounts started together on one mount
// point, exactly one mounts, every time; an empty mount point is refused.
func TestRacingMounts(t *testing.T) {
	needMount(t)
	for i := range 30 {
		dir := t.TempDir()
		unmountAtEnd(t, dir)
		var ps [2]*proc
		var wg sync.WaitGroup
		for j := range ps {
			ps[j] = &proc{cmd: exec.Command(dsfsBin, "mount", "--cache-mb", "64", tinySrc, dir), log: newLogFile(t), done: make(chan struct{})}
			ps[j].cmd.Stdout, ps[j].cmd.Stderr = ps[j].log.f, ps[j].log.f
		}
		t.Cleanup(func() {
			for _, p := range ps {
				if p.cmd.Process != nil {
					p.cmd.Process.Kill()
					<-p.done
				}
			}
		})
		wg.Add(2)
		for _, p := range ps {
			go func() {
				defer wg.Done()
				if err := p.cmd.Start(); err != nil {
					t.Error(err)
					close(p.done)
					return
				}
				go func() { p.exited = p.cmd.Wait(); close(p.done) }()
			}()
		}
		wg.Wait()
		// The loser exits; the winner serves until told to stop.
		var winner *proc
		deadline := time.After(30 * time.Second)
		for winner == nil {
			select {
			case <-ps[0].done:
				winner = ps[1]
			case <-ps[1].done:
				winner = ps[0]
			case <-deadline:
				t.Fatalf("pair %d: neither mount exited\n%s\n%s", i, ps[0].log, ps[1].log)
			}
		}
		loser := ps[0]
		if winner == ps[0] {
			loser = ps[1]
		}
		if loser.exited == nil || !regexp.MustCompile(`already a mount point|another dsfs is mounting`).MatchString(loser.log.String()) {
			t.Fatalf("pair %d: the second mount exited with %v:\n%s", i, loser.exited, loser.log)
		}
		winner.waitReady(t, dir)
		if e := mountAt(t, dir); e.count != 1 {
			t.Fatalf("pair %d: %d mounts stacked at the mount point", i, e.count)
		}
		winner.cmd.Process.Signal(syscall.SIGTERM)
		winner.waitExit(t, 10*time.Second, "after SIGTERM")
		if e := mountAt(t, dir); e.count != 0 {
			t.Fatalf("pair %d: still mounted after SIGTERM", i)
		}
	}
	out, err := exec.Command(dsfsBin, "mount", tinySrc, "").CombinedOutput()
	if err == nil || !bytes.Contains(out, []byte("mount point: empty path")) {
		t.Fatalf(`dsfs mount SRC "": %v\n%s`, err, out)
	}
}

// TestDeadMountCleared: a dsfs mount whose server was killed ("transport
// endpoint is not connected") is cleared by the next mount, which says so.
func TestDeadMountCleared(t *testing.T) {
	needMount(t)
	dir := t.TempDir()
	unmountAtEnd(t, dir)
	p := startProc(t, exec.Command(dsfsBin, "mount", tinySrc, dir))
	p.waitReady(t, dir)
	p.cmd.Process.Kill()
	<-p.done
	if _, err := os.ReadDir(dir); !errors.Is(err, syscall.ENOTCONN) {
		t.Fatalf("after kill -9 the mount point gives %v, want ENOTCONN", err)
	}
	q := startProc(t, exec.Command(dsfsBin, "mount", tinySrc, dir))
	q.waitReady(t, dir)
	if !strings.Contains(q.log.String(), "cleared a dead dsfs mount") {
		t.Fatalf("the new mount does not say it cleared the dead one:\n%s", q.log)
	}
	if e := mountAt(t, dir); e.count != 1 {
		t.Fatalf("%d mounts at the mount point, want 1", e.count)
	}
	q.cmd.Process.Signal(syscall.SIGTERM)
	q.waitExit(t, 10*time.Second, "after SIGTERM")
}

// TestProcMounts: /proc/mounts shows the source directory as the device and
// fuse.dsfs as the type, for a direct mount as root.
func TestProcMounts(t *testing.T) {
	m := startMount(t, tinySrc)
	e := mountAt(t, m.dir)
	if e.fsType != "fuse.dsfs" || e.source != tinySrc {
		t.Fatalf("mountinfo: type %q source %q; want fuse.dsfs %s", e.fsType, e.source, tinySrc)
	}
	out := run(t, "df", "--output=source,fstype", m.dir)
	if !strings.Contains(out, tinySrc) || !strings.Contains(out, "fuse.dsfs") {
		t.Fatalf("df: %s", out)
	}
}

// TestMountOptions: -o as FUSE users type it, dsfs flags as name=value,
// unknown options named in one line, rw refused.
func TestMountOptions(t *testing.T) {
	m := startMount(t, tinySrc, "-o", "allow_other,ro,default_permissions", "-o", "cache_mb=64,nosuid,noatime")
	if e := mountAt(t, m.dir); !strings.Contains(e.options, "allow_other") || !strings.Contains(e.options, "nosuid") {
		t.Fatalf("mount options %q lack allow_other or nosuid", e.options)
	}
	if budget := m.cacheStats(t).Budget; budget != 64<<20 {
		t.Errorf("cache_mb=64 gives a budget of %d bytes", budget)
	}
	for _, tc := range []struct {
		opts, want string
	}{
		{"ro,frobnicate,allow_other,speed=9", "unknown -o option frobnicate, speed=9 ("},
		{"rw", "-o rw: dsfs is read-only"},
		{"cache_mb", "-o cache_mb needs a value"},
		{"cache_mb=many", "-o cache_mb=many: "},
	} {
		out, err := exec.Command(dsfsBin, "mount", "-o", tc.opts, tinySrc, t.TempDir()).CombinedOutput()
		if err == nil || !bytes.Contains(out, []byte(tc.want)) || bytes.Count(bytes.TrimSpace(out), []byte("\n")) > 0 {
			t.Errorf("-o %s: %v\n%s\nwant one line with %q", tc.opts, err, out, tc.want)
		}
	}
}

// TestNonEmptyMountPoint: a mount point that holds files is refused in
// one line; --nonempty and -o nonempty mount over it, hiding the files
// until unmounted.
func TestNonEmptyMountPoint(t *testing.T) {
	needMount(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(dsfsBin, "mount", tinySrc, dir).CombinedOutput()
	if want := "dsfs mount: mount point " + dir + ": not empty (it holds notes.txt, which the mount would hide)"; err == nil || !strings.HasPrefix(string(out), want) || strings.Count(string(out), "\n") != 1 {
		t.Fatalf("mount on a non-empty directory: %v\n%s\nwant one line starting %q", err, out, want)
	}
	if e := mountAt(t, dir); e.count != 0 {
		t.Fatalf("refused, and yet mounted: %+v", e)
	}
	for _, args := range [][]string{{"--nonempty"}, {"-o", "ro,nonempty"}} {
		unmountAtEnd(t, dir)
		m := &mount{dir: dir, proc: startProc(t, exec.Command(dsfsBin, append(append([]string{"mount"}, args...), tinySrc, dir)...))}
		m.waitReady(t, dir)
		if _, err := os.Stat(m.path("notes.txt")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: notes.txt is visible through the mount: %v", args, err)
		}
		m.stop(t)
		if b, err := os.ReadFile(filepath.Join(dir, "notes.txt")); err != nil || string(b) != "mine" {
			t.Errorf("%s: after unmounting, notes.txt holds %q (%v)", args, b, err)
		}
	}
}

// installHelper links /sbin/mount.fuse.dsfs to the test binary for the
// test, as OPERATIONS.md's install step does with the real one.
func installHelper(t *testing.T) {
	t.Helper()
	const helper = "/sbin/mount.fuse.dsfs"
	if _, err := os.Lstat(helper); err == nil {
		t.Skipf("%s exists; not replacing it", helper)
	}
	if err := os.Symlink(dsfsBin, helper); err != nil {
		t.Skipf("cannot install %s: %v", helper, err)
	}
	t.Cleanup(func() { os.Remove(helper) })
}

// backgroundPID reads the serving process's pid from stats.json.
func backgroundPID(t *testing.T, dir string) int {
	t.Helper()
	var st struct {
		PID int `json:"pid"`
	}
	catJSON(t, filepath.Join(dir, ".dsfs", "stats.json"), &st)
	if st.PID <= 0 {
		t.Fatal("stats.json has no pid")
	}
	return st.PID
}

// waitGone waits until process pid has exited.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil || strings.Contains(string(b), ") Z ") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("background dsfs %d still running 10 s after unmount", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestMountHelper: mount(8) mounts type fuse.dsfs from an fstab line and
// from the command line, and mount.fuse3 runs dsfs SRC MNT -o OPTS; each
// returns once the mount is ready and umount(8) ends the server.
func TestMountHelper(t *testing.T) {
	needMount(t)
	mountFuse3, err := exec.LookPath("mount.fuse3")
	if err != nil {
		t.Skip("mount.fuse3 not installed (apt-get install fuse3)")
	}
	installHelper(t)
	bin := t.TempDir()
	if err := os.Symlink(dsfsBin, filepath.Join(bin, "dsfs")); err != nil {
		t.Fatal(err)
	}
	fstab := filepath.Join(t.TempDir(), "fstab")
	cases := []struct {
		name string
		cmd  func(dir string) *exec.Cmd
	}{
		{"fstab", func(dir string) *exec.Cmd {
			line := fmt.Sprintf("%s %s fuse.dsfs ro,noauto,nofail,_netdev,allow_other,cache_mb=64,views=source:q2 0 0\n", tinySrc, dir)
			if err := os.WriteFile(fstab, []byte(line), 0o644); err != nil {
				t.Fatal(err)
			}
			return exec.Command("mount", "-T", fstab, dir)
		}},
		{"mount -t", func(dir string) *exec.Cmd {
			return exec.Command("mount", "-t", "fuse.dsfs", tinySrc, dir, "-o", "ro,allow_other,cache_mb=64,views=source:q2")
		}},
		{"mount.fuse3", func(dir string) *exec.Cmd {
			c := exec.Command(mountFuse3, tinySrc, dir, "-t", "fuse.dsfs", "-o", "ro,allow_other,cache_mb=64,views=source:q2")
			c.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"))
			return c
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			unmountAtEnd(t, dir)
			log := newLogFile(t)
			c := tc.cmd(dir)
			c.Stdout, c.Stderr = log.f, log.f
			if err := c.Run(); err != nil {
				t.Fatalf("%s: %v\n%s", c, err, log)
			}
			// Ready when the helper returns: no waiting.
			if _, err := os.Stat(filepath.Join(dir, "q2", "plan.json")); err != nil {
				t.Fatalf("mount just after the helper returned: %v\n%s", err, log)
			}
			e := mountAt(t, dir)
			if e.fsType != "fuse.dsfs" || e.source != tinySrc || !strings.Contains(e.options, "allow_other") {
				t.Fatalf("mountinfo: %+v", e)
			}
			pid := backgroundPID(t, dir)
			run(t, "umount", dir)
			waitGone(t, pid)
		})
	}
}

// TestBackground: dsfs mount --background returns once the mount is
// ready, holding none of its caller's output open in the background:
// piped into tail (stderr too) it returns. The server runs under the
// command line as given, its pid in --pid-file while it serves, its log in
// --log-file, and outlives the command until unmounted; a failing
// start-up fails the command with the reason.
func TestBackground(t *testing.T) {
	needMount(t)
	dir := t.TempDir()
	unmountAtEnd(t, dir)
	tmp := t.TempDir()
	logFile, pidFile := filepath.Join(tmp, "dsfs.log"), filepath.Join(tmp, "dsfs.pid")
	args := []string{dsfsBin, "mount", "--background", "--cache-mb", "64", "--log-file", logFile, "--pid-file", pidFile, tinySrc, dir}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The pipeline ends when tail reads the end of its input, which comes
	// when no process holds the pipe's writing end.
	out, err := exec.CommandContext(ctx, "sh", "-c", "'"+strings.Join(args, "' '")+"' 2>&1 | tail -n 5").CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("dsfs mount --background ... | tail did not return within a minute\n%s", out)
	}
	if err != nil || !strings.Contains(string(out), "serving in the background") {
		t.Fatalf("dsfs mount --background | tail: %v\n%s", err, out)
	}
	pid := backgroundPID(t, dir) // stats.json is there: ready when the command returned
	b, err := os.ReadFile(pidFile)
	if err != nil || string(b) != fmt.Sprintf("%d\n", pid) {
		t.Errorf("--pid-file holds %q (%v); the server is %d", b, err, pid)
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if want := strings.Join(args, "\x00") + "\x00"; err != nil || string(cmdline) != want {
		t.Errorf("the server's command line is %q (%v), want the command as given, %q", cmdline, err, want)
	}
	var st struct {
		Log string `json:"log"`
	}
	catJSON(t, filepath.Join(dir, ".dsfs", "stats.json"), &st)
	if st.Log != logFile {
		t.Errorf("stats.json says the log goes to %q, want %s", st.Log, logFile)
	}
	run(t, dsfsBin, "umount", dir)
	waitGone(t, pid)
	log, _ := os.ReadFile(logFile)
	for _, want := range []string{"msg=mounted ", "serving in the background", "msg=unmounted "} {
		if !bytes.Contains(log, []byte(want)) {
			t.Errorf("the log file lacks %q:\n%s", want, log)
		}
	}
	if _, err := os.Stat(pidFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the pid file outlives the server: %v", err)
	}
	// A failing start-up fails the command, with the reason, which the
	// log file gets too.
	out, err = exec.CommandContext(ctx, dsfsBin, "mount", "--background", "--log-file", logFile, t.TempDir(), t.TempDir()).CombinedOutput()
	if err == nil || !bytes.Contains(out, []byte("no config.json and no safetensors files")) {
		t.Fatalf("--background of an empty source: %v\n%s", err, out)
	}
	if log, _ := os.ReadFile(logFile); !bytes.Contains(log, []byte("msg=\"mount failed\"")) {
		t.Errorf("the log file lacks the failure:\n%s", log)
	}
}

// TestSdNotify: with NOTIFY_SOCKET set, dsfs mount sends READY=1 once the
// mount can be read, as systemd's Type=notify expects.
func TestSdNotify(t *testing.T) {
	needMount(t)
	name := filepath.Join(t.TempDir(), "notify")
	sock, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer sock.Close()
	dir := t.TempDir()
	unmountAtEnd(t, dir)
	c := exec.Command(dsfsBin, "mount", tinySrc, dir)
	c.Env = append(os.Environ(), "NOTIFY_SOCKET="+name)
	p := startProc(t, c)
	sock.SetReadDeadline(time.Now().Add(30 * time.Second))
	buf := make([]byte, 256)
	n, err := sock.Read(buf)
	if err != nil || string(buf[:n]) != "READY=1" {
		t.Fatalf("notify socket: %q, %v\n%s", buf[:n], err, p.log)
	}
	if _, err := os.ReadFile(filepath.Join(dir, ".dsfs", "stats.json")); err != nil {
		t.Fatalf("READY=1 came before stats.json could be read: %v", err)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	n, err = sock.Read(buf)
	if err != nil || string(buf[:n]) != "STOPPING=1" {
		t.Fatalf("notify socket after SIGTERM: %q, %v", buf[:n], err)
	}
	p.waitExit(t, 10*time.Second, "after SIGTERM")
}

// TestHFCacheFolder: a Hugging Face cache folder models--ORG--NAME mounts
// as the snapshot refs/main names (or --revision), and q2/ records that
// snapshot's commit.
func TestHFCacheFolder(t *testing.T) {
	needMount(t)
	repo := filepath.Join(t.TempDir(), "models--deepseek-ai--DeepSeek-V4.1-Tiny")
	for _, rev := range []string{"1111111111111111111111111111111111111111", "2222222222222222222222222222222222222222"} {
		snap := filepath.Join(repo, "snapshots", rev)
		os.MkdirAll(snap, 0o755)
		os.MkdirAll(filepath.Join(repo, "blobs"), 0o755)
		ents, err := os.ReadDir(tinySrc)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			if e.IsDir() { // inference/: not needed here
				continue
			}
			// As the hub does: snapshot files link to blobs named by content.
			blob := filepath.Join(repo, "blobs", rev[:4]+"-"+e.Name())
			run(t, "cp", filepath.Join(tinySrc, e.Name()), blob)
			if err := os.Symlink(filepath.Join("..", "..", "blobs", filepath.Base(blob)), filepath.Join(snap, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}
	os.MkdirAll(filepath.Join(repo, "refs"), 0o755)
	os.WriteFile(filepath.Join(repo, "refs", "main"), []byte("2222222222222222222222222222222222222222"), 0o644)
	os.WriteFile(filepath.Join(repo, "refs", "v1"), []byte("1111111111111111111111111111111111111111"), 0o644)
	for _, tc := range []struct {
		args []string
		rev  string
	}{
		{nil, "2222222222222222222222222222222222222222"},
		{[]string{"--revision", "v1"}, "1111111111111111111111111111111111111111"},
	} {
		m := startMount(t, repo, tc.args...)
		var plan struct {
			Repo     string `json:"source_repo"`
			Revision string `json:"source_revision"`
		}
		catJSON(t, m.path("q2", "plan.json"), &plan)
		if plan.Repo != "deepseek-ai/DeepSeek-V4.1-Tiny" || plan.Revision != tc.rev {
			t.Errorf("%v: q2/plan.json records %s@%s, want deepseek-ai/DeepSeek-V4.1-Tiny@%s", tc.args, plan.Repo, plan.Revision, tc.rev)
		}
		run(t, "cmp", m.path("source", "config.json"), filepath.Join(tinySrc, "config.json"))
		m.stop(t)
	}
	out, err := exec.Command(dsfsBin, "mount", "--revision", "v9", repo, t.TempDir()).CombinedOutput()
	if err == nil || !bytes.Contains(out, []byte(`no ref or snapshot "v9"`)) {
		t.Fatalf("--revision v9: %v\n%s", err, out)
	}
}

// nobody prepares to run commands as user nobody: /dev/fuse usable, the
// test binary reachable. It returns the command prefix.
func nobody(t *testing.T) []string {
	t.Helper()
	needMount(t)
	if _, err := exec.LookPath("fusermount3"); err != nil {
		t.Skip("fusermount3 not installed (apt-get install fuse3)")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("setpriv not installed")
	}
	// Debian ships /dev/fuse world-writable; some sandboxes do not.
	fi, err := os.Stat("/dev/fuse")
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm()&0o006 != 0o006 {
		if err := os.Chmod("/dev/fuse", fi.Mode().Perm()|0o666); err != nil {
			t.Skipf("/dev/fuse is not usable by other users: %v", err)
		}
		t.Cleanup(func() { os.Chmod("/dev/fuse", fi.Mode().Perm()) })
	}
	os.Chmod(filepath.Dir(dsfsBin), 0o755)
	os.Chmod(filepath.Dir(tinySrc), 0o755)
	return []string{setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"}
}

// nobodyDir is a directory owned by nobody that nobody can reach.
func nobodyDir(t *testing.T) string {
	t.Helper()
	base := t.TempDir()
	os.Chmod(base, 0o755)
	os.Chmod(filepath.Dir(base), 0o755) // t.TempDir makes its parent private
	dir := filepath.Join(base, "mnt")
	os.Mkdir(dir, 0o755)
	os.Chown(dir, 65534, 65534)
	return dir
}

// TestNormalUserMounts: through fusermount3 /proc/mounts also shows the
// source and fuse.dsfs; a refused mount says why in words.
func TestNormalUserMounts(t *testing.T) {
	as := nobody(t)
	dir := nobodyDir(t)
	unmountAtEnd(t, dir)
	p := startProc(t, exec.Command(as[0], append(as[1:], dsfsBin, "mount", tinySrc, dir)...))
	// Root may not look into another user's mount without allow_other.
	p.waitReadyAs(t, dir, as)
	if e := mountAt(t, dir); e.fsType != "fuse.dsfs" || e.source != tinySrc {
		t.Fatalf("mountinfo of a fusermount3 mount: type %q source %q; want fuse.dsfs %s", e.fsType, e.source, tinySrc)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	p.waitExit(t, 10*time.Second, "after SIGTERM")
	if e := mountAt(t, dir); e.count != 0 {
		t.Fatal("still mounted after SIGTERM")
	}

	if b, _ := os.ReadFile("/etc/fuse.conf"); regexp.MustCompile(`(?m)^\s*user_allow_other\s*$`).Match(b) {
		t.Log("user_allow_other is set in /etc/fuse.conf; not checking its message")
	} else {
		out, err := exec.Command(as[0], append(as[1:], dsfsBin, "mount", "--allow-other", tinySrc, dir)...).CombinedOutput()
		if err == nil || !bytes.Contains(out, []byte("needs a line user_allow_other in /etc/fuse.conf")) {
			t.Errorf("--allow-other as nobody without user_allow_other: %v\n%s", err, out)
		}
	}
	rootOwned := t.TempDir()
	os.Chmod(rootOwned, 0o755)
	out, err := exec.Command(as[0], append(as[1:], dsfsBin, "mount", tinySrc, rootOwned)...).CombinedOutput()
	if err == nil || !bytes.Contains(out, []byte("has no write access to the mount point")) {
		t.Errorf("mount as nobody on a root-owned directory: %v\n%s", err, out)
	}
}

// TestDemoCleansUp: dsfs demo removes its mount and its files when stopped
// by a signal while it serves, and its mount goes away if it is killed.
func TestDemoCleansUp(t *testing.T) {
	needMount(t)
	for _, tc := range []struct {
		name string
		sig  syscall.Signal
	}{
		{"SIGINT", syscall.SIGINT},
		{"SIGHUP", syscall.SIGHUP},
		{"kill -9", syscall.SIGKILL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			unmountAtEnd(t, dir)
			p := startProc(t, exec.Command(dsfsBin, "demo", dir))
			p.waitReady(t, dir)
			tmp := regexp.MustCompile(`synthesising \S+ into (\S+)/src`).FindStringSubmatch(p.log.String())
			if tmp == nil {
				t.Fatalf("demo did not say where it synthesised:\n%s", p.log)
			}
			if tc.sig == syscall.SIGKILL {
				t.Cleanup(func() { os.RemoveAll(tmp[1]) })
			}
			p.cmd.Process.Signal(tc.sig)
			p.waitExit(t, 10*time.Second, "after "+tc.name)
			deadline := time.Now().Add(5 * time.Second)
			for mountAt(t, dir).count > 0 {
				if time.Now().After(deadline) {
					t.Fatalf("still mounted 5 s after %s to the demo\n%s", tc.name, p.log)
				}
				time.Sleep(20 * time.Millisecond)
			}
			if tc.sig == syscall.SIGKILL {
				return
			}
			if p.exited != nil {
				t.Fatalf("demo exited with %v after %s\n%s", p.exited, tc.name, p.log)
			}
			if _, err := os.Stat(tmp[1]); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("demo left %s: %v", tmp[1], err)
			}
		})
	}
}
