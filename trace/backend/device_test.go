package backend

import (
	"errors"
	"strings"
	"testing"
)

func TestStart(t *testing.T) {
	gpu := &CPU{} // stands in for a GPU that starts
	works := func() (Backend, error) { return gpu, nil }
	fails := func() (Backend, error) { return nil, errors.New("no CUDA driver") }
	for _, tt := range []struct {
		device string
		gpu    GPU
		want   Backend // nil: a fresh CPU backend
		note   string
		err    string
	}{
		{"cpu", works, nil, "", ""},
		{"cuda", works, gpu, "", ""},
		{"auto", works, gpu, "", ""},
		{"", works, gpu, "", ""},
		{"cuda", fails, nil, "", "cuda: no CUDA driver"},
		{"auto", fails, nil, "trace/ runs layers on the CPU: cuda: no CUDA driver", ""},
		{"auto", nil, nil, "no GPU backend", ""},
		{"cuda", nil, nil, "", "no GPU backend"},
		{"tpu", works, nil, "", "unknown device"},
	} {
		b, note, err := Start(tt.device, tt.gpu)
		switch {
		case tt.err != "":
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%q: error %v, want %q", tt.device, err, tt.err)
			}
			continue
		case err != nil:
			t.Errorf("%q: %v", tt.device, err)
			continue
		}
		if tt.want != nil && b != tt.want {
			t.Errorf("%q: backend %v, want the GPU's", tt.device, b)
		}
		if _, cpu := b.(*CPU); tt.want == nil && (!cpu || b == gpu) {
			t.Errorf("%q: backend %T, want a CPU one", tt.device, b)
		}
		if !strings.Contains(note, tt.note) || (tt.note == "") != (note == "") {
			t.Errorf("%q: note %q, want %q", tt.device, note, tt.note)
		}
	}
}
