package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// chunk is the size of every read(2): what `dd bs=1M` does.
const chunk = 1 << 20

// read is one timed sequential read of a file.
type read struct {
	Bytes int64
	Time  time.Duration
	// ServerCPU is the CPU time (user and system) the FUSE server spent
	// during the read; unlike throughput it hardly depends on what else
	// the machine runs.
	ServerCPU time.Duration
	// SourceHot is the fraction of the source shard's pages in the page
	// cache after the read (1 when not tracked).
	SourceHot float64
}

// MBps is the read's throughput in 10^6 bytes per second.
func (r read) MBps() float64 { return float64(r.Bytes) / r.Time.Seconds() / 1e6 }

// cpuPerGB is the server's CPU time for the read, in ms per 10^9 bytes.
func (r read) cpuPerGB() float64 { return r.ServerCPU.Seconds() * 1e3 / (float64(r.Bytes) / 1e9) }

// readFile reads path from off to its end in chunk-sized reads and checks
// that it got every byte its size promises.
func readFile(ctx context.Context, path string, off int64) (read, error) {
	f, err := os.Open(path)
	if err != nil {
		return read{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return read{}, err
	}
	buf := make([]byte, chunk)
	start := time.Now()
	n := int64(0)
	for {
		if ctx.Err() != nil {
			return read{}, ctx.Err()
		}
		m, err := f.ReadAt(buf, off+n)
		n += int64(m)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return read{}, fmt.Errorf("%s at %d: %w", path, off+n, err)
		}
	}
	r := read{Bytes: n, Time: time.Since(start)}
	if want := fi.Size() - off; n != want {
		return r, fmt.Errorf("%s: read %d bytes from offset %d, size promises %d", path, n, off, want)
	}
	return r, nil
}

// cpuTime returns the user plus system CPU time of process pid so far.
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields 14 and 15 (utime, stime) count after the command name, which
	// may hold spaces but ends at the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:]))
	if i < 0 || len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, b)
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// userHZ is the unit of /proc/PID/stat times: USER_HZ, 100 on Linux.
const userHZ = 100

// resident returns the fraction of path's pages in the page cache.
func resident(path string) (float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || fi.Size() == 0 {
		return 1, err
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(fi.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return 0, fmt.Errorf("mmap %s: %w", path, err)
	}
	defer unix.Munmap(m)
	page := int64(os.Getpagesize())
	vec := make([]byte, (fi.Size()+page-1)/page)
	// x/sys/unix has no mincore wrapper.
	_, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0])))
	if errno != 0 {
		return 0, fmt.Errorf("mincore %s: %w", path, errno)
	}
	in := 0
	for _, v := range vec {
		in += int(v & 1)
	}
	return float64(in) / float64(len(vec)), nil
}

// procStatus returns a field of /proc/PID/status in bytes (the kB fields
// such as VmHWM and RssAnon).
func procStatus(pid int, field string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), ":")
		if !ok || name != field {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(val), " kB"), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/status %s: %w", pid, field, err)
		}
		return kb << 10, nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("/proc/%d/status: no %s", pid, field)
}

// sampler records the peak of a /proc/PID/status field, sampled at a fixed
// interval until stopped.
type sampler struct {
	peak    int64
	samples int
	err     error
	stop    chan struct{}
	done    chan struct{}
}

func sample(pid int, field string, every time.Duration) *sampler {
	s := &sampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			v, err := procStatus(pid, field)
			if err != nil {
				s.err = err
				return
			}
			s.peak = max(s.peak, v)
			s.samples++
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// Stop ends sampling and returns the peak.
func (s *sampler) Stop() (int64, error) {
	close(s.stop)
	<-s.done
	return s.peak, s.err
}
