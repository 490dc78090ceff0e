package main

import (
	"fmt"
	"log/slog"

	"github.com/dsfs/dsfs/cuda"
	"github.com/dsfs/dsfs/trace"
	"github.com/dsfs/dsfs/trace/backend"
)

// traceBackend starts the backend a --device value names, for trace/ to
// run layers on: "cpu"; "cuda", the first GPU or the reason CUDA cannot
// be used; "auto" (or empty), CUDA when it starts, else the CPU. note
// says, in one line, why auto fell back to the CPU, for the log. The view
// calls it only for a model it can run: CUDA compiles its kernels and
// takes device memory.
func traceBackend(device string) (b backend.Backend, note string, err error) {
	switch device {
	case "cpu":
		return backend.NewCPU(), "", nil
	case "cuda":
		b, err := cuda.NewBackend(cuda.Options{Log: slog.Default()})
		if err != nil {
			return nil, "", fmt.Errorf("cuda: %w", err)
		}
		return b, "", nil
	case "", "auto":
		b, err := cuda.NewBackend(cuda.Options{Log: slog.Default()})
		if err != nil {
			return backend.NewCPU(), "trace/ runs layers on the CPU: " + err.Error(), nil
		}
		return b, "", nil
	}
	return nil, "", trace.CheckDevice(device)
}

// traceV4Backend returns what DeepSeek-V4 and V4.1 layers run on for a
// --device value: nil (the host engine) for cpu; for cuda and auto the
// CUDA backend when it starts, else the host, with one line saying why.
// Only an unknown device is an error.
func traceV4Backend(device string) (b backend.Backend, note string, err error) {
	switch device {
	case "cpu":
		return nil, "", nil
	case "cuda", "", "auto":
		cb, err := cuda.NewBackend(cuda.Options{Log: slog.Default()})
		if err != nil {
			return nil, "trace: DeepSeek-V4 layers run on the CPU: cuda: " + err.Error(), nil
		}
		return cb, "", nil
	}
	return nil, "", trace.CheckDevice(device)
}
