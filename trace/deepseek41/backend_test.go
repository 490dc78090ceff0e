package deepseek41

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/dsfs/dsfs/trace"
	"github.com/dsfs/dsfs/trace/backend"
	v4 "github.com/dsfs/dsfs/trace/v4"
)

// namedCPU is the CPU backend under a name of its own, so that a test can
// tell a backend's tracer from the host engine's.
type namedCPU struct{ *backend.CPU }

func (namedCPU) Name() string { return "cpu-backend" }

// TestV41TracerBackend checks that a V4.1 tracer whose model runs on a
// backend names it in trace.json and the log's backend, and computes the
// host engine's logits bit for bit.
func TestV41TracerBackend(t *testing.T) {
	host, _ := v41Tracer(t, v4.A8)
	dev, _ := v41Tracer(t, v4.A8, namedCPU{backend.NewCPU()})
	if host.BackendName() != "cpu" || dev.BackendName() != "cpu-backend" {
		t.Errorf("backend names %q and %q, want cpu and cpu-backend", host.BackendName(), dev.BackendName())
	}
	want, err := host.Final(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got, err := dev.Final(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Logits, want.Logits) {
		t.Error("logits on the backend differ from the host engine's")
	}
	b, err := dev.TraceJSON(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Environment trace.Environment `json:"environment"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if e := doc.Environment; e.Backend != "cpu-backend" || !strings.Contains(e.Device, "V4.1 operations") {
		t.Errorf("trace.json environment names backend %q, device %q", e.Backend, e.Device)
	}
}
