package main

import (
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestBackgroundLogToSyslog: a background mount without --log-file logs to
// the system log, one message per record at its level's priority, without
// slog's time; with no system log it says its log goes nowhere and how to
// keep it.
func TestBackgroundLogToSyslog(t *testing.T) {
	defer func(s []string, l *slog.Logger) {
		syslogSockets = s
		slog.SetDefault(l)
	}(syslogSockets, slog.Default())
	sock := filepath.Join(t.TempDir(), "log")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	syslogSockets = []string{filepath.Join(t.TempDir(), "none"), sock}
	logs, err := openLog("", true)
	if err != nil {
		t.Fatal(err)
	}
	defer logs.Close()
	if !strings.HasPrefix(logs.Where, "the system log ("+sock) {
		t.Errorf("Where = %q", logs.Where)
	}
	logs.starts.done.Store(true) // detached, without touching this test's stderr
	slog.Debug("not logged")
	slog.With("view", "q2").Warn("a warning", "file", "x.safetensors")
	slog.Error("an error")
	// <facility*8+severity>: daemon is 3, warning 4, error 3.
	for _, want := range []string{
		`^<28>.* dsfs\[\d+\]: level=WARN msg="a warning" view=q2 file=x.safetensors\n?$`,
		`^<27>.* dsfs\[\d+\]: level=ERROR msg="an error"\n?$`,
	} {
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		buf := make([]byte, 1024)
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatalf("reading the system log: %v", err)
		}
		if !regexp.MustCompile(want).Match(buf[:n]) {
			t.Errorf("system log got %q, want %s", buf[:n], want)
		}
	}

	syslogSockets = []string{filepath.Join(t.TempDir(), "none")}
	none, err := openLog("", true)
	if err != nil {
		t.Fatal(err)
	}
	defer none.Close()
	if want := "nowhere: there is no system log (" + syslogSockets[0] + ") here; pass --log-file FILE to keep the log"; none.Where != want {
		t.Errorf("Where = %q, want %q", none.Where, want)
	}
}

// TestPIDFile: --pid-file holds the pid while the process serves and is
// removed after, unless another process has written its own.
func TestPIDFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dsfs.pid")
	remove, err := writePIDFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != strconv.Itoa(os.Getpid())+"\n" {
		t.Fatalf("pid file holds %q (%v), want %d", b, err, os.Getpid())
	}
	remove()
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("pid file left behind: %v", err)
	}
	remove, _ = writePIDFile(path)
	os.WriteFile(path, []byte("1\n"), 0o644)
	remove()
	if _, err := os.Stat(path); err != nil {
		t.Errorf("removed another process's pid file: %v", err)
	}
	if _, err := writePIDFile(filepath.Join(t.TempDir(), "no", "dir", "pid")); err == nil || !strings.HasPrefix(err.Error(), "--pid-file: ") {
		t.Errorf("a pid file that cannot be written: %v", err)
	}
}
