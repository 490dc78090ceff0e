package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"log/syslog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dsfs/dsfs/internal/sdnotify"
	"golang.org/x/sys/unix"
)

// detachedEnv marks the process mountInBackground starts: given the same
// command line, --background included, it serves the mount itself.
const detachedEnv = "DSFS_DETACHED"

// mountInBackground runs this mount command again as a background process
// in its own session (a closed terminal does not reach it), with the same
// command line, so that ps shows the command as given. That process
// writes its start-up log to this one's standard error, through a pipe,
// and stops once the mount is ready: this one copies it, then returns
// when the pipe ends and the process has said the mount is ready over a
// private sd_notify socket. No standard stream of the caller stays open
// in the background, so `dsfs mount --background ... | tail` and
// $(dsfs mount --background ...) return. A process that fails has said
// why on the pipe; this one exits with its status.
func mountInBackground() error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	name := fmt.Sprintf("@dsfs-ready-%d-%d", os.Getpid(), time.Now().UnixNano())
	sock, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("readiness socket: %w", err)
	}
	defer sock.Close()
	null, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer null.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	cmd := &exec.Cmd{Path: exe, Args: os.Args, Stdin: null, Stdout: null, Stderr: w,
		Env:         append(os.Environ(), "NOTIFY_SOCKET="+name, detachedEnv+"=1"),
		SysProcAttr: &syscall.SysProcAttr{Setsid: true}}
	// Until the child is ready, a Ctrl-C here stops it.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sig)
	err = cmd.Start()
	w.Close() // the child holds the only writing end now
	if err != nil {
		return err
	}
	copied := make(chan struct{})
	go func() {
		io.Copy(os.Stderr, r)
		close(copied)
	}()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	ready := make(chan struct{})
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := sock.Read(buf)
			if err != nil {
				return
			}
			if slices.Contains(strings.Split(string(buf[:n]), "\n"), sdnotify.Ready) {
				close(ready)
				return
			}
		}
	}()
	for {
		select {
		case <-ready:
			<-copied // the child stops writing here before it says ready
			cmd.Process.Release()
			return nil
		case err := <-exited:
			<-copied
			var ee *exec.ExitError
			if errors.As(err, &ee) && ee.Exited() && ee.ExitCode() != 0 {
				return exitStatus(ee.ExitCode()) // it said why above
			}
			return fmt.Errorf("the mount process ended before the mount was ready (%v)", err)
		case s := <-sig:
			cmd.Process.Signal(s)
		}
	}
}

// mountLog is where a mount process logs: standard error (the default in
// the foreground), --log-file, or in the background without one, the
// system log.
type mountLog struct {
	// Where says where the log goes, for the log itself and stats.json.
	Where string
	// target is the log's handler when it is not standard error.
	target slog.Handler
	file   *os.File        // --log-file
	sys    *syslog.Writer  // the system log
	starts *startupHandler // a background process's, until detach
}

// syslogSockets are the system log's sockets, as log/syslog tries them
// (journald listens on /dev/log too); a variable for tests.
var syslogSockets = []string{"/dev/log", "/var/run/syslog", "/var/run/log"}

// openLog sets up the log of a mount process and makes it slog's default:
// into file when one is given (appended to, created 0640), else stderr in
// the foreground; a background process (detached) logs to the system log
// without a file, or nowhere when there is none, and copies its records to
// stderr until detach.
func openLog(file string, detached bool) (*mountLog, error) {
	l := &mountLog{Where: "standard error"}
	switch {
	case file != "":
		abs, err := filepath.Abs(file) // the process may not stay in this directory
		if err != nil {
			return nil, err
		}
		f, err := os.OpenFile(abs, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
		if err != nil {
			return nil, fmt.Errorf("--log-file: %w", err)
		}
		l.file, l.Where = f, abs
		l.target = slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelInfo})
	case detached:
		for _, sock := range syslogSockets {
			if w, err := syslog.Dial("unixgram", sock, syslog.LOG_DAEMON|syslog.LOG_INFO, "dsfs"); err == nil {
				l.sys, l.Where = w, "the system log ("+sock+"; journalctl -t dsfs, or /var/log/syslog)"
				l.target = newSyslogHandler(w)
				break
			}
		}
		if l.sys == nil {
			l.Where = "nowhere: there is no system log (" + strings.Join(syslogSockets, ", ") + ") here; pass --log-file FILE to keep the log"
			l.target = slog.DiscardHandler
		}
	default:
		return l, nil
	}
	h := l.target
	if detached {
		l.starts = &startupHandler{done: new(atomic.Bool),
			both: slog.NewMultiHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}), l.target), log: l.target}
		h = l.starts
	}
	slog.SetDefault(slog.New(h))
	return l, nil
}

// failed writes err to the log when it is not standard error, where the
// command's error line goes.
func (l *mountLog) failed(err error) {
	if l.target != nil {
		slog.New(l.target).Error("mount failed", "err", err)
	}
}

// detach ends a background process's writing to the standard error of
// the command that started it: records go to the log only, and so does
// whatever else writes to standard error (a panic), through a descriptor
// of the log file, or /dev/null.
func (l *mountLog) detach() error {
	if l.starts == nil {
		return nil
	}
	l.starts.done.Store(true)
	to := l.file
	if to == nil {
		null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		defer null.Close()
		to = null
	}
	return unix.Dup3(int(to.Fd()), int(os.Stderr.Fd()), 0)
}

// Close closes the log file or the system log connection.
func (l *mountLog) Close() {
	if l.file != nil {
		l.file.Close()
	}
	if l.sys != nil {
		l.sys.Close()
	}
}

// startupHandler sends records to both the log and the starting command's
// standard error until done, then to the log only.
type startupHandler struct {
	done      *atomic.Bool
	both, log slog.Handler
}

func (h *startupHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.both.Enabled(ctx, l)
}

func (h *startupHandler) Handle(ctx context.Context, r slog.Record) error {
	if !h.done.Load() {
		return h.both.Handle(ctx, r)
	}
	if h.log.Enabled(ctx, r.Level) {
		return h.log.Handle(ctx, r)
	}
	return nil
}

func (h *startupHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &startupHandler{h.done, h.both.WithAttrs(as), h.log.WithAttrs(as)}
}

func (h *startupHandler) WithGroup(name string) slog.Handler {
	return &startupHandler{h.done, h.both.WithGroup(name), h.log.WithGroup(name)}
}

// syslogHandler writes each record to the system log as one message at
// the priority of its level, as slog's text without the time, which the
// system log records itself.
type syslogHandler struct {
	w    *syslog.Writer
	mu   *sync.Mutex
	buf  *bytes.Buffer // text writes each record here, under mu
	text slog.Handler
}

func newSyslogHandler(w *syslog.Writer) *syslogHandler {
	buf := new(bytes.Buffer)
	noTime := func(groups []string, a slog.Attr) slog.Attr {
		if len(groups) == 0 && a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}
	return &syslogHandler{w: w, mu: new(sync.Mutex), buf: buf,
		text: slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelInfo, ReplaceAttr: noTime})}
}

func (h *syslogHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.text.Enabled(ctx, l)
}

func (h *syslogHandler) Handle(ctx context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.buf.Reset()
	if err := h.text.Handle(ctx, r); err != nil {
		return err
	}
	msg := strings.TrimSuffix(h.buf.String(), "\n")
	switch {
	case r.Level >= slog.LevelError:
		return h.w.Err(msg)
	case r.Level >= slog.LevelWarn:
		return h.w.Warning(msg)
	case r.Level >= slog.LevelInfo:
		return h.w.Info(msg)
	}
	return h.w.Debug(msg)
}

func (h *syslogHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &syslogHandler{h.w, h.mu, h.buf, h.text.WithAttrs(as)}
}

func (h *syslogHandler) WithGroup(name string) slog.Handler {
	return &syslogHandler{h.w, h.mu, h.buf, h.text.WithGroup(name)}
}

// writePIDFile writes this process's pid into path (--pid-file), through a
// temporary file renamed into place so a reader never sees it half
// written, and returns what removes it again, unless another process has
// written its own pid there meanwhile.
func writePIDFile(path string) (remove func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	pid := strconv.Itoa(os.Getpid()) + "\n"
	tmp := fmt.Sprintf("%s.%d.tmp", path, os.Getpid())
	if err := os.WriteFile(tmp, []byte(pid), 0o644); err != nil {
		return nil, fmt.Errorf("--pid-file: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return nil, fmt.Errorf("--pid-file: %w", err)
	}
	return func() {
		if b, err := os.ReadFile(path); err == nil && string(b) == pid {
			os.Remove(path)
		}
	}, nil
}
