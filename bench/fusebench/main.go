// Command fusebench measures a dsfs mount against baselines measured in the
// same run and prints, per target of the foundation issue, the median
// figure, the baseline, the ratio and PASS or FAIL.
//
// Usage (bench/run.sh builds the binaries and synthesises the checkpoints):
//
//	fusebench -dsfs BIN -memfs BIN -work DIR -bench-src DIR -sparse-src DIR [-codec FILE]
//
// It needs root and /dev/fuse. Every mount it starts is unmounted before
// it exits, on failure and on SIGINT/SIGTERM too. The exit status is 0 when
// every target passes, 1 when one fails and 2 when a measurement could not
// be made.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/dsfs/dsfs/internal/warmmem"
)

// config is what the measurements need.
type config struct {
	dsfs, memfs string // binaries
	work        string // mount points and baseline copies go here
	benchSrc    string // v41-bench checkpoint
	sparseSrc   string // v41-full-sparse checkpoint
	shard       string // the v41-bench shard the read targets use
	passes      int
	cacheMB     int    // budget of the memory measurement's mount
	codec       string // `go test -bench BenchmarkEngramFP4` output
	profile     string // directory for profiles of every dsfs mount; "" for none
}

func main() {
	var c config
	flag.StringVar(&c.dsfs, "dsfs", "dsfs", "dsfs binary")
	flag.StringVar(&c.memfs, "memfs", "memfs", "memfs binary (bench/memfs)")
	flag.StringVar(&c.work, "work", "/tmp/dsfs-bench", "directory for mount points and baseline copies")
	flag.StringVar(&c.benchSrc, "bench-src", "", "v41-bench checkpoint (dsfs synth --preset v41-bench)")
	flag.StringVar(&c.sparseSrc, "sparse-src", "", "v41-full-sparse checkpoint (dsfs synth --preset v41-full-sparse)")
	flag.StringVar(&c.shard, "shard", "model-00001-of-00002.safetensors", "v41-bench shard whose views are read")
	flag.IntVar(&c.passes, "passes", 5, "passes of each measurement (medians are reported)")
	flag.IntVar(&c.cacheMB, "cache-mb", 256, "--cache-mb of the mount read by 8 readers at once")
	flag.StringVar(&c.codec, "codec", "", "file holding the output of go test -bench BenchmarkEngramFP4 ./codecs")
	flag.StringVar(&c.profile, "profile", "", "write CPU and heap profiles of every dsfs mount here (needs a dsfs built with bench/profhook)")
	phases := flag.String("phases", "read,memory,mount,codec", "comma-separated measurements to make")
	flag.Parse()
	if flag.NArg() != 0 || c.passes < 1 {
		flag.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, c, strings.Split(*phases, ","))
	stop()
	os.Exit(code)
}

// run makes the measurements asked for and prints the table; it returns
// the exit status.
func run(ctx context.Context, c config, phases []string) int {
	defer stopAll()
	restore, note := warmmem.HoldFreePages()
	fmt.Fprintln(os.Stderr, "fusebench:", note)
	defer func() {
		if err := restore(); err != nil {
			fmt.Fprintln(os.Stderr, "fusebench:", err)
		}
	}()
	var rep report
	failed := false
	step := func(name string, need bool, what string, f func() error) {
		if !slices.Contains(phases, name) {
			return
		}
		if !need {
			fmt.Fprintf(os.Stderr, "fusebench: %s: %s not given\n", name, what)
			failed = true
			return
		}
		fmt.Fprintf(os.Stderr, "fusebench: measuring %s\n", name)
		if err := f(); err != nil {
			fmt.Fprintf(os.Stderr, "fusebench: %s: %v\n", name, err)
			failed = true
		}
	}
	step("read", c.benchSrc != "", "-bench-src", func() (err error) {
		rep.reads, err = measureReads(ctx, c)
		return err
	})
	step("memory", c.benchSrc != "", "-bench-src", func() (err error) {
		rep.memory, err = measureMemory(ctx, c)
		return err
	})
	step("mount", c.sparseSrc != "", "-sparse-src", func() (err error) {
		rep.mounts, err = measureMount(ctx, c)
		return err
	})
	step("codec", c.codec != "", "-codec", func() (err error) {
		rep.codec, err = parseCodecBench(c.codec)
		return err
	})
	if ctx.Err() != nil {
		fmt.Fprintln(os.Stderr, "fusebench: interrupted")
		return 2
	}
	fmt.Printf("\ndsfs benchmarks: %d passes, medians; v41-bench shard %s; MB = 10^6 bytes\n", c.passes, c.shard)
	fmt.Printf("(each first read is on a fresh mount, from a hot source shard, into pre-touched memory;\n")
	fmt.Printf("a ratio to memfs is the median of the passes' ratios, each of a dsfs read and the memfs read beside it)\n\n")
	allPass := rep.print(os.Stdout, c)
	switch {
	case failed:
		return 2
	case !allPass:
		return 1
	}
	return 0
}

// startDsfs mounts src at mnt with `dsfs mount`; it is ready when
// .dsfs/stats.json can be read. With -profile, the mount's profiles are
// named after tag.
func startDsfs(ctx context.Context, c config, tag, src, mnt string, flags ...string) (*server, error) {
	argv := append(append([]string{c.dsfs, "mount"}, flags...), src, mnt)
	stats := filepath.Join(mnt, ".dsfs", "stats.json")
	profile := ""
	if c.profile != "" {
		profile = filepath.Join(c.profile, tag+".cpu.pprof")
	}
	return startServer(ctx, mnt, profile, func() error {
		_, err := os.ReadFile(stats)
		return err
	}, argv...)
}

// startMemfs serves the files (name to path) from memory at mnt; it is
// ready when they are listed, which reads none of them.
func startMemfs(ctx context.Context, c config, mnt string, files map[string]string) (*server, error) {
	argv := []string{c.memfs, mnt}
	var names []string
	for name, path := range files {
		argv = append(argv, name+"="+path)
		names = append(names, name)
	}
	return startServer(ctx, mnt, "", func() error {
		for _, n := range names {
			if _, err := os.Stat(filepath.Join(mnt, n)); err != nil {
				return err
			}
		}
		return nil
	}, argv...)
}
