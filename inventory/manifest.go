package inventory

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/codecs"
)

// Schema names the layout of a Manifest.
const Schema = "dsfs-manifest/1"

// Manifest is the inventory's report of a checkpoint, one Record per
// tensor: manifest/'s manifest.json or one shard's shards/NAME.json, what
// `dsfs inspect --json` writes and what `dsfs diff` reads. It is the seed's
// top level with dsfs's provenance in place of the seed's fetch receipt.
// Only GeneratedUTC and Seconds vary between runs over the same bytes.
type Manifest struct {
	Schema       string      `json:"schema"`
	Root         string      `json:"root"` // the checkpoint directory
	Codec        string      `json:"dsfs_codec"`
	GeneratedUTC string      `json:"generated_utc"`
	Seconds      float64     `json:"seconds"`
	TP           int         `json:"tp"`     // the degree of the records' cuts
	Hashed       bool        `json:"hashed"` // false: headers only (--no-hash)
	NTensors     int         `json:"n_tensors"`
	Shards       []ShardInfo `json:"shards"`
	Summary      Summary     `json:"summary"`
	// Problems lists every fault of the shards covered: the catalog's
	// (headers, index, pairing) and those the records show (values).
	Problems []checkpoint.Problem `json:"problems"`
	Tensors  []Record             `json:"tensors"` // by name
}

// ShardInfo is one shard a Manifest covers.
type ShardInfo struct {
	Name    string `json:"name"`
	Size    int64  `json:"size"`
	Tensors int    `json:"tensors"`
}

// Manifest returns the manifest of the named shards (every shard when none
// is named), reading what has not been read yet as Records does.
func (inv *Inventory) Manifest(ctx context.Context, shards ...string) (*Manifest, error) {
	start := time.Now()
	want, err := inv.shards(shards)
	if err != nil {
		return nil, err
	}
	recs, err := inv.Records(ctx, shards...)
	if err != nil {
		return nil, err
	}
	m := &Manifest{
		Schema: Schema, Root: inv.cat.Dir, Codec: codecs.Version,
		TP: inv.opt.TP, Hashed: !inv.opt.NoHash, NTensors: len(recs),
		Summary: Summarize(recs), Tensors: recs,
	}
	names := make(map[string]bool, len(want))
	for _, s := range want {
		names[s.Name] = true
		m.Shards = append(m.Shards, ShardInfo{Name: s.Name, Size: s.Size, Tensors: len(s.Tensors)})
	}
	m.Problems = []checkpoint.Problem{}
	for _, p := range inv.cat.Problems {
		if len(shards) == 0 || names[p.File] {
			m.Problems = append(m.Problems, p)
		}
	}
	m.Problems = append(m.Problems, Problems(recs)...)
	sortProblems(m.Problems)
	m.GeneratedUTC = time.Now().UTC().Format("2006-01-02T15:04:05Z")
	m.Seconds = time.Since(start).Round(time.Millisecond).Seconds()
	return m, nil
}

// WriteJSON writes m as compact JSON with one tensor record per line, so
// that the file is both one JSON value and greppable.
func (m *Manifest) WriteJSON(w io.Writer) error {
	head := *m
	head.Tensors = nil
	b, err := json.Marshal(head)
	if err != nil {
		return err
	}
	// Tensors is the last field: cut its null off and write the records.
	b, ok := bytes.CutSuffix(b, []byte(`"tensors":null}`))
	if !ok {
		return errors.New("inventory: manifest head does not end with its tensors")
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	bw.Write(b)
	bw.WriteString(`"tensors":[`)
	for i := range m.Tensors {
		if i > 0 {
			bw.WriteByte(',')
		}
		bw.WriteByte('\n')
		r, err := json.Marshal(&m.Tensors[i])
		if err != nil {
			return fmt.Errorf("tensor %s: %w", m.Tensors[i].Name, err)
		}
		bw.Write(r)
	}
	bw.WriteString("\n]}\n")
	return bw.Flush()
}

// JSON returns m as WriteJSON writes it.
func (m *Manifest) JSON() ([]byte, error) {
	var b bytes.Buffer
	err := m.WriteJSON(&b)
	return b.Bytes(), err
}

// ReadManifest reads a manifest: dsfs's, or any JSON object with
// a "tensors" list of records in the seed's field names (the seed's own
// NATIVE_MANIFEST.json included).
func ReadManifest(r io.Reader) (*Manifest, error) {
	var m struct {
		Manifest
		Tensors *[]Record `json:"tensors"`
	}
	dec := json.NewDecoder(bufio.NewReaderSize(r, 1<<20))
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("reading a manifest: %w", err)
	}
	if m.Tensors == nil {
		return nil, errors.New("reading a manifest: no \"tensors\" list")
	}
	m.Manifest.Tensors = *m.Tensors
	return &m.Manifest, nil
}
