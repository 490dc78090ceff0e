package main

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// This file predicts the size of every view shard from the source headers
// with FORMATS.md's rules, written afresh here rather than through dsfs's
// packages, so that the sizes `ls -l` shows are checked against something
// dsfs did not compute.

// tensorInfo is one entry of a safetensors header.
type tensorInfo struct {
	DType   string   `json:"dtype"`
	Shape   []int64  `json:"shape"`
	Offsets [2]int64 `json:"data_offsets"`
}

func (t tensorInfo) size() int64 { return t.Offsets[1] - t.Offsets[0] }

// header is a parsed safetensors header.
type header struct {
	Len     int64 // of the JSON, after the 8-byte length
	Tensors map[string]tensorInfo
}

// dataBytes is the length of the data section: the end of the last tensor.
func (h header) dataBytes() int64 {
	var end int64
	for _, t := range h.Tensors {
		end = max(end, t.Offsets[1])
	}
	return end
}

// readHeader reads the header of the safetensors file at path.
func readHeader(path string) (header, error) {
	f, err := os.Open(path)
	if err != nil {
		return header{}, err
	}
	defer f.Close()
	var n [8]byte
	if _, err := io.ReadFull(f, n[:]); err != nil {
		return header{}, fmt.Errorf("%s: header length: %w", path, err)
	}
	l := int64(binary.LittleEndian.Uint64(n[:]))
	if l > 1<<30 {
		return header{}, fmt.Errorf("%s: header length %d", path, l)
	}
	b := make([]byte, l)
	if _, err := io.ReadFull(f, b); err != nil {
		return header{}, fmt.Errorf("%s: header: %w", path, err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return header{}, fmt.Errorf("%s: header: %w", path, err)
	}
	h := header{Len: l, Tensors: make(map[string]tensorInfo, len(raw))}
	for name, v := range raw {
		if name == "__metadata__" {
			continue
		}
		var t tensorInfo
		if err := json.Unmarshal(v, &t); err != nil {
			return header{}, fmt.Errorf("%s: tensor %s: %w", path, name, err)
		}
		h.Tensors[name] = t
	}
	return h, nil
}

var (
	// expertWeight names a routed expert matrix nvfp4/ converts
	// (FORMATS.md): the MTP blocks' experts (mtp.N.ffn.experts) stay MXFP4,
	// byte for byte, as dsfs mounts without --nvfp4-mtp, which fusebench
	// never passes.
	expertWeight = regexp.MustCompile(`^layers\.\d+\.ffn\.experts\.\d+\.w[123]\.weight$`)
	engramWeight = regexp.MustCompile(`^layers\.\d+\.engram\.embed\.weight$`)
)

// placed is a tensor with the shard that holds it.
type placed struct {
	tensorInfo
	shard string
}

// predictDataBytes returns, per shard file name, the data bytes each view
// (nvfp4, engram-fp4, nvfp4+engram-fp4) should hold, from the source
// shards' headers: nvfp4 replaces a routed MXFP4 expert's E8M0 scale (one
// byte per 32-block) with an E4M3 scale of twice the bytes plus two 4-byte
// F32 scalars (weight_scale_2 and input_scale), in the weight's shard;
// engram-fp4 halves an FP8 table (two E2M1 codes per byte) and keeps its
// scale's size, in the table's shard.
func predictDataBytes(src map[string]header) map[string]map[string]int64 {
	all := make(map[string]placed)
	for shard, h := range src {
		for name, t := range h.Tensors {
			all[name] = placed{t, shard}
		}
	}
	nv := make(map[string]int64)
	en := make(map[string]int64)
	for shard, h := range src {
		nv[shard] += h.dataBytes()
		en[shard] += h.dataBytes()
	}
	for name, w := range all {
		scale, ok := all[strings.TrimSuffix(name, ".weight")+".scale"]
		if !ok || scale.DType != "F8_E8M0" {
			continue
		}
		switch {
		case expertWeight.MatchString(name) && w.DType == "I8":
			nv[scale.shard] -= scale.size()
			nv[w.shard] += 2*scale.size() + 8
		case engramWeight.MatchString(name) && w.DType == "F8_E4M3" && len(w.Shape) == 2 && w.Shape[1]%32 == 0:
			en[scale.shard] -= scale.size()
			en[w.shard] += scale.size() - w.size()/2
		}
	}
	out := map[string]map[string]int64{"nvfp4": nv, "engram-fp4": en, "nvfp4+engram-fp4": {}}
	for shard, h := range src {
		out["nvfp4+engram-fp4"][shard] = nv[shard] + en[shard] - h.dataBytes()
	}
	return out
}

// checkLayout compares the sizes ls showed for the view shards under mnt
// with the prediction from the source checkpoint at srcDir, and source/
// with the real files. It reads the view files' headers (not their data),
// so it runs after any measurement that must see no reads. It returns the
// number of files checked.
func checkLayout(srcDir, mnt string, listed map[string]int64) (int, error) {
	shards, err := filepath.Glob(filepath.Join(srcDir, "*.safetensors"))
	if err != nil {
		return 0, err
	}
	src := make(map[string]header, len(shards))
	for _, p := range shards {
		h, err := readHeader(p)
		if err != nil {
			return 0, err
		}
		src[filepath.Base(p)] = h
	}
	entries, err := os.ReadDir(srcDir)
	if err != nil {
		return 0, err
	}
	checked := 0
	var bad []string
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		checked++
		if got, ok := listed["source/"+e.Name()]; !ok || got != fi.Size() {
			bad = append(bad, fmt.Sprintf("source/%s: ls shows %d (listed %v), the file has %d", e.Name(), got, ok, fi.Size()))
		}
	}
	for view, want := range predictDataBytes(src) {
		for shard, data := range want {
			p := view + "/" + shard
			checked++
			size, ok := listed[p]
			if !ok {
				bad = append(bad, p+": not listed")
				continue
			}
			h, err := readHeader(filepath.Join(mnt, p))
			if err != nil {
				return checked, err
			}
			if got := h.dataBytes(); got != data {
				bad = append(bad, fmt.Sprintf("%s: header lays out %d data bytes, the rules give %d", p, got, data))
			}
			if 8+h.Len+h.dataBytes() != size {
				bad = append(bad, fmt.Sprintf("%s: ls shows %d bytes, header says 8 + %d + %d", p, size, h.Len, h.dataBytes()))
			}
		}
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		if len(bad) > 10 {
			bad = append(bad[:10], fmt.Sprintf("and %d more", len(bad)-10))
		}
		return checked, fmt.Errorf("layout: %s", strings.Join(bad, "; "))
	}
	return checked, nil
}

// parseLsR reads the output of `ls -lR --time-style=long-iso DIR` into the
// size of every regular file, keyed by its path relative to DIR.
func parseLsR(out, dir string) map[string]int64 {
	sizes := make(map[string]int64)
	cur := ""
	for _, line := range strings.Split(out, "\n") {
		if strings.HasSuffix(line, ":") && !strings.HasPrefix(line, "-") {
			cur = strings.TrimPrefix(strings.TrimPrefix(strings.TrimSuffix(line, ":"), dir), "/")
			continue
		}
		f := strings.Fields(line)
		if len(f) < 8 || !strings.HasPrefix(f[0], "-") {
			continue
		}
		var n int64
		if _, err := fmt.Sscan(f[4], &n); err != nil {
			continue
		}
		name := strings.Join(f[7:], " ")
		if cur != "" {
			name = cur + "/" + name
		}
		sizes[name] = n
	}
	return sizes
}
