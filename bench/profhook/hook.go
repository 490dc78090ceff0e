//go:build dsfsprof

// This file is not a package of its own: bench/run.sh --profile builds it
// into cmd/dsfs with `go build -tags dsfsprof -overlay`, leaving the tree
// untouched, so that the dsfs process the benchmarks measure can be
// profiled with go tool pprof.
//
// When DSFS_CPUPROFILE names a file, the process profiles its CPU from
// start until SIGUSR1, then writes the CPU profile there and a heap
// profile (allocations and live memory) beside it with the suffix .heap;
// each is written under a temporary name and renamed, so a file that
// exists is complete.

package main

import (
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"syscall"
)

func init() {
	path := os.Getenv("DSFS_CPUPROFILE")
	if path == "" {
		return
	}
	f, err := os.Create(path + ".tmp")
	if err != nil {
		slog.Error("cpu profile", "err", err)
		return
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		slog.Error("cpu profile", "err", err)
		return
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGUSR1)
	go func() {
		<-sig
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			slog.Error("cpu profile", "err", err)
			return
		}
		runtime.GC() // the heap profile shows live memory as of the last GC
		h, err := os.Create(path + ".heap.tmp")
		if err == nil {
			err = pprof.Lookup("heap").WriteTo(h, 0)
			if cerr := h.Close(); err == nil {
				err = cerr
			}
		}
		if err == nil {
			err = os.Rename(path+".heap.tmp", path+".heap")
		}
		if err == nil {
			err = os.Rename(path+".tmp", path)
		}
		if err != nil {
			slog.Error("profiles", "err", err)
		}
	}()
}
