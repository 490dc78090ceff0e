package main

import (
	"log/slog"

	"github.com/dsfs/dsfs/cuda"
	"github.com/dsfs/dsfs/trace/backend"

	// The trace families trace/ runs, registered by their packages.
	_ "github.com/dsfs/dsfs/trace/deepseek2"
	_ "github.com/dsfs/dsfs/trace/deepseek4"
	_ "github.com/dsfs/dsfs/trace/deepseek41"
)

// gpu starts the CUDA backend for trace/'s --device cuda and auto
// (backend.Start): the first GPU, or the reason CUDA cannot be used. The
// view calls it only for a model it can run: CUDA compiles its kernels
// and takes device memory.
func gpu() (backend.Backend, error) {
	return cuda.NewBackend(cuda.Options{Log: slog.Default()})
}
