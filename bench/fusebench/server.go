package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dsfs/dsfs/vfs"
)

// server is a FUSE server process the benchmark started and must unmount.
type server struct {
	dir    string
	cmd    *exec.Cmd
	stderr bytes.Buffer
	exited chan struct{} // closed once the process has been reaped
	// profile is where the process writes its CPU profile on SIGUSR1
	// (a dsfs built by run.sh --profile); "" for none.
	profile string
	// Ready is the wall time from starting the process to the mount
	// answering the readiness probe.
	Ready time.Duration
}

// live holds every server not yet stopped, so that any exit path can
// unmount them.
var live struct {
	sync.Mutex
	m map[*server]bool
}

// startServer runs argv and waits until ready succeeds: the probe of the
// mount at dir that says it serves. A non-empty profile asks the process
// for a CPU profile in that file (see bench/profhook).
func startServer(ctx context.Context, dir, profile string, ready func() error, argv ...string) (*server, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if mounted, err := vfs.IsMountPoint(dir); err != nil {
		return nil, err
	} else if mounted {
		return nil, fmt.Errorf("%s is already a mount point (left over from an earlier run? dsfs umount %s)", dir, dir)
	}
	s := &server{dir: dir, exited: make(chan struct{}), profile: profile}
	s.cmd = exec.Command(argv[0], argv[1:]...)
	s.cmd.Stderr = &s.stderr
	if profile != "" {
		s.cmd.Env = append(os.Environ(), "DSFS_CPUPROFILE="+profile)
	}
	start := time.Now()
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	live.Lock()
	if live.m == nil {
		live.m = make(map[*server]bool)
	}
	live.m[s] = true
	live.Unlock()
	go func() {
		s.cmd.Wait()
		close(s.exited)
	}()
	deadline := start.Add(2 * time.Minute)
	for {
		if ready() == nil {
			s.Ready = time.Since(start)
			return s, nil
		}
		select {
		case <-s.exited:
			err := fmt.Errorf("%s exited before mounting %s: %s", argv[0], dir, s.stderrTail())
			s.stop()
			return nil, err
		case <-ctx.Done():
			s.stop()
			return nil, ctx.Err()
		case <-time.After(time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("%s: %s not ready after %v: %v", argv[0], dir, time.Since(start).Round(time.Second), ready())
		}
	}
}

// Pid is the server's process id.
func (s *server) Pid() int { return s.cmd.Process.Pid }

// stderrTail is the end of what the server wrote to stderr; call it once
// the process has exited (after stop), when nothing writes there any more.
func (s *server) stderrTail() string {
	t := strings.TrimSpace(s.stderr.String())
	if len(t) > 2000 {
		t = "..." + t[len(t)-2000:]
	}
	return t
}

// stopAfter runs measure against the server, then stops it; a failed
// measurement comes back with the end of the server's stderr.
func (s *server) stopAfter(measure func() error) error {
	if err := measure(); err != nil {
		s.stop()
		return fmt.Errorf("%w\n%s", err, s.stderrTail())
	}
	return s.stop()
}

// stop asks the server to unmount (SIGTERM), and if it does not exit in
// time, unmounts lazily and kills it. A server that died leaving its mount
// behind has the mount detached.
func (s *server) stop() error {
	live.Lock()
	delete(live.m, s)
	live.Unlock()
	var errs []error
	if s.profile != "" {
		if err := s.collectProfile(); err != nil {
			errs = append(errs, err)
		}
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		errs = append(errs, fmt.Errorf("%s did not exit on SIGTERM; killed", s.cmd.Path))
		syscall.Unmount(s.dir, syscall.MNT_DETACH)
		s.cmd.Process.Kill()
		<-s.exited
	}
	if mounted, _ := vfs.IsMountPoint(s.dir); mounted {
		if err := syscall.Unmount(s.dir, syscall.MNT_DETACH); err != nil {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", s.dir, err))
		}
	}
	return errors.Join(errs...)
}

// collectProfile asks the process to write its profiles and waits until
// they are complete.
func (s *server) collectProfile() error {
	s.cmd.Process.Signal(syscall.SIGUSR1)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(s.profile); err == nil {
			return nil
		}
		select {
		case <-s.exited:
			return fmt.Errorf("%s exited before writing %s: %s", s.cmd.Path, s.profile, s.stderrTail())
		case <-time.After(10 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s: no profile in %s after 30 s (built without bench/profhook?)", s.cmd.Path, s.profile)
}

// stopAll stops every server still running.
func stopAll() {
	live.Lock()
	var all []*server
	for s := range live.m {
		all = append(all, s)
	}
	live.Unlock()
	for _, s := range all {
		if err := s.stop(); err != nil {
			fmt.Fprintln(os.Stderr, "fusebench:", err)
		}
	}
}
