// Package layering keeps dsfs's packages in the floors docs/DESIGN.md
// draws: a package imports packages of its own floor or of floors below,
// never one above, and every package of the module is on a floor and in
// DESIGN.md's package table. It holds tests only.
package layering

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// module is the import path every package of dsfs starts with.
const module = "github.com/dsfs/dsfs"

// The floors of DESIGN.md's drawing, bottom up. Within a floor a package
// may import another (Go refuses cycles, so the imports stay a tree).
const (
	base     = iota // formats, arithmetic and source bytes
	catalog         // the checkpoint catalog
	files           // virtual files and the caches they are read through
	engines         // what a view computes, and the trace core
	families        // what needs a model family's arithmetic
	assembly        // views: catalog -> trees of files
	serving         // the mount and the tools the CLI runs
	cli             // cmd/dsfs
	harness         // end-to-end tests, benchmarks, test helpers
)

var floorNames = [...]string{
	base:     "base",
	catalog:  "catalog",
	files:    "files",
	engines:  "engines",
	families: "families",
	assembly: "assembly",
	serving:  "serving",
	cli:      "cli",
	harness:  "harness",
}

// floors places every package of the module, by its path inside the
// module, on a floor.
var floors = map[string]int{
	"safetensors":              base,
	"simd":                     base,
	"codecs":                   base,
	"codecs/internal/ggmlfp16": base,
	"codecs/iq2xxs":            base,
	"codecs/q2k":               base,
	"codecs/q8_0":              base,
	"sourcefile":               base,
	"tokenizer":                base,
	"internal/build":           base,
	"internal/scratch":         base,
	"figures":                  base,
	"objstore":                 base,

	"checkpoint": catalog,

	"blockcache": files,
	"diskcache":  files,
	"vfile":      files,
	"tensorfile": files,

	"nvfp4":         engines,
	"engramfp4":     engines,
	"q2":            engines,
	"inventory":     engines,
	"trace":         engines,
	"trace/backend": engines,

	// The families register with the trace core, so the core never sees
	// them; gguf reads V2/V3 and V4 configs through their engines.
	"trace/deepseek2":         families,
	"trace/v4":                families,
	"trace/internal/v4family": families,
	"trace/deepseek4":         families,
	"trace/deepseek41":        families,
	"cuda":                    families,
	"gguf":                    families,

	"views": assembly,

	"vfs":               serving,
	"check":             serving,
	"q2check":           serving,
	"synth":             serving,
	"hfcache":           serving,
	"internal/sdnotify": serving,

	"cmd/dsfs": cli,

	"integration":        harness,
	"internal/s3test":    harness,
	"bench/fusebench":    harness,
	"bench/gpucheck":     harness,
	"bench/hostile":      harness,
	"bench/memfs":        harness,
	"internal/badinput":  harness,
	"internal/fp8ckpt":   harness,
	"internal/fuzzcheck": harness,
	"internal/ggufread":  harness,
	"internal/layering":  harness,
	"internal/tinyckpt":  harness,
	"internal/v4tiny":    harness,
	"internal/vecbench":  harness,
	"internal/warmmem":   harness,
}

// pkg is what the tests read of a package: its path inside the module and
// the packages of the module it imports (test files left out: a test may
// reach up, as q2check's builds views to check them).
type pkg struct {
	path    string
	imports []string
}

// list lists the module's packages with go list.
func list(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports", module+"/...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.Bytes())
	}
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list's output: %v", err)
		}
		q := pkg{path: inModule(p.ImportPath)}
		for _, imp := range p.Imports {
			if strings.HasPrefix(imp, module+"/") {
				q.imports = append(q.imports, inModule(imp))
			}
		}
		pkgs = append(pkgs, q)
	}
	if len(pkgs) == 0 {
		t.Fatal("go list found no package")
	}
	return pkgs
}

func inModule(importPath string) string { return strings.TrimPrefix(importPath, module+"/") }

// TestFloors checks every import of every package of the module against
// floors.
func TestFloors(t *testing.T) {
	pkgs := list(t)
	listed := make(map[string]bool)
	for _, p := range pkgs {
		listed[p.path] = true
		from, ok := floors[p.path]
		if !ok {
			t.Errorf("%s is on no floor: add it to floors in internal/layering/layering_test.go, and to the drawing and the package table of docs/DESIGN.md", p.path)
			continue
		}
		for _, imp := range p.imports {
			to, ok := floors[imp]
			switch {
			case !ok:
				t.Errorf("%s imports %s, which is on no floor: add it to floors in internal/layering/layering_test.go and to docs/DESIGN.md", p.path, imp)
			case to > from:
				t.Errorf("%s (floor %s) imports %s (floor %s, above it): a package may import only its own floor and those below (docs/DESIGN.md, Layers)",
					p.path, floorNames[from], imp, floorNames[to])
			}
		}
	}
	for path := range floors {
		if !listed[path] {
			t.Errorf("floors places %s, which go list does not list: remove it", path)
		}
	}
}

// TestDesignNamesEveryPackage checks that docs/DESIGN.md's package table
// names every package below the harness floor (the harness's may be
// named as groups).
func TestDesignNamesEveryPackage(t *testing.T) {
	design, err := os.ReadFile("../../docs/DESIGN.md")
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	for path, floor := range floors {
		if floor == harness {
			continue
		}
		if !bytes.Contains(design, []byte("`"+path+"`")) && !bytes.Contains(design, []byte("`"+path+"/`")) {
			missing = append(missing, path)
		}
	}
	slices.Sort(missing)
	for _, path := range missing {
		t.Errorf("docs/DESIGN.md does not name `%s/` in its package table: add a row saying its one job and what it imports", path)
	}
}
