package vfs

import (
	"errors"
	"log/slog"
	"sync"
)

// repeatLog logs an error that repeats, such as every block of a source
// file truncated under the mount failing in turn, at its 1st, 10th, 100th,
// ... occurrence with the count, so a reader that walks a broken file
// leaves a few lines, not one per block. Errors repeat when they concern
// the same file and their innermost cause reads the same.
type repeatLog struct {
	mu     sync.Mutex
	counts map[[2]string]int64
}

// maxRepeatKeys bounds the (file, cause) pairs counted apart.
const maxRepeatKeys = 4096

// error logs msg for file and err (with args) if this is the 1st, 10th,
// 100th, ... time that file failed that way.
func (r *repeatLog) error(log *slog.Logger, msg, file string, err error, args ...any) {
	cause := err
	for {
		u := errors.Unwrap(cause)
		if u == nil {
			break
		}
		cause = u
	}
	key := [2]string{file, cause.Error()}
	r.mu.Lock()
	if r.counts == nil {
		r.counts = make(map[[2]string]int64)
	}
	if _, ok := r.counts[key]; !ok && len(r.counts) >= maxRepeatKeys {
		key[1] = "" // causes that differ every time: count them by file
	}
	r.counts[key]++
	n := r.counts[key]
	r.mu.Unlock()
	for m := n; m%10 == 0; m /= 10 {
		if m == 10 {
			log.Error(msg+" (repeated)", append([]any{"file", file, "times", n, "err", err}, args...)...)
			return
		}
	}
	if n == 1 {
		log.Error(msg, append([]any{"file", file, "err", err}, args...)...)
	}
}
