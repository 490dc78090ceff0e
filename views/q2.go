package views

import (
	"context"
	"io"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/q2"
	"github.com/dsfs/dsfs/tensorfile"
	"github.com/dsfs/dsfs/vfile"
)

// buildQ2 is the q2/ view: one quant-*.safetensors per source shard, its
// digests (NAME.manifest.json), the index, plan.json, manifest.json and README.md. The engine
// (package q2) plans and computes; this lays its files out.
func buildQ2(s *Set, _ string) (Built, error) {
	q, err := q2.New(s.Cat, q2Options(s.Opt))
	if err != nil {
		return Built{}, err
	}
	files := make(map[string]*vfile.Node)
	weightMap := make(map[string]string)
	var total int64
	for _, sh := range q.Shards {
		s.records[sh.File] = q2Records(sh)
		files[sh.Name] = &vfile.Node{File: sh.File, From: s.shardSources(sh.Source)}
		files[sh.Name+".manifest.json"] = &vfile.Node{Doc: sh.Digests, From: s.shardSources(sh.Source)}
		for _, t := range sh.Tensors {
			weightMap[t.Name] = sh.Name
			total += t.Size
		}
	}
	names := q2.ShardNames(s.Cat)
	for _, b := range s.Cat.BadShards {
		s.badShard(files, weightMap, names[b.Name], b)
	}
	if len(weightMap) > 0 {
		files["model.safetensors.index.json"] = &vfile.Node{File: indexFile("q2/model.safetensors.index.json", total, weightMap)}
	}
	files["plan.json"] = &vfile.Node{Doc: vfile.NewStreamedDoc(func(_ context.Context, w io.Writer) error { return q.WritePlan(w) })}
	files["manifest.json"] = jsonDoc(func(ctx context.Context) (any, error) { return q.Digests(ctx) })
	files["README.md"] = &vfile.Node{Doc: vfile.NewHeaderDoc(func(context.Context) ([]byte, error) { return q.README(), nil })}
	return Built{Root: tree("", files), Stats: func() any { return q.Stats() }}, nil
}

// q2Options are the options of the set that the q2 engine takes.
func q2Options(opt Options) q2.Options {
	return q2.Options{DiskCache: opt.DiskCache, Cache: opt.Cache, Revision: opt.Revision}
}

// q2Records are the tensors of a q2/ shard as the engine planned them.
func q2Records(sh *q2.Shard) []tensorRecord {
	recs := make([]tensorRecord, len(sh.Tensors))
	for i, t := range sh.Tensors {
		out := tensorfile.Passthrough(t.Source)
		if t.Type != nil {
			out = tensorfile.Out{Data: t.Blocks, Codec: "q2", Sources: []*checkpoint.Tensor{t.Source, t.Source.Scale}}
		}
		out.Name, out.DType, out.Shape = t.Name, t.DType, t.Shape
		recs[i] = tensorRecord{Out: out, Offset: t.Offset}
	}
	return recs
}
