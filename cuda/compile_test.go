package cuda

import (
	"os"
	"strings"
	"testing"
)

// requireNVRTC returns the NVRTC library, or skips the test when it cannot
// be loaded, unless DSFS_REQUIRE_NVRTC=1 (CI, which installs it) makes
// that a failure.
func requireNVRTC(t *testing.T) *nvrtc {
	t.Helper()
	nv, err := openNVRTC(0)
	if err != nil {
		if os.Getenv("DSFS_REQUIRE_NVRTC") == "1" {
			t.Fatalf("DSFS_REQUIRE_NVRTC=1 but %v", err)
		}
		t.Skipf("skipping: %v (set DSFS_REQUIRE_NVRTC=1 to make this a failure)", err)
	}
	return nv
}

// TestCompileKernels builds every embedded kernel file for the Ampere and
// Hopper architectures, as cubins (so ptxas runs too) and as PTX, and
// fails on any error or warning in NVRTC's log.
func TestCompileKernels(t *testing.T) {
	nv := requireNVRTC(t)
	srcs, err := sources()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("NVRTC %s, architectures %v", nv.version(), nv.archs)
	for _, s := range srcs {
		for _, tg := range []target{{arch: 80}, {arch: 90}, {arch: 80, ptx: true}} {
			t.Run(s.name+"/"+tg.String(), func(t *testing.T) {
				img, log, err := nv.compile(s.name, s.text, tg)
				if err != nil {
					t.Fatal(err)
				}
				if strings.TrimSpace(log) != "" {
					t.Errorf("NVRTC warnings:\n%s", log)
				}
				if len(img) == 0 {
					t.Fatal("empty image")
				}
				if tg.ptx {
					for _, k := range s.kernels {
						if !strings.Contains(string(img), ".entry "+k+"(") {
							t.Errorf("PTX has no entry %s", k)
						}
					}
				}
			})
		}
	}
}

// TestCompileDiagnostics checks that the log the kernel test inspects
// carries NVRTC's warnings, and that a compile error comes back as a
// *CompileError holding the log.
func TestCompileDiagnostics(t *testing.T) {
	nv := requireNVRTC(t)
	tests := []struct {
		name, src string
		fail      bool
		logHas    string
	}{
		{"warning.cu", `extern "C" __global__ void k(float* x) { int unused = 1; x[0] = 1.0f; }`, false, "unused"},
		{"error.cu", `extern "C" __global__ void k(float* x) { x[0] = undefined_name; }`, true, "undefined_name"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, log, err := nv.compile(tc.name, tc.src, target{arch: 80})
			if tc.fail {
				ce, ok := err.(*CompileError)
				if !ok {
					t.Fatalf("error %v (%T), want a *CompileError", err, err)
				}
				if !strings.Contains(ce.Error(), tc.logHas) || ce.Source != tc.name {
					t.Errorf("error %q does not name %s and %q", ce, tc.name, tc.logHas)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(log, tc.logHas) {
				t.Errorf("log %q lacks the warning about %q", log, tc.logHas)
			}
		})
	}
}
