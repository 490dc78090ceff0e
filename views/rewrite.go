package views

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/tensorfile"
	"github.com/dsfs/dsfs/vfile"
)

// A Rewriter changes some tensors of a checkpoint. Rewrite returns the
// tensors that replace t (none to drop it) and true, or false to leave t to
// the next rewriter and finally to pass it through unchanged. A set makes
// each rewriter once, calls Rewrite once per tensor and shares what it
// returns among the views applying it, which must not modify it.
type Rewriter interface {
	Rewrite(t *checkpoint.Tensor) ([]tensorfile.Out, bool)
	// ConfigPatch lists the config.json keys the view sets.
	ConfigPatch() map[string]any
	// Files are the view's own files (reports, quantisation configs).
	Files() map[string]*vfile.Node
}

// rewrites names a way of making a Rewriter. Views applying rewrites of
// one name share what it makes of each tensor (rewrittenSet), so a name
// must stand for one rewriter.
type rewrites struct {
	name string
	make func(s *Set) (Rewriter, error)
}

// safetensorsView returns a view builder that rewrites the checkpoint's
// tensors with the given rewriters, shard by shard, and passes every other
// file through (config.json patched, the index rewritten).
func safetensorsView(makers ...rewrites) builder {
	return func(s *Set, name string) (Built, error) {
		var rws []*rewritten
		var b Built
		for _, m := range makers {
			rw, err := s.rewritten.get(s, m)
			var p *viewProblem
			if errors.As(err, &p) {
				return Built{Root: tree("", map[string]*vfile.Node{"ERROR.txt": {File: vfile.NewFile(vfile.Bytes(name + "/: " + p.Error() + "\n"))}}),
					Warnings: []string{name + "/ " + p.summary + "; details in " + name + "/ERROR.txt"}}, nil
			}
			if err != nil {
				return Built{}, err
			}
			rws = append(rws, rw)
			if st, ok := rw.rw.(interface{ Stats() any }); ok && b.Stats == nil {
				b.Stats = st.Stats
			}
		}
		root, err := s.rewrite(name, rws)
		b.Root = root
		return b, err
	}
}

func (s *Set) rewrite(view string, rws []*rewritten) (*vfile.Node, error) {
	files := make(map[string]*vfile.Node)
	shardOuts := make([][]*tensorfile.Out, len(s.Cat.Shards))
	claims := make([][]claim, len(rws))
	entries := 0
	for i, sh := range s.Cat.Shards {
		for k, rw := range rws {
			claims[k] = rw.shard(i, sh)
		}
		shardOuts[i] = rewriteShard(sh, claims)
		entries += len(shardOuts[i])
	}
	for _, b := range s.Cat.BadShards {
		entries += len(b.Tensors)
	}
	// Bad shards first: a name the good shards place wins, as the index
	// keeps the last placement of a name.
	weightMap := make([]indexEntry, 0, entries)
	for _, b := range s.Cat.BadShards {
		for _, t := range b.Tensors {
			weightMap = append(weightMap, indexEntry{t, b.Name})
		}
		badShardFile(files, b.Name, b)
	}
	var total int64
	for i, sh := range s.Cat.Shards {
		outs := shardOuts[i]
		if len(outs) == 0 {
			continue
		}
		for _, o := range outs {
			weightMap = append(weightMap, indexEntry{o.Name, sh.Name})
			total += o.Data.Len()
		}
		f, err := s.layOut(view, view+"/"+sh.Name, outs)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", sh.Name, err)
		}
		files[sh.Name] = &vfile.Node{File: f, From: s.shardSources(sh)}
	}
	config := s.Cat.ConfigBytes
	for _, r := range rws {
		rw := r.rw
		patch := rw.ConfigPatch()
		for _, k := range slices.Sorted(maps.Keys(patch)) {
			b, err := checkpoint.PatchConfig(config, strings.Split(k, "."), patch[k])
			if err != nil {
				return nil, fmt.Errorf("config.json: %w", err)
			}
			config = b
		}
		for name, n := range rw.Files() {
			if prev, ok := files[name]; ok {
				n = mergeReports(prev, n)
			}
			files[name] = n
		}
	}
	for _, f := range s.Cat.Files {
		switch {
		case f.Name == "model.safetensors.index.json":
			continue
		case f.Name == "config.json" && !bytes.Equal(config, s.Cat.ConfigBytes):
			files[f.Name] = &vfile.Node{File: vfile.NewFile(vfile.Bytes(config)), From: []string{f.Path}}
		case files[f.Name] != nil:
			s.shadowed[f.Name] = append(s.shadowed[f.Name], view)
		default:
			n, err := s.sourceFile(f.Name, f.Path)
			if err != nil {
				return nil, err
			}
			files[f.Name] = n
		}
	}
	if len(weightMap) > 0 {
		files["model.safetensors.index.json"] = &vfile.Node{File: indexOf(view+"/model.safetensors.index.json", total, weightMap)}
	}
	return tree("", files), nil
}

// rewriteShard returns the tensors of a shard in a view: each source
// tensor as the first rewriter claiming it made it (claims, one list per
// rewriter), else passed through.
func rewriteShard(sh *checkpoint.Shard, claims [][]claim) []*tensorfile.Out {
	n, passed := 0, 0
	for j := range sh.Tensors {
		if outs, ok := firstClaim(claims, j); ok {
			n += len(outs)
		} else {
			passed++
		}
	}
	pass := make([]tensorfile.Out, 0, passed)
	outs := make([]*tensorfile.Out, 0, n+passed)
	for j, t := range sh.Tensors {
		if c, ok := firstClaim(claims, j); ok {
			for k := range c {
				outs = append(outs, &c[k])
			}
			continue
		}
		pass = append(pass, tensorfile.Passthrough(t))
		outs = append(outs, &pass[len(pass)-1])
	}
	return outs
}

// firstClaim returns what the first rewriter claiming tensor j of a shard
// made of it, and whether one did.
func firstClaim(claims [][]claim, j int) ([]tensorfile.Out, bool) {
	for _, c := range claims {
		if c != nil && c[j].ok {
			return c[j].outs, true
		}
	}
	return nil, false
}

// mergeReports joins two rewriters' reports of the same name (both
// transcodes of nvfp4+engram-fp4 write TRANSCODE.json) into one JSON
// document holding each under its "view" field.
func mergeReports(a, b *vfile.Node) *vfile.Node {
	return jsonDoc(func(ctx context.Context) (any, error) {
		merged := make(map[string]json.RawMessage)
		for _, n := range []*vfile.Node{a, b} {
			raw, err := n.Doc.Bytes(ctx)
			if err != nil {
				return nil, err
			}
			var parts map[string]json.RawMessage
			if err := json.Unmarshal(raw, &parts); err != nil {
				return nil, err
			}
			if _, ok := parts["view"]; ok { // a single report: key it by its view
				var v string
				json.Unmarshal(parts["view"], &v)
				merged[v] = raw
				continue
			}
			for k, v := range parts { // already merged
				merged[k] = v
			}
		}
		return merged, nil
	})
}
