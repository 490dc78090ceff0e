package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dsfs/dsfs/blockcache"
	"github.com/dsfs/dsfs/check"
	"github.com/dsfs/dsfs/synth"
	"github.com/dsfs/dsfs/trace"
	"github.com/dsfs/dsfs/views"
)

const demoPreset = "v41-tiny"

func runDemo(args []string) error {
	fs := flags("demo")
	doCheck := fs.Bool("check", false, "verify every view against the exporter and the codecs, then unmount and exit")
	preset := fs.String("preset", demoPreset, "synthetic checkpoint to show: "+presetNames())
	pos, err := parse(fs, args, 0, 1)
	if err != nil {
		return err
	}
	// A signal at any point ends the demo through the same clean-up as a
	// normal end: the mount is undone and the temporary files removed.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sig)
	tmp, err := os.MkdirTemp("", "dsfs-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	d := &demo{preset: *preset, check: *doCheck, tmp: tmp, src: filepath.Join(tmp, "src"), mnt: filepath.Join(tmp, "mnt")}
	if len(pos) == 1 {
		d.mnt = pos[0]
	}
	defer d.stop()
	done := make(chan error, 1)
	go func() { done <- d.run() }()
	select {
	case err := <-done:
		if err != nil {
			return err
		}
		if err := d.stop(); err != nil {
			return err
		}
		if d.check {
			fmt.Printf("check passed: %d views checked", d.checked)
			if len(d.notRun) > 0 {
				fmt.Printf("; not run here: %s", strings.Join(d.notRun, ", "))
			}
			fmt.Println()
		}
		return nil
	case s := <-sig:
		fmt.Fprintf(os.Stderr, "dsfs demo: %v: unmounting and removing %s\n", s, tmp)
		if err := d.stop(); err != nil {
			return err
		}
		if d.check || !d.ready() {
			return fmt.Errorf("interrupted by %v", s)
		}
		return nil
	}
}

// demo is one run of dsfs demo; stop may come from a signal while run is
// still starting the mount.
type demo struct {
	preset        string
	check         bool
	tmp, src, mnt string

	mu      sync.Mutex
	child   *mountProcess
	stopped bool

	// checked counts the views --check verified; notRun names those that
	// cannot run on this checkpoint (their ERROR.txt), not counted.
	checked int
	notRun  []string
}

// run synthesises, mounts, shows and (with check) verifies; without check
// it returns only if the mount process exits on its own.
func (d *demo) run() error {
	if err := os.MkdirAll(d.mnt, 0o755); err != nil {
		return err
	}
	fmt.Printf("synthesising %s into %s\n", d.preset, d.src)
	if err := synth.Write(d.preset, d.src); err != nil {
		return err
	}
	d.mu.Lock()
	if d.stopped {
		d.mu.Unlock()
		return errors.New("stopped")
	}
	child, err := startMount(d.src, d.mnt)
	d.child = child
	d.mu.Unlock()
	if err != nil {
		return err
	}
	if err := printTree(d.mnt); err != nil {
		return err
	}
	if !mlaPreset(d.preset) {
		if err := check.PrintExpertSample(os.Stdout, filepath.Join(d.mnt, "source"), filepath.Join(d.mnt, "nvfp4")); err != nil {
			return err
		}
	}
	if err := printTraceSample(os.Stdout, filepath.Join(d.mnt, "trace")); err != nil {
		return err
	}
	if d.check {
		return d.verify()
	}
	fmt.Printf("\nmounted at %s — try: ls -l %s/nvfp4; cat %s/.dsfs/stats.json\nCtrl-C to unmount and exit.\n", d.mnt, d.mnt, d.mnt)
	<-child.done
	return fmt.Errorf("mount process exited: %v", child.err)
}

// ready reports whether the mount was up.
func (d *demo) ready() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.child != nil
}

// stop undoes the mount, if one was made, and keeps run from making one.
func (d *demo) stop() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stopped = true
	if d.child == nil {
		return nil
	}
	return d.child.stop()
}

// verify checks the mounted views against an in-process export and the
// codecs, and trace/ for what it computed (check.Trace), one line each. A
// view that cannot run on this checkpoint (it serves an ERROR.txt) is
// named with its reason and not counted as checked; trace/ must run,
// since every preset can trace. It returns the first error or a list of
// the failed checks.
func (d *demo) verify() error {
	cache := blockcache.New(256<<20, runtime.NumCPU())
	s, err := openSource(d.src, views.Options{Cache: cache})
	if err != nil {
		cache.Close()
		return err
	}
	defer s.Close()
	defer cache.Close() // computations stop before the sources close
	var failed []string
	ran := map[string]bool{}
	for _, v := range s.set.Root.Children {
		dir := filepath.Join(d.mnt, v.Name)
		why, err := check.Unserved(dir)
		if err != nil {
			return err
		}
		if why != "" && v.Name != "trace" {
			fmt.Printf("check %-18s not run: %s\n", v.Name+"/", why)
			d.notRun = append(d.notRun, v.Name+"/")
			continue
		}
		out := filepath.Join(d.tmp, "export", v.Name)
		if _, err := export(context.Background(), v, cache, out); err != nil {
			return err
		}
		diffs, err := check.SameTree(dir, out)
		if err != nil {
			return err
		}
		fmt.Printf("check %-18s mount == export: %d files differ\n", v.Name+"/", len(diffs))
		failed = append(failed, diffs...)
		ran[v.Name] = true
		d.checked++
	}
	if ran["nvfp4"] {
		r, err := check.NVFP4(filepath.Join(d.mnt, "source"), filepath.Join(d.mnt, "nvfp4"))
		if err != nil {
			return err
		}
		fmt.Printf("check nvfp4/ decode == mxfp4 decode: %d experts, %d blocks, %d differ (%d lossy expected); %d MTP experts kept as MXFP4\n",
			r.Experts, r.Blocks, r.Differ, r.Lossy, r.Kept)
		if r.Experts > 0 && r.Differ != r.Lossy {
			failed = append(failed, fmt.Sprintf("nvfp4: %d blocks decode differently, %d counted lossy", r.Differ, r.Lossy))
		}
	}
	if ran["engram-fp4"] {
		e, err := check.Engram(filepath.Join(d.mnt, "source"), filepath.Join(d.mnt, "engram-fp4"))
		if err != nil {
			return err
		}
		fmt.Printf("check engram-fp4/ tables: %d, rows %d, mean cosine %.5f, worst row %.5f\n", e.Tables, e.Rows, e.MeanCosine, e.MinCosine)
		if e.Tables > 0 && e.MeanCosine < 0.9 {
			failed = append(failed, fmt.Sprintf("engram-fp4: mean cosine %.4f too low", e.MeanCosine))
		}
	}
	if ran["trace"] {
		var ids []string
		for _, p := range trace.DefaultPrompts() {
			ids = append(ids, p.ID)
		}
		r, err := check.Trace(d.src, filepath.Join(d.mnt, "trace"), ids)
		if err != nil {
			failed = append(failed, "trace: "+err.Error())
		} else {
			fmt.Printf("check %-18s %s\n", "trace/", traceFigures(r))
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("check failed:\n  %s", strings.Join(failed, "\n  "))
	}
	return nil
}

// traceFigures is the check trace/ line's account of what was checked.
func traceFigures(r check.TraceResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d prompts (%d tokens) x %d MoE layers: %d routes to %d distinct experts, weights %s",
		r.Prompts, r.Tokens, r.MoELayers, r.Routes, r.TopK, r.Rule)
	if r.WorstSum > 0 {
		fmt.Fprintf(&b, " (sums off by %.1e at most)", r.WorstSum)
	}
	if r.HashRoutes > 0 {
		fmt.Fprintf(&b, ", %d hash routes as tid2eid says", r.HashRoutes)
	}
	fmt.Fprintf(&b, "; %d activations finite; %d files (%.1f MB) read twice, the same bytes", r.Values, r.Files, float64(r.Bytes)/1e6)
	return b.String()
}

// mountProcess is a `dsfs mount` child process.
type mountProcess struct {
	cmd  *exec.Cmd
	mnt  string
	done chan struct{}
	err  error
}

// startMount runs `dsfs mount SRC MNT` as a child process (the serving
// process must not read its own mount) and waits until it is ready.
func startMount(src, mnt string) (*mountProcess, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, "mount", "--cache-mb", "256", src, mnt)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	// The mount process has its own process group, so a Ctrl-C reaches the
	// demo alone, which then stops it; should the demo die without cleaning
	// up (kill -9), the mount process is told to unmount.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &mountProcess{cmd: cmd, mnt: mnt, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(mnt, ".dsfs", "stats.json")); err == nil {
			return p, nil
		}
		select {
		case <-p.done:
			return nil, fmt.Errorf("dsfs mount exited before the mount was ready: %v", p.err)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, errors.New("mount not ready after 30 s")
		}
	}
}

// stop unmounts and waits for the child to exit: SIGTERM makes it detach
// the mount at once and exit when the last file open on it is closed.
func (p *mountProcess) stop() error {
	select {
	case <-p.done:
		return nil
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
		return errors.New("mount process did not exit 30 s after SIGTERM (files held open on it?)")
	}
	return nil
}

// printTree lists the mount, two levels deep, with file sizes.
func printTree(mnt string) error {
	fmt.Printf("\n%s\n", mnt)
	return filepath.WalkDir(mnt, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(mnt, p)
		if rel == "." {
			return nil
		}
		depth := strings.Count(rel, string(filepath.Separator))
		if d.IsDir() {
			fmt.Printf("%s%s/\n", strings.Repeat("  ", depth+1), d.Name())
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		fmt.Printf("%s%-44s %12d\n", strings.Repeat("  ", depth+1), d.Name(), info.Size())
		return nil
	})
}
