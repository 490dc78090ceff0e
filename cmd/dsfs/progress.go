package main

import (
	"os"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// progress is the one progress bar of dsfs (inspect, diff, export, verify,
// audit): what is done of the total, the rate and the time left, on stderr
// when it is a terminal. On anything else it draws nothing, so logs and
// pipes stay clean. The zero value draws nothing; all methods are safe for
// concurrent use.
type progress struct {
	bar *progressbar.ProgressBar

	mu   sync.Mutex
	stop chan struct{} // closes the watch goroutine, if any
	done chan struct{}
}

// newProgress returns a bar described by what, counting bytes when units is
// "" and units otherwise ("blocks", "weights").
func newProgress(what, units string) *progress {
	if !term.IsTerminal(int(os.Stderr.Fd())) {
		return &progress{}
	}
	opts := []progressbar.Option{
		progressbar.OptionSetWriter(os.Stderr),
		progressbar.OptionSetDescription(what),
		progressbar.OptionSetTheme(progressbar.ThemeASCII),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(100 * time.Millisecond),
		progressbar.OptionShowCount(),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionSetElapsedTime(true),
	}
	if units == "" {
		opts = append(opts, progressbar.OptionShowBytes(true), progressbar.OptionUseIECUnits(true))
	} else {
		opts = append(opts, progressbar.OptionShowIts(), progressbar.OptionSetItsString(units))
	}
	return &progress{bar: progressbar.NewOptions64(-1, opts...)}
}

// set shows done of total.
func (p *progress) set(done, total int64) {
	if p.bar == nil || total <= 0 {
		return
	}
	if p.bar.GetMax64() != total {
		p.bar.ChangeMax64(total)
	}
	p.bar.Set64(done)
}

// watch polls counters five times a second until finish, for work that
// keeps its own counts (inventory.Progress).
func (p *progress) watch(counts func() (done, total int64)) {
	if p.bar == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stop, p.done = make(chan struct{}), make(chan struct{})
	go func(stop, done chan struct{}) {
		defer close(done)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				p.set(counts())
			}
		}
	}(p.stop, p.done)
}

// finish erases the bar, leaving the line to what the command prints next.
func (p *progress) finish() {
	if p.bar == nil {
		return
	}
	p.mu.Lock()
	if p.stop != nil {
		close(p.stop)
		<-p.done
		p.stop = nil
	}
	p.mu.Unlock()
	p.bar.Clear()
	p.bar.Exit()
}
