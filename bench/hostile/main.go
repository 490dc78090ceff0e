// Command hostile mounts dsfs on every hostile input of the reliability
// review in one go (FORMATS.md's bad inputs, oversized config counts and
// vocabularies, a sparse 8 GiB tokenizer.json, a normalizer that grows
// text a thousandfold five times, a header of 10^6 tensors, 300k stale index
// entries, a symlink out of the checkpoint, a tensor name that is not
// UTF-8, a poisoned --cache-dir entry, a FIFO in the cache dir) and prints,
// per case, the verdict, the time until .dsfs/stats.json could be read,
// the peak RSS of the dsfs process (VmHWM), how long SIGTERM took to stop
// it, and the first problem line it logged.
//
// A case passes when the mount becomes ready within -timeout, logs at
// least one problem (holding the case's phrase) and at most -max-lines
// problem lines, serves the good parts (a good shard of nvfp4/, or q2/ byte
// for byte), stays under -cache-mb + 300 MiB, and exits within 2 s of
// SIGTERM. A process over -rss-kill MiB is stopped at once, to spare the
// machine. The exit status is 1 if any case fails, 2 if the harness itself
// could not run.
//
// Usage (as root, with /dev/fuse):
//
//	go run ./bench/hostile [-run REGEXP] [-timeout 60s] [-work DIR] [-keep]
package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dsfs/dsfs/internal/badinput"
	"github.com/dsfs/dsfs/synth"
)

var (
	flagRun      = flag.String("run", "", "run only the cases whose name matches this regular expression")
	flagTimeout  = flag.Duration("timeout", 60*time.Second, "how long a mount may take to become ready")
	flagWork     = flag.String("work", "", "working directory (default: a temporary one, removed afterwards)")
	flagKeep     = flag.Bool("keep", false, "keep the working directory (checkpoints, logs)")
	flagDsfs     = flag.String("dsfs", "", "dsfs binary (default: built from this module)")
	flagCacheMB  = flag.Int("cache-mb", 256, "--cache-mb of every mount")
	flagRSSKill  = flag.Int("rss-kill", 2048, "stop a dsfs process whose RSS passes this many MiB")
	flagMaxLines = flag.Int("max-lines", 100, "most problem lines a case may log")
)

// env is what every case shares.
type env struct {
	work  string
	dsfs  string
	tiny  string // pristine v41-tiny
	v2    string // pristine v2lite-tiny: trace/ runs it, reading config and tokenizer
	q2ref string // q2/ exported without a cache
	cache string // a --cache-dir filled by an export of q2/
	// baseline holds the problem lines of the pristine checkpoint (trace/
	// cannot run V4.1, ...), without their times: not the cases' doing.
	baseline map[string]bool
}

// hcase is one hostile input.
type hcase struct {
	name   string
	v2     bool     // damage v2lite-tiny rather than v41-tiny
	expect []string // phrases one problem line must hold
	// plant damages the checkpoint copy src (and may prepare a cache dir
	// under dir); it returns extra mount arguments.
	plant func(e *env, dir, src string) ([]string, error)
	// check reads the good parts through the mount.
	check func(e *env, mnt string) error
}

// result is what a case measured.
type result struct {
	ready    time.Duration // 0: never
	hwmMiB   int64
	stopped  time.Duration // 0: SIGTERM did not stop it within 2 s
	first    string        // the first problem line
	problems int
	fails    []string
}

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "hostile:", err)
		os.Exit(2)
	}
}

func run() error {
	if os.Geteuid() != 0 {
		return errors.New("needs root: dsfs mounts with mount(2)")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return errors.New("no /dev/fuse")
	}
	var filter *regexp.Regexp
	if *flagRun != "" {
		var err error
		if filter, err = regexp.Compile(*flagRun); err != nil {
			return fmt.Errorf("-run: %w", err)
		}
	}
	e, cleanup, err := setup()
	if err != nil {
		return err
	}
	defer cleanup()

	fmt.Printf("%-44s %-4s %8s %9s %8s  %s\n", "case", "", "ready", "peak RSS", "SIGTERM", "first problem line")
	failed := 0
	for i, c := range cases() {
		if filter != nil && !filter.MatchString(c.name) {
			continue
		}
		r := runCase(e, filepath.Join(e.work, "cases", strconv.Itoa(i)), c)
		verdict := "PASS"
		if len(r.fails) > 0 {
			verdict = "FAIL"
			failed++
		}
		ready, stop := "never", "no"
		if r.ready > 0 {
			ready = r.ready.Round(time.Millisecond).String()
		}
		if r.stopped > 0 {
			stop = r.stopped.Round(time.Millisecond).String()
		}
		fmt.Printf("%-44s %-4s %8s %6d MB %8s  %s\n", c.name, verdict, ready, r.hwmMiB, stop, clip(r.first, 160))
		for _, f := range r.fails {
			fmt.Printf("%-44s      - %s\n", "", f)
		}
	}
	if failed > 0 {
		fmt.Printf("%d case(s) failed\n", failed)
		cleanup()
		os.Exit(1)
	}
	return nil
}

// setup builds dsfs, writes v41-tiny and fills a cache dir with q2/.
func setup() (*env, func(), error) {
	work := *flagWork
	if work == "" {
		var err error
		if work, err = os.MkdirTemp("", "dsfs-hostile-"); err != nil {
			return nil, nil, err
		}
	}
	done := false
	cleanup := func() {
		if !done && !*flagKeep && *flagWork == "" {
			os.RemoveAll(work)
		}
		done = true
	}
	e := &env{work: work, dsfs: *flagDsfs, tiny: filepath.Join(work, "tiny"), v2: filepath.Join(work, "v2lite"),
		q2ref: filepath.Join(work, "q2ref"), cache: filepath.Join(work, "cache")}
	fail := func(err error) (*env, func(), error) { cleanup(); return nil, nil, err }
	if e.dsfs == "" {
		e.dsfs = filepath.Join(work, "dsfs")
		root, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
		if err != nil {
			return fail(fmt.Errorf("finding the module: %w", err))
		}
		cmd := exec.Command("go", "build", "-o", e.dsfs, "./cmd/dsfs")
		cmd.Dir = strings.TrimSpace(string(root))
		if out, err := cmd.CombinedOutput(); err != nil {
			return fail(fmt.Errorf("building dsfs: %v\n%s", err, out))
		}
	}
	for _, d := range []string{e.tiny, e.v2, e.q2ref, e.cache} {
		os.RemoveAll(d)
	}
	if err := synth.Write("v41-tiny", e.tiny); err != nil {
		return fail(err)
	}
	if err := synth.Write("v2lite-tiny", e.v2); err != nil {
		return fail(err)
	}
	for _, args := range [][]string{{"export", "q2", e.tiny, e.q2ref}, {"export", "--cache-dir", e.cache, "q2", e.tiny, filepath.Join(work, "q2cached")}} {
		if out, err := exec.Command(e.dsfs, args...).CombinedOutput(); err != nil {
			return fail(fmt.Errorf("dsfs %s: %v\n%s", strings.Join(args, " "), err, out))
		}
	}
	e.baseline = make(map[string]bool)
	for _, v2 := range []bool{false, true} {
		base := filepath.Join(work, "baseline", strconv.FormatBool(v2))
		check := goodShard
		if v2 {
			check = goodV2
		}
		r := runCase(e, base, hcase{name: "baseline", v2: v2, plant: func(*env, string, string) ([]string, error) { return nil, nil }, check: check})
		if r.ready == 0 || r.stopped == 0 || slices.ContainsFunc(r.fails, func(f string) bool { return !strings.Contains(f, "no problem") }) {
			return fail(fmt.Errorf("a pristine checkpoint does not mount and stop cleanly: %v (log in %s)", r.fails, base))
		}
		for _, l := range problemLines(filepath.Join(base, "log")) {
			e.baseline[withoutTime(l)] = true
		}
	}
	return e, cleanup, nil
}

// cases is the hostile set.
func cases() []hcase {
	var cs []hcase
	for _, b := range badinput.Cases() {
		cs = append(cs, hcase{
			name:   "FORMATS: " + b.Name,
			expect: []string{b.File, b.Reason},
			plant: func(_ *env, _, src string) ([]string, error) {
				return nil, b.Plant(src)
			},
			check: goodShard,
		})
	}
	for _, n := range []string{"1e5", "1e9"} {
		cs = append(cs, hcase{
			name:   "config num_hidden_layers " + n,
			v2:     true,
			expect: []string{"num_hidden_layers"},
			plant: func(_ *env, _, src string) ([]string, error) {
				v, _ := strconv.ParseFloat(n, 64)
				return nil, editConfig(src, "num_hidden_layers", int64(v))
			},
			check: goodV2,
		})
	}
	for _, n := range []string{"2e9", "1e8", "600"} {
		cs = append(cs, hcase{
			name:   "config vocab_size " + n,
			v2:     true,
			expect: []string{"vocab_size"},
			plant: func(_ *env, _, src string) ([]string, error) {
				v, _ := strconv.ParseFloat(n, 64)
				return nil, editConfig(src, "vocab_size", int64(v))
			},
			check: func(_ *env, mnt string) error {
				shard, err := firstShard(mnt)
				if err != nil {
					return err
				}
				return readWhole(mnt, "manifest/summary.json", shard)
			},
		})
	}
	grow := map[string]any{"type": "Replace", "pattern": map[string]any{"String": "a"}, "content": strings.Repeat("a", 1000)}
	cs = append(cs,
		hcase{
			name:   "normalizer growing text 1000^5 times",
			v2:     true,
			expect: []string{"tokenizer.json"},
			plant: func(_ *env, _, src string) ([]string, error) {
				return nil, editJSON(filepath.Join(src, "tokenizer.json"), func(tj map[string]any) {
					tj["normalizer"] = map[string]any{"type": "Sequence", "normalizers": []any{grow, grow, grow, grow, grow}}
				})
			},
			check: refusedTokenizer,
		},
		hcase{
			name:   "sparse 8 GiB tokenizer.json",
			v2:     true,
			expect: []string{"tokenizer.json"},
			plant: func(_ *env, _, src string) ([]string, error) {
				f, err := os.Create(filepath.Join(src, "tokenizer.json"))
				if err != nil {
					return nil, err
				}
				defer f.Close()
				return nil, f.Truncate(8 << 30)
			},
			check: refusedTokenizer,
		},
		hcase{
			name:   "header with 10^6 tensors",
			expect: []string{badinput.BadShard},
			plant: func(_ *env, _, src string) ([]string, error) {
				return nil, manyTensors(filepath.Join(src, badinput.BadShard), 1_000_000)
			},
			check: goodShard,
		},
		hcase{
			name:   "300k stale index entries",
			expect: []string{"listed in the index"},
			plant: func(_ *env, _, src string) ([]string, error) {
				return nil, badinput.EditIndex(src, func(m map[string]string) {
					for i := range 300_000 {
						m[fmt.Sprintf("stale.%d.weight", i)] = badinput.GoodShard
					}
				})
			},
			check: goodShard,
		},
		hcase{
			name:   "symlink to a file outside the checkpoint",
			expect: []string{"notes.txt"},
			plant: func(_ *env, dir, src string) ([]string, error) {
				secret := filepath.Join(dir, "outside", "secret.txt")
				if err := os.MkdirAll(filepath.Dir(secret), 0o700); err != nil {
					return nil, err
				}
				if err := os.WriteFile(secret, []byte("not to be served\n"), 0o600); err != nil {
					return nil, err
				}
				return nil, os.Symlink(secret, filepath.Join(src, "notes.txt"))
			},
			check: func(e *env, mnt string) error {
				if _, err := os.Lstat(filepath.Join(mnt, "source", "notes.txt")); !errors.Is(err, fs.ErrNotExist) {
					return fmt.Errorf("source/notes.txt, a link out of the checkpoint, is served (%v)", err)
				}
				return goodShard(e, mnt)
			},
		},
		hcase{
			name:   "tensor name not valid UTF-8",
			expect: []string{"UTF-8"},
			plant: func(_ *env, _, src string) ([]string, error) {
				return nil, badName(filepath.Join(src, badinput.BadShard))
			},
			check: goodShard,
		},
		hcase{
			name:   "poisoned --cache-dir entry",
			expect: []string{"corrupt entry"},
			plant: func(e *env, dir, _ string) ([]string, error) {
				cache, entry, err := copyCache(e, dir)
				if err != nil {
					return nil, err
				}
				b, err := os.ReadFile(entry)
				if err != nil {
					return nil, err
				}
				b[len(b)/2] ^= 0x01
				return []string{"--cache-dir", cache}, os.WriteFile(entry, b, 0o644)
			},
			check: sameQ2,
		},
		hcase{
			name:   "FIFO at a --cache-dir entry",
			expect: []string{"named pipe"},
			plant: func(e *env, dir, _ string) ([]string, error) {
				cache, entry, err := copyCache(e, dir)
				if err != nil {
					return nil, err
				}
				if err := os.Remove(entry); err != nil {
					return nil, err
				}
				return []string{"--cache-dir", cache}, syscall.Mkfifo(entry, 0o644)
			},
			check: sameQ2,
		},
	)
	return cs
}

// runCase plants c in a fresh copy of v41-tiny under dir, mounts it and
// measures.
func runCase(e *env, dir string, c hcase) (r result) {
	os.RemoveAll(dir)
	// The copy keeps the checkpoint's directory name, which q2/README.md
	// shows.
	base := e.tiny
	if c.v2 {
		base = e.v2
	}
	src, mnt := filepath.Join(dir, filepath.Base(base)), filepath.Join(dir, "mnt")
	failf := func(format string, a ...any) { r.fails = append(r.fails, fmt.Sprintf(format, a...)) }
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		failf("setting up: %v", err)
		return r
	}
	if out, err := exec.Command("cp", "-a", base, src).CombinedOutput(); err != nil {
		failf("copying the checkpoint: %v %s", err, out)
		return r
	}
	args, err := c.plant(e, dir, src)
	if err != nil {
		failf("planting: %v", err)
		return r
	}
	logPath := filepath.Join(dir, "log")
	logf, err := os.Create(logPath)
	if err != nil {
		failf("%v", err)
		return r
	}
	defer logf.Close()
	// --device cpu: the GPU probe's note differs from run to run.
	cmd := exec.Command(e.dsfs, append(append([]string{"mount", "--device", "cpu", "--cache-mb", strconv.Itoa(*flagCacheMB)}, args...), src, mnt)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	start := time.Now()
	if err := cmd.Start(); err != nil {
		failf("starting dsfs: %v", err)
		return r
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	pid := cmd.Process.Pid
	defer syscall.Unmount(mnt, syscall.MNT_DETACH) // after a kill; a clean exit unmounted already

	// Wait for readiness, watching memory.
	stats := filepath.Join(mnt, ".dsfs", "stats.json")
	deadline := start.Add(*flagTimeout)
	var hwm int64
	alive := true
wait:
	for {
		hwm = max(hwm, procKiB(pid, "VmHWM"))
		switch {
		case procKiB(pid, "VmRSS") > int64(*flagRSSKill)<<10:
			failf("RSS passed %d MiB before it was ready: stopped", *flagRSSKill)
			break wait
		case readable(stats):
			r.ready = time.Since(start)
			break wait
		case time.Now().After(deadline):
			failf("not ready after %v", *flagTimeout)
			break wait
		}
		select {
		case <-exited:
			failf("dsfs exited before it was ready")
			alive = false
			break wait
		case <-time.After(20 * time.Millisecond):
		}
	}
	if r.ready > 0 && c.check != nil {
		if err := within(60*time.Second, func() error { return c.check(e, mnt) }); err != nil {
			failf("good parts: %v", err)
		}
	}
	hwm = max(hwm, procKiB(pid, "VmHWM"))
	r.hwmMiB = hwm >> 10
	if limit := int64(*flagCacheMB + 300); r.hwmMiB > limit {
		failf("peak RSS %d MiB over the cache budget + 300 MiB (%d)", r.hwmMiB, limit)
	}
	if alive {
		stop := time.Now()
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
			r.stopped = max(time.Since(stop), time.Nanosecond)
		case <-time.After(2 * time.Second):
			failf("still running 2 s after SIGTERM: killed")
			cmd.Process.Kill()
			<-exited
		}
	}

	logf.Sync()
	var lines []string
	for _, l := range problemLines(logPath) {
		if !e.baseline[withoutTime(l)] {
			lines = append(lines, l)
		}
	}
	r.problems = len(lines)
	if len(lines) > 0 {
		r.first = lines[0]
	}
	switch {
	case len(lines) == 0:
		failf("no problem logged")
	case len(lines) > *flagMaxLines:
		failf("%d problem lines (at most %d)", len(lines), *flagMaxLines)
	}
	if len(lines) > 0 && !anyHolds(lines, c.expect) {
		failf("no problem line holds %q", c.expect)
	}
	return r
}

// problemLines are the WARN and ERROR lines of a dsfs log.
func problemLines(path string) []string {
	b, _ := os.ReadFile(path)
	var out []string
	for l := range strings.SplitSeq(string(b), "\n") {
		if strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") {
			out = append(out, l)
		}
	}
	return out
}

// withoutTime is a log line without its time= field.
func withoutTime(l string) string {
	if rest, ok := strings.CutPrefix(l, "time="); ok {
		if _, after, ok := strings.Cut(rest, " "); ok {
			return after
		}
	}
	return l
}

// anyHolds reports whether one line holds every phrase.
func anyHolds(lines, phrases []string) bool {
	for _, l := range lines {
		ok := true
		for _, p := range phrases {
			ok = ok && strings.Contains(l, p)
		}
		if ok {
			return true
		}
	}
	return false
}

// procKiB reads a "Vm..." line of /proc/PID/status, in KiB (0 when gone).
func procKiB(pid int, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for l := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, field+":"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n
			}
		}
	}
	return 0
}

// readable reports whether path can be looked up within a second (a
// mount that hangs is not ready), as the integration tests wait for it.
func readable(path string) bool {
	return within(time.Second, func() error { _, err := os.Stat(path); return err }) == nil
}

// within runs fn and gives up waiting for it after d (fn may then go on,
// blocked in a read that the unmount will end).
func within(d time.Duration, fn func() error) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("no answer within %v", d)
	}
}

// goodShard reads a good shard of nvfp4/ and manifest/summary.json (from
// the headers and config, so cheap) whole.
func goodShard(_ *env, mnt string) error {
	return readWhole(mnt, "nvfp4/"+badinput.GoodShard, "manifest/summary.json")
}

// goodV2 reads what a v2lite-tiny mount serves from its config and
// tokenizer: the manifest summary, trace/'s prompts (encoded with the
// tokenizer) and a shard of nvfp4/.
func goodV2(_ *env, mnt string) error {
	shard, err := firstShard(mnt)
	if err != nil {
		return err
	}
	return readWhole(mnt, "manifest/summary.json", "trace/prompts.json", shard)
}

// refusedTokenizer checks a v2lite-tiny mount whose tokenizer.json is
// refused: the manifest summary and a shard of nvfp4/ are served, and
// trace/ERROR.txt says the prompts cannot be encoded, naming the file.
func refusedTokenizer(_ *env, mnt string) error {
	shard, err := firstShard(mnt)
	if err != nil {
		return err
	}
	if err := readWhole(mnt, "manifest/summary.json", shard); err != nil {
		return err
	}
	b, err := os.ReadFile(filepath.Join(mnt, "trace", "ERROR.txt"))
	if err != nil {
		return err
	}
	if !strings.Contains(string(b), "tokenizer.json") {
		return fmt.Errorf("trace/ERROR.txt does not name tokenizer.json:\n%s", b)
	}
	return nil
}

// readWhole reads each of the files, relative to mnt, whole; an empty
// one is an error.
func readWhole(mnt string, rels ...string) error {
	for _, rel := range rels {
		b, err := os.ReadFile(filepath.Join(mnt, rel))
		if err == nil && len(b) == 0 {
			err = errors.New("empty")
		}
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
	}
	return nil
}

// firstShard is the path, relative to mnt, of the first shard of nvfp4/.
func firstShard(mnt string) (string, error) {
	shards, _ := filepath.Glob(filepath.Join(mnt, "nvfp4", "*.safetensors"))
	if len(shards) == 0 {
		return "", errors.New("nvfp4/ holds no shard")
	}
	return filepath.Rel(mnt, shards[0])
}

// sameQ2 compares every file of q2/ with the export made without a cache.
func sameQ2(e *env, mnt string) error {
	return filepath.WalkDir(e.q2ref, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(e.q2ref, p)
		want, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		got, err := os.ReadFile(filepath.Join(mnt, "q2", rel))
		if err != nil {
			return fmt.Errorf("q2/%s: %w", rel, err)
		}
		if !bytes.Equal(got, want) {
			return fmt.Errorf("q2/%s differs from the export", rel)
		}
		return nil
	})
}

// copyCache copies the filled cache dir into dir and returns the copy and
// the path of one of its block entries.
func copyCache(e *env, dir string) (cache, entry string, err error) {
	cache = filepath.Join(dir, "cache")
	if out, err := exec.Command("cp", "-a", e.cache, cache).CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("copying the cache dir: %v %s", err, out)
	}
	entries, _ := filepath.Glob(filepath.Join(cache, "[0-9a-f][0-9a-f]", "*"))
	for _, p := range entries {
		if len(filepath.Base(p)) == 64 {
			return cache, p, nil
		}
	}
	return "", "", errors.New("the cache dir holds no entry")
}

// editConfig sets a key of config.json.
func editConfig(src, key string, v any) error {
	return editJSON(filepath.Join(src, "config.json"), func(cfg map[string]any) { cfg[key] = v })
}

// editJSON rewrites the JSON object in file p with edit.
func editJSON(p string, edit func(map[string]any)) error {
	b, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	edit(m)
	if b, err = json.Marshal(m); err != nil {
		return err
	}
	return os.WriteFile(p, b, 0o644)
}

// manyTensors adds n one-byte U8 tensors after the data of a shard.
func manyTensors(path string, n int) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	hlen := int(binary.LittleEndian.Uint64(b))
	header, data := b[8:8+hlen], b[8+hlen:]
	// Append entries to the JSON object by hand: marshalling a map of 10^6
	// entries would cost the harness what it measures in dsfs.
	var h bytes.Buffer
	h.Write(bytes.TrimSuffix(bytes.TrimSpace(header), []byte("}")))
	end := len(data)
	for i := range n {
		fmt.Fprintf(&h, `,"hostile.%d.weight":{"dtype":"U8","shape":[1],"data_offsets":[%d,%d]}`, i, end+i, end+i+1)
	}
	h.WriteByte('}')
	return badinput.WriteShard(path, h.Bytes(), append(data, make([]byte, n)...))
}

// badName renames the last tensor of a shard to a name whose JSON escape is
// a lone surrogate, which no UTF-8 string can hold.
func badName(path string) error {
	const placeholder = "HOSTILE-PLACEHOLDER-NAME"
	var last string
	err := badinput.RewriteHeader(path, func(h map[string]map[string]any) error {
		last = badinput.LastTensor(h)
		h[placeholder] = h[last]
		delete(h, last)
		return nil
	})
	if err != nil {
		return err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	hlen := int(binary.LittleEndian.Uint64(b))
	header := bytes.Replace(b[8:8+hlen], []byte(placeholder), []byte(`bad\ud800name.weight`), 1)
	return badinput.WriteShard(path, header, b[8+hlen:])
}

// clip shortens s to n bytes.
func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
