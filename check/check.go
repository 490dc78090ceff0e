// Package check verifies views from the outside, the way a user would: it
// reads view directories as ordinary files (a mount or an export), decodes
// them with the codecs and compares them with the source checkpoint.
package check

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/codecs"
	"github.com/dsfs/dsfs/vfile"
)

// SameTree compares two directory trees file by file (names and SHA-256)
// and returns one line per difference. JSON documents that differ only in
// the fields allowed to vary between runs (DESIGN.md: *_utc, seconds,
// timing*) count as the same.
func SameTree(a, b string) ([]string, error) {
	ha, err := hashTree(a)
	if err != nil {
		return nil, err
	}
	hb, err := hashTree(b)
	if err != nil {
		return nil, err
	}
	var diffs []string
	for name, h := range ha {
		switch hb2, ok := hb[name]; {
		case !ok:
			diffs = append(diffs, name+": only in "+a)
		case hb2 != h:
			if strings.HasSuffix(name, ".json") {
				same, err := sameJSON(filepath.Join(a, name), filepath.Join(b, name))
				if err != nil {
					return nil, err
				}
				if same {
					continue
				}
			}
			diffs = append(diffs, name+": contents differ")
		}
	}
	for name := range hb {
		if _, ok := ha[name]; !ok {
			diffs = append(diffs, name+": only in "+b)
		}
	}
	return diffs, nil
}

func sameJSON(a, b string) (bool, error) {
	var docs [2]any
	for i, p := range []string{a, b} {
		data, err := os.ReadFile(p)
		if err != nil {
			return false, err
		}
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		if err := dec.Decode(&docs[i]); err != nil {
			return false, fmt.Errorf("%s: %w", p, err)
		}
		docs[i] = dropTimings(docs[i])
	}
	return reflect.DeepEqual(docs[0], docs[1]), nil
}

func dropTimings(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if strings.HasSuffix(k, "_utc") || k == "seconds" || strings.HasPrefix(k, "timing") {
				delete(v, k)
				continue
			}
			v[k] = dropTimings(x)
		}
	case []any:
		for i, x := range v {
			v[i] = dropTimings(x)
		}
	}
	return v
}

func hashTree(root string) (map[string]string, error) {
	out := make(map[string]string)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		h, err := hashFile(p)
		out[filepath.ToSlash(rel)] = h
		return err
	})
	return out, err
}

func hashFile(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	sum, err := vfile.SHA256(context.Background(), f, 0, fi.Size())
	if err != nil {
		return "", fmt.Errorf("%s: %w", p, err)
	}
	return sum, nil
}

// Unserved returns the first line of the ERROR.txt a view directory holds
// when the view cannot serve everything of its checkpoint (alone when it
// serves nothing), or "" when it has none.
func Unserved(viewDir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(viewDir, "ERROR.txt"))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	first, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	return first, nil
}

// NVFP4Result summarises an NVFP4 check.
type NVFP4Result struct {
	Experts int   // experts the view holds as NVFP4
	Kept    int   // MTP experts the view keeps as MXFP4 (without --nvfp4-mtp)
	Blocks  int64 // source 32-blocks compared
	Differ  int64 // blocks whose NVFP4 decode differs from the MXFP4 decode
	Lossy   int64 // blocks the view's TRANSCODE.json counts as lossy
}

// NVFP4 decodes every expert of the source (MXFP4) and of the nvfp4 view
// and counts the 32-blocks whose float32 values differ in any bit; a correct
// view differs exactly in the blocks its report counts as lossy. Every
// routed expert must be NVFP4 with its input_scale; an MTP expert is
// either NVFP4 too or kept byte for byte as the source's MXFP4.
func NVFP4(srcDir, viewDir string) (NVFP4Result, error) {
	var r NVFP4Result
	src, view, err := openPair(srcDir, viewDir)
	if err != nil {
		return r, err
	}
	defer src.Close()
	defer view.Close()
	for _, t := range src.Tensors {
		if t.Format != checkpoint.FormatMXFP4 || t.Scale == nil ||
			(t.Role != checkpoint.RoleRoutedExpert && t.Role != checkpoint.RoleMTPExpert) {
			continue
		}
		b := strings.TrimSuffix(t.Name, ".weight")
		w, sc, err := readPair(t, t.Scale)
		if err != nil {
			return r, err
		}
		if t.Role == checkpoint.RoleMTPExpert && view.Tensor(b+".weight_scale") == nil {
			vw, vsc, err := readPair(view.Tensor(t.Name), view.Tensor(t.Scale.Name))
			if err != nil {
				return r, fmt.Errorf("nvfp4 view: MTP expert %s kept as MXFP4: %w", b, err)
			}
			if !bytes.Equal(w, vw) || !bytes.Equal(sc, vsc) {
				return r, fmt.Errorf("nvfp4 view: MTP expert %s kept as MXFP4: bytes differ from the source", b)
			}
			r.Kept++
			continue
		}
		if in, err := read(view.Tensor(b + ".input_scale")); err != nil || len(in) != 4 {
			return r, fmt.Errorf("nvfp4 view: %s.input_scale: %v", b, err)
		}
		vw, vs, err := readPair(view.Tensor(b+".weight"), view.Tensor(b+".weight_scale"))
		if err != nil {
			return r, fmt.Errorf("nvfp4 view: %s: %w", b, err)
		}
		g, err := read(view.Tensor(b + ".weight_scale_2"))
		if err != nil || len(g) != 4 {
			return r, fmt.Errorf("nvfp4 view: %s.weight_scale_2: %v", b, err)
		}
		if !bytes.Equal(w, vw) {
			return r, fmt.Errorf("nvfp4 view: %s.weight: bytes differ from the source", b)
		}
		want := make([]float32, 2*len(w))
		got := make([]float32, 2*len(w))
		codecs.DecodeMXFP4(want, w, sc)
		codecs.DecodeNVFP4(got, vw, vs, math.Float32frombits(binary.LittleEndian.Uint32(g)))
		for i := 0; i < len(want); i += codecs.MXBlock {
			for j := i; j < i+codecs.MXBlock; j++ {
				if math.Float32bits(want[j]) != math.Float32bits(got[j]) && !(isNaN(want[j]) && isNaN(got[j])) {
					r.Differ++
					break
				}
			}
		}
		r.Experts++
		r.Blocks += int64(len(sc))
	}
	var rep struct {
		Totals codecs.NVFP4Counts `json:"totals"`
	}
	b, err := os.ReadFile(filepath.Join(viewDir, "TRANSCODE.json"))
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		return r, fmt.Errorf("TRANSCODE.json: %w", err)
	}
	r.Lossy = rep.Totals.Lossy
	return r, nil
}

// EngramResult summarises an Engram check.
type EngramResult struct {
	Tables     int
	Rows       int64
	MeanCosine float64 // over rows with a defined cosine
	MinCosine  float64
}

// Engram decodes every Engram table of the source (FP8) and of the
// engram-fp4 view (FP4 with E8M0 block scales, decoded like MXFP4) and
// measures their per-row cosine similarity.
func Engram(srcDir, viewDir string) (EngramResult, error) {
	r := EngramResult{MinCosine: 1}
	src, view, err := openPair(srcDir, viewDir)
	if err != nil {
		return r, err
	}
	defer src.Close()
	defer view.Close()
	var sum float64
	var n int64
	for _, t := range src.Tensors {
		if t.Role != checkpoint.RoleEngram || t.Scale == nil || len(t.Shape) != 2 {
			continue
		}
		w, sc, err := readPair(t, t.Scale)
		if err != nil {
			return r, err
		}
		vw, vs, err := readPair(view.Tensor(t.Name), view.Tensor(t.Scale.Name))
		if err != nil {
			return r, fmt.Errorf("engram-fp4 view: %s: %w", t.Name, err)
		}
		cols := int(t.Shape[1])
		nb := cols / codecs.MXBlock
		dec := make([]float32, cols)
		for row := range int(t.Shape[0]) {
			codecs.DecodeMXFP4(dec, vw[row*cols/2:(row+1)*cols/2], vs[row*nb:(row+1)*nb])
			var dot, a2, b2 float64
			for j := range cols {
				v := codecs.E4M3ToFloat64(w[row*cols+j]) * codecs.E8M0ToFloat64(sc[row*nb+j/codecs.MXBlock])
				d := float64(dec[j])
				dot += v * d
				a2 += v * v
				b2 += d * d
			}
			if a2 == 0 || b2 == 0 || math.IsNaN(dot) {
				continue
			}
			c := dot / math.Sqrt(a2*b2)
			sum += c
			n++
			r.MinCosine = min(r.MinCosine, c)
		}
		r.Tables++
		r.Rows += t.Shape[0]
	}
	if n > 0 {
		r.MeanCosine = sum / float64(n)
	}
	return r, nil
}

// openPair opens a source checkpoint and a view of it as catalogs.
func openPair(srcDir, viewDir string) (src, view *checkpoint.Catalog, err error) {
	if src, err = checkpoint.Open(srcDir); err != nil {
		return nil, nil, err
	}
	if view, err = checkpoint.Open(viewDir); err != nil {
		src.Close()
		return nil, nil, err
	}
	return src, view, nil
}

func readPair(a, b *checkpoint.Tensor) ([]byte, []byte, error) {
	x, err := read(a)
	if err != nil {
		return nil, nil, err
	}
	y, err := read(b)
	return x, y, err
}

func read(t *checkpoint.Tensor) ([]byte, error) {
	if t == nil {
		return nil, fmt.Errorf("tensor missing")
	}
	b := make([]byte, t.Size)
	if _, err := t.ReadAt(b, 0); err != nil {
		return nil, err
	}
	return b, nil
}

func isNaN(f float32) bool { return f != f }

// PrintExpertSample prints the first values of one routed expert decoded
// from the source (MXFP4) and from the nvfp4 view, side by side.
func PrintExpertSample(w io.Writer, srcDir, viewDir string) error {
	src, view, err := openPair(srcDir, viewDir)
	if err != nil {
		return err
	}
	defer src.Close()
	defer view.Close()
	for _, t := range src.Tensors {
		if t.Role != checkpoint.RoleRoutedExpert || t.Format != checkpoint.FormatMXFP4 || t.Scale == nil {
			continue
		}
		b := strings.TrimSuffix(t.Name, ".weight")
		const n = 8
		wt, sc, err := readPair(t, t.Scale)
		if err != nil {
			return err
		}
		vw, vs, err := readPair(view.Tensor(b+".weight"), view.Tensor(b+".weight_scale"))
		if err != nil {
			return fmt.Errorf("nvfp4 view: %s: %w", b, err)
		}
		g, err := read(view.Tensor(b + ".weight_scale_2"))
		if err != nil {
			return err
		}
		mx := make([]float32, codecs.MXBlock)
		nv := make([]float32, codecs.MXBlock)
		codecs.DecodeMXFP4(mx, wt[:codecs.MXBlock/2], sc[:1])
		codecs.DecodeNVFP4(nv, vw[:codecs.MXBlock/2], vs[:2], math.Float32frombits(binary.LittleEndian.Uint32(g)))
		fmt.Fprintf(w, "\n%s, row 0 (scale 2^%d; nvfp4 weight_scale_2 = %g)\n", b, int(sc[0])-127, math.Float32frombits(binary.LittleEndian.Uint32(g)))
		fmt.Fprintf(w, "  %-4s %14s %14s\n", "i", "source mxfp4", "nvfp4 view")
		for i := range n {
			fmt.Fprintf(w, "  %-4d %14g %14g\n", i, mx[i], nv[i])
		}
		return nil
	}
	return fmt.Errorf("%s: no MXFP4 routed expert to show", srcDir)
}
