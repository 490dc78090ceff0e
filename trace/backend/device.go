package backend

import (
	"errors"
	"fmt"
)

// CheckDevice returns an error unless device is a value --device takes:
// auto (or empty), cpu or cuda.
func CheckDevice(device string) error {
	switch device {
	case "", "auto", "cpu", "cuda":
		return nil
	}
	return fmt.Errorf("unknown device %q (want auto, cpu or cuda)", device)
}

// GPU starts a GPU backend, or says why it cannot (no device, no driver,
// kernels that do not compile). The program that links one passes it to
// Start; the package that implements it (cuda) loads its libraries at
// run time, so a build without CUDA still runs.
type GPU func() (Backend, error)

// Start starts the backend --device names, by one rule for every family:
// "cpu" is the CPU backend; "cuda" is gpu's, and an error when it cannot
// start, since the user asked for it; "auto" (or empty) is gpu's when it
// starts, else the CPU, with note saying why in one line for the log. gpu
// may be nil: a program without a GPU backend.
func Start(device string, gpu GPU) (b Backend, note string, err error) {
	if err := CheckDevice(device); err != nil {
		return nil, "", err
	}
	if device == "cpu" {
		return NewCPU(), "", nil
	}
	if gpu == nil {
		gpu = func() (Backend, error) { return nil, errors.New("this program has no GPU backend") }
	}
	b, err = gpu()
	switch {
	case err == nil:
		return b, "", nil
	case device == "cuda":
		return nil, "", fmt.Errorf("cuda: %w", err)
	}
	return NewCPU(), "trace/ runs layers on the CPU: cuda: " + err.Error(), nil
}
