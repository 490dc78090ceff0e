package vfs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// A computation belongs to the readers waiting for it (blockcache, vfile's
// documents): it stops when the last one's context ends. The kernel ends a
// FUSE request's context (FUSE_INTERRUPT) only for a request its caller
// waits on; the page cache's read-ahead requests are sent in the
// background and never interrupted, and they keep the file open until
// they are answered. A reader killed during a long computation (a trace
// forward) would so leave it running, and its file open, until it ended.
//
// callers closes that gap: the context of each request also ends once the
// process that sent it has exited, and, for every request, once the mount
// stops computing (Mount.Cancel). Watching starts only when the request
// waits (its Done is first called), so requests answered at once cost
// nothing; a waiting one is checked every callerPoll.

// callerPoll is how often waiting requests' processes are checked.
const callerPoll = 100 * time.Millisecond

// errCallerGone is the context error of a request whose process exited.
var errCallerGone = fmt.Errorf("the reading process exited: %w", context.Canceled)

// errStopped is the context error of every request once the mount stops
// computing.
var errStopped = fmt.Errorf("dsfs is stopping: %w", context.Canceled)

// callers watches the processes of waiting requests.
type callers struct {
	proc    string        // procfs's mount point
	stopped chan struct{} // closed by stop
	once    sync.Once

	mu      sync.Mutex
	waiting map[*callerCtx]struct{}
	running bool // the poller is running
}

func newCallers() *callers {
	return &callers{proc: "/proc", stopped: make(chan struct{}), waiting: make(map[*callerCtx]struct{})}
}

// stop ends every wait, now and later.
func (c *callers) stop() { c.once.Do(func() { close(c.stopped) }) }

// context returns ctx, a request's, tied to its caller's process and to
// the mount's computing, and the function that ends the watch when the
// request is answered. A caller dsfs cannot see (pid 0: another pid
// namespace) is not watched.
func (c *callers) context(ctx context.Context) (context.Context, func()) {
	cc := &callerCtx{Context: ctx, w: c}
	if fc, ok := ctx.(*fuse.Context); ok {
		cc.pid = fc.Caller.Pid
	}
	return cc, cc.release
}

// callerCtx is a request's context that also ends when the request's
// process has exited.
type callerCtx struct {
	context.Context // the request's
	w               *callers
	pid             uint32 // the calling thread, as FUSE gives it; 0 if unseen

	mu      sync.Mutex
	done    chan struct{} // nil until the first Done
	tgid    int           // the thread's process
	quit    chan struct{} // closed by release: the request is answered
	ended   bool
	exited  atomic.Bool
	exitedC chan struct{} // closed when the process is found gone
}

// Done starts watching the caller's process.
func (c *callerCtx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done != nil {
		return c.done
	}
	c.done = make(chan struct{})
	if c.ended {
		close(c.done)
		return c.done
	}
	c.quit, c.exitedC = make(chan struct{}), make(chan struct{})
	if c.pid != 0 {
		if c.tgid = c.w.tgidOf(c.pid); c.tgid > 0 {
			c.w.add(c)
		}
	}
	go func() {
		select {
		case <-c.Context.Done():
		case <-c.exitedC:
		case <-c.w.stopped:
		case <-c.quit:
			return
		}
		close(c.done)
	}()
	return c.done
}

// Err is the request's error, errCallerGone once its process exited, or
// errStopped once the mount stopped computing.
func (c *callerCtx) Err() error {
	if err := c.Context.Err(); err != nil {
		return err
	}
	if c.exited.Load() {
		return errCallerGone
	}
	select {
	case <-c.w.stopped:
		return errStopped
	default:
		return nil
	}
}

// release ends the watch: the request has been answered.
func (c *callerCtx) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended {
		return
	}
	c.ended = true
	if c.quit != nil {
		close(c.quit)
		c.w.remove(c)
	}
}

// exit records that the caller's process is gone.
func (c *callerCtx) exit() {
	if c.exited.CompareAndSwap(false, true) {
		close(c.exitedC)
	}
}

func (c *callers) add(cc *callerCtx) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.waiting[cc] = struct{}{}
	if !c.running {
		c.running = true
		go c.poll()
	}
}

func (c *callers) remove(cc *callerCtx) {
	c.mu.Lock()
	delete(c.waiting, cc)
	c.mu.Unlock()
}

// poll checks the waiting requests' processes until none waits.
func (c *callers) poll() {
	for {
		time.Sleep(callerPoll)
		c.mu.Lock()
		if len(c.waiting) == 0 {
			c.running = false
			c.mu.Unlock()
			return
		}
		var gone []*callerCtx
		alive := make(map[int]bool)
		for cc := range c.waiting {
			a, ok := alive[cc.tgid]
			if !ok {
				a = c.alive(cc.tgid)
				alive[cc.tgid] = a
			}
			if !a {
				gone = append(gone, cc)
				delete(c.waiting, cc)
			}
		}
		c.mu.Unlock()
		for _, cc := range gone {
			cc.exit()
		}
	}
}

// tgidOf is the process of thread tid (FUSE gives the calling thread), or
// 0 when procfs does not say.
func (c *callers) tgidOf(tid uint32) int {
	b, err := os.ReadFile(fmt.Sprintf("%s/%d/status", c.proc, tid))
	if err != nil {
		return 0
	}
	for line := range bytes.Lines(b) {
		if v, ok := bytes.CutPrefix(line, []byte("Tgid:")); ok {
			n, err := strconv.Atoi(string(bytes.TrimSpace(v)))
			if err != nil {
				return 0
			}
			return n
		}
	}
	return 0
}

// alive reports whether process pid still runs: it has exited when procfs
// no longer has it, or has it as a zombie with no thread left running (a
// zombie leader whose other threads run is a live process). Its files are
// closed either way.
func (c *callers) alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("%s/%d/stat", c.proc, pid))
	if err != nil {
		return !os.IsNotExist(err)
	}
	// pid (comm) state ppid pgrp session tty_nr tpgid flags minflt cminflt
	// majflt cmajflt utime stime cutime cstime priority nice num_threads:
	// comm may hold spaces and parentheses, so count from the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return true
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 18 {
		return true
	}
	if state := f[0][0]; state != 'Z' && state != 'X' {
		return true
	}
	threads, err := strconv.Atoi(string(f[17]))
	return err == nil && threads > 1
}

// canceled says how to answer a request whose context ended: EINTR for
// one the kernel interrupted or whose process exited (nobody reads the
// answer), EIO once the mount stopped computing, since readers retry an
// EINTR (coreutils' safe_read does, forever) and the bytes will not come.
func (m *Mount) canceled(ctx context.Context) (syscall.Errno, bool) {
	switch err := ctx.Err(); {
	case err == nil:
		return 0, false
	case errors.Is(err, errStopped):
		m.ctr.errors.Add(1)
		return syscall.EIO, true
	}
	return syscall.EINTR, true
}
