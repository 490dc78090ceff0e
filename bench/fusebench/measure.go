package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/dsfs/dsfs/internal/warmmem"
)

// readViews are the views whose shard the read targets measure.
var readViews = []string{"nvfp4", "engram-fp4"}

// touchSlack is memory touched before a first read beyond the file's
// size, for the server's own allocations.
const touchSlack = 512 << 20

// readKey names one series of timed reads.
type readKey struct {
	server string // "dsfs", "dsfs-kept" (--cache-files), "memfs" or "ext4"
	view   string // "" for ext4
	second bool   // the read after a first read in the same mount
}

// measureReads times, pass after pass, a plain read of the source shard
// (hot), and first and second reads of its views through memfs (the views'
// bytes held in memory) and through dsfs. Each pass mounts both servers
// afresh, so a first read finds neither the kernel page cache nor dsfs's
// block cache holding the file; the source shard is read whole just before
// every read, so that it is hot, and how much of it stayed in the page
// cache is recorded after. Before a first read the memory it will fill is
// touched (see warmmem).
//
// Both servers are mounted at once and each read through dsfs is paired
// with the same read through memfs, one right after the other, memfs first
// in even passes and dsfs first in odd ones: on a shared virtual machine
// the baseline's own CPU per GB moved 2.6-fold between passes (199 to 528
// ms/GB), and the ratios the targets are set in are only as steady as the
// two reads are close in time.
func measureReads(ctx context.Context, c config) (map[readKey][]read, error) {
	src := filepath.Join(c.benchSrc, c.shard)
	mnt := filepath.Join(c.work, "mnt")
	baseline, err := copyViews(ctx, c, mnt)
	if err != nil {
		return nil, err
	}
	res := make(map[readKey][]read)
	// timed warms the source shard and reads path; pid is the server's
	// process, 0 for none.
	timed := func(k readKey, path string, pid int) error {
		if _, err := readFile(ctx, src, 0); err != nil {
			return err
		}
		if pid != 0 && !k.second {
			fi, err := os.Stat(path)
			if err != nil {
				return err
			}
			if err := warmmem.Touch(fi.Size() + touchSlack); err != nil {
				return err
			}
		}
		var cpu0 time.Duration
		if pid != 0 {
			var err error
			if cpu0, err = cpuTime(pid); err != nil {
				return err
			}
		}
		r, err := readFile(ctx, path, 0)
		if err != nil {
			return err
		}
		if pid != 0 {
			cpu1, err := cpuTime(pid)
			if err != nil {
				return err
			}
			r.ServerCPU = cpu1 - cpu0
		}
		if r.SourceHot, err = resident(src); err != nil {
			return err
		}
		res[k] = append(res[k], r)
		return nil
	}
	memMnt := filepath.Join(c.work, "mnt-memfs")
	if err := os.MkdirAll(memMnt, 0o755); err != nil {
		return nil, err
	}
	for pass := range c.passes {
		if err := settle(); err != nil {
			return nil, err
		}
		if err := timed(readKey{server: "ext4"}, src, 0); err != nil {
			return nil, err
		}
		m, err := startMemfs(ctx, c, memMnt, baseline)
		if err != nil {
			return nil, err
		}
		d, err := startDsfs(ctx, c, fmt.Sprintf("read-%d", pass+1), c.benchSrc, mnt)
		if err != nil {
			m.stop()
			return nil, err
		}
		// pair reads each view's file through both servers, in the
		// pass's order.
		pair := func(v string, second bool) error {
			reads := []func() error{
				func() error { return timed(readKey{"memfs", v, second}, filepath.Join(memMnt, v), m.Pid()) },
				func() error { return timed(readKey{"dsfs", v, second}, filepath.Join(mnt, v, c.shard), d.Pid()) },
			}
			if pass%2 == 1 {
				slices.Reverse(reads)
			}
			for _, read := range reads {
				if err := read(); err != nil {
					return err
				}
			}
			return nil
		}
		if err := d.stopAfter(func() error {
			return m.stopAfter(func() error {
				for _, v := range readViews {
					for _, second := range []bool{false, true} {
						if err := pair(v, second); err != nil {
							return err
						}
					}
				}
				return nil
			})
		}); err != nil {
			return nil, err
		}
		// source/ is passed through to the kernel (as root): its second
		// read is the source file's page cache, as ext4's is.
		d, err = startDsfs(ctx, c, fmt.Sprintf("source-%d", pass+1), c.benchSrc, mnt, "--views", "source")
		if err != nil {
			return nil, err
		}
		if err := d.stopAfter(func() error {
			for _, second := range []bool{false, true} {
				if err := timed(readKey{"dsfs", "source", second}, filepath.Join(mnt, "source", c.shard), d.Pid()); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return nil, err
		}
		// With --cache-files a view file read whole is kept in the cache
		// directory and its next open passed through to the copy: the
		// second read is then that file's page cache, as ext4's is.
		kept := filepath.Join(c.work, "kept-cache")
		if err := os.RemoveAll(kept); err != nil {
			return nil, err
		}
		d, err = startDsfs(ctx, c, fmt.Sprintf("kept-%d", pass+1), c.benchSrc, mnt,
			"--views", strings.Join(readViews, ","), "--cache-dir", kept, "--cache-files")
		if err != nil {
			return nil, err
		}
		if err := d.stopAfter(func() error {
			for i, v := range readViews {
				path := filepath.Join(mnt, v, c.shard)
				if _, err := readFile(ctx, path, 0); err != nil {
					return err
				}
				if err := waitKept(ctx, mnt, int64(i+1)); err != nil {
					return err
				}
				// Written back, so that the read does not race the
				// writeback, and read once through the mount (passed
				// through), as ext4's file is before its timed read: a
				// file's pages as its writer left them read slower than
				// those a read brought in (11-18 GB/s against 19).
				syscall.Sync()
				if _, err := readFile(ctx, path, 0); err != nil {
					return err
				}
				if err := timed(readKey{"dsfs-kept", v, true}, path, d.Pid()); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// settle writes back what earlier measurements wrote (baseline copies,
// kept files) and empties the page cache, so that a pass neither waits
// behind that writeback nor reclaims the pages an earlier pass left: the
// first pass after the read measurement ran at half the others' speed.
// It then touches the free memory (warmmem.TouchFree), so that what the
// pass allocates comes backed by the host however the kernel orders its
// free pages. Each measurement then warms what it reads.
func settle() error {
	syscall.Sync()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("1"), 0); err != nil {
		return fmt.Errorf("emptying the page cache between passes: %w", err)
	}
	return warmmem.TouchFree()
}

// waitKept waits until the dsfs mount at mnt has kept n files
// (--cache-files), for at most a minute.
func waitKept(ctx context.Context, mnt string, n int64) error {
	deadline := time.Now().Add(time.Minute)
	for {
		s, _, err := readStats(mnt)
		if err != nil {
			return err
		}
		if s.Disk.KeptWritten >= n {
			return nil
		}
		if s.Kept.Failed > 0 || time.Now().After(deadline) {
			return fmt.Errorf("%s: %d files kept, %d failed, after a minute; %d wanted", mnt, s.Disk.KeptWritten, s.Kept.Failed, n)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// copyViews copies the read views' shard out of a dsfs mount into
// work/baseline, for memfs to serve the very same bytes; it returns the
// copies' paths by view.
func copyViews(ctx context.Context, c config, mnt string) (map[string]string, error) {
	dir := filepath.Join(c.work, "baseline")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	d, err := startDsfs(ctx, c, "copy", c.benchSrc, mnt)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string)
	return out, d.stopAfter(func() error {
		for _, v := range readViews {
			p := filepath.Join(dir, v+"-"+c.shard)
			if err := copyFile(filepath.Join(mnt, v, c.shard), p); err != nil {
				return err
			}
			out[v] = p
		}
		return nil
	})
}

func copyFile(from, to string) error {
	r, err := os.Open(from)
	if err != nil {
		return err
	}
	defer r.Close()
	w, err := os.Create(to)
	if err != nil {
		return err
	}
	if _, err := io.CopyBuffer(w, r, make([]byte, chunk)); err != nil {
		w.Close()
		return fmt.Errorf("copying %s: %w", from, err)
	}
	return w.Close()
}

// memPass is one run of 8 concurrent readers, and of one reader reading
// the same files one after another on a fresh mount.
type memPass struct {
	PeakAnon int64 // peak RssAnon sampled every 100 ms
	Samples  int
	HWM      int64 // VmHWM at the end
	Bytes    int64 // read by all readers
	Time     time.Duration
	// OneTime is the time one reader took for the same bytes.
	OneTime time.Duration
}

// Together is the 8 readers' throughput in all, in MB/s.
func (p memPass) Together() float64 { return float64(p.Bytes) / p.Time.Seconds() / 1e6 }

// Alone is one reader's throughput, in MB/s.
func (p memPass) Alone() float64 { return float64(p.Bytes) / p.OneTime.Seconds() / 1e6 }

// readers is how many files are read at once in the memory measurement.
const readers = 8

// measureMemory mounts v41-bench with the cache budget c.cacheMB and reads
// the shards of the derived views with 8 concurrent readers (those of
// engram-fp4/, the costliest, first; readers beyond the number of files
// start half-way into a file already read), sampling the mount's anonymous
// memory; then, on a fresh mount, one reader reads the same parts one
// after another, the throughput the 8 readers together must reach. Each
// pass uses fresh mounts, and empties the page cache and reads the source
// shards whole before each run, so that both find the same page cache.
func measureMemory(ctx context.Context, c config) ([]memPass, error) {
	shards, err := filepath.Glob(filepath.Join(c.benchSrc, "*.safetensors"))
	if err != nil || len(shards) == 0 {
		return nil, fmt.Errorf("no shards in %s (%v)", c.benchSrc, err)
	}
	mnt := filepath.Join(c.work, "mnt")
	var files []string
	for _, v := range []string{"engram-fp4", "nvfp4", "nvfp4+engram-fp4"} {
		for _, s := range shards {
			files = append(files, filepath.Join(mnt, v, filepath.Base(s)))
		}
	}
	// Both runs start from the same page cache: the source shards hot
	// (otherwise the first run would read them from the disk for the
	// second) and nothing else (see settle).
	warm := func() error {
		if err := settle(); err != nil {
			return err
		}
		for _, s := range shards {
			if _, err := readFile(ctx, s, 0); err != nil {
				return err
			}
		}
		return nil
	}
	var out []memPass
	for pass := range c.passes {
		if err := warm(); err != nil {
			return nil, err
		}
		d, err := startDsfs(ctx, c, fmt.Sprintf("memory-%d", pass+1), c.benchSrc, mnt, "--cache-mb", strconv.Itoa(c.cacheMB))
		if err != nil {
			return nil, err
		}
		var p memPass
		if err := d.stopAfter(func() (err error) { p, err = readTogether(ctx, d.Pid(), files); return err }); err != nil {
			return nil, err
		}
		if err := warm(); err != nil {
			return nil, err
		}
		d, err = startDsfs(ctx, c, fmt.Sprintf("one-reader-%d", pass+1), c.benchSrc, mnt, "--cache-mb", strconv.Itoa(c.cacheMB))
		if err != nil {
			return nil, err
		}
		if err := d.stopAfter(func() (err error) { p.OneTime, err = readAlone(ctx, files, p.Bytes); return err }); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// readJob is one reader's part: path from off to its end.
type readJob struct {
	path string
	off  int64
}

// readJobs gives each of the readers a file (those beyond the number of
// files start half-way into one read already).
func readJobs(files []string) ([]readJob, error) {
	var jobs []readJob
	laps := (readers + len(files) - 1) / len(files)
	for i := range readers {
		path := files[i%len(files)]
		fi, err := os.Stat(path)
		if err != nil {
			return nil, err
		}
		jobs = append(jobs, readJob{path, fi.Size() * int64(i/len(files)) / int64(laps)})
	}
	return jobs, nil
}

// readAlone reads the readers' parts one after another and returns the
// time it took; want is the bytes the readers read together.
func readAlone(ctx context.Context, files []string, want int64) (time.Duration, error) {
	jobs, err := readJobs(files)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	n := int64(0)
	for _, j := range jobs {
		r, err := readFile(ctx, j.path, j.off)
		if err != nil {
			return 0, err
		}
		n += r.Bytes
	}
	if n != want {
		return 0, fmt.Errorf("one reader read %d bytes, the readers together %d", n, want)
	}
	return time.Since(start), nil
}

// readTogether runs the readers over files and samples pid's RssAnon.
func readTogether(ctx context.Context, pid int, files []string) (memPass, error) {
	var p memPass
	jobs, err := readJobs(files)
	if err != nil {
		return p, err
	}
	s := sample(pid, "RssAnon", 100*time.Millisecond)
	start := time.Now()
	got := make([]read, len(jobs))
	var eg errgroup.Group
	for i, j := range jobs {
		eg.Go(func() (err error) {
			got[i], err = readFile(ctx, j.path, j.off)
			return err
		})
	}
	err = eg.Wait()
	p.Time = time.Since(start)
	peak, serr := s.Stop()
	p.PeakAnon, p.Samples = peak, s.samples
	if err != nil {
		return p, err
	}
	if serr != nil {
		return p, serr
	}
	for _, r := range got {
		p.Bytes += r.Bytes
	}
	p.HWM, err = procStatus(pid, "VmHWM")
	return p, err
}

// mountPass is one mount of v41-full-sparse and `ls -lR` of it.
type mountPass struct {
	Wall      time.Duration // process start to stats.json readable
	HWMMount  int64         // VmHWM once mounted
	HWMLs     int64         // VmHWM after ls -lR
	Served    int64         // file bytes served during ls -lR
	Computed  int64         // blocks computed or missed during ls -lR
	Files     int           // regular files ls listed
	LayoutErr error         // sizes against the source and the format rules
	Checked   int           // files the layout check covered
	Sizes     map[string]int64
}

// stats is the part of .dsfs/stats.json the mount measurement reads.
type stats struct {
	BytesServed int64 `json:"bytes_served"`
	Cache       struct {
		Misses   int64 `json:"misses"`
		Computed int64 `json:"blocks_computed"`
	} `json:"cache"`
	Disk struct {
		KeptWritten int64 `json:"kept_files_written"`
	} `json:"disk_cache"`
	Kept struct {
		Failed int64 `json:"failed"`
	} `json:"kept_files"`
}

func readStats(mnt string) (stats, int64, error) {
	b, err := os.ReadFile(filepath.Join(mnt, ".dsfs", "stats.json"))
	if err != nil {
		return stats{}, 0, err
	}
	var s stats
	if err := json.Unmarshal(b, &s); err != nil {
		return stats{}, 0, fmt.Errorf("stats.json: %w", err)
	}
	return s, int64(len(b)), nil
}

// mountTouch is the memory touched before each mount (see warmmem):
// more than the mount's peak.
const mountTouch = 1 << 30

// measureMount mounts v41-full-sparse pass after pass and records the time
// to ready, the peak resident memory after mounting and after `ls -lR`, and
// what ls made dsfs read. The last pass also checks the listed sizes; it
// reads the view shards' headers, which makes dsfs compute blocks, so it
// comes after that pass's figures are taken and no profile but the last
// pass's holds its work.
func measureMount(ctx context.Context, c config) ([]mountPass, error) {
	mnt := filepath.Join(c.work, "mnt")
	var out []mountPass
	for i := range c.passes {
		if err := warmmem.Touch(mountTouch); err != nil {
			return nil, err
		}
		d, err := startDsfs(ctx, c, fmt.Sprintf("mount-%d", i+1), c.sparseSrc, mnt)
		if err != nil {
			return nil, err
		}
		var p mountPass
		if err := d.stopAfter(func() (err error) { p, err = lsMount(ctx, c, d, mnt, i == c.passes-1); return err }); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

func lsMount(ctx context.Context, c config, d *server, mnt string, checkSizes bool) (mountPass, error) {
	p := mountPass{Wall: d.Ready}
	var err error
	if p.HWMMount, err = procStatus(d.Pid(), "VmHWM"); err != nil {
		return p, err
	}
	before, beforeLen, err := readStats(mnt)
	if err != nil {
		return p, err
	}
	ls := exec.CommandContext(ctx, "ls", "-lR", "--time-style=long-iso", mnt)
	ls.Env = append(os.Environ(), "LC_ALL=C")
	listing, err := ls.Output()
	if err != nil {
		return p, fmt.Errorf("ls -lR %s: %w", mnt, err)
	}
	if p.HWMLs, err = procStatus(d.Pid(), "VmHWM"); err != nil {
		return p, err
	}
	after, _, err := readStats(mnt)
	if err != nil {
		return p, err
	}
	// The first stats.json read is itself served between the two readings.
	p.Served = after.BytesServed - before.BytesServed - beforeLen
	p.Computed = after.Cache.Computed - before.Cache.Computed + after.Cache.Misses - before.Cache.Misses
	p.Sizes = parseLsR(string(listing), mnt)
	p.Files = len(p.Sizes)
	if checkSizes {
		p.Checked, p.LayoutErr = checkLayout(c.sparseSrc, mnt, p.Sizes)
	}
	return p, nil
}

// stableSizes reports whether every pass listed the same files with the
// same sizes.
func stableSizes(ps []mountPass) bool {
	for _, p := range ps[1:] {
		if !maps.Equal(p.Sizes, ps[0].Sizes) {
			return false
		}
	}
	return true
}

// parseCodecBench reads the MB/s figures of BenchmarkEngramFP4 from go test
// output.
func parseCodecBench(path string) ([]float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var mbps []float64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 || (fields[0] != "BenchmarkEngramFP4" && !strings.HasPrefix(fields[0], "BenchmarkEngramFP4-")) {
			continue
		}
		for i := 1; i < len(fields); i++ {
			if fields[i] == "MB/s" {
				v, err := strconv.ParseFloat(fields[i-1], 64)
				if err != nil {
					return nil, fmt.Errorf("%s: %q: %w", path, sc.Text(), err)
				}
				mbps = append(mbps, v)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(mbps) == 0 {
		return nil, fmt.Errorf("%s: no BenchmarkEngramFP4 result with MB/s", path)
	}
	return mbps, nil
}
