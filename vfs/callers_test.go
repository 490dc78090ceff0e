package vfs

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// fakeProc writes a procfs of processes: pid -> stat line after "pid (comm) ".
func fakeProc(t *testing.T, procs map[string]string, tgids map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for pid, stat := range procs {
		os.MkdirAll(filepath.Join(dir, pid), 0o755)
		if err := os.WriteFile(filepath.Join(dir, pid, "stat"), []byte(pid+" "+stat+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for tid, tgid := range tgids {
		os.MkdirAll(filepath.Join(dir, tid), 0o755)
		if err := os.WriteFile(filepath.Join(dir, tid, "status"), []byte("Name:\tx\nState:\tS\nTgid:\t"+tgid+"\nPid:\t"+tid+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// stat is a /proc/PID/stat tail: state and num_threads, the rest zeros.
func stat(comm string, state byte, threads string) string {
	f := make([]string, 18)
	for i := range f {
		f[i] = "0"
	}
	f[0], f[17] = string(state), threads
	return "(" + comm + ") " + strings.Join(f, " ")
}

func TestCallerAlive(t *testing.T) {
	c := newCallers()
	c.proc = fakeProc(t, map[string]string{
		"10": stat("sleep", 'S', "1"),
		"11": stat("py (x) y", 'R', "4"), // a comm with spaces and parentheses
		"12": stat("dead", 'Z', "1"),
		"13": stat("leader", 'Z', "3"), // a zombie leader whose threads run
		"14": stat("x", 'X', "1"),
	}, nil)
	for _, tt := range []struct {
		pid  int
		want bool
	}{{10, true}, {11, true}, {12, false}, {13, true}, {14, false}, {15, false}} {
		if got := c.alive(tt.pid); got != tt.want {
			t.Errorf("alive(%d) = %v, want %v", tt.pid, got, tt.want)
		}
	}
}

func TestCallerContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCallers()
		c.proc = fakeProc(t, map[string]string{"5": stat("reader", 'S', "2")}, map[string]string{"7": "5"})
		request := func(pid uint32) (context.Context, func()) {
			return c.context(&fuse.Context{Caller: fuse.Caller{Pid: pid}, Cancel: make(chan struct{})})
		}
		quick, answered := request(7)
		answered() // answered without waiting: nothing watched
		if len(c.waiting) != 0 {
			t.Fatal("a request answered at once was watched")
		}
		if quick.Err() != nil {
			t.Fatalf("Err of an answered request: %v", quick.Err())
		}

		ctx, answered := request(7) // thread 7 of process 5
		done := ctx.Done()
		synctest.Wait()
		select {
		case <-done:
			t.Fatal("done while its process runs")
		default:
		}
		os.Remove(filepath.Join(c.proc, "5", "stat")) // process 5 exits
		<-done
		if err := ctx.Err(); !errors.Is(err, errCallerGone) || !errors.Is(err, context.Canceled) {
			t.Fatalf("Err = %v, want the caller gone, a cancellation", err)
		}

		unseen, answered2 := request(0) // a caller in another pid namespace
		done = unseen.Done()
		c.stop()
		<-done
		if err := unseen.Err(); !errors.Is(err, errStopped) {
			t.Fatalf("Err after stop = %v", err)
		}
		if err := laterErr(c); !errors.Is(err, errStopped) {
			t.Fatalf("a request after stop: Err = %v", err)
		}
		answered()
		answered2()
		time.Sleep(2 * callerPoll) // the poller sees nothing waits and ends
	})
}

// laterErr is the error of a request made after c stopped.
func laterErr(c *callers) error {
	ctx, answered := c.context(context.Background())
	defer answered()
	return ctx.Err()
}
