// Package checkpoint is the catalog of a checkpoint directory: it opens
// config.json, the safetensors index and every shard header, validates them,
// and classifies each tensor by role and official format. It reads headers
// only; tensor values are read on demand through Shard.ReadAt.
package checkpoint

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/dsfs/dsfs/safetensors"
	"github.com/dsfs/dsfs/sourcefile"
	"golang.org/x/sync/semaphore"
)

// Role says what a tensor is for in the model.
type Role string

// The roles a tensor can have.
const (
	RoleRoutedExpert Role = "routed_expert"
	RoleMTPExpert    Role = "mtp_expert" // a routed expert of an MTP block or DSpark stage
	RoleSharedExpert Role = "shared_expert"
	RoleDense        Role = "dense" // the FFN projections of a dense (non-MoE) layer
	RoleAttention    Role = "attention"
	RoleRouter       Role = "router"
	// RoleEngram is an Engram table (engram.embed: the n-gram hash rows
	// and their scales); RoleEngramProj the rest of the Engram block (its
	// key/value projection wkv and the gate weights q_weight, k_weight).
	RoleEngram     Role = "engram"
	RoleEngramProj Role = "engram_proj"
	RoleNorm       Role = "norm"
	RoleEmbed      Role = "embed"
	RoleHead       Role = "head"
	// RoleMTPProj is the input projection of an MTP block or DSpark stage
	// (V4's e_proj and h_proj, V3's eh_proj, V4.1's main_proj).
	RoleMTPProj Role = "mtp_proj"
	// RoleDraftHead is a head of a DSpark draft stage: the Markov head
	// (markov_head.embed, markov_head.head, of rank dspark_markov_rank,
	// not vocabulary by hidden size) and the acceptance confidence head.
	RoleDraftHead Role = "draft_head"
	RoleVision    Role = "vision" // the vision tower
	// RoleVisionProjector maps the vision tower's output into the language
	// model (V4.1's aligner, a multi_modal_projector).
	RoleVisionProjector Role = "vision_projector"
	// RoleImageToken is a learned embedding that marks an image span
	// (image_start, image_end, image_newline).
	RoleImageToken Role = "image_token"
	RoleMHC        Role = "mhc"
	RoleOther      Role = "other"
)

// Format is the official storage format of a tensor, scale tensors included.
type Format string

// The formats the catalog recognises. A tensor is mxfp4 or fp8 only when it
// is paired with a scale that fits it (Tensor.Scale is then set), so a view
// that transcodes by format never meets a weight it cannot decode.
const (
	FormatMXFP4      Format = "mxfp4"       // I8 packed E2M1 with a 1x32 E8M0 scale
	FormatMXFP4Scale Format = "mxfp4_scale" // the E8M0 scale of an MXFP4 weight
	FormatFP8        Format = "fp8"         // F8_E4M3 with a block scale (see Tensor.Block)
	FormatFP8Scale   Format = "fp8_scale"   // an E8M0 or F32 block scale of an FP8 weight
	FormatE8M0       Format = "e8m0"        // an E8M0 tensor that pairs with no weight
	FormatBF16       Format = "bf16"
	FormatF16        Format = "f16"
	FormatF32        Format = "f32"
	FormatOther      Format = "other"
)

// Tensor is one tensor of the checkpoint, with its place in its shard and
// what the catalog learnt about it.
type Tensor struct {
	Name   string
	Shard  *Shard
	DType  safetensors.DType
	Shape  []int64 // shared with the shard's header: do not modify
	Offset int64   // absolute offset of the data in the shard file
	Size   int64   // bytes

	Role   Role
	Format Format
	// Block is the FP8 scale block [rows, cols] inferred from the scale
	// shape (e.g. 128x128 for V3, 32x32 for V4.1; 1x32 for Engram tables),
	// set on an FP8 weight and on its scale.
	Block [2]int64
	// Scale is the scale tensor of a quantised weight; ScaleOf is the
	// weight of a scale tensor.
	Scale, ScaleOf *Tensor

	// Position in the model, -1 where not applicable. Layer is the index
	// in a layers.L name; MTP is the multi-token-prediction block, from an
	// mtp.M name (Layer -1) or from a layers.L name with L at or past the
	// config's layer count (DeepSeek-V3's model.layers.61: Layer 61, MTP 0).
	Layer, Expert, MTP int
	// Proj is the FFN projection of a routed, shared or dense expert
	// matrix: "w1" (gate_proj), "w2" (down_proj) or "w3" (up_proj); empty
	// otherwise.
	Proj string
}

// Shard is one opened, valid safetensors file of the checkpoint. It keeps
// its file open until Close.
type Shard struct {
	Name    string // relative to the checkpoint dir, slash-separated, as the index names it
	Path    string // the checkpoint dir joined with Name; symbolic links are followed on open
	Size    int64
	ModTime time.Time
	// DataStart is the absolute offset of the data section (8 + the
	// header's length).
	DataStart int64
	Tensors   []*Tensor // data order; tensors left out of the catalog are left out here too

	// header is the parsed header until the catalog takes its tensors:
	// Tensors hold what a mount needs of it.
	header *safetensors.Header

	f  *sourcefile.File
	id fileID
}

// File is a non-shard file of the checkpoint directory (config, tokenizer,
// README, index, ...), served unchanged by the views unless they rewrite it.
type File struct {
	Name string // relative path, slash-separated
	Path string
	Size int64
}

// Problem is one thing wrong with the source, reported once at open.
type Problem struct {
	File   string `json:"file"`
	Tensor string `json:"tensor,omitempty"`
	Reason string `json:"reason"`
}

// String renders the problem as one line: file, tensor, reason.
func (p Problem) String() string {
	if p.Tensor != "" {
		return p.File + ": tensor " + p.Tensor + ": " + p.Reason
	}
	return p.File + ": " + p.Reason
}

// Names of the files the catalog reads itself.
const (
	ConfigName = "config.json"
	// InferenceConfigName is DeepSeek's inference/config.json: ModelArgs'
	// settings, which its reference code builds the model from.
	InferenceConfigName = "inference/config.json"
	IndexName           = "model.safetensors.index.json"
	singleName          = "model.safetensors"
	shardExt            = ".safetensors"
)

// Catalog is an opened checkpoint directory. It does not change after
// Open, and its shards may be read concurrently.
type Catalog struct {
	Dir string // absolute path of the checkpoint directory
	// Config is never nil: its fields are zero (and Raw nil) when
	// config.json is absent or does not parse.
	Config      *Config
	ConfigBytes []byte // config.json as read; nil when absent
	// InferenceConfigBytes is inference/config.json as read; nil when absent.
	InferenceConfigBytes []byte
	// IndexSHA256 is the hex SHA-256 of the index as read; empty when
	// absent. (A released index is ~7 MB: its bytes are not kept.)
	IndexSHA256 string
	Shards      []*Shard
	Tensors     []*Tensor // sorted by name, each name once
	// Files is every other regular file under Dir (symbolic links
	// followed, hidden directories such as .cache skipped), config.json and
	// the index included, sorted by name. Files the index names as shards
	// are not here, valid or not, so a view never serves a bad shard as an
	// ordinary file; only one whose name and header say it is no
	// safetensors file at all (config.json) is.
	Files []File
	// BadShards lists, by name, the shards that could not be opened, so
	// that views can refuse to serve them loudly rather than leave them
	// out. A file the index names that is plainly no safetensors file
	// (config.json) is not one: it stays in Files.
	BadShards []BadShard
	// Problems lists every fault found, sorted by file, then tensor.
	Problems []Problem

	roots      roots             // where the files may resolve
	ids        map[string]fileID // by Path: the file checked there, for CheckOpened
	tokenizers *tokenizerMemo    // tokenizer.json parsed, for Tokenizer and Vocab; shared by copies

	// store holds the files when they are not in a local directory;
	// listed is its listing by Path, and listedAt its newest file's time.
	store    Store
	listed   map[string]fs.FileInfo
	listedAt time.Time
}

// BadShard is a shard of the checkpoint that could not be opened.
type BadShard struct {
	Name   string // as the index names it
	Path   string
	Size   int64 // -1 when there is no regular file of that name
	Reason string
	// Tensors are the tensors the index places in the shard, sorted; none
	// without an index.
	Tensors []string
}

// Open catalogs the checkpoint in dir. It fails only when dir itself is
// unusable: missing, unreadable, or holding neither config.json nor any
// safetensors file. Every other fault becomes a Problem and the good parts
// are catalogued.
func Open(dir string) (*Catalog, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	fi, err := os.Stat(abs)
	if pe := (*fs.PathError)(nil); errors.As(err, &pe) {
		err = pe.Err // "stat PATH: " says less than what follows
	}
	if err != nil {
		return nil, fmt.Errorf("source checkpoint directory %s: %w", abs, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("source checkpoint directory %s: not a directory", abs)
	}
	c := &Catalog{Dir: abs, Config: &Config{}, ids: make(map[string]fileID), tokenizers: new(tokenizerMemo)}
	if c.roots, err = sourceRoots(abs); err != nil {
		return nil, err
	}
	files, broken, outside, err := c.walk()
	if err != nil {
		return nil, err
	}
	return c.build(files, broken, outside)
}

// build catalogs the checkpoint whose files are files: it reads the
// configs, the index and every shard's header. broken and outside are
// the symbolic links walk left out.
func (c *Catalog) build(files []File, broken, outside []string) (*Catalog, error) {
	top := make(map[string]bool)
	for _, f := range files {
		if !strings.Contains(f.Name, "/") {
			top[f.Name] = true
		}
	}
	c.readConfig(top[ConfigName], slices.ContainsFunc(files, func(f File) bool { return f.Name == InferenceConfigName }))
	names, idx := c.shardNames(top, files)
	if !top[ConfigName] && !top[IndexName] && len(names) == 0 {
		return nil, fmt.Errorf("%s: no %s and no safetensors files", c.Dir, ConfigName)
	}
	if !top[ConfigName] && !slices.Contains(outside, ConfigName) { // else refused, and said so below
		c.problem(ConfigName, "", "missing")
	}

	shards, notShards := c.openShards(names, idx)
	for _, s := range shards {
		if s != nil {
			c.ids[s.Path] = s.id
		}
	}
	c.catalog(shards, idx)
	classify(c.Tensors, c.Config, c.problem)
	if !slices.Contains(shards, nil) { // else the missing shard explains the shortfall
		checkCounts(c.Config, c.Tensors, c.problem)
	}

	isShard := make(map[string]bool, len(names))
	for _, n := range names {
		isShard[n] = !notShards[n]
	}
	sizes := make(map[string]int64, len(files))
	for _, f := range files {
		sizes[f.Name] = f.Size
	}
	for i, b := range c.BadShards {
		if n, ok := sizes[b.Name]; ok {
			c.BadShards[i].Size = n
		}
	}
	for _, f := range files {
		if !isShard[f.Name] {
			c.Files = append(c.Files, f)
		}
	}
	for _, b := range broken {
		if !isShard[b] {
			c.problem(b, "", "broken symbolic link")
		}
	}
	for _, o := range outside {
		if !isShard[o] { // else openShard said so
			c.problem(o, "", errOutside.Error())
		}
	}
	sort.SliceStable(c.Problems, func(i, j int) bool {
		a, b := c.Problems[i], c.Problems[j]
		if a.File != b.File {
			return a.File < b.File
		}
		return a.Tensor < b.Tensor
	})
	return c, nil
}

// Tensor returns the catalogued tensor with the given name, or nil.
func (c *Catalog) Tensor(name string) *Tensor {
	return findTensor(c.Tensors, name, "")
}

// Shard returns the valid shard with the given name, or nil.
func (c *Catalog) Shard(name string) *Shard {
	i := sort.Search(len(c.Shards), func(i int) bool { return c.Shards[i].Name >= name })
	if i < len(c.Shards) && c.Shards[i].Name == name {
		return c.Shards[i]
	}
	return nil
}

// Close closes every shard.
func (c *Catalog) Close() error {
	var errs []error
	for _, s := range c.Shards {
		if err := s.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// findTensor finds the tensor named prefix+suffix in ts (sorted by name)
// without building the name.
func findTensor(ts []*Tensor, prefix, suffix string) *Tensor {
	i := sort.Search(len(ts), func(i int) bool { return compareJoined(ts[i].Name, prefix, suffix) >= 0 })
	if i < len(ts) && compareJoined(ts[i].Name, prefix, suffix) == 0 {
		return ts[i]
	}
	return nil
}

// compareJoined compares s with a+b.
func compareJoined(s, a, b string) int {
	if len(s) < len(a) {
		if c := strings.Compare(s, a[:len(s)]); c != 0 {
			return c
		}
		return -1 // s is a proper prefix of a+b
	}
	if c := strings.Compare(s[:len(a)], a); c != 0 {
		return c
	}
	return strings.Compare(s[len(a):], b)
}

func (c *Catalog) problem(file, tensor, reason string) {
	c.Problems = append(c.Problems, Problem{File: file, Tensor: tensor, Reason: reason})
}

// walk lists the regular files under the directory, following symbolic
// links to files (a Hugging Face snapshot links every file into ../../blobs)
// but not to directories, and skipping hidden directories. broken lists the
// links that lead nowhere, outside those that lead out of the roots.
func (c *Catalog) walk() (files []File, broken, outside []string, err error) {
	// WalkDir does not enter a root that is itself a link; walk its target
	// but name everything under Dir.
	root := c.roots[0]
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if p == root {
			return err // an unreadable root makes the directory unusable
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if err != nil {
			c.problem(rel, "", "unreadable: "+pathErrReason(err))
			if d != nil && d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") {
				return fs.SkipDir
			}
			return nil
		}
		var fi fs.FileInfo
		switch {
		case d.Type().IsRegular():
			fi, err = d.Info()
		case d.Type()&fs.ModeSymlink != 0:
			fi, err = os.Stat(p)
			if errors.Is(err, fs.ErrNotExist) {
				broken = append(broken, rel)
				return nil
			}
			if err != nil || !fi.Mode().IsRegular() {
				break // links to directories are not followed
			}
			var f *os.File
			if f, fi, err = c.roots.open(p); err == nil {
				f.Close()
			} else if errors.Is(err, errOutside) {
				outside = append(outside, rel)
				return nil
			}
		default:
			return nil // sockets, devices and pipes are no part of a checkpoint
		}
		if err != nil {
			c.problem(rel, "", "unreadable: "+pathErrReason(err))
			return nil
		}
		if fi.Mode().IsRegular() {
			f := File{Name: rel, Path: filepath.Join(c.Dir, filepath.FromSlash(rel)), Size: fi.Size()}
			files = append(files, f)
			c.ids[f.Path] = idOf(fi)
		}
		return nil
	})
	if err != nil {
		return nil, nil, nil, err
	}
	slices.SortFunc(files, func(a, b File) int { return strings.Compare(a.Name, b.Name) })
	return files, broken, outside, nil
}

func (c *Catalog) readConfig(present, inference bool) {
	if inference {
		b, err := c.ReadFile(InferenceConfigName, maxConfigSize)
		if err != nil {
			c.problem(InferenceConfigName, "", "unreadable: "+pathErrReason(err))
		} else {
			c.InferenceConfigBytes = b
		}
	}
	var b []byte
	if present {
		var err error
		if b, err = c.ReadFile(ConfigName, maxConfigSize); err != nil {
			c.problem(ConfigName, "", "unreadable: "+pathErrReason(err))
			return
		}
	}
	if b == nil && c.InferenceConfigBytes == nil {
		return
	}
	c.ConfigBytes = b
	cfg, errs := parseConfigs(b, c.InferenceConfigBytes)
	c.Config = cfg
	for _, e := range errs {
		file := ConfigName
		if strings.HasPrefix(e.Error(), InferenceConfigName+": ") {
			file = InferenceConfigName
		}
		c.problem(file, "", strings.TrimPrefix(e.Error(), file+": "))
	}
}

// shardNames returns the shard files to open, sorted, and the parsed
// index (nil when there is none or it is unusable): the index's entries,
// else a lone model.safetensors, else every *.safetensors at the top.
func (c *Catalog) shardNames(top map[string]bool, files []File) ([]string, *index) {
	if top[IndexName] {
		b, err := c.ReadFile(IndexName, maxIndexSize)
		if err != nil {
			c.problem(IndexName, "", "unreadable: "+pathErrReason(err))
		} else {
			sum := sha256.Sum256(b)
			c.IndexSHA256 = hex.EncodeToString(sum[:])
			idx, err := parseIndex(b)
			if err == nil {
				c.Problems = append(c.Problems, idx.problems...)
				return idx.shards, idx
			}
			c.problem(IndexName, "", err.Error()+"; opening every *.safetensors file instead")
		}
	}
	if top[singleName] {
		return []string{singleName}, nil
	}
	var names []string
	for _, f := range files {
		if top[f.Name] && strings.HasSuffix(f.Name, shardExt) {
			names = append(names, f.Name)
		}
	}
	return names, nil
}

// openShards opens the named shards in parallel; a shard that fails is
// reported, recorded in BadShards and comes back nil. A file the index
// names whose name and header both say it is no safetensors file is
// reported as a wrong index entry and returned in notShards.
func (c *Catalog) openShards(names []string, idx *index) (shards []*Shard, notShards map[string]bool) {
	shards = make([]*Shard, len(names))
	errs := make([]error, len(names))
	work := make(chan int)
	parsing := semaphore.NewWeighted(maxParsing)
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(names)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				shards[i], errs[i] = c.openShard(names[i], parsing)
			}
		}()
	}
	for i := range names {
		work <- i
	}
	close(work)
	wg.Wait()
	boundShards(shards, errs, MaxTensors, MaxHeaderBytes)
	notShards = make(map[string]bool)
	var notShardReasons [][2]string // file, why its header is no header
	bad := make(map[string]int)     // name -> index in c.BadShards
	for i, err := range errs {
		if err == nil {
			continue
		}
		var herr *safetensors.Error
		reason := pathErrReason(err)
		switch {
		case errors.As(err, &herr) && idx != nil && !strings.HasSuffix(names[i], shardExt):
			notShards[names[i]] = true
			notShardReasons = append(notShardReasons, [2]string{names[i], herr.Reason})
			continue
		case errors.As(err, &herr):
			reason = herr.Reason
			if herr.Tensor != "" {
				reason = "tensor " + herr.Tensor + ": " + reason
			}
			c.problem(names[i], herr.Tensor, herr.Reason)
		case errors.Is(err, fs.ErrNotExist):
			reason = "missing"
			if idx != nil {
				reason = fmt.Sprintf("missing (index entries: %d)", idx.count[names[i]])
			}
			c.problem(names[i], "", reason)
		default:
			c.problem(names[i], "", reason)
		}
		bad[names[i]] = len(c.BadShards)
		c.BadShards = append(c.BadShards, BadShard{Name: names[i], Path: c.pathOf(names[i]), Size: -1, Reason: reason})
	}
	if idx == nil || len(bad)+len(notShards) == 0 {
		return shards, notShards
	}
	first := make(map[string]string, len(notShards)) // the first tensor, by name, of each
	for name, where := range idx.weightMap {
		if i, ok := bad[where]; ok {
			c.BadShards[i].Tensors = append(c.BadShards[i].Tensors, name)
		}
		if f, ok := first[where]; notShards[where] && (!ok || name < f) {
			first[where] = name
		}
	}
	for i := range c.BadShards {
		slices.Sort(c.BadShards[i].Tensors)
	}
	for _, nr := range notShardReasons {
		c.problem(IndexName, "", fmt.Sprintf("maps %d tensors (%s first) to %s, which is not a safetensors file (%s); it is served as an ordinary file",
			idx.count[nr[0]], first[nr[0]], nr[0], nr[1]))
	}
	return shards, notShards
}

// candidate is a header tensor that may enter the catalog: slab i of the
// valid shards, entry j.
type candidate struct {
	t    *Tensor
	i, j int
	// indexed: the index places it in this shard (always, without an
	// index); unlisted: the index does not name it at all.
	indexed, unlisted bool
}

// catalog builds the tensor list from the valid shards, checking it
// against the index.
func (c *Catalog) catalog(shards []*Shard, idx *index) {
	var (
		cands   []candidate
		slabs   [][]Tensor
		dropped [][]bool
		listed  []int // per valid shard: tensors the index places there that its header has
	)
	n := 0
	for _, s := range shards {
		if s != nil {
			n += len(s.header.Tensors)
		}
	}
	cands = make([]candidate, 0, n)
	for _, s := range shards {
		if s == nil {
			continue
		}
		i := len(c.Shards)
		c.Shards = append(c.Shards, s)
		slab := make([]Tensor, len(s.header.Tensors))
		slabs = append(slabs, slab)
		dropped = append(dropped, make([]bool, len(slab)))
		listed = append(listed, 0)
		for j, ht := range s.header.Tensors {
			t := &slab[j]
			*t = Tensor{
				Name: ht.Name, Shard: s, DType: ht.DType, Shape: ht.Shape,
				Offset: s.DataStart + ht.Begin, Size: ht.Len(),
				Layer: -1, Expert: -1, MTP: -1,
			}
			indexed, unlisted := true, false
			if idx != nil {
				where, ok := idx.weightMap[ht.Name]
				switch {
				case !ok:
					indexed, unlisted = false, true
				case where == "":
					indexed = false // its entry was refused, and reported
				case where != s.Name:
					c.problem(s.Name, ht.Name, fmt.Sprintf("the index places it in %s; this copy is ignored", where))
					dropped[i][j] = true
					continue
				default:
					listed[i]++
				}
			}
			cands = append(cands, candidate{t, i, j, indexed, unlisted})
		}
	}
	// Of several copies the indexed one wins, then the first shard by name
	// (the shards are in name order).
	slices.SortFunc(cands, func(a, b candidate) int {
		if n := strings.Compare(a.t.Name, b.t.Name); n != 0 {
			return n
		}
		if a.indexed != b.indexed {
			if a.indexed {
				return -1
			}
			return 1
		}
		return a.i - b.i
	})
	c.Tensors = make([]*Tensor, 0, len(cands))
	for k, cd := range cands {
		if k > 0 && cands[k-1].t.Name == cd.t.Name {
			first := c.Tensors[len(c.Tensors)-1]
			c.problem(cd.t.Shard.Name, cd.t.Name, fmt.Sprintf("also in %s; this copy is ignored", first.Shard.Name))
			dropped[cd.i][cd.j] = true
			continue
		}
		if cd.unlisted {
			c.problem(cd.t.Shard.Name, cd.t.Name, "in the shard but not in the index")
		}
		c.Tensors = append(c.Tensors, cd.t)
	}
	for i, s := range c.Shards {
		s.Tensors = make([]*Tensor, 0, len(slabs[i]))
		for j := range slabs[i] {
			if !dropped[i][j] {
				s.Tensors = append(s.Tensors, &slabs[i][j])
			}
		}
		s.header = nil // the slab holds it now
	}
	if idx == nil {
		return
	}
	for i, s := range c.Shards {
		if listed[i] == idx.count[s.Name] {
			continue
		}
		for name, where := range idx.weightMap {
			if where == s.Name {
				if t := c.Tensor(name); t == nil || t.Shard != s {
					c.problem(s.Name, name, "listed in the index but not in the shard")
				}
			}
		}
	}
}

// Bounds on the JSON files the catalog reads whole: DeepSeek's
// config.json is a few kB; the index of a checkpoint of MaxTensors tensors
// is under 64 MB.
const (
	maxConfigSize = 16 << 20
	maxIndexSize  = 64 << 20
)

// pathErrReason drops the path from an *fs.PathError: the Problem names the
// file already.
func pathErrReason(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}
