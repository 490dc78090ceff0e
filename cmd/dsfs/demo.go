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
	"syscall"
	"time"

	"github.com/dsfs/dsfs/blockcache"
	"github.com/dsfs/dsfs/check"
	"github.com/dsfs/dsfs/synth"
	"github.com/dsfs/dsfs/vfs"
	"github.com/dsfs/dsfs/views"
)

const demoPreset = "v41-tiny"

func runDemo(args []string) error {
	fs := flags("demo")
	doCheck := fs.Bool("check", false, "verify every view against the exporter and the codecs, then unmount and exit")
	preset := fs.String("preset", demoPreset, "synthetic checkpoint to show: "+presetNames()+" (v2lite-tiny and v3-tiny show trace/)")
	pos, err := parse(fs, args, 0, 1)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "dsfs-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	src := filepath.Join(tmp, "src")
	mnt := filepath.Join(tmp, "mnt")
	if len(pos) == 1 {
		mnt = pos[0]
	}
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		return err
	}
	fmt.Printf("synthesising %s into %s\n", *preset, src)
	if err := synth.Write(*preset, src); err != nil {
		return err
	}
	child, err := startMount(src, mnt)
	if err != nil {
		return err
	}
	defer child.stop()

	if err := printTree(mnt); err != nil {
		return err
	}
	if !mlaPreset(*preset) {
		if err := check.PrintExpertSample(os.Stdout, filepath.Join(mnt, "source"), filepath.Join(mnt, "nvfp4")); err != nil {
			return err
		}
	}
	if err := printTraceSample(os.Stdout, filepath.Join(mnt, "trace")); err != nil {
		return err
	}
	if !*doCheck {
		fmt.Printf("\nmounted at %s — try: ls -l %s/nvfp4; cat %s/.dsfs/stats.json\nCtrl-C to unmount and exit.\n", mnt, mnt, mnt)
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
		select {
		case <-sig:
		case <-child.done:
			return fmt.Errorf("mount process exited: %v", child.err)
		}
		return child.stop()
	}
	if err := demoCheck(src, mnt, tmp); err != nil {
		return err
	}
	if err := child.stop(); err != nil {
		return err
	}
	fmt.Println("check passed")
	return nil
}

// demoCheck verifies the mounted views against an in-process export and
// the codecs.
func demoCheck(src, mnt, tmp string) error {
	cache := blockcache.New(256<<20, runtime.NumCPU())
	s, err := openSource(src, views.Options{Cache: cache})
	if err != nil {
		cache.Close()
		return err
	}
	defer s.Close()
	defer cache.Close() // computations stop before the sources close
	var failed []string
	for _, v := range s.set.Root.Children {
		out := filepath.Join(tmp, "export", v.Name)
		if _, err := export(context.Background(), v, cache, out); err != nil {
			return err
		}
		diffs, err := check.SameTree(filepath.Join(mnt, v.Name), out)
		if err != nil {
			return err
		}
		fmt.Printf("check %-18s mount == export: %d files differ\n", v.Name+"/", len(diffs))
		failed = append(failed, diffs...)
	}
	r, err := check.NVFP4(filepath.Join(mnt, "source"), filepath.Join(mnt, "nvfp4"))
	if err != nil {
		return err
	}
	fmt.Printf("check nvfp4/ decode == mxfp4 decode: %d experts, %d blocks, %d differ (%d lossy expected)\n",
		r.Experts, r.Blocks, r.Differ, r.Lossy)
	if r.Experts > 0 && r.Differ != r.Lossy {
		failed = append(failed, fmt.Sprintf("nvfp4: %d blocks decode differently, %d counted lossy", r.Differ, r.Lossy))
	}
	e, err := check.Engram(filepath.Join(mnt, "source"), filepath.Join(mnt, "engram-fp4"))
	if err != nil {
		return err
	}
	fmt.Printf("check engram-fp4/ tables: %d, rows %d, mean cosine %.5f, worst row %.5f\n", e.Tables, e.Rows, e.MeanCosine, e.MinCosine)
	if e.Tables > 0 && e.MeanCosine < 0.9 {
		failed = append(failed, fmt.Sprintf("engram-fp4: mean cosine %.4f too low", e.MeanCosine))
	}
	if len(failed) > 0 {
		return fmt.Errorf("check failed:\n  %s", strings.Join(failed, "\n  "))
	}
	return nil
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

// stop unmounts and waits for the child to exit.
func (p *mountProcess) stop() error {
	select {
	case <-p.done:
		return nil
	default:
	}
	if err := vfs.Unmount(p.mnt); err != nil {
		p.cmd.Process.Signal(syscall.SIGTERM)
	}
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
		return errors.New("mount process did not exit after unmount")
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
